"""Failures of a job of pstrain.torch workers, as tests/fault_test,
tests/restart_test and tests/takeover_test do them with ps_worker: two
workers running tests/python/tiny_worker.py (a 2-layer MLP, 200 clocks,
BSP, Adam on two servers, a short sleep per step so that the job lasts
seconds), each fault made once the slowest worker has passed clock 50:

- shrink: worker 1 killed with SIGKILL; the job ends DONE, worker 0
  FINISHED at the last clock, worker 1 DEAD; both read their data through
  a DataLoader (2 worker processes, pinned memory) over
  pst.ClockBatchSampler, and worker 0's batches are its share of each
  clock's global batch in the job's order -- half of it, then all of it;
- wait: worker 1 killed with SIGKILL, then a new script started with
  pst.init(id=1) takes its id (reading through a DataLoader over
  pst.ClockBatchSampler, whose batches are its share from its first
  clock); the job ends DONE, both FINISHED;
- a server killed with SIGKILL once a checkpoint exists, and a ps_server
  --id=ID started in its place: the cluster rolls back (a new generation,
  a rollback in Status), the scripts go on without noticing (exit 0), the
  job ends DONE, both FINISHED;
- the scheduler killed (SIGKILL, and SIGTERM) and started again on its
  --state_dir and address: it takes the job over (scheduler_takeovers),
  the job ends DONE, both FINISHED.

The facts come from exit codes, the scheduler's Status (psctl status
--json while the job runs, the --status_file at its end) and the scripts'
result files, never from logs.

By hand: python3 tests/python/torch_failure_test.py (the daemons from
bazel-bin; it re-runs itself under a python3 that imports torch).
"""

import os
import signal
import sys
import time
import unittest

# One BLAS thread in every process: 2 cores are shared by all of them.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import local_cluster  # noqa: E402
from local_cluster import binary, runfile  # noqa: E402

os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))
sys.path[:0] = [str(runfile("python"))]

from cluster_control import (TINY_JOB, Cluster, member, slowest_clock,  # noqa: E402
                             worker_clocks, worker_rank)

CLOCKS = 200
# tests/python/jobs/tiny_external.pbtxt's data order and tiny_worker.py's set.
SEED, BATCH_SIZE, TRAIN_SIZE = 7, 32, 2048
FAULT_AT = 50            # the slowest worker's clock when the fault is made
SLEEP_MS = "--sleep_ms=25"  # per step: 200 clocks last at least 5 s
CHECKPOINT_EVERY = 20
# Generous for a loaded 2-core machine; a healthy run takes 10-30 s.
START_TIMEOUT_S = 120
END_TIMEOUT_S = 240
KILLED = 128 + signal.SIGKILL
WORKERS = ["worker0", "worker1"]
COMMON_FLAGS = ["--clocks=%d" % CLOCKS, "--heartbeat_timeout_ms=3000"]
# Every daemon out after an abort within this of the fault: the heartbeat
# timeout (3 s) and slack for a loaded machine (ps_worker: 2.4 s here with a
# 2 s timeout; a call left to run out its 30 s deadline fails it).
ABORT_EXIT_S = 12

_undisturbed = None


def undisturbed_weights():
    """Worker 0's final weights of the same job with no fault (run once)."""
    global _undisturbed
    if _undisturbed is None:
        with Cluster(TINY_JOB, servers=2, workers=2, name="torch_undisturbed",
                     scheduler_flags=COMMON_FLAGS) as cluster:
            for name in WORKERS:
                cluster.start_tiny(name, "--weights_out=%s/%s.pt" % (cluster.dir, name))
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, END_TIMEOUT_S)
            if codes != dict.fromkeys(codes, 0):
                raise AssertionError("the undisturbed run failed: %s" % codes)
            _undisturbed = (weights(cluster, "worker0"), cluster.final_status())
    return _undisturbed[0]


def undisturbed_final_status():
    """The scheduler's --status_file of the undisturbed run."""
    undisturbed_weights()
    return _undisturbed[1]


def weights(cluster, name):
    import torch
    return torch.load(cluster.dir / (name + ".pt"))


class TorchFailureTest(unittest.TestCase):
    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        sys.stderr.write("[%s: %.1f s] " % (self._testMethodName, time.monotonic() - self.started))

    def start_workers(self, cluster, *args):
        """Starts both tiny workers (with `args`): {rank: process name}."""
        for name in WORKERS:
            cluster.start_tiny(name, SLEEP_MS, "--weights_out=%s/%s.pt" % (cluster.dir, name),
                               *args)
        by_rank = {worker_rank(cluster, name, START_TIMEOUT_S): name for name in WORKERS}
        self.assertEqual(sorted(by_rank), [0, 1])
        return by_rank

    def wait_for_fault_clock(self, cluster, also=lambda st: True):
        status = cluster.wait_status(lambda st: slowest_clock(st) >= FAULT_AT and also(st),
                                     START_TIMEOUT_S)
        self.assertLess(slowest_clock(status), CLOCKS - 20, "the job nearly ended before the "
                        "fault; the test would prove nothing")
        return status

    def assertAllExitZero(self, cluster, names):
        codes = cluster.wait(names, END_TIMEOUT_S)
        self.assertEqual(codes, dict.fromkeys(names, 0))

    def assertFinished(self, final, worker_id):
        m = member(final, "WORKER", worker_id)
        self.assertIsNotNone(m, "worker %d in the final Status" % worker_id)
        self.assertEqual((m["state"], int(m["clock"]), m["worker"]["frontend"]),
                         ("FINISHED", CLOCKS, "pytorch"), m)

    def assertTrainedToTheEnd(self, cluster, name):
        result = cluster.result(name)
        self.assertIsNotNone(result, name)
        self.assertTrue(result["ok"], result)

    def assertWeightsAsUndisturbed(self, cluster, names):
        """Under BSP a rollback, a replacement or a takeover changes no
        weight: every finished worker's final weights are bit for bit the
        undisturbed run's (as tests/restart_test, tests/chaos_test and
        tests/takeover_test find for ps_worker)."""
        import torch
        expected = undisturbed_weights()
        for name in names:
            got = weights(cluster, name)
            self.assertEqual(sorted(got), sorted(expected))
            for key, w in expected.items():
                self.assertTrue(torch.equal(got[key], w), "%s's %s: max |dw| %g" % (
                    name, key, float((got[key] - w).abs().max())))

    def assertEndStates(self, final, expected):
        """Every member's state in the final Status is `expected`:
        {(role, id): state}, each of the job's four members."""
        got = {(m["role"], int(m.get("id", 0))): m["state"] for m in final["members"]}
        self.assertEqual(len(got), 4, final["members"])
        self.assertEqual(got, expected, final["members"])

    def test_the_final_status_holds_every_members_end_state(self):
        # A DONE job: the scheduler waits for each member's last report
        # before it writes --status_file, so the servers are FINISHED too.
        final = undisturbed_final_status()
        self.assertEqual(final["job_state"], "DONE")
        self.assertEndStates(final, {("SERVER", 0): "FINISHED", ("SERVER", 1): "FINISHED",
                                     ("WORKER", 0): "FINISHED", ("WORKER", 1): "FINISHED"})
        # A script's exception aborts the job (--on_worker_failure=abort):
        # its worker FAILED with the exception, the other worker's script
        # raised JobAborted (FAILED), the servers saw the abort (FAILED,
        # the job's reason); every process exits 1.
        with Cluster(TINY_JOB, servers=2, workers=2, name="torch_end_states",
                     scheduler_flags=COMMON_FLAGS + ["--on_worker_failure=abort"]) as cluster:
            for name, flags in zip(WORKERS, [[], ["--raise_at_clock=%d" % FAULT_AT]]):
                cluster.start_tiny(name, SLEEP_MS, *flags)
            names = ["scheduler", "server0", "server1"] + WORKERS
            self.assertEqual(cluster.wait(names, END_TIMEOUT_S), dict.fromkeys(names, 1))
            final = cluster.final_status()
        self.assertEqual(final["job_state"], "ABORTED")
        states = {(m["role"], int(m.get("id", 0))): m for m in final["members"]}
        self.assertEndStates(final, dict.fromkeys(states, "FAILED"))
        messages = [states[("WORKER", w)].get("message", "") for w in range(2)]
        self.assertEqual(sorted(m.split(":")[0].split(".")[-1] for m in messages),
                         ["JobAborted", "RuntimeError"], messages)
        for s in range(2):
            self.assertIn(final["message"], states[("SERVER", s)].get("message", ""))

    def test_shrink_the_other_worker_takes_over_a_killed_ones_share(self):
        with Cluster(TINY_JOB, servers=2, workers=2, name="torch_shrink",
                     scheduler_flags=COMMON_FLAGS + ["--on_worker_failure=shrink"]) as cluster:
            # Their data through DataLoaders (2 worker processes each, pinned
            # memory) over pst.ClockBatchSampler.
            by_rank = self.start_workers(cluster, "--loader")
            at = slowest_clock(self.wait_for_fault_clock(cluster))
            self.assertEqual(cluster.kill(by_rank[1]), KILLED)
            self.assertAllExitZero(cluster, ["scheduler", "server0", "server1", by_rank[0]])
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "DONE", final.get("message"))
            self.assertFinished(final, 0)
            dead = member(final, "WORKER", 1)
            self.assertEqual(dead["state"], "DEAD", dead)
            self.assertLess(int(dead["clock"]), CLOCKS)
            # The survivor trained every clock: with the global batch split
            # among the live workers, alone after the kill.
            self.assertTrainedToTheEnd(cluster, by_rank[0])
            self.assertEqual(cluster.result(by_rank[0])["steps"], CLOCKS)
            taken_over = self.assertLoaderFollowedTheShares(cluster.result(by_rank[0])["indices"])
            print("shrink: worker 1 killed at clock >= %d, declared dead at %s; worker 0 "
                  "finished %d clocks, its loader's batches the job's shares (half of each "
                  "global batch until clock %d, all of it after)"
                  % (at, dead["clock"], CLOCKS, taken_over))

    def assertLoaderFollowedTheShares(self, indices):
        """Worker 0's loader gave each clock's share of the job's order:
        half of the global batch, then (once worker 1 was gone) all of it.
        Returns the clock it took the whole batch from."""
        import pstrain.torch as pst

        self.assertEqual(len(indices), CLOCKS)
        order = dict(seed=SEED, train_size=TRAIN_SIZE, batch_size=BATCH_SIZE)
        whole = [c for c in range(CLOCKS)
                 if indices[c] == pst.batch_indices(c, share_index=0, num_shares=1, **order)]
        self.assertTrue(whole, "worker 0 never took the whole batch")
        for c in range(CLOCKS):
            num_shares = 1 if c >= whole[0] else 2
            self.assertEqual(indices[c], pst.batch_indices(c, share_index=0, num_shares=num_shares,
                                                           **order), "clock %d" % c)
        return whole[0]

    def test_wait_a_replacement_with_id_takes_over_a_killed_workers_rank(self):
        # With checkpoints: a kill between a clock's pushes to the two
        # servers (or, pushing by layers, between its layers' pushes) leaves
        # that clock applied on some chunks only, and the replacement then
        # asks for a rollback instead of redoing it from newer weights --
        # the path on which the weights stay bit-identical (docs/failures.md).
        cluster = Cluster(TINY_JOB, servers=2, workers=2, name="torch_wait")
        cluster.scheduler_flags = COMMON_FLAGS + [
            "--on_worker_failure=wait", "--checkpoint_dir=%s" % (cluster.dir / "checkpoints"),
            "--checkpoint_every=%d" % CHECKPOINT_EVERY]
        with cluster:
            by_rank = self.start_workers(cluster)
            self.wait_for_fault_clock(cluster)
            self.assertEqual(cluster.kill(by_rank[1]), KILLED)
            # Declared dead; its place is kept (the gate holds worker 0).
            status = cluster.wait_status(
                lambda st: (member(st, "WORKER", 1) or {}).get("state") == "DEAD", 60)
            held_at = worker_clocks(status)[0]
            self.assertEqual(status["job_state"], "RUNNING_JOB")
            # It reads its data through a DataLoader over
            # pst.ClockBatchSampler: it starts at its first clock, not 0.
            cluster.start_tiny("replacement", SLEEP_MS, '--init_flags={"id": 1}',
                               "--weights_out=%s/replacement.pt" % cluster.dir, "--loader")
            self.assertEqual(worker_rank(cluster, "replacement", START_TIMEOUT_S), 1)
            self.assertAllExitZero(cluster,
                                   ["scheduler", "server0", "server1", by_rank[0], "replacement"])
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "DONE", final.get("message"))
            self.assertFinished(final, 0)
            self.assertFinished(final, 1)
            # The replacement started where the dead worker's pushes were
            # known to have landed (under BSP one or two clocks behind the
            # held survivor: docs/failures.md), not at 0.
            start = int(member(final, "WORKER", 1)["worker"].get("start_clock", 0))
            self.assertGreaterEqual(start, held_at - 2)
            self.assertLessEqual(start, held_at)
            self.assertGreaterEqual(start, FAULT_AT - 2)
            for name in (by_rank[0], "replacement"):
                self.assertTrainedToTheEnd(cluster, name)
            rollbacks = final.get("rollbacks", [])
            if rollbacks:
                self.assertRedoneFromACheckpoint(cluster, final, start)
            else:
                self.assertEqual(int(final.get("generation", 0)), 0, final)
                self.assertEqual(cluster.result("replacement")["steps"], CLOCKS - start)
                order = dict(seed=SEED, train_size=TRAIN_SIZE, batch_size=BATCH_SIZE)
                import pstrain.torch as pst
                self.assertEqual(cluster.result("replacement")["indices"],
                                 [pst.batch_indices(c, share_index=1, num_shares=2, **order)
                                  for c in range(start, CLOCKS)])
            self.assertWeightsAsUndisturbed(cluster, [by_rank[0], "replacement"])
            print("wait: worker 1 killed, worker 0 held at %d; the replacement took id 1 at "
                  "clock %d and finished (%d rollbacks)" % (held_at, start, len(rollbacks)))

    def assertRedoneFromACheckpoint(self, cluster, final, start):
        """The replacement found its first clock applied on some chunks
        only and asked for the one rollback (Rollback.redo) to a checkpoint
        at or before it; the scripts redid the clocks rolled back."""
        rollbacks = final["rollbacks"]
        self.assertEqual(len(rollbacks), 1, rollbacks)
        self.assertTrue(rollbacks[0].get("redo", False), rollbacks[0])
        to_clock = int(rollbacks[0].get("to_clock", 0))
        self.assertEqual(to_clock % CHECKPOINT_EVERY, 0, rollbacks[0])
        self.assertLessEqual(to_clock, start, rollbacks[0])
        self.assertGreater(int(rollbacks[0].get("done_unix_ms", 0)), 0, "the rollback completed")
        self.assertGreaterEqual(cluster.result("replacement")["steps"], CLOCKS - start)

    def test_a_server_killed_and_replaced_rolls_back_and_the_scripts_go_on(self):
        cluster = Cluster(TINY_JOB, servers=2, workers=2, name="torch_server_restart")
        cluster.scheduler_flags = COMMON_FLAGS + [
            "--checkpoint_dir=%s" % (cluster.dir / "checkpoints"),
            "--checkpoint_every=%d" % CHECKPOINT_EVERY]
        with cluster:
            self.start_workers(cluster)
            status = self.wait_for_fault_clock(
                cluster, lambda st: int(st.get("manifest_clock", 0)) >= CHECKPOINT_EVERY)
            manifest = int(status["manifest_clock"])
            victim = cluster.server_process(1)
            self.assertEqual(cluster.kill(victim), KILLED)
            cluster.start_server("server1_again", server_id=1)
            survivors = [n for n in ("server0", "server1") if n != victim]
            self.assertAllExitZero(cluster, ["scheduler", "server1_again"] + survivors + WORKERS)
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "DONE", final.get("message"))
            self.assertGreaterEqual(int(final.get("generation", 0)), 1)
            rollbacks = final.get("rollbacks", [])
            self.assertGreaterEqual(len(rollbacks), 1, final)
            first = rollbacks[0]
            to_clock = int(first.get("to_clock", 0))
            self.assertEqual(to_clock % CHECKPOINT_EVERY, 0, first)
            self.assertGreaterEqual(to_clock, manifest, first)
            self.assertGreater(int(first.get("done_unix_ms", 0)), 0, "the rollback completed")
            self.assertFinished(final, 0)
            self.assertFinished(final, 1)
            # The scripts never saw an error; they redid the clocks rolled
            # back (their loops yielded them again).
            for name in WORKERS:
                self.assertTrainedToTheEnd(cluster, name)
                self.assertGreaterEqual(cluster.result(name)["steps"], CLOCKS)
            self.assertWeightsAsUndisturbed(cluster, WORKERS)
            print("server 1 killed (manifest at %d): rolled back from %s to %d (generation %s); "
                  "the scripts made %s steps" % (
                      manifest, first.get("from_clock"), to_clock, final.get("generation"),
                      [cluster.result(n)["steps"] for n in WORKERS]))

    def test_a_server_killed_without_checkpoints_aborts_every_script_quickly(self):
        # As tests/abort_test for ps_worker: with no checkpoint to roll back
        # to, a dead server ends the job, and every daemon -- the torch
        # workers too -- is out within the heartbeat timeout and a few
        # seconds, each script with JobAborted.
        with Cluster(TINY_JOB, servers=2, workers=2, name="torch_abort",
                     scheduler_flags=COMMON_FLAGS) as cluster:
            self.start_workers(cluster)
            self.wait_for_fault_clock(cluster)
            victim = cluster.server_process(1)
            killed = time.monotonic()
            self.assertEqual(cluster.kill(victim), KILLED)
            others = ["scheduler"] + [n for n in ("server0", "server1") if n != victim] + WORKERS
            exits = cluster.exit_times(others, END_TIMEOUT_S, killed)
            print("a server killed, no checkpoints: out after %s s" % {
                n: round(t, 2) for n, (_, t) in exits.items()})
            self.assertEqual({n: code for n, (code, _) in exits.items()}, dict.fromkeys(others, 1))
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "ABORTED")
            for name in WORKERS:
                result = cluster.result(name)
                self.assertEqual(result["exception"], "JobAborted", result)
            for name, (_, seconds) in exits.items():
                self.assertLess(seconds, ABORT_EXIT_S, "%s exited %.1f s after the kill"
                                % (name, seconds))

    def scheduler_restarted(self, sig, exit_code, name):
        cluster = Cluster(TINY_JOB, servers=2, workers=2, name=name)
        cluster.scheduler_flags = COMMON_FLAGS + ["--state_dir=%s" % (cluster.dir / "state")]
        with cluster:
            self.start_workers(cluster)
            at = slowest_clock(self.wait_for_fault_clock(cluster))
            self.assertEqual(cluster.kill("scheduler", sig), exit_code)
            time.sleep(1)  # down for a while
            cluster.restart_scheduler("scheduler_again")
            self.assertAllExitZero(cluster, ["scheduler_again", "server0", "server1"] + WORKERS)
            final = cluster.final_status()
            self.assertEqual(final["job_state"], "DONE", final.get("message"))
            self.assertEqual(int(final.get("scheduler_takeovers", 0)), 1)
            self.assertEqual(int(final.get("generation", 0)), 0, "no rollback needed")
            self.assertFinished(final, 0)
            self.assertFinished(final, 1)
            self.assertEqual(worker_clocks(final), [CLOCKS, CLOCKS])
            for name in WORKERS:
                self.assertTrainedToTheEnd(cluster, name)
                self.assertEqual(cluster.result(name)["steps"], CLOCKS)
            self.assertWeightsAsUndisturbed(cluster, WORKERS)
            print("scheduler stopped with signal %d at clock >= %d, taken over; DONE"
                  % (sig, at))

    def test_a_scheduler_killed_and_started_again_takes_the_job_over(self):
        self.scheduler_restarted(signal.SIGKILL, KILLED, "torch_takeover_kill")

    def test_a_scheduler_stopped_with_sigterm_and_started_again_takes_the_job_over(self):
        # With --state_dir, SIGTERM stops the scheduler without ending the
        # job (exit 1).
        self.scheduler_restarted(signal.SIGTERM, 1, "torch_takeover_term")


if __name__ == "__main__":
    local_cluster.main("torch_failure_test")
