"""torch_failure_test's faults that must change no weight, with the
workers pulling layer by layer and each script's forward loading its
modules' weights as it reaches them (--overlap=on, pst.Optimizer's
read_by_layer; issue 67): a worker SIGKILLed mid-run and replaced under
--on_worker_failure=wait, and a server SIGKILLed and replaced (a rollback
to the last checkpoint) -- each ends DONE with worker 0's final weights bit
for bit the undisturbed run's (under the same path). Also the two aborts
(a server killed without checkpoints, a script raising): every other
script ends with JobAborted while its backward pushes by layers.

By hand: python3 tests/python/torch_failure_layered_test.py.
"""

import os
import unittest

os.environ["PSTRAIN_TEST_WORKER_FLAGS"] = "--overlap=on"

import local_cluster  # noqa: E402
import torch_failure_test  # noqa: E402

FAULTS = ["test_wait_a_replacement_with_id_takes_over_a_killed_workers_rank",
          "test_a_server_killed_and_replaced_rolls_back_and_the_scripts_go_on",
          # A job aborted while a script's backward pushes by layers: its
          # later hooks raise JobAborted too (they once raised a
          # PstrainError, "a gradient was reported outside a clock").
          "test_a_server_killed_without_checkpoints_aborts_every_script_quickly",
          "test_the_final_status_holds_every_members_end_state"]


def load_tests(loader, tests, pattern):
    return unittest.TestSuite(torch_failure_test.TorchFailureTest(name) for name in FAULTS)


if __name__ == "__main__":
    local_cluster.main("torch_failure_layered_test")
