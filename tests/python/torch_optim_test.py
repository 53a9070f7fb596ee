"""pst.Optimizer as a torch.optim.Optimizer: two tiny workers and two
servers under BSP, Adam on the servers, 20 clocks with a
torch.optim.lr_scheduler on the script's optimizer (StepLR; OneCycleLR,
which moves beta1 too), against one process that runs the same scheduler
on the servers' Adam arithmetic (server_adam.py) over the same global
batches: every final weight within 1e-5. Worker 0 clears its gradients with
model.zero_grad(set_to_none=True) each clock and overlaps (its gradients
leave at the hooks), worker 1 with opt.zero_grad(set_to_none=True) and
pushes at step(): neither loses a gradient.

The reference without the schedule ends far from it (checked), so the
match is the schedule's doing.

And opt.state_dict(): worker 0 saves it at clock 20 of a 40-clock job;
torch.optim.Adam loading it runs clocks 20-39 alone to within 1e-5 (max
|dw| / max |w|) of the cluster's final weights (a fresh Adam does not).
And back: a run of 20 clocks alone with torch.optim.Adam, saved, loaded by
both workers (model.load_state_dict, opt.load_state_dict) of a 20-clock
job: the cluster's weights within 1e-5 of Adam going on alone.

And a parameter frozen mid-run (requires_grad_(False) at clock 20 of 40):
unchanged on the servers from then on, bit for bit, as torch.optim.Adam
skips it; the rest within 1e-5 of Adam going on alone with it frozen.

By hand: python3 tests/python/torch_optim_test.py (the daemons from
bazel-bin).
"""

import os
import sys
import tempfile
import unittest

# One BLAS thread in every process: the same arithmetic, the same bits.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import local_cluster  # noqa: E402
from local_cluster import binary, runfile  # noqa: E402

os.environ["PSTRAIN_LIB"] = str(binary("worker/external/libpstrain_torch.so"))
sys.path[:0] = [str(runfile("python")), str(runfile("tests/python"))]

from cluster_control import TINY_JOB, Cluster  # noqa: E402

# What tests/python/jobs/tiny_external.pbtxt says, and the run's length.
CLOCKS, BATCH_SIZE, SEED, LR = 20, 32, 7, 0.01
WORKERS = ["worker0", "worker1"]
TOLERANCE = 1e-5
TIMEOUT_S = 180


def train_like_the_servers(schedule):
    """The job's 20 clocks in this process: each clock's gradient summed
    over the workers' shares, the servers' Adam, the scheduler `schedule`
    (tiny_worker.LR_SCHEDULERS) stepped after each clock."""
    import torch
    import torch.nn.functional as F

    import pstrain.torch as pst
    import tiny_worker
    from server_adam import ServerAdam

    torch.set_num_threads(1)
    torch.manual_seed(0)  # tiny_worker's --torch_seed
    model = tiny_worker.Tiny()
    opt = ServerAdam(model.parameters(), lr=LR)
    scheduler = tiny_worker.LR_SCHEDULERS[schedule](opt, CLOCKS)
    data = tiny_worker.synthetic_set()
    for clock in range(CLOCKS):
        opt.zero_grad()
        for share_index in range(len(WORKERS)):
            indices = pst.batch_indices(clock, seed=SEED, train_size=len(data),
                                        batch_size=BATCH_SIZE, share_index=share_index,
                                        num_shares=len(WORKERS))
            x, y = data[indices]
            (F.cross_entropy(model(x), y) * len(indices) / BATCH_SIZE).backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()
    return model.state_dict()


def continue_alone(saved, first_clock, clocks, whole=False, frozen=()):
    """`clocks` more clocks from `first_clock` in this process with
    torch.optim.Adam given the saved model and opt.state_dict(): the new
    {"model", "optimizer"}. Each clock's gradient is summed over the
    workers' shares as the cluster sums it, or (`whole`) taken over the
    global batch at once, as a script alone does. The parameters named in
    `frozen` require no gradient (torch.optim.Adam skips them: their .grad
    is None)."""
    import torch
    import torch.nn.functional as F

    import pstrain.torch as pst
    import tiny_worker

    torch.set_num_threads(1)
    model = tiny_worker.Tiny()
    model.load_state_dict(saved["model"], strict=True)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    opt.load_state_dict(saved["optimizer"])
    for name, p in model.named_parameters():
        p.requires_grad_(name not in frozen)
    data = tiny_worker.synthetic_set()
    shares = 1 if whole else len(WORKERS)
    for clock in range(first_clock, first_clock + clocks):
        opt.zero_grad(set_to_none=True)
        for share_index in range(shares):
            indices = pst.batch_indices(clock, seed=SEED, train_size=len(data),
                                        batch_size=BATCH_SIZE, share_index=share_index,
                                        num_shares=shares)
            x, y = data[indices]
            (F.cross_entropy(model(x), y) * len(indices) / BATCH_SIZE).backward()
        opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict()}


def tiny_worker_model():
    import tiny_worker

    return tiny_worker.Tiny()


def relative_difference(a, b):
    return max(float((a[name] - b[name]).abs().max() / b[name].abs().max()) for name in a)


def largest_difference(a, b):
    return max(float((a[name] - b[name]).abs().max()) for name in a)


class TorchOptimTest(unittest.TestCase):
    def run_job(self, schedule):
        """The cluster's final weights (both workers') with `schedule`."""
        import torch

        with Cluster(TINY_JOB, servers=2, workers=len(WORKERS), name="optim_" + schedule,
                     scheduler_flags=["--clocks=%d" % CLOCKS]) as cluster:
            # Worker 0 overlaps (each gradient leaves at its hook), so a
            # gradient model.zero_grad() made anew must reach the push
            # buffer there; worker 1 pushes at step().
            for name, zero_grad, overlap in zip(WORKERS, ("model", "optimizer"), ("on", "off")):
                cluster.start_tiny(name, "--lr_scheduler=" + schedule, "--clocks=%d" % CLOCKS,
                                   "--zero_grad=" + zero_grad,
                                   '--init_flags={"overlap": "%s"}' % overlap,
                                   "--weights_out=%s/%s.pt" % (cluster.dir, name))
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0),
                             "\n".join(str(cluster.log(n)) for n in WORKERS))
            self.assertEqual(cluster.final_status()["job_state"], "DONE")
            return [torch.load(cluster.dir / (name + ".pt")) for name in WORKERS]

    def check_schedule(self, schedule):
        import torch

        final = self.run_job(schedule)
        expected = train_like_the_servers(schedule)
        self.assertEqual(sorted(final[0]), sorted(expected))
        for name in expected:
            self.assertTrue(torch.equal(final[0][name], final[1][name]), name)
        error = largest_difference(final[0], expected)
        self.assertLessEqual(error, TOLERANCE, schedule)
        unscheduled = largest_difference(train_like_the_servers("none"), expected)
        self.assertGreater(unscheduled, 100 * TOLERANCE, "the schedule changes the weights")
        print("%s: largest |w - reference| %.2e; without the schedule %.2e"
              % (schedule, error, unscheduled))

    def test_state_dict_continues_training_alone_in_torch_optim_adam(self):
        import torch

        with Cluster(TINY_JOB, servers=2, workers=len(WORKERS), name="optim_state",
                     scheduler_flags=["--clocks=%d" % (2 * CLOCKS)]) as cluster:
            saved = cluster.dir / ("at_%d.pt" % CLOCKS)
            for name in WORKERS:
                extra = (["--save_at_clock=%d" % CLOCKS, "--save_to=%s" % saved]
                         if name == WORKERS[0] else [])
                cluster.start_tiny(name, "--weights_out=%s/%s.pt" % (cluster.dir, name), *extra)
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0),
                             "\n".join(str(cluster.log(n)) for n in WORKERS))
            final = torch.load(cluster.dir / (WORKERS[0] + ".pt"))
            state = torch.load(saved)
        adam = state["optimizer"]
        self.assertEqual(sorted(adam["state"]), [0, 1, 2, 3])
        for i, entry in adam["state"].items():
            self.assertEqual(sorted(entry), ["exp_avg", "exp_avg_sq", "step"])
            self.assertEqual(float(entry["step"]), CLOCKS)
        alone = continue_alone(state, CLOCKS, CLOCKS)["model"]
        error = relative_difference(final, alone)
        self.assertLessEqual(error, TOLERANCE)
        # Without the state (a fresh Adam) it would not continue alike.
        fresh = dict(state, optimizer=torch.optim.Adam(
            tiny_worker_model().parameters(), lr=LR).state_dict())
        self.assertGreater(
            relative_difference(final, continue_alone(fresh, CLOCKS, CLOCKS)["model"]),
            100 * TOLERANCE)
        print("state_dict at clock %d -> torch.optim.Adam, %d clocks alone: max |dw| / max |w| "
              "%.2e against the cluster's" % (CLOCKS, CLOCKS, error))

    def test_a_parameter_frozen_mid_run_takes_no_update_as_in_torch_optim(self):
        """Both workers freeze fc2.weight (requires_grad_(False)) at clock
        20 of 40 -- worker 0 overlapping and clearing its gradients with
        model.zero_grad(set_to_none=True) (its .grad is then None), worker 1
        pushing at step() (its .grad the untouched push buffer): the servers
        update it no more (its weights, Adam's moments and its step count
        those of clock 20, bit for bit) while the others train on, and the
        cluster ends within 1e-5 of torch.optim.Adam going on alone from
        clock 20 with the parameter frozen."""
        import torch

        frozen, index = "fc2.weight", 2  # the Optimizer's third parameter
        with Cluster(TINY_JOB, servers=2, workers=len(WORKERS), name="optim_frozen",
                     scheduler_flags=["--clocks=%d" % (2 * CLOCKS)]) as cluster:
            saved = cluster.dir / ("at_%d.pt" % CLOCKS)
            state = cluster.dir / "final_state.pt"
            for name, zero_grad, overlap in zip(WORKERS, ("model", "none"), ("on", "off")):
                extra = (["--save_at_clock=%d" % CLOCKS, "--save_to=%s" % saved,
                          "--state_out=%s" % state] if name == WORKERS[0] else [])
                cluster.start_tiny(name, "--freeze=" + frozen, "--freeze_at_clock=%d" % CLOCKS,
                                   "--zero_grad=" + zero_grad,
                                   '--init_flags={"overlap": "%s"}' % overlap,
                                   "--weights_out=%s/%s.pt" % (cluster.dir, name), *extra)
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0),
                             "\n".join(str(cluster.log(n)) for n in WORKERS))
            final = torch.load(cluster.dir / (WORKERS[0] + ".pt"))
            at_freeze = torch.load(saved)
            final_state = torch.load(state)
        self.assertTrue(torch.equal(final[frozen], at_freeze["model"][frozen]),
                        "max |dw| %g" % float((final[frozen] - at_freeze["model"][frozen])
                                              .abs().max()))
        for name in final:
            if name != frozen:
                self.assertFalse(torch.equal(final[name], at_freeze["model"][name]), name)
        adam, adam_then = final_state["state"], at_freeze["optimizer"]["state"]
        self.assertEqual(float(adam[index]["step"]), CLOCKS)
        for key in ("exp_avg", "exp_avg_sq"):
            self.assertTrue(torch.equal(adam[index][key], adam_then[index][key]), key)
        self.assertEqual(sorted(float(adam[i]["step"]) for i in adam if i != index),
                         [2.0 * CLOCKS] * 3)
        alone = continue_alone(at_freeze, CLOCKS, CLOCKS, frozen=(frozen,))["model"]
        error = relative_difference(final, alone)
        self.assertLessEqual(error, TOLERANCE)
        print("%s frozen at clock %d of %d: unchanged on the servers (step %d), the rest within "
              "%.2e of torch.optim.Adam alone" % (frozen, CLOCKS, 2 * CLOCKS,
                                                   float(adam[index]["step"]), error))

    def test_load_state_dict_moves_a_torch_run_onto_the_cluster(self):
        import torch

        import tiny_worker

        # 20 clocks alone with torch.optim.Adam, saved; the cluster's job
        # (its own clocks 0-19) starts from that model and optimizer state.
        torch.manual_seed(0)
        model = tiny_worker.Tiny()
        start = {"model": model.state_dict()}
        start["optimizer"] = torch.optim.Adam(model.parameters(), lr=LR).state_dict()
        saved = continue_alone(start, 0, CLOCKS, whole=True)
        base = tempfile.mkdtemp(prefix="optim_load-", dir=os.environ.get("TEST_TMPDIR"))
        path = os.path.join(base, "torch_run.pt")
        torch.save(saved, path)
        self.assertEqual(float(saved["optimizer"]["state"][0]["step"]), CLOCKS)
        with Cluster(TINY_JOB, servers=2, workers=len(WORKERS), name="optim_load",
                     scheduler_flags=["--clocks=%d" % CLOCKS]) as cluster:
            for name in WORKERS:
                cluster.start_tiny(name, "--load_from=" + path,
                                   "--weights_out=%s/%s.pt" % (cluster.dir, name))
            codes = cluster.wait(["scheduler", "server0", "server1"] + WORKERS, TIMEOUT_S)
            self.assertEqual(codes, dict.fromkeys(codes, 0),
                             "\n".join(str(cluster.log(n)) for n in WORKERS))
            final = torch.load(cluster.dir / (WORKERS[0] + ".pt"))
        alone = continue_alone(saved, 0, CLOCKS)["model"]
        error = relative_difference(final, alone)
        self.assertLessEqual(error, TOLERANCE)
        fresh = dict(saved, optimizer=torch.optim.Adam(tiny_worker_model().parameters(),
                                                       lr=LR).state_dict())
        self.assertGreater(relative_difference(final, continue_alone(fresh, 0, CLOCKS)["model"]),
                           100 * TOLERANCE)
        print("a torch run's state after %d clocks loaded by pst.Optimizer.load_state_dict: the "
              "cluster's %d clocks within %.2e of torch.optim.Adam going on alone"
              % (CLOCKS, CLOCKS, error))

    def test_step_lr_reaches_the_servers(self):
        self.check_schedule("step")

    def test_one_cycle_lr_moves_the_learning_rate_and_beta1_on_the_servers(self):
        self.check_schedule("onecycle")


if __name__ == "__main__":
    local_cluster.main("torch_optim_test")
