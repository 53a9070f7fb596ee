"""Two PyTorch workers and two servers train examples/torch/fortune_topics.py
(a fastText-style classifier: an embedding bag whose rows are the sparse
table "words", a linear layer) as one process does on the same global
batches:

- under BSP, the table's rows of every id the data use within 1e-5
  (max |dw| / max |w|) of one process with torch.nn.EmbeddingBag(sparse=True)
  and torch.optim.SparseAdam, the linear layer within 1e-5 of the servers'
  Adam arithmetic (server_adam.py), each clock's gradient summed over the
  workers' two shares;
- the servers' Status: each table's clock at the job's end, every update
  counted on both servers, no refusal; a second table the script never
  uses kept up by the empty pushes each step makes;
- test accuracy within 1 point of the example run --alone (torch.optim.Adam
  and SparseAdam) under BSP, and no more than 1 point below it under the
  hybrid (--table_consistency=asp: asynchronous tables beside BSP dense
  training).

Under Bazel its data are the daemons and the library; by hand
(python3 tests/python/torch_sparse_test.py) they come from bazel-bin.
"""

import json
import os
import sys
import unittest

import local_cluster
from local_cluster import LocalCluster, binary, runfile

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))
sys.path[:0] = [str(runfile("python")), str(runfile("examples/torch"))]

from fortune_reference import (BATCH_SIZE, LR, SEED, TORCH_SEED,  # noqa: E402
                               relative_error, train_like_one_process)

JOB = runfile("tests/python/jobs/fortune_external.pbtxt")  # the example's, and a table unused
SCRIPT = runfile("examples/torch/fortune_topics.py")
CLOCKS = 150
WORKERS = ["worker0", "worker1"]
TOLERANCE = 1e-5
ACCURACY_POINTS = 0.01
TIMEOUT_S = 600


class TorchSparseTest(unittest.TestCase):
    def run_job(self, name, flags=()):
        """The job with two torch workers: (final Status, worker 0's weights)."""
        import torch

        with LocalCluster(JOB, servers=2, workers=len(WORKERS), name=name,
                          scheduler_flags=["--clocks=%d" % CLOCKS] + list(flags)) as cluster:
            script = [sys.executable, SCRIPT, "--threads=1", "--torch_seed=%d" % TORCH_SEED]
            for w in WORKERS:
                cluster.start(w, script + ["--weights_out=%s/%s.pt" % (cluster.dir, w)],
                              cluster.worker_env())
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0))
            status = cluster.final_status()
            self.assertEqual(status["job_state"], "DONE")
            final = [torch.load(cluster.dir / (w + ".pt")) for w in WORKERS]
            for key in final[0]:  # both read the servers' weights and rows
                self.assertTrue(torch.equal(final[0][key], final[1][key]), key)
            return status, final[0]

    def accuracy_alone(self):
        import subprocess
        import tempfile

        out = tempfile.mkdtemp(prefix="fortune_alone-", dir=os.environ.get("TEST_TMPDIR"))
        result = os.path.join(out, "alone.json")
        run = subprocess.run([sys.executable, str(SCRIPT), "--alone", "--threads=1",
                              "--torch_seed=%d" % TORCH_SEED, "--clocks=%d" % CLOCKS,
                              "--batch_size=%d" % BATCH_SIZE, "--seed=%d" % SEED,
                              "--lr=%g" % LR, "--result_json=" + result, "--log_every=0"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(run.returncode, 0, run.stdout)
        with open(result) as f:
            return json.load(f)["test_accuracy"]

    def check_servers(self, status, consistency):
        servers = [m for m in status["members"] if m["role"] == "SERVER"]
        self.assertEqual(len(servers), 2)
        for m in servers:
            table, unused = m["server"]["tables"]
            self.assertEqual(table["name"], "words")
            # The unused table's rounds went on with the empty pushes.
            self.assertEqual(unused["name"], "unused")
            self.assertEqual(int(unused.get("rows", 0)), 0)
            self.assertEqual(int(unused["clock"]), CLOCKS)
            self.assertEqual(table["consistency"], consistency)
            self.assertEqual(int(table.get("refused", 0)), 0)
            self.assertGreater(int(table["rows"]), 0)
            if consistency == "BSP":  # one update a round
                self.assertEqual(int(table["updates"]), CLOCKS)
                self.assertEqual(int(table["clock"]), CLOCKS)
            else:  # each worker's push is an update
                self.assertEqual(int(table["updates"]), CLOCKS * len(WORKERS))

    def test_bsp_trains_like_one_process_and_the_hybrid_as_well(self):
        import torch

        status, final = self.run_job("torch_sparse_bsp")
        self.check_servers(status, "BSP")
        expected = train_like_one_process(CLOCKS, len(WORKERS))
        self.assertTrue(torch.equal(final["ids"], expected["ids"]))
        for key in ("rows", "fc.weight", "fc.bias"):
            error = relative_error(final[key], expected[key])
            print("%s: relative error %.3g" % (key, error), file=sys.stderr)
            self.assertLessEqual(error, TOLERANCE, key)

        alone = self.accuracy_alone()
        hybrid_status, _ = self.run_job("torch_sparse_hybrid", ["--table_consistency=asp"])
        self.check_servers(hybrid_status, "ASP")
        for st in (status, hybrid_status):
            workers = [m for m in st["members"] if m["role"] == "WORKER"]
            print("test accuracy %s, alone %.4f" % ([m["worker"]["test_accuracy"] for m in workers], alone),
                  file=sys.stderr)
            self.assertEqual(len(workers), len(WORKERS))
            for m in workers:
                self.assertEqual((m["state"], int(m["clock"])), ("FINISHED", CLOCKS), m)
                if st is status:
                    self.assertAlmostEqual(m["worker"]["test_accuracy"], alone, delta=ACCURACY_POINTS)
                else:  # the hybrid: no worse than a point below
                    self.assertGreaterEqual(m["worker"]["test_accuracy"], alone - ACCURACY_POINTS)


if __name__ == "__main__":
    local_cluster.main("torch_sparse_test")
