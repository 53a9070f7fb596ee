"""bench/consistency_experiment.py --quick, the CI's smoke run of the
consistency experiment: it runs real local clusters (BSP and SSP(3), one
slow worker, the MLP), prints its JSON and writes every curve and a plot.
Facts only, no timing: each run's curve is there and its loss fell, the
table names each mode with its target, and the PNG is a PNG.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE",
                                                                              "pstrain"))
ROOT = RUNFILES if os.environ.get("TEST_SRCDIR") else pathlib.Path(__file__).resolve().parents[2]


class ConsistencyExperimentTest(unittest.TestCase):
    def test_quick_runs_both_modes_and_draws_them(self):
        out = pathlib.Path(os.environ.get("TEST_TMPDIR", tempfile.mkdtemp()), "experiment")
        bin_dir = ROOT if os.environ.get("TEST_SRCDIR") else ROOT / "bazel-bin"
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench/consistency_experiment.py"), "--quick",
             "--out=%s" % out, "--plots=%s" % out, "--bin=%s" % bin_dir],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600, check=False)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        printed = json.loads(done.stdout)
        self.assertEqual([row["mode"] for row in printed["table"]], ["BSP", "SSP(3)"])
        for row in printed["table"]:
            self.assertEqual(row["target_loss"], printed["targets"]["mlp"])
        saved = json.loads((out / "consistency.json").read_text())
        self.assertEqual(len(saved["runs"]), 2)
        for run in saved["runs"]:
            losses = [loss for _, _, loss in run["curve"]]
            self.assertGreater(len(losses), 3, run["mode"])
            self.assertLess(losses[-1], losses[0], run["mode"])
            clocks = [clock for _, clock, _ in run["curve"]]
            self.assertEqual(clocks, sorted(clocks))
            self.assertEqual(clocks[-1], run["clocks"])
        png = (out / "mlp-one-slow-worker.png").read_bytes()
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")

    def test_unknown_modes_are_refused(self):
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench/consistency_experiment.py"), "--modes=BSP,SSP(4)"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
        self.assertEqual(done.returncode, 2)
        self.assertIn("unknown mode 'SSP(4)'", done.stderr)


if __name__ == "__main__":
    unittest.main()
