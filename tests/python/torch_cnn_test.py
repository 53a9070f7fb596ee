"""Two PyTorch workers and two servers under BSP, Adam on the servers, train
the CNN of examples/torch/cnn_fashion_mnist.py for 200 clocks as one
process does on the same global batches (one worker with --overlap=on, one
without):

- every tensor within 1e-4 (max |dw| / max |w|) of one process computing
  each clock's gradient over the workers' two shares and stepping with the
  servers' Adam arithmetic (server_adam.py): the same sums in the same
  order, so the same bits, whatever the chaos of training;
- `psctl export` of the job's last checkpoint loads into the script's model
  with load_state_dict(strict=True): the real parameter names, the final
  weights;
- test accuracy within 1 point of one process running torch.optim.Adam
  (example --alone). Its weights cannot be held to 1e-4: Adam's update
  divides by sqrt(v) + 1e-8, so last-bit differences of near-zero
  gradients move weights by up to lr, and training amplifies them; two
  torch.optim.Adam runs that only sum the global batch's gradient in
  another order (64 examples, or 2 x 32) end 0.15 apart after 200 clocks.

Under Bazel its data are the daemons and the library; by hand
(python3 tests/python/torch_cnn_test.py) they come from bazel-bin.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import local_cluster
from local_cluster import LocalCluster, binary, runfile

# One BLAS thread in every process (torch's own threads are the example's
# --threads=1): the same arithmetic then gives the same bits everywhere.
# Set before torch loads OpenBLAS.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))
sys.path[:0] = [str(runfile("python")), str(runfile("examples/torch"))]

JOB = runfile("tests/python/jobs/cnn_external.pbtxt")
SCRIPT = runfile("examples/torch/cnn_fashion_mnist.py")
# What the job file says, for the runs alone.
CLOCKS, BATCH_SIZE, SEED, LR = 200, 64, 42, 0.001
WORKERS = ["worker0", "worker1"]
TORCH_SEED = 0
TOLERANCE = 1e-4
ACCURACY_POINTS = 0.01
TIMEOUT_S = 600


def train_like_the_servers():
    """The job's training in this process, summed as the cluster sums it:
    each clock's gradient over the workers' shares, the servers' Adam."""
    import torch
    import torch.nn.functional as F

    import cnn_fashion_mnist
    import fashion_mnist
    import pstrain.torch as pst
    from server_adam import ServerAdam

    torch.set_num_threads(1)
    torch.manual_seed(TORCH_SEED)
    model = cnn_fashion_mnist.Net()
    opt = ServerAdam(model.parameters(), lr=LR)
    train = fashion_mnist.FashionMNIST(train=True)
    for clock in range(CLOCKS):
        opt.zero_grad()
        for share_index in range(len(WORKERS)):
            indices = pst.batch_indices(clock, seed=SEED, train_size=len(train),
                                        batch_size=BATCH_SIZE, share_index=share_index,
                                        num_shares=len(WORKERS))
            x, y = torch.utils.data.default_collate([train[i] for i in indices])
            (F.cross_entropy(model(x), y) * len(indices) / BATCH_SIZE).backward()
        opt.step()
    return model.state_dict()


class TorchCnnTest(unittest.TestCase):
    def test_two_workers_train_like_one_process(self):
        import torch

        checkpoints = tempfile.mkdtemp(prefix="torch_cnn_checkpoints-",
                                       dir=os.environ.get("TEST_TMPDIR"))
        flags = ["--checkpoint_dir=" + checkpoints, "--checkpoint_every=%d" % CLOCKS]
        with LocalCluster(JOB, servers=2, workers=len(WORKERS), name="torch_cnn",
                          scheduler_flags=flags) as cluster:
            script = [sys.executable, SCRIPT, "--threads=1", "--torch_seed=%d" % TORCH_SEED]
            for name in WORKERS:
                # Worker 0 overlaps (its gradients leave at the hooks, its
                # reads land while the clock starts), worker 1 does not.
                env = cluster.worker_env()
                if name == WORKERS[0]:
                    env["PSTRAIN_FLAGS"] += " --overlap=on"
                cluster.start(name, script + ["--weights_out=%s/%s.pt" % (cluster.dir, name)], env)
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0))

            status = cluster.final_status()
            self.assertEqual(status["job_state"], "DONE")
            workers = [m for m in status["members"] if m["role"] == "WORKER"]
            self.assertEqual(len(workers), len(WORKERS))
            for m in workers:
                self.assertEqual((m["state"], int(m["clock"]), m["worker"]["frontend"]),
                                 ("FINISHED", CLOCKS, "pytorch"), m)

            final = [torch.load(cluster.dir / (name + ".pt")) for name in WORKERS]
            expected = train_like_the_servers()
            self.assertEqual(sorted(final[0]), sorted(expected))
            for name, w in expected.items():
                # Both workers hold the servers' final weights.
                self.assertTrue(torch.equal(final[0][name], final[1][name]), name)
                error = float((final[0][name] - w).abs().max() / w.abs().max())
                self.assertLessEqual(error, TOLERANCE, name)

            self.check_export(checkpoints, cluster.dir / "export.safetensors", final[0])

            result = cluster.dir / "alone.json"
            cluster.start("alone", script + [
                "--alone", "--clocks=%d" % CLOCKS, "--batch_size=%d" % BATCH_SIZE,
                "--seed=%d" % SEED, "--lr=%g" % LR, "--result_json=%s" % result,
            ])
            self.assertEqual(cluster.wait(["alone"], TIMEOUT_S), {"alone": 0})
            with open(result) as f:
                alone = json.load(f)["test_accuracy"]
            for m in workers:
                self.assertAlmostEqual(m["worker"]["test_accuracy"], alone, delta=ACCURACY_POINTS)

    def check_export(self, checkpoints, out, final):
        import torch

        import cnn_fashion_mnist
        from pstrain.checkpoint import load_safetensors

        export = subprocess.run([str(binary("tools/psctl")), "export",
                                 "--checkpoint_dir=" + checkpoints, "--out=%s" % out],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(export.returncode, 0, export.stdout)
        model = cnn_fashion_mnist.Net()
        model.load_state_dict(load_safetensors(out), strict=True)
        for name, w in model.state_dict().items():
            self.assertTrue(torch.equal(w, final[name]), name)


if __name__ == "__main__":
    local_cluster.main("torch_cnn_test")
