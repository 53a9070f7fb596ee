#!/usr/bin/env python3
"""A PyTorch worker of an H200's shape on the CPU: what the cluster costs a
GPU worker's clock, measured without a GPU (issue 67).

The model (bench/gpu_shaped_model.py) has the 78 parameters of
examples/torch/transformer_fortunes.py as bench/gpu_proof.sh trains it on a
GPU (6 layers x 512, 8 heads, context 256, bytes: 19,308,800 float32
values, 77.2 MB) and its forward's and backward's module order, but each
module only waits for its share of the step an H200 measured
(--forward_ms=15.7, --backward_ms=31.3) and hands back fixed gradients. So
a clock moves the bytes per millisecond of compute an H200 worker moves,
and every CPU cycle spent is the cluster's: overhead a GPU worker's host
would see.

Configurations, each in processes of its own:

  alone    the waits, then --adam_ms (1 ms) for the GPU's Adam: the ceiling;
  bsp_1x2  1 pstrain.torch worker + 2 ps_server + the scheduler, BSP, the
           servers' Adam (the job of tests/python/jobs/transformer_external
           .pbtxt: global batch 32, 64 KiB chunks, lr 3e-3);
  bsp_2x2  2 workers + 2 servers, each worker half of the global batch.
           --compute_per=clock (default): each worker's waits are the whole
           step's -- two workers sharing one GPU, gpu_proof.sh's "2 workers
           sharing the GPU"; --compute_per=row: its rows' share.

The workers run pst.init(overlap=--overlap), "on" by default: a CUDA
worker's path (gradients leave at their hooks, the pull lands layer by
layer), which overlap "auto" takes for CUDA parameters only -- the proxy's
are on the CPU (worker/overlap.h).

Rounds interleave (each runs every configuration, the order rotated by one
each round); the JSON gives per configuration the median and range of
clocks/s and of the per-round ratio to alone (paired: the machine may be
shared), and for the cluster's: each worker's per-clock split (gate, pull,
compute, push ms: the scheduler's final Status, run_split, the whole run
from its first clock), the CPU time per timed clock of each process
(scheduler, each server, each worker: /proc/<pid>/stat) and of its busiest
thread (/proc/<pid>/task: one thread near a whole clock is a serial point),
their sum in passes over the model at this host's memcpy speed (measured
each round: the second ceiling), and the weight check: clock c's forward
must read weights -c * lr (zeros moved by Adam under ones; a stale read,
one clock old, is counted and named). Progress lines go to stderr, the JSON
to stdout (and --out).

Run from the repository, after `bazel build -c opt //scheduler:ps_scheduler
//server:ps_server //worker/external:libpstrain_torch.so`:

    /usr/bin/python3 bench/gpu_shaped_bench.py --rounds=5
    /usr/bin/python3 bench/gpu_shaped_bench.py --quick      # tests/python's smoke run

This process does not import torch; the ones it starts run under --python.
Every child dies with it (bench/bench_processes.py).
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

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
from bench_processes import (add_run_flags, cpu_seconds, kill_all, log_tails,  # noqa: E402
                             on_signal, start, thread_cpu, torch_python, wait_all,
                             wait_port_file)
from gpu_shaped_report import (CONTEXT, GLOBAL_BATCH, HEADS, LAYERS, VOCAB,  # noqa: E402
                               WIDTH, model_numel, param_shapes, report)
from torch_bench_report import clock_split  # noqa: E402

HERE = os.path.abspath(__file__)
# The transformer's job as gpu_proof.sh runs it (tests/python/jobs/transformer_external.pbtxt).
LR = 3e-3
SEED = 42
CHUNK_BYTES = 65536
TRAIN_SIZE = 8192  # examples are indices; their values are never read
# name: (workers, servers); 0 workers: alone.
CONFIGS = {"alone": (0, 0), "bsp_1x2": (1, 2), "bsp_2x2": (2, 2)}


# --------------------------------------------------------------------------
# Child processes: one training process (alone, or a pstrain.torch worker).
# --------------------------------------------------------------------------

class _Indices:
    """A map-style data set of TRAIN_SIZE examples, each its index."""

    def __len__(self):
        return TRAIN_SIZE

    def __getitem__(self, i):
        return i


class _ClockMarks:
    """The ends of a child's clocks: wall and CPU time (this process's, all
    threads: the script's and the library's) at each; `path`.warm touched
    at the end of the warm-up, `path`.timed at the last clock's (before a
    worker's final read), for the orchestrator's readings of every
    process's CPU."""

    def __init__(self, path, warmup, clocks):
        self.path, self.warmup, self.clocks = path, warmup, clocks
        self.wall, self.cpu = [], []
        self.last = None

    def end(self):
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())
        if len(self.wall) == self.warmup:
            open(self.path + ".warm", "w").close()
        if len(self.wall) == self.clocks:
            open(self.path + ".timed", "w").close()

    def figures(self):
        """{"steps", "seconds", "clock_ms", "cpu_ms_per_clock"} over the
        timed clocks. RuntimeError when there were none."""
        w = self.warmup
        n = len(self.wall) - w
        if n < 1:
            raise RuntimeError("%d clocks, not more than the warm-up's %d"
                               % (len(self.wall), w))
        timed = sorted(b - a for a, b in zip(self.wall[w - 1:], self.wall[w:]))
        return {"steps": len(self.wall), "seconds": self.wall[-1] - self.wall[w - 1],
                "clock_ms": {"median": round(1e3 * statistics.median(timed), 3),
                             "p90": round(1e3 * timed[int(0.9 * (n - 1))], 3),
                             "max": round(1e3 * timed[-1], 3)},
                "cpu_ms_per_clock": 1e3 * (self.cpu[-1] - self.cpu[w - 1]) / n}


def child_main(args):
    """Trains --clocks clocks alone or as a pstrain.torch worker; writes
    {"seconds", "steps", "clock_ms", ...} as JSON to --_result."""
    import torch
    import gpu_shaped_model as gsm
    import pstrain.torch as pst

    torch.set_num_threads(args.threads)
    device = gsm.Timeline(args.cpu_lead_ms)
    in_cluster = args._child == "pstrain"
    check = gsm.WeightCheck(LR) if in_cluster and args.check_weights else None
    model = gsm.GpuShapedTransformer(device, args.forward_ms, args.backward_ms, CONTEXT, WIDTH,
                                     LAYERS, HEADS, VOCAB, check=check)
    declared = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    if declared != param_shapes():
        raise AssertionError("the proxy's parameters are not ByteTransformer's")
    clocks = _ClockMarks(args._result, args.warmup, args.clocks)
    rank, world = 0, 1
    if in_cluster:
        pst.init(overlap=args._overlap)
        opt = pst.Optimizer(model)
        for clock, batch in enumerate(pst.batches(_Indices())):
            rows = len(batch)
            device.scale = rows / GLOBAL_BATCH if args.compute_per == "row" else 1.0
            if check is not None:
                check.expect(clock)
            loss = model(torch.zeros(rows, 1)).sum()
            loss.backward()
            pst.report(loss)
            opt.step()
            clocks.end()
        rank, world = pst.get_rank(), pst.get_world_size()
    else:
        params = list(model.parameters())
        for clock in range(args.clocks):
            rows = len(pst.batch_indices(clock, seed=SEED, train_size=TRAIN_SIZE,
                                         batch_size=GLOBAL_BATCH))
            loss = model(torch.zeros(rows, 1)).sum()
            loss.backward()
            device.run(args.adam_ms)  # the GPU's Adam over the model
            for p in params:
                p.grad = None
            clocks.end()
    result = dict(clocks.figures(), rank=rank, world=world, torch=torch.__version__)
    if check is not None:
        result.update(weight_reads=check.reads, stale_reads=check.stale,
                      stale_examples=check.examples)
    with open(args._result, "w") as f:
        json.dump(result, f)
    if in_cluster:
        pst.finish()


# --------------------------------------------------------------------------
# The orchestrator.
# --------------------------------------------------------------------------

def snapshot(processes):
    """{name: (process CPU s, {tid: CPU s})} of the processes still running."""
    return {name: (cpu_seconds(p.pid), thread_cpu(p.pid))
            for name, p in processes.items() if p.poll() is None}


def memcpy_gb_s(nbytes, reps=3):
    """This host's memcpy speed over `nbytes` (bytearray slice assignment is
    a memmove): the median of `reps`."""
    src, dst = bytearray(nbytes), bytearray(nbytes)
    dst[:] = src  # (both touched before the timing)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        dst[:] = src
        times.append(time.perf_counter() - t)
    return nbytes / statistics.median(times) / 1e9


class Runner:
    def __init__(self, args):
        self.args = args
        self.lib = os.path.join(args.bin, "worker", "external", "libpstrain_torch.so")
        threads = str(args.threads)
        path = os.path.join(ROOT, "python")
        self.env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
                        MKL_NUM_THREADS=threads, PSTRAIN_LIB=self.lib,
                        PYTHONPATH=path + (":" + os.environ["PYTHONPATH"]
                                           if os.environ.get("PYTHONPATH") else ""))

    def child_argv(self, kind, result):
        a = self.args
        return [a.python, HERE, "--_child=" + kind, "--_result=" + result,
                "--_overlap=" + a.overlap, "--clocks=%d" % a.clocks, "--warmup=%d" % a.warmup,
                "--threads=%d" % a.threads, "--forward_ms=%g" % a.forward_ms,
                "--backward_ms=%g" % a.backward_ms, "--adam_ms=%g" % a.adam_ms,
                "--cpu_lead_ms=%g" % a.cpu_lead_ms, "--compute_per=" + a.compute_per,
                "--check_weights" if a.check_weights else "--no-check_weights"]

    def run(self, config):
        workers, servers = CONFIGS[config]
        run_dir = tempfile.mkdtemp(prefix="gpu_shaped-%s-" % config)
        started = []
        try:
            out = (self._pstrain(workers, servers, run_dir, started) if workers
                   else self._alone(run_dir, started))
        except BaseException as e:
            kill_all(started)
            sys.stderr.write("gpu_shaped_bench: %s failed: %s; logs in %s\n%s"
                             % (config, e, run_dir, log_tails(run_dir)))
            raise
        kill_all(started)
        timed = self.args.clocks - self.args.warmup
        out["seconds"] = max(r["seconds"] for r in out["results"])
        out["clocks_per_s"] = timed / out["seconds"]
        if not self.args.keep:
            for name in os.listdir(run_dir):
                os.remove(os.path.join(run_dir, name))
            os.rmdir(run_dir)
        else:
            out["dir"] = run_dir
        return out

    def _results(self, paths):
        results = []
        for path in paths:
            with open(path) as f:
                r = json.load(f)
            if r["steps"] != self.args.clocks:
                raise RuntimeError("%s: %d clocks, not %d" % (path, r["steps"], self.args.clocks))
            results.append(r)
        return results

    def _alone(self, run_dir, started):
        result = os.path.join(run_dir, "alone.json")
        p = start(self.child_argv("alone", result), os.path.join(run_dir, "alone.log"), self.env)
        started.append(p)
        wait_all({"alone": p}, self.args.timeout, "alone")
        return {"results": self._results([result])}

    def _job(self, run_dir, workers, servers):
        path = os.path.join(run_dir, "job.pbtxt")
        with open(path, "w") as f:
            f.write('name: "gpu-shaped-bench"\nmodel { kind: EXTERNAL }\n'
                    "data { dataset: EXTERNAL_DATA }\n"
                    "optimizer { type: ADAM learning_rate: %g }\nconsistency: BSP\n"
                    "batch_size: %d\nclocks: %d\nseed: %d\nnum_servers: %d\nnum_workers: %d\n"
                    "chunk_bytes: %d\n" % (LR, GLOBAL_BATCH, self.args.clocks, SEED, servers,
                                           workers, self.args.chunk_bytes))
        return path

    def _pstrain(self, workers, servers, run_dir, started):
        a = self.args
        port_file = os.path.join(run_dir, "scheduler.port")
        status_file = os.path.join(run_dir, "status.json")
        scheduler = start([os.path.join(a.bin, "scheduler", "ps_scheduler"),
                           "--job=" + self._job(run_dir, workers, servers),
                           "--listen=127.0.0.1:0", "--port_file=" + port_file,
                           "--status_file=" + status_file, "--end_grace_ms=1000"]
                          + a.scheduler_flags.split(), os.path.join(run_dir, "scheduler.log"))
        started.append(scheduler)
        address = wait_port_file(port_file, scheduler)
        daemons = {"scheduler": scheduler}
        for i in range(servers):
            daemons["server%d" % i] = p = start(
                [os.path.join(a.bin, "server", "ps_server"), "--scheduler=" + address,
                 "--listen=127.0.0.1:0"] + a.server_flags.split(),
                os.path.join(run_dir, "server%d.log" % i))
            started.append(p)
        env = dict(self.env, PSTRAIN_SCHEDULER=address,
                   PSTRAIN_FLAGS=" ".join(["--listen=127.0.0.1:0", a.worker_flags]).strip())
        procs, results = {}, []
        for i in range(workers):
            result = os.path.join(run_dir, "worker%d.json" % i)
            results.append(result)
            procs["worker%d" % i] = p = start(self.child_argv("pstrain", result),
                                              os.path.join(run_dir, "worker%d.log" % i), env)
            started.append(p)
        everyone = dict(daemons, **procs)
        marks = {}  # "warm", "timed" -> snapshot()
        deadline = time.monotonic() + a.timeout
        while any(p.poll() is None for p in procs.values()):
            for mark in ("warm", "timed"):
                if mark not in marks and all(os.path.exists(r + "." + mark) for r in results):
                    marks[mark] = snapshot(everyone)
            for name, p in everyone.items():
                if p.poll() not in (None, 0):
                    raise RuntimeError("%s exited with code %d" % (name, p.returncode))
            if time.monotonic() > deadline:
                raise TimeoutError("workers still running after %d s" % a.timeout)
            time.sleep(0.02)
        wait_all(procs, 1, "pstrain")
        out = {"results": self._results(results)}
        if "warm" in marks and "timed" in marks:
            out.update(self._cpu(marks["warm"], marks["timed"], a.clocks - a.warmup))
        try:
            wait_all({"scheduler": scheduler}, 30, "pstrain")  # its final Status is written
            with open(status_file) as f:
                out["split"] = clock_split(json.load(f))
        except (RuntimeError, TimeoutError, OSError, ValueError) as e:
            out["split_error"] = str(e)
        return out

    @staticmethod
    def _cpu(warm, timed, clocks):
        """Each process's CPU ms per timed clock, and its busiest thread's."""
        cpu, busiest = {}, {}
        for name, (total1, threads1) in timed.items():
            if name not in warm or warm[name][0] is None or total1 is None:
                continue
            total0, threads0 = warm[name]
            cpu[name] = round(1e3 * (total1 - total0) / clocks, 2)
            deltas = [t - threads0.get(tid, 0.0) for tid, t in threads1.items()]
            busiest[name] = round(1e3 * max(deltas, default=0.0) / clocks, 2)
        return {"cpu_ms_per_clock": cpu, "busiest_thread_ms_per_clock": busiest}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated, of " + ", ".join(CONFIGS))
    p.add_argument("--clocks", type=int, default=110)
    p.add_argument("--warmup", type=int, default=10, help="untimed first clocks")
    p.add_argument("--quick", action="store_true",
                   help="one round of alone and bsp_1x2, 14 clocks (4 untimed): a smoke run")
    p.add_argument("--forward_ms", type=float, default=15.7, help="the GPU's forward (H200)")
    p.add_argument("--backward_ms", type=float, default=31.3, help="the GPU's backward (H200)")
    p.add_argument("--adam_ms", type=float, default=1.0, help="alone: the GPU's Adam")
    p.add_argument("--cpu_lead_ms", type=float, default=1.0,
                   help="how far the script's thread runs ahead of the device (Timeline)")
    p.add_argument("--compute_per", default="clock", choices=["clock", "row"],
                   help="a worker's waits: the whole step's (clock) or its rows' share")
    p.add_argument("--overlap", default="on", choices=["on", "auto", "off"],
                   help="pst.init(overlap=...); on is a CUDA worker's path")
    p.add_argument("--check_weights", action=argparse.BooleanOptionalAction, default=True,
                   help="count forwards that read weights not of their clock")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--chunk_bytes", type=int, default=CHUNK_BYTES)
    p.add_argument("--worker_flags", default="", help="more PSTRAIN_FLAGS")
    p.add_argument("--server_flags", default="", help="extra ps_server flags")
    p.add_argument("--scheduler_flags", default="", help="extra ps_scheduler flags")
    add_run_flags(p, ROOT)
    p.add_argument("--_child", default="", help=argparse.SUPPRESS)
    p.add_argument("--_result", default="", help=argparse.SUPPRESS)
    p.add_argument("--_overlap", default="on", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.clocks, args.warmup = 1, 14, 4
        if args.configs == ",".join(CONFIGS):
            args.configs = "alone,bsp_1x2"
    return args


def main():
    args = parse_args()
    if args._child:
        child_main(args)
        return
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit("gpu_shaped_bench: unknown configuration %r" % c)
    if not 1 <= args.warmup < args.clocks - 1:
        raise SystemExit("gpu_shaped_bench: need 1 <= --warmup < --clocks - 1")
    args.python = args.python or torch_python("gpu_shaped_bench")
    for path in ("scheduler/ps_scheduler", "server/ps_server",
                 "worker/external/libpstrain_torch.so"):
        if not os.path.exists(os.path.join(args.bin, path)):
            raise SystemExit("gpu_shaped_bench: %s/%s is missing; build it first (or give "
                             "--bin)" % (args.bin, path))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(kill_all)
    runner = Runner(args)
    runs, ceilings = {}, []
    try:
        for r in range(args.rounds):
            ceilings.append(memcpy_gb_s(4 * model_numel()))
            for config in configs[r % len(configs):] + configs[:r % len(configs)]:
                run = runs[(r, config)] = runner.run(config)
                line = "gpu_shaped_bench: round %d %-8s %6.2f clocks/s (%.1f ms a clock)" % (
                    r, config, run["clocks_per_s"], 1e3 / run["clocks_per_s"])
                for w in run.get("split", []):
                    line += " | w%d gate %.1f pull %.1f compute %.1f push %.1f" % (
                        w["id"], w["gate_ms"], w["pull_ms"], w["compute_ms"], w["push_ms"])
                if "cpu_ms_per_clock" in run:
                    line += " | cpu ms/clock " + " ".join(
                        "%s %.1f" % kv for kv in sorted(run["cpu_ms_per_clock"].items()))
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
    finally:
        kill_all()
    text = json.dumps(report(args, runs, configs, ceilings), indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
