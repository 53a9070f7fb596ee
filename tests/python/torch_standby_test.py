"""Standby copies (JobSpec.standby_copies = 1, ps_scheduler --standby_copies=1) with
pstrain.torch workers, as tests/standby_test does them with ps_worker: two
workers running tests/python/tiny_worker.py (a 2-layer MLP, BSP, Adam on
two servers), server 1 killed with SIGKILL once the slowest worker has
passed clock 50, its standby promoted, a ps_server --id=1 started in its
place that fills its standby copies, then server 0 killed the same way.
The scripts never notice (exit 0), the job ends DONE without a rollback
(generation 0, two promotions), and every worker's final weights are bit
for bit those of the same job undisturbed and without standbys.

The same for the sparse tables' job (examples/torch/fortune_topics.py as
tests/python/fortune_worker.py: an embedding bag over the table "words",
BSP, SparseAdam rows): the rows and the linear layer at the end are bit
for bit an undisturbed run's without standbys -- under BSP with two
workers, and under SSP (staleness 0, one worker).

The facts come from exit codes, the scheduler's Status (psctl status
--json while the job runs, the --status_file at its end) and the scripts'
result files, never from logs.

By hand: python3 tests/python/torch_standby_test.py (the daemons from
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

from cluster_control import TINY_JOB, Cluster, member, slowest_clock, worker_rank  # noqa: E402

FORTUNE_JOB = runfile("tests/python/jobs/fortune_external.pbtxt")
FORTUNE_WORKER = runfile("tests/python/fortune_worker.py")

CLOCKS = 200
FAULT_AT = 50               # the slowest worker's clock at the first kill
SAVE_AT = 190               # the workers save state_dict()s then (after both replacements)
SLEEP_MS = "--sleep_ms=25"  # per step: 200 clocks last at least 5 s
START_TIMEOUT_S = 120
END_TIMEOUT_S = 240
KILLED = 128 + signal.SIGKILL
WORKERS = ["worker0", "worker1"]
COMMON_FLAGS = ["--clocks=%d" % CLOCKS, "--heartbeat_timeout_ms=2000"]


def weights(cluster, name):
    import torch
    return torch.load(cluster.dir / (name + ".pt"))


def save_flags(cluster, name):
    """tiny_worker.py's flags that save its model's and optimizer's
    state_dict() at clock SAVE_AT (timing opt.state_dict())."""
    return ["--save_at_clock=%d" % SAVE_AT, "--save_to=%s/%s-saved.pt" % (cluster.dir, name)]


def saved(cluster, name):
    import torch
    return torch.load(cluster.dir / (name + "-saved.pt"))


def run_undisturbed():
    """Worker 0's final weights, and what it saved at clock SAVE_AT, of the
    job without standbys or faults."""
    with Cluster(TINY_JOB, servers=2, workers=2, name="torch_standby_calm",
                 scheduler_flags=COMMON_FLAGS) as cluster:
        for name in WORKERS:
            cluster.start_tiny(name, "--weights_out=%s/%s.pt" % (cluster.dir, name),
                               *save_flags(cluster, name))
        codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, END_TIMEOUT_S)
        if codes != dict.fromkeys(codes, 0):
            raise AssertionError("the undisturbed run failed: %s" % codes)
        return weights(cluster, "worker0"), saved(cluster, "worker0")


def start_fortune(cluster, *flags, workers=WORKERS):
    for name in workers:
        cluster.start(name, [sys.executable, str(FORTUNE_WORKER), "--weights_out=%s/%s.pt" % (
            cluster.dir, name), "--result_json=%s" % cluster.result_path(name)] + list(flags),
            env=cluster.worker_env())


def run_fortune_undisturbed(flags=(), workers=WORKERS):
    """Worker 0's final rows and weights of the tables' job (with the
    scheduler's `flags`) without standbys or faults."""
    with Cluster(FORTUNE_JOB, servers=2, workers=len(workers), name="torch_standby_fortune_calm",
                 scheduler_flags=COMMON_FLAGS + list(flags)) as cluster:
        start_fortune(cluster, workers=workers)
        codes = cluster.wait(["scheduler", "server0", "server1"] + workers, END_TIMEOUT_S)
        if codes != dict.fromkeys(codes, 0):
            raise AssertionError("the undisturbed run failed: %s (logs in %s)" % (
                codes, cluster.dir))
        return weights(cluster, "worker0")


class TorchStandbyTest(unittest.TestCase):
    def kill_and_replace(self, cluster, server_id, at_clock, promotions):
        """Kills server `server_id` once the slowest worker is past
        `at_clock`, waits for the `promotions`-th promotion, starts a
        replacement with its id and waits until its copies are filled."""
        status = cluster.wait_status(lambda st: slowest_clock(st) >= at_clock, START_TIMEOUT_S)
        self.assertLess(slowest_clock(status), CLOCKS - 20,
                        "the job nearly ended before the fault; the test would prove nothing")
        victim = cluster.server_process(server_id)
        self.assertEqual(cluster.kill(victim), KILLED)
        promoted = cluster.wait_status(
            lambda st: int(st.get("promotions", 0)) >= promotions, START_TIMEOUT_S)
        self.assertEqual(promoted.get("rollbacks", []), [])
        name = "server%d_again%d" % (server_id, promotions)
        cluster.start_server(name, server_id=server_id)
        cluster.wait_status(
            lambda st: st.get("routes", {}).get("ready", [False] * 2)[server_id] is True,
            START_TIMEOUT_S)
        print("server %d killed past clock %d; promoted at clock %d: serving %s" % (
            server_id, at_clock, slowest_clock(promoted), promoted["routes"]["serving"]))
        return victim, name

    def kill_each_server(self, cluster, expected, workers=WORKERS, replaced_by=CLOCKS):
        """Kills server 1, then server 0, each replaced (the second
        replacement's copies filled before the slowest worker's clock
        `replaced_by`); then checks the job ended DONE without a rollback
        and every worker's final weights are `expected`."""
        import torch
        first, first_again = self.kill_and_replace(cluster, 1, FAULT_AT, 1)
        now = slowest_clock(cluster.wait_status(lambda st: True, START_TIMEOUT_S))
        second, second_again = self.kill_and_replace(cluster, 0, now + 10, 2)
        filled_at = slowest_clock(cluster.wait_status(lambda st: True, START_TIMEOUT_S))
        self.assertLess(filled_at, replaced_by,
                        "the replacements were filled too late for what the test checks")
        live = [first_again, second_again]
        codes = cluster.wait(["scheduler"] + live + workers, END_TIMEOUT_S)
        self.assertEqual(codes, dict.fromkeys(codes, 0))
        final = cluster.final_status()
        self.assertEqual(final["job_state"], "DONE", final.get("message"))
        self.assertEqual(final.get("rollbacks", []), [])
        self.assertEqual(int(final.get("generation", 0)), 0)
        self.assertEqual(int(final.get("promotions", 0)), 2)
        for worker_id in range(len(workers)):
            m = member(final, "WORKER", worker_id)
            self.assertEqual((m["state"], int(m["clock"])), ("FINISHED", CLOCKS), m)
        for name in workers:
            result = cluster.result(name)
            self.assertTrue(result is not None and result["ok"], result)
            got = weights(cluster, name)
            self.assertEqual(sorted(got), sorted(expected))
            for key, w in expected.items():
                self.assertTrue(torch.equal(got[key], w), "%s's %s: max |dw| %g" % (
                    name, key, float((got[key].float() - w.float()).abs().max())))

    def test_each_servers_death_costs_the_scripts_nothing(self):
        """...and opt.state_dict() after both promotions and replacements
        reads the servers that serve the chunks now (the routes, not the
        dead servers' addresses): at once, and the very state of the
        undisturbed run at the same clock."""
        import torch
        expected, expected_saved = run_undisturbed()
        cluster = Cluster(TINY_JOB, servers=2, workers=2, name="torch_standby",
                          scheduler_flags=COMMON_FLAGS + ["--standby_copies=1"])
        with cluster:
            for name in WORKERS:
                cluster.start_tiny(name, SLEEP_MS, "--weights_out=%s/%s.pt" % (cluster.dir, name),
                                   *save_flags(cluster, name))
            ranks = sorted(worker_rank(cluster, name, START_TIMEOUT_S) for name in WORKERS)
            self.assertEqual(ranks, [0, 1])
            self.kill_each_server(cluster, expected, replaced_by=SAVE_AT)
            for name in WORKERS:
                took = cluster.result(name)["state_dict_seconds"]
                print("%s: opt.state_dict() at clock %d took %.3f s" % (name, SAVE_AT, took))
                self.assertLess(took, 1.0)
            got = saved(cluster, "worker0")["optimizer"]
            want = expected_saved["optimizer"]
            self.assertEqual(sorted(got["state"]), sorted(want["state"]))
            for index, entry in want["state"].items():
                for key, value in entry.items():
                    self.assertTrue(torch.equal(got["state"][index][key], value),
                                    "state %s of parameter %d" % (key, index))

    def test_a_sparse_tables_job_loses_no_row(self):
        expected = run_fortune_undisturbed()
        self.assertIn("rows", expected)
        cluster = Cluster(FORTUNE_JOB, servers=2, workers=2, name="torch_standby_fortune",
                          scheduler_flags=COMMON_FLAGS + ["--standby_copies=1"])
        with cluster:
            start_fortune(cluster, "--sleep_ms=15")
            self.kill_each_server(cluster, expected)

    def test_tables_pushed_in_another_order_on_each_rank_do_not_wait_for_each_other(self):
        """BSP table pushes with standbys are answered once their round is
        applied and held by the standby: rank 0 pushes the table "unused"
        before "words" (fortune_worker.py --cross_tables), rank 1 "words"
        first and "unused" at the clock's end. Each rank's pushes go at once,
        so neither waits for a round the other can only finish after it: the
        job ends DONE, and since "unused" only ever gets zero gradients, with
        the weights of the plain job."""
        expected = run_fortune_undisturbed()
        cluster = Cluster(FORTUNE_JOB, servers=2, workers=2, name="torch_standby_cross",
                          scheduler_flags=COMMON_FLAGS + ["--standby_copies=1"])
        with cluster:
            start_fortune(cluster, "--cross_tables")
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, END_TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0), "logs in %s" % cluster.dir)
            self.assertEqual(cluster.final_status()["job_state"], "DONE")
            import torch
            for name in WORKERS:
                got = weights(cluster, name)
                for key, w in expected.items():
                    self.assertTrue(torch.equal(got[key], w), "%s's %s" % (name, key))

    def test_an_ssp_tables_job_loses_no_row_either(self):
        """SSP with staleness 0 and one worker (each push applied at once:
        an undisturbed run is deterministic), the tables' pushes shipped one
        by one."""
        flags = ["--consistency=ssp", "--staleness=0"]
        workers = WORKERS[:1]
        expected = run_fortune_undisturbed(flags, workers)
        cluster = Cluster(FORTUNE_JOB, servers=2, workers=1, name="torch_standby_fortune_ssp",
                          scheduler_flags=COMMON_FLAGS + flags + ["--standby_copies=1"])
        with cluster:
            start_fortune(cluster, "--sleep_ms=15", workers=workers)
            self.kill_each_server(cluster, expected, workers)


if __name__ == "__main__":
    local_cluster.main("torch_standby_test")
