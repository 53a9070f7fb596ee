"""Bad input to a pstrain.torch worker is a clear Python exception naming the
cause -- never a hang, never the interpreter's exit or crash:

- no scheduler at the address: SchedulerUnavailable (a ConnectionError)
  within connect_timeout_s and a little;
- a token the scheduler does not take: Unauthenticated (a PermissionError),
  and the worker is not a member;
- a model whose 2nd parameter has another shape than the first worker's:
  ModelMismatch naming that parameter; the job keeps waiting for a worker
  that matches and, given one, finishes;
- a float64 parameter: UnsupportedDtype (a TypeError) at pst.Optimizer, and
  nothing registered; when no worker takes the failed one's place within
  the replacement timeout, the job ends ABORTED saying why;
- step() without backward: NoGradients; the job (one worker) is ABORTED with
  that worker FAILED and every daemon exits;
- a second pst.Optimizer in a worker: RuntimeError at its construction,
  before the model is declared (the job goes on waiting);
- a flag out of range, unknown, or unparsable: InvalidArgument (a
  ValueError) from pst.init;
- a server gone mid-run (and not declared dead): ServerUnavailable naming
  it, not SchedulerUnavailable, from the clock loop's calls that reach
  both daemons.

Each script is tests/python/tiny_worker.py in a process of its own: it
writes the exception's class and bases to a result file and raises it again
(exit 1). A result file at all proves the interpreter was still running
Python when the error came (a C exit() or a crash writes none). The facts
come from that file, exit codes and the scheduler's Status (psctl status
--json, the final --status_file), never from logs.

By hand: python3 tests/python/torch_bad_input_test.py (the daemons from
bazel-bin; it re-runs itself under a python3 that imports torch).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

# One BLAS thread in every process: 2 cores are shared by all of them.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import local_cluster  # noqa: E402
from local_cluster import binary, runfile  # noqa: E402

os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))

from cluster_control import (TINY_JOB, TINY_WORKER, Cluster, closed_port, member,  # noqa: E402
                             members, read_json)

# A script that fails must be out within this (it fails in seconds).
EXIT_TIMEOUT_S = 60
# A job of the tiny model that finishes fast.
SHORT_JOB = ["--clocks=20"]


def run_tiny_alone(*args, timeout=EXIT_TIMEOUT_S):
    """Runs tiny_worker.py with `args` and no cluster: (exit code, its
    result dict or None, wall seconds). TimeoutExpired fails the test."""
    # pstrain from the runfiles (or the repository), as the cluster's workers.
    path = [str(runfile("python"))] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    env = dict(os.environ, PYTHONPATH=":".join(path))
    with tempfile.TemporaryDirectory(prefix="pstrain-bad-input-") as d:
        result = os.path.join(d, "result.json")
        log = os.path.join(d, "log")
        start = time.monotonic()
        with open(log, "wb") as out:
            process = subprocess.Popen([sys.executable, str(TINY_WORKER),
                                        "--result_json=" + result] + list(args),
                                       stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env)
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                with open(log, errors="replace") as f:
                    sys.stderr.write(f.read()[-4000:])
                raise AssertionError("tiny_worker.py %s still ran after %d s" % (args, timeout))
        seconds = time.monotonic() - start
        if code != 1:
            with open(log, errors="replace") as f:
                sys.stderr.write(f.read()[-4000:])
        return code, read_json(result), seconds


class BadInputTest(unittest.TestCase):
    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        sys.stderr.write("[%s: %.1f s] " % (self._testMethodName, time.monotonic() - self.started))

    def assertRaisedIn(self, result, exception, *bases):
        """The script's result says it raised `exception` (a subclass of
        every one of `bases`), with the interpreter alive to say so."""
        self.assertIsNotNone(result, "no result file: the interpreter did not get to write it")
        self.assertFalse(result["ok"], result)
        self.assertEqual(result["exception"], exception, result)
        for base in bases:
            self.assertIn(base, result["bases"], result)
        # From the script's start to the exception: seconds, not a hang.
        self.assertLess(result["seconds"], 30, result)

    def assertFailedWithExitOne(self, code, cluster=None, name=None):
        self.assertEqual(code, 1, "an uncaught Python exception exits 1 (%s)"
                         % (cluster.log(name) if cluster else "no cluster"))

    # (a) No scheduler.
    def test_no_scheduler_is_scheduler_unavailable_within_seconds(self):
        port = closed_port()
        code, result, seconds = run_tiny_alone(
            "--scheduler=127.0.0.1:%d" % port, '--init_flags={"connect_timeout_s": 1}')
        self.assertFailedWithExitOne(code)
        self.assertRaisedIn(result, "SchedulerUnavailable", "PstrainError", "ConnectionError")
        # Within connect_timeout_s (1 s) and a little, not a hang: the
        # script's own time from start to the exception.
        self.assertLess(result["seconds"], 10, result)
        print("no scheduler: %s after %.2f s in the script (process %.1f s)"
              % (result["exception"], result["seconds"], seconds))

    # (b) A wrong token.
    def test_wrong_token_is_unauthenticated_and_not_a_member(self):
        with tempfile.TemporaryDirectory(prefix="pstrain-tokens-") as d:
            right, wrong = os.path.join(d, "right"), os.path.join(d, "wrong")
            for path, token in ((right, "the-cluster-token-0123456789"),
                                (wrong, "another-token-9876543210")):
                with open(path, "w") as f:
                    f.write(token + "\n")
                os.chmod(path, 0o600)
            token_flag = "--auth_token_file=" + right
            with Cluster(TINY_JOB, servers=2, workers=2, name="wrong_token",
                         scheduler_flags=[token_flag] + SHORT_JOB, server_flags=[token_flag],
                         psctl_flags=[token_flag]) as cluster:
                cluster.wait_status(lambda st: len(members(st, "SERVER")) == 2, 60)
                cluster.start_tiny("stranger", '--init_flags={"auth_token_file": "%s"}' % wrong)
                code = cluster.wait(["stranger"], EXIT_TIMEOUT_S)["stranger"]
                self.assertFailedWithExitOne(code, cluster, "stranger")
                self.assertRaisedIn(cluster.result("stranger"), "Unauthenticated",
                                    "PstrainError", "PermissionError")
                status = cluster.status()
                self.assertIsNotNone(status, "psctl with the right token gets Status")
                self.assertEqual(status["job_state"], "WAITING")
                self.assertEqual(members(status, "WORKER"), [])
                # With the right token the same script gets in.
                for name in ("worker0", "worker1"):
                    cluster.start_tiny(name, '--init_flags={"auth_token_file": "%s"}' % right)
                codes = cluster.wait(["scheduler", "server0", "server1", "worker0", "worker1"],
                                     EXIT_TIMEOUT_S * 2)
                self.assertEqual(codes, dict.fromkeys(codes, 0))
                self.assertEqual(cluster.final_status()["job_state"], "DONE")

    # (c) A model that differs from the first worker's.
    def test_model_mismatch_names_the_parameter_and_the_job_waits(self):
        with Cluster(TINY_JOB, servers=2, workers=2, name="mismatch",
                     scheduler_flags=SHORT_JOB) as cluster:
            cluster.start_tiny("worker0")
            # Worker 0 has registered model X (the job waits for another).
            cluster.wait_status(lambda st: len(members(st, "WORKER")) == 1, 60)
            cluster.start_tiny("other", "--model=bias_mismatch")
            code = cluster.wait(["other"], EXIT_TIMEOUT_S)["other"]
            self.assertFailedWithExitOne(code, cluster, "other")
            result = cluster.result("other")
            self.assertRaisedIn(result, "ModelMismatch", "PstrainError", "ValueError")
            # The first parameter that differs: fc1.weight is the same.
            self.assertIn("fc1.bias", result["message"])
            self.assertNotIn("fc1.weight", result["message"])
            # It joined at init() and left at the refusal: its place is
            # free (DEAD), and the scheduler goes on waiting for a worker
            # that matches.
            status = cluster.status()
            self.assertIsNotNone(status)
            self.assertEqual(status["job_state"], "WAITING")
            self.assertEqual([(int(m["id"]), m["state"] == "DEAD")
                              for m in members(status, "WORKER")], [(0, False), (1, True)])
            self.assertTrue(cluster.processes["worker0"].poll() is None, "worker 0 still waits")
            # Given one, the job runs and finishes.
            cluster.start_tiny("worker1")
            codes = cluster.wait(["scheduler", "server0", "server1", "worker0", "worker1"],
                                 EXIT_TIMEOUT_S * 2)
            self.assertEqual(codes, dict.fromkeys(codes, 0))
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "DONE")
            self.assertEqual(sorted(m["state"] for m in members(final, "WORKER")),
                             ["FINISHED", "FINISHED"])
            # Each worker's rank and the world size from init() on, and
            # still after finish(): the same as at its first batch.
            ranks = []
            for name in ("worker0", "worker1"):
                result = cluster.result(name)
                self.assertEqual(result["place_at_init"], [result["rank"], 2], result)
                self.assertEqual(result["place_after_finish"], [result["rank"], 2], result)
                ranks.append(result["rank"])
            self.assertEqual(sorted(ranks), [0, 1])

    def fail_before_registration(self, name, *flags):
        """Runs a one-worker job whose tiny worker (`flags`) raises before it
        declares its model: its result. The worker that joined at init()
        left (DEAD, its place free), and the job goes on waiting."""
        with Cluster(TINY_JOB, servers=1, workers=1, name=name,
                     scheduler_flags=SHORT_JOB + ["--num_servers=1", "--num_workers=1"]) as cluster:
            cluster.wait_status(lambda st: len(members(st, "SERVER")) == 1, 60)
            cluster.start_tiny("worker0", *flags)
            code = cluster.wait(["worker0"], EXIT_TIMEOUT_S)["worker0"]
            self.assertFailedWithExitOne(code, cluster, "worker0")
            status = cluster.status()
            self.assertIsNotNone(status)
            self.assertEqual(status["job_state"], "WAITING")
            self.assertEqual([m["state"] for m in members(status, "WORKER")], ["DEAD"])
            return cluster.result("worker0")

    # (d) A parameter of an unsupported dtype.
    def test_float64_parameters_are_unsupported_dtype_before_registration(self):
        # Raised at pst.Optimizer, before the model was declared.
        result = self.fail_before_registration("dtype", "--model=double")
        self.assertRaisedIn(result, "UnsupportedDtype", "TypeError")
        self.assertIn("fc1.weight", result["message"])

    # (d') ...and when the job then waits for a worker nobody starts.
    def test_a_worker_that_failed_before_the_start_ends_the_job_within_the_timeout(self):
        """Worker 1 fails before it declares its model (UnsupportedDtype):
        its place is free, and when no worker takes it within the
        replacement timeout the job, which can never start, ends ABORTED
        saying why; worker 0, which waited for the start, gets JobAborted
        and every daemon exits (a launcher that started every worker it
        will start would otherwise wait for good)."""
        timeout_s = 3
        with Cluster(TINY_JOB, servers=1, workers=2, name="left_before_start",
                     scheduler_flags=SHORT_JOB + ["--num_servers=1",
                                                  "--replacement_timeout_ms=%d" % (timeout_s * 1000)]
                     ) as cluster:
            cluster.start_tiny("worker0")
            cluster.wait_status(lambda st: len(members(st, "WORKER")) == 1, 60)
            cluster.start_tiny("double", "--model=double")
            self.assertFailedWithExitOne(cluster.wait(["double"], EXIT_TIMEOUT_S)["double"],
                                         cluster, "double")
            left = time.monotonic()
            codes = cluster.wait(["scheduler", "server0", "worker0"], EXIT_TIMEOUT_S)
            took = time.monotonic() - left
            self.assertEqual(codes, {"scheduler": 1, "server0": 1, "worker0": 1})
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "ABORTED")
            self.assertIn("could not start: worker 1 left before it", final.get("message", ""))
            self.assertIn("UnsupportedDtype", final.get("message", ""))
            self.assertRaisedIn(cluster.result("worker0"), "JobAborted", "PstrainError")
            self.assertLess(took, timeout_s + 10)
            print("a worker that failed before the start: the job ABORTED %.1f s later "
                  "(replacement timeout %d s)" % (took, timeout_s))

    # (e) step() with no gradients.
    def test_step_without_backward_is_no_gradients_and_nobody_hangs(self):
        with Cluster(TINY_JOB, servers=1, workers=1, name="no_gradients",
                     scheduler_flags=SHORT_JOB + ["--num_servers=1", "--num_workers=1"]) as cluster:
            cluster.start_tiny("worker0", "--no_backward")
            codes = cluster.wait(["worker0", "scheduler", "server0"], EXIT_TIMEOUT_S)
            self.assertFailedWithExitOne(codes["worker0"], cluster, "worker0")
            result = cluster.result("worker0")
            self.assertRaisedIn(result, "NoGradients", "PstrainError")
            self.assertEqual(result["steps"], 0, "raised at the first step")
            # The only worker failed: the job is aborted, every daemon exits 1.
            self.assertEqual((codes["scheduler"], codes["server0"]), (1, 1))
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "ABORTED")
            self.assertEqual(member(final, "WORKER", 0)["state"], "FAILED")

    # (f) A second Optimizer.
    def test_a_second_optimizer_is_runtime_error_before_registration(self):
        # Raised at the second pst.Optimizer, before the model was declared.
        result = self.fail_before_registration("two_optimizers", "--second_optimizer")
        self.assertRaisedIn(result, "RuntimeError")
        self.assertEqual(result["steps"], 0, result)
        print("second Optimizer: %s after %.2f s, the job WAITING"
              % (result["exception"], result["seconds"]))

    # (g) Bad flags.
    def test_bad_flags_are_invalid_argument_not_an_exit(self):
        scheduler = "--scheduler=127.0.0.1:%d" % closed_port()
        for flags in ({"heartbeat_interval_ms": -5},   # out of range
                      {"no_such_flag": 1},             # unknown
                      {"connect_timeout_s": "soon"},   # does not parse
                      {"overlap": "sometimes"}):       # not a choice
            with self.subTest(flags=flags):
                code, result, _ = run_tiny_alone(scheduler, "--init_flags=" + json.dumps(flags))
                self.assertFailedWithExitOne(code)
                self.assertRaisedIn(result, "InvalidArgument", "PstrainError", "ValueError")
                self.assertIn(next(iter(flags)), result["message"])

    # (h) A server gone mid-run.
    def test_a_server_gone_mid_run_is_server_unavailable_naming_it(self):
        """A clock's pull or push that cannot reach a server within the
        client's retries (30 s) raises ServerUnavailable naming the server:
        pst_next and pst_clock_done reach the scheduler and the servers, and
        the class says which one failed. The scheduler is told to wait long
        before it declares a member dead, so the worker's retries end first."""
        with Cluster(TINY_JOB, servers=2, workers=1, name="server_gone",
                     scheduler_flags=["--clocks=100000", "--num_workers=1",
                                      "--heartbeat_timeout_ms=600000"]) as cluster:
            cluster.start_tiny("worker0")
            cluster.wait_status(
                lambda st: int((member(st, "WORKER", 0) or {}).get("clock", 0)) >= 3, 60)
            cluster.kill(cluster.server_process(1))
            code = cluster.wait(["worker0"], 120)["worker0"]
            self.assertFailedWithExitOne(code, cluster, "worker0")
            result = cluster.result("worker0")
            self.assertIsNotNone(result, "no result file")
            self.assertEqual(result["exception"], "ServerUnavailable", result)
            for base in ("Unavailable", "PstrainError", "ConnectionError"):
                self.assertIn(base, result["bases"], result)
            self.assertIn("server 1", result["message"])
            print("a server gone: %s after %d clocks" % (result["exception"], result["steps"]))


if __name__ == "__main__":
    local_cluster.main("torch_bad_input_test")
