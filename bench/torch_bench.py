#!/usr/bin/env python3
"""PyTorch models trained by pstrain against PyTorch's own ways, one machine.

Measures training throughput (samples/s) of two models written in PyTorch
(bench/torch_bench_models.py): the quick start's MLP (784-256-256-10 ReLU,
global batch 128) and the CNN of examples/torch/cnn_fashion_mnist.py (global
batch 64), on Fashion-MNIST, Adam lr 1e-3, in these configurations:

  alone            one process, torch.optim.Adam, the whole global batch;
  ddp              torch DistributedDataParallel, gloo, 2 processes, each
                   half of the global batch, torch.optim.Adam in each;
  pstrain          2 pstrain.torch workers + 2 ps_server + the scheduler,
                   BSP, Adam on the servers (overlap "auto": off under BSP,
                   the whole gradient is pushed at step());
  pstrain_overlap  the same with pst.init(overlap="on"): each parameter's
                   gradient is pushed as the backward completes it.

Every configuration trains on the same global batches (pstrain's data
order, pst.batch_indices; a 2-process configuration splits each batch in
pstrain's two shares), collated the same way, and each process runs
torch.set_num_threads(T) (and OMP/OpenBLAS/MKL at T threads), T = --threads.
Clocks: 400 (MLP) and 300 (CNN) by default, the first 20 (--warmup) not
timed. Every training process runs with glibc malloc's thresholds fixed
(--malloc=tuned, see MALLOC_TUNED): with glibc's adaptive defaults a
batch-64 step of PyTorch gets fresh zeroed pages every step and costs up
to 3x more than it should, while a batch-32 step does not, which would
bias the one-process configuration; --malloc=glibc measures the defaults.

Throughput: (clocks - warmup) * global batch / the slowest process's time
from the end of step `warmup`-1 to the end of the last step (for pstrain:
until the final weights are in the model). Rounds interleave: each round
runs every (model, configuration) once, in turn, the order rotated by one
each round; the JSON gives, per model and configuration, the median
samples/s with [min, max] over rounds and the median and [min, max] of the
per-round ratio to `ddp` and to `alone` (paired by round: the machine may
be shared, so only ratios within a round are compared). For the pstrain
configurations it also gives where a clock's time went (the scheduler's
final Status: each worker's run_split, gate/pull/compute/push ms per clock,
over the whole run, warm-up included), and for every configuration the
training processes' CPU time per timed step (summed over them; all their
threads: torch's, gloo's, pstrain's library), the time from the data read
to the first step done (process group, or registration and the servers'
seeding) and each run's wall time; for pstrain also the servers' and the
scheduler's CPU time per timed clock. Progress lines go to stderr, the JSON to
stdout (and --out).

Run (from the repository; the daemons and libpstrain_torch.so from
bazel-bin, built with `bazel build //scheduler:ps_scheduler
//server:ps_server //worker/external:libpstrain_torch.so`):

    /usr/bin/python3 bench/torch_bench.py --rounds=3
    /usr/bin/python3 bench/torch_bench.py --models=mlp --clocks=mlp:500 \\
        --configs=alone,ddp,pstrain --out=/tmp/torch_bench.json

The orchestrating process does not import torch; the processes it starts
run under --python (default: this interpreter if it imports torch, else
/usr/bin/python3, Debian's python3-torch). Every child is killed when this
script exits, by an exception or Ctrl-C too (and, through
PR_SET_PDEATHSIG, if this script is killed).
"""

import argparse
import atexit
import json
import os
import signal
import statistics
import sys
import tempfile
import time

from bench_processes import (add_run_flags, cpu_seconds, free_port, kill_all, log_tails,
                             on_signal, start, torch_python, wait_all, wait_port_file)
from torch_bench_report import clock_split, report

_T_START = time.time()  # (a child's phases are timed from here)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.abspath(__file__)
CONFIGS = ["alone", "ddp", "pstrain", "pstrain_overlap"]
# name: (global batch, default clocks); the same as torch_bench_models.MODELS,
# kept here so that this process need not import torch.
MODELS = {"mlp": (128, 400), "cnn": (64, 300)}
# --malloc=tuned: glibc's malloc with fixed thresholds in every training
# process. By default glibc serves blocks over a threshold (128 KiB at
# first, raised as such blocks are freed) with mmap and gives heap memory
# back once 2x that is free at its top: PyTorch's activations and gradients
# of a batch-64 step then come from fresh, zeroed pages every step (this
# machine, Debian's torch 1.13, one thread: the CNN's fwd+bwd at batch 64
# 16-45 ms instead of 13 ms, a third of it in the kernel), varying with the
# history of the process, while a batch-32 step is unaffected: one process
# with the whole batch would be penalised against two with half of it.
# (Setting any malloc tunable also stops the threshold's adjustment, so both
# are set.)
MALLOC_TUNED = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"
LR = 1e-3
SEED = 42         # the job's seed: the data order
TORCH_SEED = 0    # torch.manual_seed before the model is made
PROCESSES = 2     # workers of ddp and pstrain; servers of pstrain


# --------------------------------------------------------------------------
# Child processes: one training process of one configuration.
# --------------------------------------------------------------------------

def child_main(args):
    """A training process (--_child=alone|ddp|pstrain): trains, writes
    {"seconds", "steps", "loss", ...} as JSON to --_result."""
    import torch
    import torch.nn.functional as F
    import torch.utils.data

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import torch_bench_models as models
    import pstrain.torch as pst

    t_imported = time.time()
    torch.set_num_threads(args.threads)
    batch, _ = models.MODELS[args.model]
    clocks, warmup = args.clocks, args.warmup
    train = models.train_set()
    collate = getattr(torch.utils.data, "default_collate", None) or \
        torch.utils.data._utils.collate.default_collate
    t_data = time.time()
    rank, world = 0, 1
    result = {}
    t_first = None

    if args._child == "pstrain":
        pst.init(overlap=args._overlap)
    elif args._child == "ddp":
        import torch.distributed as dist
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", rank=rank, world_size=world)

    torch.manual_seed(TORCH_SEED)
    model = models.make_model(args.model)
    loss = None
    t0 = None
    steps = 0

    if args._child == "pstrain":
        opt = pst.Optimizer(model)
        for x, y in pst.batches(train):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            pst.report(loss)
            opt.step()
            steps += 1
            if steps == 1:
                t_first = time.time()
            if steps == warmup:
                t0, c0 = time.perf_counter(), time.process_time()
                open(args._result + ".warm", "w").close()  # (the daemons' CPU is read)
        t1, c1 = time.perf_counter(), time.process_time()  # the final weights are in
        rank, world = pst.get_rank(), pst.get_world_size()
    else:
        net = model
        if args._child == "ddp":
            net = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.Adam(net.parameters(), lr=LR)
        for clock in range(clocks):
            indices = pst.batch_indices(clock, seed=SEED, train_size=len(train),
                                        batch_size=batch, share_index=rank, num_shares=world)
            x, y = collate([train[i] for i in indices])
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            steps += 1
            if steps == 1:
                t_first = time.time()
            if steps == warmup:
                t0, c0 = time.perf_counter(), time.process_time()
        t1, c1 = time.perf_counter(), time.process_time()

    if t0 is None:
        raise RuntimeError("%d steps, not more than the warm-up's %d" % (steps, warmup))
    # cpu_seconds: this process's CPU time (all its threads: torch's, gloo's,
    # pstrain's) over the timed clocks.
    result.update(rank=rank, world=world, steps=steps, seconds=t1 - t0, cpu_seconds=c1 - c0,
                  loss=float(loss), threads=torch.get_num_threads(),
                  torch=torch.__version__,
                  # Seconds before the timed clocks: importing torch and
                  # pstrain, reading the data, from there to the end of
                  # the first step (process group or cluster, registration).
                  phases_s={"import": round(t_imported - _T_START, 3),
                            "data": round(t_data - t_imported, 3),
                            "to_first_step": round(t_first - t_data, 3)})
    with open(args._result, "w") as f:
        json.dump(result, f)
    if args._child == "pstrain":
        pst.finish()
    elif args._child == "ddp":
        torch.distributed.destroy_process_group()


# --------------------------------------------------------------------------
# The orchestrator: starts, waits for and kills the processes of each run.
# --------------------------------------------------------------------------

class Runner:
    def __init__(self, args):
        self.args = args
        self.bin = args.bin
        self.lib = os.path.join(self.bin, "worker", "external", "libpstrain_torch.so")
        self.env = dict(os.environ)
        threads = str(args.threads)
        if args.malloc == "tuned":
            self.env["GLIBC_TUNABLES"] = MALLOC_TUNED
        self.env.update(OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
                        MKL_NUM_THREADS=threads, PSTRAIN_LIB=self.lib,
                        PYTHONPATH=os.path.join(ROOT, "python") + (
                            ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH")
                            else ""))

    def child_argv(self, kind, model, clocks, result):
        return [self.args.python, HERE, "--_child=" + kind, "--_result=" + result,
                "--model=" + model, "--clocks=%d" % clocks, "--warmup=%d" % self.args.warmup,
                "--threads=%d" % self.args.threads]

    def run(self, model, config, clocks):
        """One run: {"samples_per_s", "seconds", "loss", ...}."""
        run_dir = tempfile.mkdtemp(prefix="torch_bench-%s-%s-" % (model, config))
        started = []
        t_run = time.monotonic()
        try:
            if config == "alone":
                out = self._alone(model, clocks, run_dir, started)
            elif config == "ddp":
                out = self._ddp(model, clocks, run_dir, started)
            else:
                out = self._pstrain(model, clocks, run_dir, started,
                                    "on" if config == "pstrain_overlap" else "auto")
        except BaseException as e:
            kill_all(started)
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                sys.stderr.write("torch_bench: interrupted in %s %s; its processes killed; "
                                 "logs in %s\n" % (model, config, run_dir))
            else:
                sys.stderr.write("torch_bench: %s %s failed: %s; logs in %s\n%s"
                                 % (model, config, e, run_dir, log_tails(run_dir)))
            raise
        kill_all(started)
        batch, _ = MODELS[model]
        seconds = max(r["seconds"] for r in out["results"])
        out["seconds"] = seconds
        out["samples_per_s"] = (clocks - self.args.warmup) * batch / seconds
        out["loss"] = statistics.mean(r["loss"] for r in out["results"])
        out["wall_s"] = time.monotonic() - t_run
        # The training processes' CPU time per timed step (ms, summed over
        # them; the servers' and the scheduler's not counted).
        out["cpu_ms_per_step"] = 1e3 * sum(r["cpu_seconds"] for r in out["results"]) / (
            clocks - self.args.warmup)
        out["to_first_step_s"] = max(r["phases_s"]["to_first_step"] for r in out["results"])
        if not self.args.keep:
            for name in os.listdir(run_dir):
                os.remove(os.path.join(run_dir, name))
            os.rmdir(run_dir)
        else:
            out["dir"] = run_dir
        return out

    def _results(self, paths, clocks):
        results = []
        for path in paths:
            with open(path) as f:
                r = json.load(f)
            if r["steps"] != clocks:
                raise RuntimeError("%s: %d steps, not %d" % (path, r["steps"], clocks))
            results.append(r)
        return results

    def _alone(self, model, clocks, run_dir, started):
        result = os.path.join(run_dir, "alone.json")
        p = start(self.child_argv("alone", model, clocks, result),
                  os.path.join(run_dir, "alone.log"), self.env)
        started.append(p)
        wait_all({"alone": p}, self.args.timeout, "alone")
        return {"results": self._results([result], clocks)}

    def _ddp(self, model, clocks, run_dir, started):
        env = dict(self.env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   WORLD_SIZE=str(PROCESSES))
        procs, results = {}, []
        for rank in range(PROCESSES):
            result = os.path.join(run_dir, "rank%d.json" % rank)
            results.append(result)
            procs["rank%d" % rank] = p = start(
                self.child_argv("ddp", model, clocks, result),
                os.path.join(run_dir, "rank%d.log" % rank), dict(env, RANK=str(rank)))
            started.append(p)
        wait_all(procs, self.args.timeout, "ddp")
        return {"results": self._results(results, clocks)}

    def _pstrain(self, model, clocks, run_dir, started, overlap):
        batch, _ = MODELS[model]
        job = os.path.join(run_dir, "job.pbtxt")
        with open(job, "w") as f:
            f.write("name: \"torch-bench-%s\"\n"
                    "model { kind: EXTERNAL }\n"
                    "data { dataset: EXTERNAL_DATA }\n"
                    "optimizer { type: ADAM learning_rate: %g }\n"
                    "consistency: BSP\n"
                    "batch_size: %d\nclocks: %d\nseed: %d\n"
                    "num_servers: %d\nnum_workers: %d\n"
                    "chunk_bytes: %d\n"
                    % (model, LR, batch, clocks, SEED, PROCESSES, PROCESSES,
                       self.args.chunk_bytes))
        port_file = os.path.join(run_dir, "scheduler.port")
        status_file = os.path.join(run_dir, "status.json")
        scheduler = start([os.path.join(self.bin, "scheduler", "ps_scheduler"),
                           "--job=" + job, "--listen=127.0.0.1:0", "--port_file=" + port_file,
                           "--status_file=" + status_file, "--end_grace_ms=1000"],
                          os.path.join(run_dir, "scheduler.log"))
        started.append(scheduler)
        address = wait_port_file(port_file, scheduler)
        servers = {}
        for i in range(PROCESSES):
            servers["server%d" % i] = p = start(
                [os.path.join(self.bin, "server", "ps_server"), "--scheduler=" + address,
                 "--listen=127.0.0.1:0"] + self.args.server_flags.split(),
                os.path.join(run_dir, "server%d.log" % i))
            started.append(p)
        env = dict(self.env, PSTRAIN_SCHEDULER=address,
                   PSTRAIN_FLAGS="--listen=127.0.0.1:0")
        workers, results = {}, []
        for i in range(PROCESSES):
            result = os.path.join(run_dir, "worker%d.json" % i)
            results.append(result)
            workers["worker%d" % i] = p = start(
                self.child_argv("pstrain", model, clocks, result) + ["--_overlap=" + overlap],
                os.path.join(run_dir, "worker%d.log" % i), env)
            started.append(p)
        daemons = dict(servers, scheduler=scheduler)
        daemon_cpu = {}  # name -> the last CPU seconds read while it ran
        warm_cpu = None  # their sum when every worker's warm-up was over
        deadline = time.monotonic() + self.args.timeout
        while any(p.poll() is None for p in workers.values()):
            for name, p in daemons.items():
                daemon_cpu[name] = cpu_seconds(p.pid) or daemon_cpu.get(name, 0.0)
            if warm_cpu is None and all(os.path.exists(r + ".warm") for r in results):
                warm_cpu = sum(daemon_cpu.values())
            for name, p in list(workers.items()) + list(daemons.items()):
                if p.poll() not in (None, 0):
                    raise RuntimeError("pstrain: %s exited with code %d" % (name, p.returncode))
            if time.monotonic() > deadline:
                raise TimeoutError("pstrain: workers still running after %d s"
                                   % self.args.timeout)
            time.sleep(0.05)
        wait_all(workers, 1, "pstrain")
        for name, p in daemons.items():
            daemon_cpu[name] = cpu_seconds(p.pid) or daemon_cpu.get(name, 0.0)
        out = {"results": self._results(results, clocks)}
        if warm_cpu is not None:
            # The servers' and the scheduler's CPU time per timed clock, ms
            # (from the end of the warm-up to the workers' exit).
            out["daemon_cpu_ms_per_clock"] = 1e3 * (sum(daemon_cpu.values()) - warm_cpu) / (
                clocks - self.args.warmup)
        # The scheduler writes its final Status once every member reported.
        try:
            wait_all({"scheduler": scheduler}, 30, "pstrain")
            with open(status_file) as f:
                out["split"] = clock_split(json.load(f))
        except (RuntimeError, TimeoutError, OSError, ValueError) as e:
            out["split_error"] = str(e)
        return out


def parse_clocks(text, models):
    clocks = {m: MODELS[m][1] for m in models}
    if not text:
        return clocks
    for part in text.split(","):
        name, sep, value = part.rpartition(":")
        if sep:
            clocks[name] = int(value)
        else:
            clocks = {m: int(value) for m in models}
    return clocks


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp, cnn")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated, of " + ", ".join(CONFIGS))
    p.add_argument("--clocks", default="",
                   help="N (every model) or MODEL:N,... (default mlp:%d,cnn:%d)"
                   % (MODELS["mlp"][1], MODELS["cnn"][1]))
    p.add_argument("--warmup", type=int, default=20, help="untimed first clocks")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--malloc", default="tuned", choices=["tuned", "glibc"],
                   help="tuned: GLIBC_TUNABLES=%s in the training processes (not the "
                   "pstrain daemons); glibc: as the environment has it" % MALLOC_TUNED)
    p.add_argument("--chunk_bytes", type=int, default=262144)
    p.add_argument("--server_flags", default="", help="extra ps_server flags")
    add_run_flags(p, ROOT)
    # A child's own flags.
    p.add_argument("--_child", default="", help=argparse.SUPPRESS)
    p.add_argument("--_result", default="", help=argparse.SUPPRESS)
    p.add_argument("--_overlap", default="auto", help=argparse.SUPPRESS)
    p.add_argument("--model", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main():
    args = parse_args()
    if args._child:
        args.clocks = int(args.clocks)
        child_main(args)
        return
    args.models = [m for m in args.models.split(",") if m]
    configs = [c for c in args.configs.split(",") if c]
    for m in args.models:
        if m not in MODELS:
            raise SystemExit("torch_bench: unknown model %r" % m)
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit("torch_bench: unknown configuration %r" % c)
    if args.warmup < 1:
        raise SystemExit("torch_bench: --warmup must be >= 1")
    clocks_of = parse_clocks(args.clocks, args.models)
    for m in args.models:
        if clocks_of[m] <= args.warmup:
            raise SystemExit("torch_bench: %s: --clocks must exceed --warmup" % m)
    args.python = args.python or torch_python("torch_bench")
    for path in ("scheduler/ps_scheduler", "server/ps_server",
                 "worker/external/libpstrain_torch.so"):
        if any(c.startswith("pstrain") for c in configs) and \
                not os.path.exists(os.path.join(args.bin, path)):
            raise SystemExit("torch_bench: %s/%s is missing; build it first (or give "
                             "--bin)" % (args.bin, path))

    signal.signal(signal.SIGINT, signal.default_int_handler)  # (even if started ignoring it)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(kill_all)
    runner = Runner(args)
    runs = {}
    try:
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for model in args.models:
                for config in order:
                    run = runner.run(model, config, clocks_of[model])
                    runs[(r, model, config)] = run
                    split = ""
                    for w in run.get("split", []):
                        split += " | w%d gate %.1f pull %.1f compute %.1f push %.1f ms" % (
                            w["id"], w["gate_ms"], w["pull_ms"], w["compute_ms"],
                            w["push_ms"])
                    if "daemon_cpu_ms_per_clock" in run:
                        split += " | daemons %.1f cpu ms/clock" % run["daemon_cpu_ms_per_clock"]
                    sys.stderr.write("torch_bench: round %d %s %-15s %8.1f samples/s "
                                     "(%.2f s timed, loss %.3f, %.1f cpu ms/step)%s\n"
                                     % (r, model, config, run["samples_per_s"],
                                        run["seconds"], run["loss"], run["cpu_ms_per_step"],
                                        split))
                    sys.stderr.flush()
    finally:
        kill_all()
    out = json.dumps(report(args, runs, configs, clocks_of, runner.env,
                            {m: MODELS[m][0] for m in args.models}, LR, PROCESSES), indent=2)
    print(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
