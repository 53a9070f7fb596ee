"""Build macros shared by every pstrain package."""

load("@local_cuda//:defs.bzl", "CUDA_PATH")

def nvcc(args):
    """A genrule command: nvcc with `args`, its temporary files in a folder
    of its own. nvcc names them after its pid, and every Bazel sandbox has
    its own pid namespace but the machine's /tmp: two at once collided
    ("cannot open source file /tmp/tmpxft_00000002_...")."""
    return "d=$$(mktemp -d) && TMPDIR=$$d " + CUDA_PATH + "/bin/nvcc " + args + " && rm -rf $$d"

PS_COPTS = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
]

# For libraries with PSTRAIN_SIMD_CLONES loops (common/simd.h): vectorise
# them, let sqrt vectorise (no errno), and let `omp simd` reductions vectorise.
# No FMA contraction: a loop rounds the same in both clones, so an update does
# not depend on which CPU the server runs on (sums in `omp simd` reductions
# still group by the vector width).
PS_SIMD_COPTS = [
    "-O3",
    "-fno-math-errno",
    "-ffp-contract=off",
    "-fopenmp-simd",
]

def ps_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = PS_COPTS + copts, **kwargs)

# Binaries also look for shared libraries in ../../lib next to themselves:
# deploy/bundle.sh lays them out as bin/<package>/<binary> beside lib/.
BUNDLE_RPATH = ["-Wl,-rpath,$$ORIGIN/../../lib"]

def ps_cc_binary(name, copts = [], linkopts = [], **kwargs):
    native.cc_binary(
        name = name,
        copts = PS_COPTS + copts,
        linkopts = linkopts + BUNDLE_RPATH,
        **kwargs
    )

def ps_cc_test(name, copts = [], deps = [], linkopts = [], **kwargs):
    native.cc_test(
        name = name,
        copts = PS_COPTS + copts,
        linkopts = linkopts + BUNDLE_RPATH,
        deps = deps + ["@system//:gtest_main"],
        **kwargs
    )

def ps_proto_library(name, src, deps = [], grpc = False, visibility = None):
    """Compiles one .proto with the system protoc (and grpc_cpp_plugin).

    Makes `name` (a cc_library) exposing `<base>.pb.h` and, with grpc = True,
    `<base>.grpc.pb.h`. `deps` are other ps_proto_library targets whose protos
    `src` imports; `visibility` the cc_library's (the package's default
    when None).
    """
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    cmd = "protoc -I. --cpp_out=$(GENDIR) "
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        cmd += "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin "
    native.genrule(
        name = name + "_gen",
        srcs = [src] + [d + "_src" for d in deps],
        outs = outs,
        cmd = cmd + "$(location " + src + ")",
    )
    native.filegroup(name = name + "_src", srcs = [src] + [d + "_src" for d in deps])
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@system//:grpc" if grpc else "@system//:protobuf"],
        copts = ["-w"],
        # Its descriptors register in every binary that depends on it.
        alwayslink = 1,
        visibility = visibility,
    )

def ps_fuzz_test(name, srcs, deps = [], seconds = 3):
    """A fuzz target: `srcs` define LLVMFuzzerTestOneInput.

    Makes `name`, a test that runs it over its seed corpus (corpus/<name>/)
    and random mutations of the seeds for `seconds` (fuzz/standalone_main.cc,
    any compiler), and `name`_libfuzzer, the libFuzzer binary (manual: only
    fuzz/run.sh builds it, with --config=libfuzzer).
    """
    native.cc_library(
        name = name + "_target",
        srcs = srcs,
        copts = PS_COPTS,
        deps = deps,
        alwayslink = 1,
        testonly = 1,
    )
    native.cc_test(
        name = name,
        srcs = ["standalone_main.cc"],
        copts = PS_COPTS,
        linkopts = BUNDLE_RPATH,
        args = ["fuzz/corpus/" + name, str(seconds)],
        data = native.glob(["corpus/" + name + "/*"]),
        deps = [":" + name + "_target"],
    )
    native.cc_binary(
        name = name + "_libfuzzer",
        linkopts = ["-fsanitize=fuzzer"],
        deps = [":" + name + "_target"],
        tags = ["manual"],
        testonly = 1,
    )
