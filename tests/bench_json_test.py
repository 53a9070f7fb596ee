"""A benchmark's standard output is its JSON and nothing else (issue 53):
every C++ bench under bench/ runs a small, fast case here, and its whole
stdout must parse as one JSON document; logs (spdlog's, which the benches
send to stderr with pstrain::LogToStderr) and progress lines go to stderr.

transport_bench's case is the one that broke: its in-process worker logs
"server 0: payloads in the messages (server not ready)" or "... payloads
through shared memory" (worker/shm_links.cc), which used to land in the
middle of its JSON; the test also checks that the line was logged (to
stderr), so that the log path is exercised.

The test is a subreaper (PR_SET_CHILD_SUBREAPER): the benches' orphans
become its children, as they do in a container or a chroot whose PID 1 is
not init. transport_bench's reference peers once outlived it there
(waiting for getppid() to become 1), held its stdout open, and timed the
test out on a fresh Debian 12 while it passed here.

Left out: netns_bench, which needs root, iproute2 and tc and moves the
host's links, namespaces and IPv4 forwarding (a sandboxed test cannot, and
a test that did would have to run alone); its JSON is printed the way the
others' is.

The benches run two at a time (optimizer_bench's 4096 x 4096 memory section
is fixed and takes ~30 s on two cores, transport_bench's paired rounds
~25 s); the whole test takes 40 s or so on two cores, more on a busy
machine. By hand, after
`bazel build -c opt //bench/...`: python3 tests/bench_json_test.py
"""

import concurrent.futures
import ctypes
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import unittest

IN_BAZEL = bool(os.environ.get("TEST_SRCDIR"))
ROOT = (pathlib.Path(os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "pstrain"))
        if IN_BAZEL else pathlib.Path(__file__).resolve().parents[1] / "bazel-bin")
TMP = pathlib.Path(os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp(prefix="bench_json."))

# The smallest run of each bench, longest first (they are started in this
# order, two at a time).
CASES = {
    "optimizer_bench": ["--sizes=1", "--threads=1", "--min_seconds=0.01", "--pairs=1"],
    # Both paths (gRPC and shared memory) of a 1 MiB tensor: the worker in
    # this process logs how it reaches server 0.
    "transport_bench": ["--sizes_mib=1", "--min_seconds=0.01"],
    # Bit-identical or not (exit 1), chaos prints its JSON; chaos_test
    # checks the run itself.
    "chaos": ["--minutes=0.1", "--slowdown_ms=1", "--seed=1", "--dir=%s" % (TMP / "chaos")],
    "train_bench": ["--rounds=1", "--clocks=3", "--only=alone,bsp_1x1"],
    # The budget must hold the largest chunk (16 MiB of weights and Adam's
    # state: ~50 MB).
    "offload_bench": ["--state_mb=64", "--budget_mb=56", "--rounds=1",
                      "--dir=%s" % (TMP / "offload")],
    "sparse_bench": ["--rounds=1", "--ids=64", "--width=4", "--servers=1"],
    "windowed_bench": ["--device=cpu", "--layers=2", "--width=16", "--heads=1", "--context=8",
                       "--batch=2", "--rounds=1"],
    "worker_bench": ["--device=cpu", "--layers=1", "--width=16", "--heads=1", "--context=8",
                     "--batch=2", "--steps=1", "--dtypes=fp32"],
    "pipeline_bench": ["--rounds=1", "--forward_ms=0.1"],
    "codec_bench": ["--numel=1024", "--rounds=1", "--reps=2"],
}
EXIT_CODES = {"chaos": (0, 1)}
TIMEOUT_S = 240
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Makes the benches' orphans this process's children (see the module's
    docstring); a no-op where prctl is missing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):
        pass


def run_bench(name):
    """Runs one bench's case; its CompletedProcess (stdout and stderr apart)."""
    for d in ("chaos", "offload"):
        (TMP / d).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if not IN_BAZEL:  # the daemons are in each bench's own runfiles
        env.update(TEST_SRCDIR=str(ROOT / "bench" / (name + ".runfiles")),
                   TEST_WORKSPACE="pstrain")
    start = time.monotonic()
    done = subprocess.run([str(ROOT / "bench" / name)] + CASES[name], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, timeout=TIMEOUT_S,
                          check=False)
    sys.stderr.write("bench_json_test: %s took %.1f s\n" % (name, time.monotonic() - start))
    return done


_pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
_runs = {}


def setUpModule():
    become_subreaper()
    for name in CASES:
        _runs[name] = _pool.submit(run_bench, name)


def tearDownModule():
    _pool.shutdown(wait=True)


class BenchJsonTest(unittest.TestCase):
    def check(self, name):
        done = _runs[name].result()
        self.assertIn(done.returncode, EXIT_CODES.get(name, (0,)),
                      "%s exited %d; stderr ends:\n%s" % (name, done.returncode,
                                                          done.stderr[-3000:]))
        try:
            printed = json.loads(done.stdout)
        except json.JSONDecodeError as e:
            self.fail("%s's stdout is not one JSON document (%s):\n%s" % (name, e,
                                                                         done.stdout[:3000]))
        self.assertIsInstance(printed, dict, name)
        return done

    def test_transport_bench_logs_to_stderr(self):
        done = self.check("transport_bench")
        self.assertRegex(done.stderr,
                         r"server 0: payloads (in the messages|through shared memory)")


def _add(name):
    def test(self):
        self.check(name)

    setattr(BenchJsonTest, "test_%s_prints_json_alone" % name, test)


for _name in CASES:
    if _name != "transport_bench":
        _add(_name)

if __name__ == "__main__":
    unittest.main()
