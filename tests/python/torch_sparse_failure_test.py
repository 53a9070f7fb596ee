"""The sparse tables' job -- examples/torch/fortune_topics.py as two
PyTorch workers (tests/python/fortune_worker.py), two servers, BSP,
checkpoints every 20 clocks -- against servers that fail and scripts that
push a NaN:

- servers killed with SIGKILL at three clocks, each replaced at once
  (ps_server --id): every kill rolls the cluster back to the newest
  complete checkpoint (a new generation), the scripts go on without an
  exception and redo the clocks rolled back, the job ends DONE with every
  member's exit 0, and the table's rows, the linear layer and the test
  accuracy are bit for bit an undisturbed run's;
- a server frozen (SIGSTOP) past the heartbeat timeout and let go: it is
  declared dead, the cluster rolls back, the server rejoins; the same;
- a NaN in worker 0's loss and an Inf in worker 1's at one clock (so in
  every gradient of that clock, dense and rows): that clock's pushes are
  taken but nothing of them is applied -- the rows and weights at the end
  are those of one process that skips the clock, the table counts one
  update fewer -- each skip counted in Status, and the job ends DONE with
  the undisturbed run's accuracy within a point.

The facts come from exit codes, the scheduler's Status (live and its
--status_file) and the workers' result files, never from logs.

By hand: python3 tests/python/torch_sparse_failure_test.py (the daemons
from bazel-bin; it re-runs itself under a python3 that imports torch).
"""

import os
import signal
import sys
import time
import unittest

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import local_cluster  # noqa: E402
from local_cluster import binary, runfile  # noqa: E402

os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))
sys.path[:0] = [str(runfile("python")), str(runfile("examples/torch"))]

from cluster_control import Cluster, member, slowest_clock  # noqa: E402
from fortune_reference import relative_error, train_like_one_process  # noqa: E402

JOB = runfile("tests/python/jobs/fortune_external.pbtxt")
WORKER = runfile("tests/python/fortune_worker.py")
CLOCKS = 200
CHECKPOINT_EVERY = 20
SLEEP_MS = "--sleep_ms=15"    # per step: 200 clocks last at least 3 s
FLAGS = ["--clocks=%d" % CLOCKS, "--heartbeat_timeout_ms=2000"]
WORKERS = ["worker0", "worker1"]
KILLED = 128 + signal.SIGKILL
START_TIMEOUT_S = 120
END_TIMEOUT_S = 300
POISONED_CLOCK = 60
ACCURACY_POINTS = 0.01
TOLERANCE = 5e-5  # 200 clocks of float32 drift (torch_sparse_test: 2.6e-6 after 150)

_undisturbed = None


def weights(cluster, name):
    import torch
    return torch.load(cluster.dir / (name + ".pt"))


def rollbacks_done(status):
    return [r for r in status.get("rollbacks", []) if int(r.get("done_unix_ms", 0)) > 0]


class TorchSparseFailureTest(unittest.TestCase):
    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        sys.stderr.write("[%s: %.1f s] " % (self._testMethodName, time.monotonic() - self.started))

    def cluster(self, name, checkpoints=True):
        cluster = Cluster(JOB, servers=2, workers=2, name=name)
        cluster.scheduler_flags = list(FLAGS)
        if checkpoints:
            cluster.scheduler_flags += ["--checkpoint_dir=%s" % (cluster.dir / "checkpoints"),
                                        "--checkpoint_every=%d" % CHECKPOINT_EVERY]
        return cluster

    def start_workers(self, cluster, *flags):
        for name in WORKERS:
            cluster.start(name, [sys.executable, WORKER, "--weights_out=%s/%s.pt" % (
                cluster.dir, name), "--result_json=%s" % cluster.result_path(name)] + list(flags),
                env=cluster.worker_env())

    def finish(self, cluster, names):
        """Waits for `names` and the workers: every exit 0, the job DONE,
        both workers FINISHED at the last clock with the same weights. The
        final Status and worker 0's weights."""
        import torch
        codes = cluster.wait(names + WORKERS, END_TIMEOUT_S)
        self.assertEqual(codes, dict.fromkeys(codes, 0), "logs in %s" % cluster.dir)
        final = cluster.final_status()
        self.assertEqual(final["job_state"], "DONE", final.get("message"))
        for w in range(len(WORKERS)):
            m = member(final, "WORKER", w)
            self.assertEqual((m["state"], int(m["clock"])), ("FINISHED", CLOCKS), m)
        for name in WORKERS:
            result = cluster.result(name)
            self.assertTrue(result["ok"], result)
            self.assertEqual(result["clocks"], CLOCKS, result)
        got = [weights(cluster, name) for name in WORKERS]
        for key in got[0]:  # both read the servers' weights and rows
            self.assertTrue(torch.equal(got[0][key], got[1][key]), key)
        return final, got[0]

    def undisturbed(self):
        """Worker 0's final weights and test accuracy with no fault (run once)."""
        global _undisturbed
        if _undisturbed is None:
            with self.cluster("sparse_undisturbed") as cluster:
                self.start_workers(cluster)
                _, w = self.finish(cluster, ["scheduler", "server0", "server1"])
                _undisturbed = (w, cluster.result("worker0")["test_accuracy"])
        return _undisturbed

    def assertAsUndisturbed(self, cluster, got):
        """Under BSP a rollback changes no row and no weight: the final ones,
        and so the accuracy, are bit for bit the undisturbed run's."""
        import torch
        expected, accuracy = self.undisturbed()
        self.assertEqual(sorted(got), sorted(expected))
        for key, w in expected.items():
            self.assertTrue(torch.equal(got[key], w), "%s: max |dw| %g" % (
                key, float((got[key].float() - w.float()).abs().max())))
        for name in WORKERS:
            self.assertEqual(cluster.result(name)["test_accuracy"], accuracy)

    def wait_until(self, cluster, clock, rollbacks):
        """Waits for the slowest worker at `clock` with `rollbacks` done."""
        return cluster.wait_status(
            lambda st: slowest_clock(st) >= clock and len(rollbacks_done(st)) >= rollbacks
            and int(st.get("manifest_clock", 0)) >= CHECKPOINT_EVERY, START_TIMEOUT_S)

    def test_servers_killed_at_three_clocks_and_replaced_change_no_row(self):
        with self.cluster("sparse_kills") as cluster:
            self.start_workers(cluster, SLEEP_MS)
            replaced = []
            for n, (server_id, at) in enumerate([(1, 45), (0, 95), (1, 140)]):
                status = self.wait_until(cluster, at, n)
                self.assertLess(slowest_clock(status), CLOCKS - 20, "the job nearly ended first")
                victim = cluster.server_process(server_id)
                self.assertEqual(cluster.kill(victim), KILLED)
                name = "server%d_again%d" % (server_id, n)
                cluster.start_server(name, server_id=server_id)
                replaced.append((victim, name))
            victims = {v for v, _ in replaced}
            alive = [n for n in ["server0", "server1"] + [r for _, r in replaced]
                     if n not in victims]
            final, got = self.finish(cluster, ["scheduler"] + alive)
            done = rollbacks_done(final)
            self.assertEqual(len(done), 3, final.get("rollbacks"))
            self.assertEqual(int(final["generation"]), 3)
            for r in done:
                self.assertEqual(int(r["to_clock"]) % CHECKPOINT_EVERY, 0, r)
            # The scripts redid the clocks rolled back, and saw no exception.
            for name in WORKERS:
                self.assertGreater(cluster.result(name)["steps"], CLOCKS)
            self.assertAsUndisturbed(cluster, got)
            print("servers killed and replaced: rolled back %s; steps %s" % (
                [(r["from_clock"], r["to_clock"]) for r in done],
                [cluster.result(n)["steps"] for n in WORKERS]))

    def test_a_server_frozen_past_the_timeout_changes_no_row(self):
        with self.cluster("sparse_frozen") as cluster:
            self.start_workers(cluster, SLEEP_MS)
            self.wait_until(cluster, 70, 0)
            victim = cluster.server_process(0)
            cluster.processes[victim].send_signal(signal.SIGSTOP)
            time.sleep(4)  # twice the heartbeat timeout: declared dead
            # Back, it hears of the rollback its silence made, restores the
            # checkpoint and rejoins.
            cluster.processes[victim].send_signal(signal.SIGCONT)
            final, got = self.finish(cluster, ["scheduler", "server0", "server1"])
            done = rollbacks_done(final)
            self.assertEqual(len(done), 1, final.get("rollbacks"))
            for name in WORKERS:
                self.assertGreater(cluster.result(name)["steps"], CLOCKS)
            self.assertAsUndisturbed(cluster, got)
            print("a server frozen for 4 s: rolled back from %s to %s; steps %s" % (
                done[0]["from_clock"], done[0]["to_clock"],
                [cluster.result(n)["steps"] for n in WORKERS]))

    def test_a_nan_and_an_inf_at_one_clock_are_taken_not_applied_and_counted(self):
        import torch
        with self.cluster("sparse_nan", checkpoints=False) as cluster:
            for name, value in zip(WORKERS, ["nan", "inf"]):
                cluster.start(name, [sys.executable, WORKER, "--weights_out=%s/%s.pt" % (
                    cluster.dir, name), "--result_json=%s" % cluster.result_path(name),
                    "--poison=%d:%s" % (POISONED_CLOCK, value)], env=cluster.worker_env())
            final, got = self.finish(cluster, ["scheduler", "server0", "server1"])
        servers = [m for m in final["members"] if m["role"] == "SERVER"]
        rows_skipped = dense_skipped = 0
        for m in servers:
            words, unused = m["server"]["tables"]
            # The poisoned round is no update; the empty pushes of the unused
            # table hold nothing to skip.
            self.assertEqual(int(words["updates"]), CLOCKS - 1, m)
            self.assertEqual(int(words["clock"]), CLOCKS, m)
            self.assertEqual(int(unused.get("nonfinite_skipped", 0)), 0, m)
            rows_skipped += int(words.get("nonfinite_skipped", 0))
            dense_skipped += int(m["server"].get("nonfinite_skipped", 0)) - int(
                words.get("nonfinite_skipped", 0))
            self.assertEqual(int(words.get("refused", 0)), 0, m)
        # Each worker's push of the clock to each server that got rows of it,
        # and each of the linear layer's two chunks (weight, bias) from both.
        self.assertGreaterEqual(rows_skipped, 2)
        self.assertLessEqual(rows_skipped, 4)
        self.assertEqual(dense_skipped, 2 * 2)
        # One process that skips the clock, within the float drift of 200
        # clocks; the undisturbed run, which did not skip it, far from it.
        expected = train_like_one_process(CLOCKS, len(WORKERS), skip={POISONED_CLOCK})
        undisturbed, accuracy = self.undisturbed()
        self.assertTrue(torch.equal(got["ids"], expected["ids"]))
        for key in ("rows", "fc.weight", "fc.bias"):
            self.assertTrue(bool(torch.isfinite(got[key]).all()), key)
            error = relative_error(got[key], expected[key])
            self.assertLessEqual(error, TOLERANCE, key)
            self.assertGreater(relative_error(got[key], undisturbed[key]), 10 * TOLERANCE, key)
        for name in WORKERS:
            self.assertAlmostEqual(cluster.result(name)["test_accuracy"], accuracy,
                                   delta=ACCURACY_POINTS)
        print("a NaN and an Inf at clock %d: %d row pushes and %d chunks skipped; accuracy %.4f "
              "(undisturbed %.4f)" % (POISONED_CLOCK, rows_skipped, dense_skipped,
                                      cluster.result("worker0")["test_accuracy"], accuracy))


if __name__ == "__main__":
    local_cluster.main("torch_sparse_failure_test")
