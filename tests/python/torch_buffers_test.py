"""A module's buffers under pst.Optimizer: the tiny MLP with a BatchNorm1d
(running_mean, running_var, num_batches_tracked), two workers and two
servers under BSP, 20 clocks, each buffer rule:

- broadcast (DDP's broadcast_buffers): both workers start every clock with
  the same buffers, worker 0's after its forward of the clock before;
- average: both start every clock with the same buffers, the mean of the
  two workers' after the clock before (their shares are equal);
- either way the servers' checkpoint holds them: `psctl export` loads into
  the model with load_state_dict(strict=True), equals the workers' final
  state_dict, and evaluates (eval mode) to the accuracy the workers report.

The facts are the buffers' sums each worker records (tiny_worker.py
--model=batchnorm), the final weights and the export.

By hand: python3 tests/python/torch_buffers_test.py (the daemons from
bazel-bin).
"""

import os
import subprocess
import sys
import tempfile
import unittest

# One BLAS thread in every process: the same arithmetic, the same bits.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import local_cluster  # noqa: E402
from local_cluster import binary, runfile  # noqa: E402

os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))
sys.path[:0] = [str(runfile("python")), str(runfile("tests/python"))]

from cluster_control import TINY_JOB, Cluster  # noqa: E402

CLOCKS = 20
WORKERS = ["worker0", "worker1"]
TIMEOUT_S = 180


class TorchBuffersTest(unittest.TestCase):
    def run_job(self, rule):
        """Each worker's result and final state_dict, and the export."""
        import torch

        from pstrain.checkpoint import load_safetensors

        checkpoints = tempfile.mkdtemp(prefix="torch_buffers-", dir=os.environ.get("TEST_TMPDIR"))
        flags = ["--clocks=%d" % CLOCKS, "--checkpoint_dir=" + checkpoints,
                 "--checkpoint_every=%d" % CLOCKS]
        with Cluster(TINY_JOB, servers=2, workers=len(WORKERS), name="buffers_" + rule,
                     scheduler_flags=flags) as cluster:
            for name in WORKERS:
                cluster.start_tiny(name, "--model=batchnorm", "--buffers=" + rule,
                                   "--weights_out=%s/%s.pt" % (cluster.dir, name))
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0))
            self.assertEqual(cluster.final_status()["job_state"], "DONE")
            results = {cluster.result(n)["rank"]: cluster.result(n) for n in WORKERS}
            finals = {cluster.result(n)["rank"]: torch.load(cluster.dir / (n + ".pt"))
                      for n in WORKERS}
            out = cluster.dir / "export.safetensors"
            export = subprocess.run([str(binary("tools/psctl")), "export",
                                     "--checkpoint_dir=" + checkpoints, "--out=%s" % out],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(export.returncode, 0, export.stdout)
            return results, finals, load_safetensors(out)

    def check_rule(self, rule, expected_start):
        import torch

        import tiny_worker

        results, finals, exported = self.run_job(rule)
        starts = [results[r]["buffers_at_start"] for r in (0, 1)]
        afters = [results[r]["buffers_after_forward"] for r in (0, 1)]
        self.assertEqual(len(starts[0]), CLOCKS)
        self.assertEqual(starts[0], starts[1], "both workers start each clock alike")
        self.assertNotEqual(afters[0], afters[1], "their own batches move them apart")
        for clock in range(1, CLOCKS):
            want = expected_start(afters[0][clock - 1], afters[1][clock - 1])
            for got, expected in zip(starts[0][clock], want):
                self.assertAlmostEqual(got, expected, delta=1e-5 * max(1.0, abs(expected)),
                                       msg="clock %d" % clock)
        model = tiny_worker.Tiny(batch_norm=True)
        model.load_state_dict(exported, strict=True)
        for name, value in model.state_dict().items():
            self.assertTrue(torch.equal(value, finals[0][name]), name)
            self.assertTrue(torch.equal(value, finals[1][name]), name)
        model.eval()
        x, y = tiny_worker.synthetic_set().tensors
        with torch.no_grad():
            accuracy = float((model(x).argmax(1) == y).float().mean())
        for r in (0, 1):
            self.assertEqual(results[r]["accuracy"], accuracy)
        print("%s: buffers as the rule says at each of %d clocks; the export loads strict "
              "and evaluates to %.4f, as the workers" % (rule, CLOCKS, accuracy))

    def test_broadcast_gives_every_worker_worker_0s_buffers(self):
        self.check_rule("broadcast", lambda first, second: first)

    def test_average_gives_every_worker_the_workers_mean(self):
        self.check_rule("average", lambda first, second: [(a + b) / 2
                                                          for a, b in zip(first, second)])


if __name__ == "__main__":
    local_cluster.main("torch_buffers_test")
