"""torch_failure_test's faults that must change no weight, with the
workers pulling layer by layer and each script's forward loading its
modules' weights as it reaches them (--overlap=on, pst.Optimizer's
read_by_layer; issue 67): a worker SIGKILLed mid-run and replaced under
--on_worker_failure=wait, and a server SIGKILLed and replaced (a rollback
to the last checkpoint) -- each ends DONE with worker 0's final weights bit
for bit the undisturbed run's (under the same path); and the half-pushed
clock made on purpose: a worker whose first layer's push of clock HOLD_AT
is held (--debug_hold_push) killed after its other layers' pushes closed
their rounds, and replaced: the replacement asks for the rollback
(Rollback.redo) and the weights stay bit-identical. Also the two aborts
(a server killed without checkpoints, a script raising): every other
script ends with JobAborted while its backward pushes by layers.

By hand: python3 tests/python/torch_failure_layered_test.py.
"""

import os
import time
import unittest

os.environ["PSTRAIN_TEST_WORKER_FLAGS"] = "--overlap=on"

import local_cluster  # noqa: E402
import torch_failure_test  # noqa: E402

from cluster_control import (TINY_JOB, Cluster, member, slowest_clock,  # noqa: E402
                             worker_rank)
from torch_failure_test import (CHECKPOINT_EVERY, CLOCKS, COMMON_FLAGS, KILLED,  # noqa: E402
                                SLEEP_MS, START_TIMEOUT_S)

FAULTS = ["test_wait_a_replacement_with_id_takes_over_a_killed_workers_rank",
          "test_a_server_killed_and_replaced_rolls_back_and_the_scripts_go_on",
          # A job aborted while a script's backward pushes by layers: its
          # later hooks raise JobAborted too (they once raised a
          # PstrainError, "a gradient was reported outside a clock").
          "test_a_server_killed_without_checkpoints_aborts_every_script_quickly",
          "test_the_final_status_holds_every_members_end_state"]
HOLD_AT = 60  # the clock whose first layer's push the victim holds
HOLD_SETTLE_S = 1.0  # for its other layers' pushes to land and close their rounds


class HalfPushedClockTest(torch_failure_test.TorchFailureTest):
    def test_a_half_pushed_clock_is_redone_from_a_checkpoint(self):
        cluster = Cluster(TINY_JOB, servers=2, workers=2, name="torch_half_pushed")
        cluster.scheduler_flags = COMMON_FLAGS + [
            "--on_worker_failure=wait", "--checkpoint_dir=%s" % (cluster.dir / "checkpoints"),
            "--checkpoint_every=%d" % CHECKPOINT_EVERY]
        with cluster:
            cluster.start_tiny("worker0", SLEEP_MS, "--weights_out=%s/worker0.pt" % cluster.dir)
            held = cluster.worker_env()
            held["PSTRAIN_FLAGS"] += " --debug_hold_push=%d" % HOLD_AT
            cluster.start_tiny("victim", SLEEP_MS, env=held)
            cluster.wait_status(lambda st: slowest_clock(st) >= HOLD_AT, START_TIMEOUT_S)
            time.sleep(HOLD_SETTLE_S)
            rank = worker_rank(cluster, "victim", START_TIMEOUT_S)
            self.assertEqual(cluster.kill("victim"), KILLED)
            cluster.wait_status(
                lambda st: (member(st, "WORKER", rank) or {}).get("state") == "DEAD", 60)
            cluster.start_tiny("replacement", SLEEP_MS, '--init_flags={"id": %d}' % rank,
                               "--weights_out=%s/replacement.pt" % cluster.dir)
            self.assertAllExitZero(cluster, ["scheduler", "server0", "server1", "worker0",
                                             "replacement"])
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "DONE", final.get("message"))
            self.assertFinished(final, 0)
            self.assertFinished(final, 1)
            start = int(member(final, "WORKER", rank).get("start_clock", 0))
            self.assertGreaterEqual(start, HOLD_AT - 2)
            self.assertLessEqual(start, HOLD_AT)
            self.assertRedoneFromACheckpoint(cluster, final, start)
            self.assertWeightsAsUndisturbed(cluster, ["worker0", "replacement"])
            print("half-pushed clock %d: rolled back to %s; %d clocks in all" % (
                HOLD_AT, final["rollbacks"][0].get("to_clock"), CLOCKS))


def load_tests(loader, tests, pattern):
    suite = unittest.TestSuite(torch_failure_test.TorchFailureTest(name) for name in FAULTS)
    suite.addTest(HalfPushedClockTest("test_a_half_pushed_clock_is_redone_from_a_checkpoint"))
    return suite


if __name__ == "__main__":
    local_cluster.main("torch_failure_layered_test")
