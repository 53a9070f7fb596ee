"""Compressed pushes and pulls from PyTorch workers (JobSpec.compression):
two tiny workers and two servers under BSP, Adam on the servers, the
job's weights pushed top-k (or INT8) with error feedback, against one
process that computes the same: each worker's share's gradient plus its
residual per chunk, the largest quarter of each chunk kept (INT8: each
value rounded to a level of its block's scale), the rest the new
residual, the decoded values summed over the shares and the servers' Adam
(server_adam.py) -- every final weight within 1e-5. With the pulls
compressed too, the workers compute with views the reference moves by the
decoded compression of each chunk's change. The reference without the
compression under test ends far from it (checked), so the match is its
doing.

By hand: python3 tests/python/torch_compression_test.py (the daemons from
bazel-bin).
"""

import os
import sys
import unittest

# One BLAS thread in every process: the same arithmetic, the same bits.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import local_cluster  # noqa: E402
from local_cluster import binary, runfile  # noqa: E402

os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))
sys.path[:0] = [str(runfile("python")), str(runfile("tests/python"))]

from cluster_control import TINY_JOB, Cluster  # noqa: E402

# tiny_external.pbtxt's batch, seed and learning rate; its chunk_bytes (512)
# cuts fc1.weight (512 values) into 4 chunks of 128 and fc2.weight into 1;
# min_numel 128 compresses those five, the biases (32 and 4) go dense.
CLOCKS, BATCH_SIZE, SEED, LR = 30, 32, 7, 0.01
CHUNK, RATIO, BLOCK = 128, 0.25, 64
COMPRESSION = "compression { codec: TOP_K ratio: %g min_numel: %d }" % (RATIO, CHUNK)
INT8 = "compression { codec: INT8 block: %d min_numel: %d pulls: true }" % (BLOCK, CHUNK)
WORKERS = ["worker0", "worker1"]
TOLERANCE = 1e-5
TIMEOUT_S = 180


def top_k(v):
    """v's RATIO x len largest magnitudes kept, the rest zero (a chunk's
    decoding under TOP_K): on a tie the lower index first, as the codec
    (Adam's first step moves many weights by exactly the learning rate)."""
    import torch

    kept = torch.zeros_like(v)
    index = torch.sort(-v.abs(), stable=True).indices[:round(RATIO * v.numel())]
    kept[index] = v[index]
    return kept


def int8(v):
    """v's decoding under INT8: per block of BLOCK values, scale = max |v| /
    127, each value the nearest level (ties away from zero) times it, in
    float32 as the codec computes."""
    import torch

    out = torch.zeros_like(v)
    half = torch.tensor(0.5)
    for b in range(0, v.numel(), BLOCK):
        x = v[b:b + BLOCK]
        scale = x.abs().max() / 127
        if scale < torch.finfo(torch.float32).tiny:
            continue  # sent as zeros, kept in the residual
        y = x * (1.0 / scale)
        level = torch.clamp(y + torch.where(y < 0, -half, half), -127, 127).trunc()
        out[b:b + BLOCK] = level * scale
    return out


def chunks_of(p):
    """The flat slices of parameter p the job compresses (CHUNK values
    each), or none."""
    return [slice(i, i + CHUNK) for i in range(0, p.numel(), CHUNK)] if p.numel() >= CHUNK else []


def train_like_the_cluster(codec, pulls=False):
    """The job's clocks in this process: each share's gradient compressed
    chunk by chunk with its worker's residuals (by `codec`, a chunk's
    decoding; None: dense), summed over the shares weighted by their sizes,
    the servers' Adam. With `pulls`, the workers compute with their views:
    whole at first, then moved each clock by the codec's decoding of the
    change to the servers' weights (every worker holds the same view under
    BSP)."""
    import torch
    import torch.nn.functional as F

    import pstrain.torch as pst
    import tiny_worker
    from server_adam import ServerAdam

    torch.set_num_threads(1)
    torch.manual_seed(0)  # tiny_worker's --torch_seed
    model = tiny_worker.Tiny()
    opt = ServerAdam(model.parameters(), lr=LR)
    data = tiny_worker.synthetic_set()
    params = list(model.parameters())
    residuals = [[torch.zeros(p.numel()) for p in params] for _ in WORKERS]
    views = [p.detach().flatten().clone() for p in params]  # the first pull: whole
    servers = [p.detach().clone() for p in params]          # the servers' weights
    for clock in range(CLOCKS):
        if pulls:  # the workers compute with their views
            with torch.no_grad():
                for p, view in zip(params, views):
                    p.copy_(view.view_as(p))
        total = [torch.zeros(p.numel()) for p in params]
        for share_index in range(len(WORKERS)):
            indices = pst.batch_indices(clock, seed=SEED, train_size=len(data),
                                        batch_size=BATCH_SIZE, share_index=share_index,
                                        num_shares=len(WORKERS))
            x, y = data[indices]
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
            for i, p in enumerate(params):
                g = p.grad.detach().flatten().clone()
                if codec is not None:
                    r = residuals[share_index][i]
                    for c in chunks_of(p):
                        v = g[c] + r[c]
                        g[c] = codec(v)
                        r[c] = v - g[c]
                total[i] += g * (len(indices) / BATCH_SIZE)
        with torch.no_grad():
            for p, server in zip(params, servers):
                p.copy_(server)
        for p, g in zip(params, total):
            p.grad = g.view_as(p)
        opt.step()
        with torch.no_grad():
            for p, server, view in zip(params, servers, views):
                server.copy_(p)
                if not pulls:
                    continue
                w = p.detach().flatten()
                covered = torch.zeros(p.numel(), dtype=torch.bool)
                for c in chunks_of(p):
                    view[c] = view[c] + codec(w[c] - view[c])
                    covered[c] = True
                view[~covered] = w[~covered]  # small chunks: whole
    return model.state_dict()


def largest_difference(a, b):
    return max(float((a[name] - b[name]).abs().max() / b[name].abs().max()) for name in a)


class TorchCompressionTest(unittest.TestCase):
    def run_cluster(self, compression, name):
        """The tiny job with `compression` on two tiny workers: their final
        weights (each's) and the final status."""
        import torch

        job = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), name + ".pbtxt")
        with open(TINY_JOB) as f, open(job, "w") as out:
            out.write(f.read() + "\n" + compression + "\n")
        with Cluster(job, servers=2, workers=len(WORKERS), name=name,
                     scheduler_flags=["--clocks=%d" % CLOCKS]) as cluster:
            for worker in WORKERS:
                cluster.start_tiny(worker, "--weights_out=%s/%s.pt" % (cluster.dir, worker))
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0),
                             "\n".join(str(cluster.log(n)) for n in WORKERS))
            final = [torch.load(cluster.dir / (n + ".pt")) for n in WORKERS]
            return final, cluster.final_status()

    def test_top_k_pulls_too_train_as_the_views_say(self):
        import torch

        final, status = self.run_cluster(COMPRESSION.replace(" }", " pulls: true }"), "pulls")
        for name in final[0]:
            self.assertTrue(torch.equal(final[0][name], final[1][name]), name)
        error = largest_difference(final[0], train_like_the_cluster(top_k, pulls=True))
        self.assertLessEqual(error, TOLERANCE)
        pushes_only = largest_difference(final[0], train_like_the_cluster(top_k))
        self.assertGreater(pushes_only, 100 * TOLERANCE, "the views change the weights")
        # What the workers pulled: each chunk whole at the first pull, then
        # 5 chunks of 32 changed values and the biases whole a clock, and
        # the exact weights at the end.
        for w in [m for m in status["members"] if m["role"] == "WORKER"]:
            pulled = int(w["bytes_in"])
            self.assertLessEqual(pulled, CLOCKS * (5 * 32 * 8 + 36 * 4) + 2 * 676 * 4,
                                 w["address"])
        print("top-k pushes and pulls: largest |w - reference| %.2e; against pushes alone %.2e"
              % (error, pushes_only))

    def test_top_k_pushes_train_as_the_codec_says(self):
        import torch

        final, status = self.run_cluster(COMPRESSION, "pushes")
        for name in final[0]:
            self.assertTrue(torch.equal(final[0][name], final[1][name]), name)
        expected = train_like_the_cluster(top_k)
        error = largest_difference(final[0], expected)
        self.assertLessEqual(error, TOLERANCE)
        dense = largest_difference(final[0], train_like_the_cluster(None))
        self.assertGreater(dense, 100 * TOLERANCE, "compression changes the weights")
        # What the workers pushed: at most 5 chunks of 32 kept values (8
        # bytes each) and the biases' 36 floats a clock, instead of 676
        # floats -- and the initial weights, dense, once.
        workers = [m for m in status["members"] if m["role"] == "WORKER"]
        for w in workers:
            self.assertEqual(w["worker"]["frontend"], "pytorch")
            pushed = int(w["bytes_out"])
            self.assertLessEqual(pushed, CLOCKS * (5 * 32 * 8 + 36 * 4) + 676 * 4, w["address"])
            self.assertLess(pushed, 0.6 * CLOCKS * 676 * 4, w["address"])
        print("top-k pushes: largest |w - reference| %.2e; against dense training %.2e"
              % (error, dense))

    def test_int8_pushes_and_pulls_train_as_the_levels_say(self):
        import torch

        final, status = self.run_cluster(INT8, "int8")
        for name in final[0]:
            self.assertTrue(torch.equal(final[0][name], final[1][name]), name)
        error = largest_difference(final[0], train_like_the_cluster(int8, pulls=True))
        self.assertLessEqual(error, TOLERANCE)
        dense = largest_difference(final[0], train_like_the_cluster(None))
        self.assertGreater(dense, 100 * TOLERANCE, "compression changes the weights")
        # Each way, a clock: 5 chunks of 2 scales and 128 levels (136
        # bytes) and the biases' 36 floats, instead of 676 floats; whole
        # at the first push and pull and the exact weights at the end.
        for w in [m for m in status["members"] if m["role"] == "WORKER"]:
            budget = CLOCKS * (5 * 136 + 36 * 4)
            self.assertLessEqual(int(w["bytes_out"]), budget + 676 * 4, w["address"])
            self.assertLessEqual(int(w["bytes_in"]), budget + 2 * 676 * 4, w["address"])
        print("int8 pushes and pulls: largest |w - reference| %.2e; against dense training %.2e"
              % (error, dense))


if __name__ == "__main__":
    local_cluster.main("torch_compression_test")
