"""Each clock's weights into a script's forward module by module
(pst.Optimizer(read_by_layer=True), the default; issue 67): with the
workers pulling layer by layer (--overlap=on, a CUDA worker's path) a clock
is offered before its weights are all in, and each module's forward waits
for its own parameters only.

- a pull that brings fc2.weight 100 ms after the rest
  (--debug_delay_pull_param=2): the job's final weights are bit for bit
  those of the same job read whole (read_by_layer=False) -- a forward that
  did not wait for fc2's weights would train on the last clock's (max |dw|
  0.03 when the wait is left out) -- and at every clock fc2's forward read
  what fc2 holds after opt.step() (no later load of the clock's weights);
- a forward pre-hook the script registered on fc2 before making the
  Optimizer (as weight_norm and pruning do) still sees the clock's
  weights: the Optimizer's hooks go first;
- two workers under BSP: the same, bit for bit, layer by layer and whole.

Rollbacks and a replacement under this path: torch_failure_layered_test.

By hand: python3 tests/python/torch_layered_reads_test.py.
"""

import os
import sys
import unittest

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import local_cluster  # noqa: E402
from local_cluster import binary, runfile  # noqa: E402

os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))
sys.path[:0] = [str(runfile("python"))]

from cluster_control import TINY_JOB, Cluster  # noqa: E402

CLOCKS = 30
FLAGS = ["--clocks=%d" % CLOCKS]
TIMEOUT_S = 240
DELAYED = 2  # fc2.weight: fc1.weight, fc1.bias, fc2.weight, fc2.bias


def train(name, workers, worker_flags, *args):
    """A tiny job of `workers` workers with PSTRAIN_FLAGS + `worker_flags`:
    ({name: result}, {name: final state_dict})."""
    import torch
    with Cluster(TINY_JOB, servers=2, workers=workers, name=name,
                 scheduler_flags=FLAGS) as cluster:
        env = cluster.worker_env()
        env["PSTRAIN_FLAGS"] += " " + worker_flags
        names = ["worker%d" % i for i in range(workers)]
        for n in names:
            cluster.start_tiny(n, "--weights_out=%s/%s.pt" % (cluster.dir, n), *args, env=env)
        codes = cluster.wait(["scheduler", "server0", "server1"] + names, TIMEOUT_S)
        if codes != dict.fromkeys(codes, 0):
            cluster.print_logs()
            raise AssertionError("%s: exit codes %s" % (name, codes))
        return ({n: cluster.result(n) for n in names},
                {n: torch.load(cluster.dir / (n + ".pt")) for n in names})


class TorchLayeredReadsTest(unittest.TestCase):
    def assertSameWeights(self, got, expected):
        import torch
        self.assertEqual(sorted(got), sorted(expected))
        for key in expected:
            self.assertTrue(torch.equal(got[key], expected[key]),
                            "%s: max |dw| %g" % (key, (got[key] - expected[key]).abs().max()))

    def test_a_forward_waits_for_a_delayed_parameter_and_reads_the_clocks_weights(self):
        flags = "--overlap=on --debug_delay_pull_param=%d" % DELAYED
        results, layered = train("layered_delayed", 1, flags, "--check_forward_reads")
        result = results["worker0"]
        self.assertEqual(result["steps"], CLOCKS)
        self.assertEqual(result["forward_reads"], CLOCKS)
        self.assertEqual(result["stale_forward_reads"], 0)
        _, whole = train("whole_delayed", 1, flags, "--whole_reads")
        self.assertSameWeights(layered["worker0"], whole["worker0"])

    def test_a_hook_the_script_registered_first_still_sees_the_clocks_weights(self):
        # As weight_norm's or pruning's, which rebuild a weight from the
        # parameters they must see loaded: the Optimizer's hooks run first.
        results, _ = train("layered_hook_first", 1, "--overlap=on --debug_delay_pull_param=%d"
                           % DELAYED, "--check_forward_reads", "--check_hook_first")
        self.assertEqual(results["worker0"]["forward_reads"], CLOCKS)
        self.assertEqual(results["worker0"]["stale_forward_reads"], 0)

    def test_two_workers_layer_by_layer_end_bit_identical_to_whole_reads(self):
        results, layered = train("layered_bsp", 2, "--overlap=on", "--check_forward_reads")
        for name, result in results.items():
            self.assertEqual(result["stale_forward_reads"], 0, name)
        _, whole = train("whole_bsp", 2, "--overlap=on", "--whole_reads")
        self.assertSameWeights(layered["worker0"], whole["worker0"])
        self.assertSameWeights(layered["worker1"], layered["worker0"])


if __name__ == "__main__":
    local_cluster.main("torch_layered_reads_test")
