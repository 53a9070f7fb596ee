"""bench/gpu_shaped_bench.py --quick, the CI's smoke run of the GPU-shaped
CPU benchmark (issue 67): the transformer's 78 parameters on a model whose
forward and backward only wait, alone and as 1 pstrain.torch worker with 2
servers under BSP. Facts only, no timing: the model is the example's, every
forward in the cluster read the weights of its clock, every process's CPU
and the worker's per-clock split are there, and the proxy itself costs the
CPU little (what the cluster spends is the cluster's).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import local_cluster  # noqa: E402

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE",
                                                                              "pstrain"))
ROOT = RUNFILES if os.environ.get("TEST_SRCDIR") else pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT if os.environ.get("TEST_SRCDIR") else ROOT / "bazel-bin"


class GpuShapedBenchTest(unittest.TestCase):
    def test_quick_runs_alone_and_bsp_with_the_weights_of_each_clock(self):
        out = pathlib.Path(os.environ.get("TEST_TMPDIR", tempfile.mkdtemp()), "gpu_shaped.json")
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench/gpu_shaped_bench.py"), "--quick",
             "--bin=%s" % BIN, "--python=%s" % sys.executable, "--out=%s" % out],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600, check=False)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        printed = json.loads(done.stdout)
        self.assertEqual(json.loads(out.read_text()), printed)
        self.assertEqual(printed["model"]["params"], 78)
        self.assertEqual(printed["model"]["numel"], 19308800)
        configs = printed["configs"]
        self.assertEqual(sorted(configs), ["alone", "bsp_1x2"])
        bsp = configs["bsp_1x2"]
        self.assertGreater(bsp["weight_reads"], 0)
        self.assertEqual(bsp["stale_reads"], 0, bsp["stale_examples"])
        for process in ("server0", "server1", "worker0"):
            self.assertGreater(bsp["cpu_ms_per_clock"][process], 0, process)
        self.assertIn("scheduler", bsp["cpu_ms_per_clock"])
        self.assertGreater(bsp["worker_clock_split_ms"]["compute_ms"], 0)
        self.assertGreater(bsp["vs_alone"]["median"], 0)
        # The proxy's premise: alone, a clock of ~48 ms waits costs the CPU a
        # few ms (1.8-2.2 ms here), not a model's worth of arithmetic.
        self.assertLess(configs["alone"]["worker_cpu_ms_per_clock"], 12)

    def test_the_weight_check_counts_a_forward_that_read_last_clocks_weights(self):
        check = (
            "import sys, torch; sys.path.insert(0, %r); import gpu_shaped_model as m\n"
            "c = m.WeightCheck(lr=0.01)\n"
            "c.expect(3); c.see('fresh', torch.full((4,), -0.03))\n"
            "c.see('stale', torch.full((4,), -0.02))\n"
            "print(c.reads, c.stale, c.examples[0]['param'])\n" % str(ROOT / "bench"))
        done = subprocess.run([sys.executable, "-c", check], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertEqual(done.stdout.split(), ["4", "2", "stale"])

    def test_an_unknown_configuration_is_refused(self):
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench/gpu_shaped_bench.py"), "--configs=alone,bsp_9x9",
             "--bin=%s" % BIN],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
        self.assertNotEqual(done.returncode, 0)
        self.assertEqual(done.stdout, "")


if __name__ == "__main__":
    local_cluster.main("gpu_shaped_bench_test")
