#!/usr/bin/env python3
"""Which consistency trains to a target loss soonest? BSP, SSP(s) and ASP
on real local clusters under injected stragglers and slow links, each run's
loss curve against wall-clock time and clocks, repeated over seeds.

    bazel build //scheduler:ps_scheduler //server:ps_server //worker:ps_worker
    bench/consistency_experiment.py [--quick] [--models=mlp,gpt] [--seeds=1,2,3]
                                    [--conditions=...] [--links="--rate=2000"]
                                    [--out=DIR] [--plots=DIR]

Each run is deploy/local_cluster.sh with 4 workers and 2 servers, the mode
given to ps_scheduler (--consistency, --staleness), the condition to every
worker (ps_worker --straggler, seeded by the run's seed; for slow links,
each worker in a network namespace behind a link shaped by deploy/netem.sh
with --links, which needs root), the job's curves
written by the scheduler (--run_dir: curves.jsonl, a point each time the
slowest clock moves). A run's time to the target is the first point whose
loss, averaged over the points of the last few clocks (each worker's
loss already the mean of its last 16 clocks), is at or below the model's target,
in seconds since the run's first point. The modes run interleaved within
each seed, and each mode's row gives the medians of its ratios to the
first mode's run of the same seed (time to the target, final loss, clocks
a second). Prints one JSON object (and writes
it to OUT/consistency.json with every curve); with --plots, a PNG per model
and condition (gnuplot): the median seed's loss against time, one line per
mode. --quick: a smoke run of a few minutes (one model, one condition, two
modes, one seed, fewer clocks), no timing claim.
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

MODES = {  # name: (--consistency, --staleness, more ps_scheduler flags)
    "BSP": ("bsp", 0, []),
    "SSP(1)": ("ssp", 1, []),
    "SSP(3)": ("ssp", 3, []),
    "SSP(10)": ("ssp", 10, []),
    "ASP": ("asp", 0, []),
}
# BSP with the workers' pushes compressed (docs/compression.md); not run
# unless --modes names them.
COMPRESSED_MODES = {
    "BSP+sign": ("bsp", 0, ["--compression=sign"]),
    "BSP+top-k": ("bsp", 0, ["--compression=top_k"]),
    "BSP+sign+pulls": ("bsp", 0, ["--compression=sign", "--compression_pulls=1"]),
    "BSP+top-k+pulls": ("bsp", 0, ["--compression=top_k", "--compression_pulls=1"]),
    "BSP+int8": ("bsp", 0, ["--compression=int8"]),
    "BSP+int4": ("bsp", 0, ["--compression=int4"]),
    "BSP+int8+pulls": ("bsp", 0, ["--compression=int8", "--compression_pulls=1"]),
    "BSP+int4+pulls": ("bsp", 0, ["--compression=int4", "--compression_pulls=1"]),
}

# name: (ps_worker flags, the seed being the run's; local_cluster.sh
# --worker_links, "" for none, LINKS for the --links option's).
CONDITIONS = {
    "no stragglers": ([], ""),
    # Every worker: 30 % of its clocks delayed, Pareto(5 ms, 1.5): median
    # 7.9 ms, 1 % above 108 ms.
    "heavy-tailed delays": (["--straggler=pareto:5:1.5@0.3"], ""),
    # Worker 3 is 15 ms slower every clock.
    "one slow worker": (["--straggler=fixed:15", "--straggler_workers=3"], ""),
    # Every worker behind a link of its own, shaped by deploy/netem.sh
    # (needs root): by default 2 Gbit/s each way, so that an MLP clock's
    # 1.07 MB push and pull take about 4.3 ms each, its compute's time.
    "slow links": ([], "LINKS"),
}
LINKS = "--rate=2000"
ALL_MODES = dict(MODES, **COMPRESSED_MODES)

# name: (job file, clocks, quick clocks, target loss, smoothing clocks). A
# worker's status loss is already the mean of its last 16 clocks
# (worker/loop_stats.h); a point's loss is further averaged with those of
# the points of the smoothing clocks before it -- a span of clocks, not of
# points, so that modes of faster clocks are not smoothed over more.
MODELS = {
    "mlp": ("deploy/jobs/mlp_fashion_mnist.pbtxt", 900, 200, 0.45, 48),
    "gpt": ("deploy/jobs/gpt_fortunes.pbtxt", 250, 60, 2.45, 16),
}
# Every worker heartbeats (and so reports its loss) this often, so that
# the scheduler's curve (a point every 200 ms) samples each worker's loss
# at most 100 ms old.
HEARTBEAT_FLAGS = ["--heartbeat_interval_ms=100"]


class ExperimentError(RuntimeError):
    """A run that did not end well, with its logs' tail."""


def run_one(model, condition, mode, seed, clocks, workdir, bin_dir, links):
    """One local cluster run; its curve as [(seconds, clock, loss)], its
    wall seconds, and its facts (the final test accuracy or, for a text
    model, the final loss on its held-out text; a worker's pushed and
    pulled bytes a clock). `links`: the slow links' netem.sh options."""
    job, _, _, _, _ = MODELS[model]
    consistency, staleness, mode_flags = ALL_MODES[mode]
    name = "%s-%s-%s-%d" % (model, condition, mode, seed)
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    logs, run_dir = workdir / name / "logs", workdir / name / "run"
    run_dir.mkdir(parents=True)
    flags, shaped = CONDITIONS[condition]
    flags = flags + HEARTBEAT_FLAGS + ["--straggler_seed=%d" % seed]
    cmd = [str(ROOT / "deploy/local_cluster.sh"), "--job=" + str(ROOT / job),
           "--bin=" + str(bin_dir), "--servers=2", "--workers=4", "--logs=" + str(logs),
           "--worker_flags=" + " ".join(flags)]
    if shaped:
        cmd.append("--worker_links=" + links)
    cmd += ["--",
           "--run_dir=" + str(run_dir), "--consistency=" + consistency,
           "--staleness=%d" % staleness, "--seed=%d" % seed, "--clocks=%d" % clocks] + mode_flags
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900, check=False)
    if done.returncode != 0:
        raise ExperimentError("%s: local_cluster.sh exited %d:\n%s"
                              % (name, done.returncode, done.stdout[-3000:]))
    points = [json.loads(line) for line in (run_dir / "curves.jsonl").read_text().splitlines()
              if line.strip()]
    t0 = int(points[0]["unix_ms"])
    curve = [((int(p["unix_ms"]) - t0) / 1000.0, int(p.get("clock", 0)), float(p["loss"]))
             for p in points if float(p.get("loss", -1)) >= 0]
    accuracy = next((float(p["test_accuracy"]) for p in reversed(points)
                     if float(p.get("test_accuracy", -1)) >= 0), None)
    validation = next((float(p["validation_loss"]) for p in reversed(points)
                       if float(p.get("validation_loss", -1)) >= 0), None)
    members = json.loads((logs / "status.json").read_text()).get("members", [])
    workers = [m for m in members if m.get("role") == "WORKER"]
    pushed = [int(m.get("bytes_out", 0)) for m in workers]
    pulled = [int(m.get("bytes_in", 0)) for m in workers]
    facts = {"final_accuracy": accuracy, "final_validation_loss": validation,
             "pushed_bytes_per_clock": round(statistics.mean(pushed) / clocks) if pushed else None,
             "pulled_bytes_per_clock": round(statistics.mean(pulled) / clocks) if pulled else None}
    return curve, time.monotonic() - started, facts


def smoothed(curve, span):
    """Each point's loss averaged over it and the points of the `span`
    clocks before it."""
    out = []
    for i, (t, c, _) in enumerate(curve):
        window = [loss for _, c2, loss in curve[:i + 1] if c2 > c - span]
        out.append((t, c, sum(window) / len(window)))
    return out


def time_to(curve, target):
    """(seconds, clock) where the smoothed curve first reaches the target,
    interpolated linearly between the point before and the first point at
    or below it (the points are 200 ms apart); None if it never does."""
    for i, (t, c, loss) in enumerate(curve):
        if loss <= target:
            if i == 0:
                return t, c
            t0, c0, loss0 = curve[i - 1]
            f = (loss0 - target) / (loss0 - loss)  # loss0 > target >= loss
            return t0 + f * (t - t0), round(c0 + f * (c - c0))
    return None


def summary(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def plot(path, model, condition, curves, target):
    """A PNG of the median seed's smoothed loss against time, a line per mode."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        raise ExperimentError("gnuplot not found (install gnuplot-nox)")
    with tempfile.TemporaryDirectory() as tmp:
        series = []
        for i, (mode, curve) in enumerate(curves.items()):
            data = pathlib.Path(tmp, "%d.dat" % i)
            data.write_text("".join("%f %f\n" % (t, loss) for t, _, loss in curve))
            series.append("'%s' using 1:2 with lines lw 2 title '%s'" % (data, mode))
        script = pathlib.Path(tmp, "plot.gp")
        script.write_text(
            "set terminal png size 640,400\nset output '%s'\nset grid\n"
            "set title '%s, %s (4 workers)'\nset xlabel 'seconds'\nset ylabel 'training loss'\n"
            "set key top right\nplot %s, %f with lines dt 2 lc 'gray' title 'target'\n"
            % (path, model.upper(), condition, ", ".join(series), target))
        subprocess.run([gnuplot, str(script)], check=True)


def paired(runs, baseline, mode, key):
    """The median, min and max over seeds of run[key] of `mode` divided by
    that of `baseline` with the same seed (seeds where both have it)."""
    by_seed = {r["seed"]: r for r in runs if r["mode"] == baseline}
    ratios = [r[key] / by_seed[r["seed"]][key] for r in runs
              if r["mode"] == mode and r[key] and by_seed[r["seed"]][key]]
    return summary(ratios)


def row(model, condition, mode, target, seeds, runs, baseline):
    """One mode's line of the table: medians and ranges over its runs, and
    the medians of its ratios to the baseline's run of the same seed."""
    mine = [r for r in runs if r["mode"] == mode]

    def over(key):
        return summary([r[key] for r in mine if r[key] is not None])

    times = [r["time_to_target_s"] for r in mine if r["time_to_target_s"] is not None]
    out = {"model": model, "condition": condition, "mode": mode, "target_loss": target,
           "time_to_target_s": summary(times), "reached": "%d of %d" % (len(times), len(seeds)),
           "final_loss": over("final_loss"), "final_accuracy": over("final_accuracy"),
           "final_validation_loss": over("final_validation_loss"),
           "clocks_per_s": over("clocks_per_s"),
           "pushed_bytes_per_clock": over("pushed_bytes_per_clock"),
           "pulled_bytes_per_clock": over("pulled_bytes_per_clock")}
    if mode != baseline:
        out["vs_" + baseline] = {key: paired(runs, baseline, mode, key)
                                 for key in ("time_to_target_s", "final_loss",
                                             "final_validation_loss", "clocks_per_s")}
    return out


def analyze(run):
    """Sets a run's figures that follow from its curve (its final smoothed
    loss, clocks a second, time and clock at the target); returns the
    smoothed curve and (seconds, clock) at the target or None."""
    curve = [tuple(p) for p in run["curve"]]
    target, span = MODELS[run["model"]][3], MODELS[run["model"]][4]
    smooth = smoothed(curve, span)
    reached = time_to(smooth, target)
    run.update({"final_loss": smooth[-1][2] if smooth else None,
                "seconds": curve[-1][0] if curve else None,
                "clocks_per_s": round(curve[-1][1] / curve[-1][0], 2)
                if curve and curve[-1][0] > 0 else None,
                "time_to_target_s": round(reached[0], 3) if reached else None,
                "clock_at_target": reached[1] if reached else None})
    return smooth, reached


def reanalyze(path):
    """The result of an earlier run (its consistency.json) with every
    figure recomputed from its curves: the table as this script now
    computes it."""
    result = json.loads(pathlib.Path(path).read_text())
    runs, table = result["runs"], []
    for run in runs:
        analyze(run)
    done = []
    for run in runs:
        key = (run["model"], run["condition"])
        if key in done:
            continue
        done.append(key)
        mine = [r for r in runs if (r["model"], r["condition"]) == key]
        modes = list(dict.fromkeys(r["mode"] for r in mine))
        seeds = sorted({r["seed"] for r in mine})
        table += [row(key[0], key[1], mode, MODELS[key[0]][3], seeds, mine, modes[0])
                  for mode in modes]
    result["table"] = table
    return result


def measure(model, condition, modes, seeds, clocks, workdir, bin_dir, links, runs, table):
    """Every mode and seed of one model and condition, the modes
    interleaved within each seed: appends each run to `runs` and each
    mode's row to `table` (with its ratios to the first mode's run of the
    same seed); the median seed's smoothed curve per mode (for the plot)."""
    target = MODELS[model][3]
    mine, ran = [], {mode: [] for mode in modes}
    for seed in seeds:
        for mode in modes:
            curve, wall, facts = run_one(model, condition, mode, seed, clocks, workdir, bin_dir,
                                         links)
            mine.append(dict(facts, model=model, condition=condition, mode=mode, seed=seed,
                             clocks=clocks, wall_s=round(wall, 2),
                             curve=[[round(t, 3), c, round(l, 5)] for t, c, l in curve]))
            smooth, reached = analyze(mine[-1])
            ran[mode].append((reached[0] if reached else float("inf"), smooth))
            print("%s / %s / %s / seed %d: %s" % (
                model, condition, mode, seed,
                "target at %.2f s (clock %d)" % reached if reached else "target not reached"),
                file=sys.stderr)
    runs += mine
    medians = {}
    for mode in modes:
        ran[mode].sort(key=lambda r: r[0])
        medians[mode] = ran[mode][len(ran[mode]) // 2][1]
        table.append(row(model, condition, mode, target, seeds, mine, modes[0]))
    return medians


def chosen(args, error):
    """The models, modes, conditions and seeds to run, and the conditions
    left out (with why); calls error() for an unknown name."""
    if args.quick:
        return ["mlp"], ["BSP", "SSP(3)"], ["one slow worker"], [1], {}
    models, modes = args.models.split(","), args.modes.split(",")
    conditions = args.conditions.split(",") if args.conditions else list(CONDITIONS)
    for name, values, known in (("model", models, MODELS), ("mode", modes, ALL_MODES),
                                ("condition", conditions, CONDITIONS)):
        for value in values:
            if value not in known:
                error("unknown %s '%s' (one of: %s)" % (name, value, ", ".join(known)))
    left_out = {}
    if os.geteuid() != 0 and "slow links" in conditions:
        if args.conditions:
            error("'slow links' needs root (network namespaces and tc); "
                  "leave it out of --conditions")
        conditions.remove("slow links")
        left_out["slow links"] = "needs root (network namespaces and tc)"
        print("consistency_experiment: 'slow links' left out: not root", file=sys.stderr)
    return models, modes, conditions, [int(s) for s in args.seeds.split(",")], left_out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run of a few minutes")
    p.add_argument("--models", default="mlp,gpt")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--modes", default=",".join(MODES),
                   help="of %s" % ", ".join(ALL_MODES))
    p.add_argument("--conditions", default="",
                   help="default: all four ('slow links' only as root)")
    p.add_argument("--links", default=LINKS,
                   help="the slow links' deploy/netem.sh options, e.g. "
                        "'--rate=1000 --delay=2 --jitter=1' (delay, jitter and loss need "
                        "a kernel with sch_netem)")
    p.add_argument("--out", default="", help="write consistency.json (every curve) here")
    p.add_argument("--plots", default="", help="write a PNG per model and condition here")
    p.add_argument("--bin", default=str(ROOT / "bazel-bin"),
                   help="where the daemons are (scheduler/ps_scheduler, ...)")
    p.add_argument("--reanalyze", default="",
                   help="run nothing: recompute the figures of an earlier consistency.json "
                        "from its curves (and write it to --out)")
    args = p.parse_args()
    if args.reanalyze:
        result = reanalyze(args.reanalyze)
        if args.out:
            pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
            pathlib.Path(args.out, "consistency.json").write_text(
                json.dumps(result, indent=1) + "\n")
        print(json.dumps(dict((k, v) for k, v in result.items() if k != "runs"), indent=1))
        return
    models, modes, conditions, seeds, left_out = chosen(args, p.error)
    if not pathlib.Path(args.bin, "worker/ps_worker").exists():
        p.error("build the daemons first: bazel build //scheduler:ps_scheduler "
                "//server:ps_server //worker:ps_worker")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            stdout=subprocess.PIPE, text=True, check=False).stdout.strip()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="pstrain-consistency."))
    runs, table = [], []
    started = time.monotonic()
    for model in models:
        clocks = MODELS[model][2] if args.quick else MODELS[model][1]
        for condition in conditions:
            medians = measure(model, condition, modes, seeds, clocks, workdir, args.bin,
                              args.links, runs, table)
            if args.plots:
                pathlib.Path(args.plots).mkdir(parents=True, exist_ok=True)
                slug = "".join(c if c.isalnum() else "-" for c in condition)
                plot(pathlib.Path(args.plots, "%s-%s.png" % (model, slug)), model, condition,
                     medians, MODELS[model][3])
    result = {"bench": "consistency_experiment", "commit": commit, "workers": 4, "servers": 2,
              "seeds": seeds,
              "conditions": {c: {"worker_flags": CONDITIONS[c][0],
                                 "worker_links": args.links if CONDITIONS[c][1] else ""}
                             for c in conditions},
              "left_out": left_out,
              "targets": {m: MODELS[m][3] for m in models},
              "minutes": round((time.monotonic() - started) / 60, 1), "table": table}
    if args.out:
        pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.out, "consistency.json").write_text(
            json.dumps(dict(result, runs=runs), indent=1) + "\n")
    print(json.dumps(result, indent=1))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except ExperimentError as e:
        sys.exit("consistency_experiment: %s" % e)
