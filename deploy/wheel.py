#!/usr/bin/env python3
"""Builds pstrain's Python wheel: the package (pstrain, pstrain.torch, the
launcher pstrain.run), libpstrain_torch.so beside it, the daemons the
launcher starts (pstrain/bin: ps_scheduler, ps_server, psctl), and the
shared libraries they need that a machine may lack in pstrain.libs/ -- as
auditwheel lays a wheel out, without glibc, libstdc++, libgcc_s, the NVIDIA
driver or the CUDA runtime (the machine's serve).

    deploy/wheel.py [--out=DIR]      builds with bazel, writes DIR/pstrain-*.whl
                                     (default dist/)

    python3 -m venv --system-site-packages VENV   # Debian's python3-torch
    VENV/bin/pip install --no-index dist/pstrain-*.whl
    VENV/bin/python -m pstrain.run --job=JOB --workers=2 script.py

The wheel is tagged py3-none-linux_x86_64: the package loads its library
with ctypes, so one wheel serves every CPython >= 3.9 and PyTorch >= 1.13.
It declares no dependency on torch (Debian's, or the machine's own).
Standard library only; the files' paths can also be given (a test's).
"""

import argparse
import base64
import hashlib
import pathlib
import re
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BINARIES = {  # name in pstrain/bin -> bazel-bin path
    "ps_scheduler": "scheduler/ps_scheduler",
    "ps_server": "server/ps_server",
    "psctl": "tools/psctl",
}
LIBRARY = "worker/external/libpstrain_torch.so"
# Never bundled: the C library and its loader, the C++ runtime, the GPU
# driver and CUDA's runtime libraries.
SYSTEM = re.compile(r"^(ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv|libstdc\+\+|"
                    r"libgcc_s|libcuda|libnvidia.*|libcudart|libcublas|libcublasLt)\.so")


def needed(path):
    """The shared libraries `path` resolves (ldd), but the system's."""
    out = subprocess.run(["ldd", str(path)], check=True, capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m and not SYSTEM.match(m.group(1)):
            libs.append(pathlib.Path(m.group(2)))
    return libs


def load_order(libs):
    """`libs` (paths) ordered so that each comes after the ones of them it
    needs (readelf's NEEDED entries): the order the package loads them in."""
    by_name = {lib.name: lib for lib in libs}
    deps = {}
    for lib in libs:
        out = subprocess.run(["readelf", "-d", str(lib)], check=True, capture_output=True,
                             text=True).stdout
        deps[lib.name] = [n for n in re.findall(r"\(NEEDED\).*\[(.+)\]", out) if n in by_name]
    order, seen = [], set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for dep in deps[name]:
            visit(dep)
        order.append(name)

    for name in sorted(deps):
        visit(name)
    return order


def version(package):
    text = (package / "__init__.py").read_text()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def build_wheel(out_dir, package, library, binaries):
    """Writes the wheel into out_dir; returns its path."""
    ver = version(package)
    dist_info = "pstrain-%s.dist-info" % ver
    files = {}  # name in the wheel -> (bytes, executable)
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" not in path.parts:
            files["pstrain/" + path.relative_to(package).as_posix()] = (path.read_bytes(), False)
    files["pstrain/" + library.name] = (library.read_bytes(), False)
    libs = set(needed(library))
    for name, path in binaries.items():
        files["pstrain/bin/" + name] = (path.read_bytes(), True)
        libs.update(needed(path))
    for lib in sorted(libs):
        files["pstrain.libs/" + lib.name] = (lib.resolve().read_bytes(), False)
    files["pstrain.libs/load-order.txt"] = ("\n".join(load_order(sorted(libs))) + "\n").encode(), \
        False
    files[dist_info + "/METADATA"] = ((
        "Metadata-Version: 2.1\nName: pstrain\nVersion: %s\n"
        "Summary: PyTorch workers of a pstrain parameter-server cluster\n"
        "Requires-Python: >=3.9\n" % ver).encode(), False)
    files[dist_info + "/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: pstrain deploy/wheel.py\nRoot-Is-Purelib: false\n"
        b"Tag: py3-none-linux_x86_64\n", False)
    files[dist_info + "/top_level.txt"] = (b"pstrain\n", False)
    record = [record_line(name, data) for name, (data, _) in sorted(files.items())]
    record.append(dist_info + "/RECORD,,")
    files[dist_info + "/RECORD"] = (("\n".join(record) + "\n").encode(), False)
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / ("pstrain-%s-py3-none-linux_x86_64.whl" % ver)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, (data, executable) in sorted(files.items()):
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if executable else 0o100644) << 16  # regular files
            z.writestr(info, data)
    return wheel


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "dist"), help="folder of the wheel")
    p.add_argument("--bin", help="a built bazel-bin (default: build it with bazel)")
    args = p.parse_args()
    if args.bin is None:
        targets = ["//%s:%s" % tuple(LIBRARY.rsplit("/", 1))]
        targets += ["//%s:%s" % tuple(b.rsplit("/", 1)) for b in BINARIES.values()]
        subprocess.run(["bazel", "build", "--noshow_progress"] + targets, cwd=ROOT, check=True)
        args.bin = str(ROOT / "bazel-bin")
    bin_dir = pathlib.Path(args.bin)
    wheel = build_wheel(pathlib.Path(args.out), ROOT / "python" / "pstrain", bin_dir / LIBRARY,
                        {name: bin_dir / path for name, path in BINARIES.items()})
    print("wheel: %s (%.1f MB)" % (wheel, wheel.stat().st_size / 1e6), file=sys.stderr)
    print(wheel)


if __name__ == "__main__":
    main()
