"""Moves of the job's placement under pstrain.torch workers (issue 70), as
tests/placement_move_test makes them under ps_worker: two workers running
tests/python/tiny_worker.py (a 2-layer MLP, 200 clocks, BSP, Adam on two
servers, checkpoints) -- and again tests/python/fortune_worker.py, whose
model is a sparse table's rows and a linear layer -- and while they train

- past clock 50, a ps_server --join adds a third server: the scheduler
  places a share of the chunks on it at a checkpoint a few clocks ahead;
- past clock 110, psctl drain-server 0 --wait gives server 0 back: its
  chunks go to the others at another checkpoint and it exits 0.

The scripts go on without noticing (exit 0), the
job ends DONE with two switches (placement versions 2 and 3, each a new
generation at the clock reached: no rollback), server 0 FINISHED at its
switch, every parameter served by exactly one server of the final
placement (the dense job), and both workers' final weights -- the table's
rows too -- are the undisturbed run's, bit for bit. The facts come from exit codes, the scheduler's Status and the
scripts' result files, never from logs.

By hand: python3 tests/python/torch_placement_test.py (the daemons from
bazel-bin; it re-runs itself under a python3 that imports torch).
"""

import os
import pathlib
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
sys.path[:0] = [str(runfile("python"))]

sys.path.append(str(runfile("examples/torch")))

from cluster_control import TINY_JOB, Cluster, member, slowest_clock  # noqa: E402

CLOCKS = 200
JOIN_AT, DRAIN_AT = 50, 110  # the slowest worker's clock when each move is asked for
SLEEP_MS = "--sleep_ms=25"   # per step: 200 clocks last at least 5 s
START_TIMEOUT_S = 120
END_TIMEOUT_S = 240
WORKERS = ["worker0", "worker1"]
FLAGS = ["--clocks=%d" % CLOCKS, "--heartbeat_timeout_ms=3000"]
# The sparse table's job: examples/torch/fortune_topics.py's embedding
# table and linear layer (tests/python/fortune_worker.py), the layer cut in
# chunks of 256 bytes so that each of three servers holds some (a server
# with table rows holds a chunk: PlacementMoves refuses a move otherwise).
SPARSE_JOB_TEXT = runfile("tests/python/jobs/fortune_external.pbtxt").read_text() + \
    "chunk_bytes: 256\n"
SPARSE_WORKER = runfile("tests/python/fortune_worker.py")


def weights(cluster, name):
    import torch
    return torch.load(cluster.dir / (name + ".pt"))


def run_workers(cluster, sparse=False):
    for name in WORKERS:
        weights_out = "--weights_out=%s/%s.pt" % (cluster.dir, name)
        if sparse:
            cluster.start(name, [sys.executable, SPARSE_WORKER, weights_out, "--sleep_ms=15",
                                 "--result_json=%s" % cluster.result_path(name)],
                          env=cluster.worker_env())
        else:
            cluster.start_tiny(name, SLEEP_MS, weights_out)


class TorchPlacementTest(unittest.TestCase):
    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        sys.stderr.write("[%s: %.1f s] " % (self._testMethodName, time.monotonic() - self.started))

    def undisturbed(self, job, sparse=False):
        with Cluster(job, servers=2, workers=2, name="torch_placement_undisturbed",
                     scheduler_flags=FLAGS) as cluster:
            run_workers(cluster, sparse)
            names = ["scheduler", "server0", "server1"] + WORKERS
            self.assertEqual(cluster.wait(names, END_TIMEOUT_S), dict.fromkeys(names, 0))
            return weights(cluster, "worker0")

    def wait_for_clock(self, cluster, clock):
        status = cluster.wait_status(lambda st: slowest_clock(st) >= clock, START_TIMEOUT_S)
        self.assertLess(slowest_clock(status), CLOCKS - 20,
                        "the job nearly ended before the move; the test would prove nothing")

    def test_a_server_added_then_one_drained_and_the_weights_end_bit_identical(self):
        self.grow_and_drain(TINY_JOB)

    def test_a_sparse_tables_rows_follow_the_moves_bit_identical(self):
        job = pathlib.Path(tempfile.mkdtemp(prefix="pstrain-sparse-job-")) / "job.pbtxt"
        job.write_text(SPARSE_JOB_TEXT)
        self.grow_and_drain(job, sparse=True)

    def grow_and_drain(self, job, sparse=False):
        import torch
        expected = self.undisturbed(job, sparse)
        cluster = Cluster(job, servers=2, workers=2, name="torch_placement")
        cluster.scheduler_flags = FLAGS + ["--checkpoint_dir=%s" % (cluster.dir / "checkpoints"),
                                           "--checkpoint_every=1000"]
        with cluster:
            run_workers(cluster, sparse)
            self.wait_for_clock(cluster, JOIN_AT)
            cluster.start_server("server2", join=True)
            cluster.wait_status(lambda st: int(st.get("placement", {}).get("version", 1)) >= 2,
                                START_TIMEOUT_S)
            self.wait_for_clock(cluster, DRAIN_AT)
            drained = cluster.server_process(0)
            code, out, err = cluster.psctl("drain-server", "0", "--wait", "--json")
            self.assertEqual(code, 0, out + err)
            names = ["scheduler", "server0", "server1", "server2"] + WORKERS
            self.assertEqual(cluster.wait(names, END_TIMEOUT_S), dict.fromkeys(names, 0))
            final = cluster.final_status()

            self.assertEqual(final["job_state"], "DONE", final.get("message"))
            placement = final["placement"]
            self.assertEqual(int(placement["version"]), 3)
            self.assertEqual([int(s.get("server", 0)) for s in placement["servers"]], [1, 2])
            self.assertEqual([(h["kind"], int(h.get("server", 0)), h.get("abandoned", ""))
                              for h in placement["history"]],
                             [("ADD_SERVER", 2, ""), ("DRAIN_SERVER", 0, "")])
            # The two switches are the only new generations: nothing rolled back.
            self.assertEqual([int(r.get("placement_version", 0)) for r in final["rollbacks"]],
                             [2, 3])
            for r in final["rollbacks"]:
                self.assertEqual(r.get("from_clock"), r.get("to_clock"), r)
            self.assertEqual(member(final, "SERVER", 0)["state"], "FINISHED")
            self.assertIn("drained at clock", member(final, "SERVER", 0).get("message", ""))
            if not sparse:  # (the table's rows are not parameters of the model)
                served = sum(int(member(final, "SERVER", s)["server"].get("params", 0))
                             for s in (1, 2))
                self.assertEqual(served, sum(w.numel() for w in expected.values()))
            for name in WORKERS:
                result = cluster.result(name)
                self.assertTrue(result is not None and result["ok"], result)
                got = weights(cluster, name)
                self.assertEqual(sorted(got), sorted(expected))
                for key, w in expected.items():
                    self.assertTrue(torch.equal(got[key], w), "%s's %s: max |dw| %g" % (
                        name, key, float((got[key].float() - w.float()).abs().max())))
            print("%s: grown 2 -> 3 servers at clock %s, server 0 drained at clock %s "
                  "(process %s)" % ("sparse" if sparse else "dense",
                                    placement["history"][0].get("switch_clock"),
                                    placement["history"][1].get("switch_clock"), drained))


if __name__ == "__main__":
    local_cluster.main("torch_placement_test")
