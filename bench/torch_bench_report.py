"""The JSON report of bench/torch_bench.py: medians and ranges of every
round's runs, paired ratios against ddp and alone, and each pstrain
worker's per-clock split from the scheduler's final Status.
"""
import os
import platform
import statistics
import sys


def clock_split(status):
    """Each worker's mean per-clock split from the scheduler's final Status."""
    split = []
    for m in status.get("members", []):
        if m.get("role") != "WORKER":
            continue
        w = m.get("worker", {})
        s = w.get("run_split", {})
        split.append({
            "id": m.get("id", 0),
            "frontend": w.get("frontend", ""),
            "clocks": int(w.get("clocks_trained", 0)),
            "train_s": round(float(w.get("train_s", 0.0)), 3),
            **{k: round(float(s.get(k, 0.0)), 3)
               for k in ("gate_ms", "pull_ms", "compute_ms", "push_ms", "rpcs", "bytes")},
        })
    return sorted(split, key=lambda w: w["id"])


def summary(values):
    return {"median": round(statistics.median(values), 4),
            "range": [round(min(values), 4), round(max(values), 4)]}


def report(args, runs, configs, clocks_of, runner_env, batch_of, lr, processes):
    """The JSON of every round's runs.

    Args:
        batch_of: model name -> its global batch.
        lr: Adam's learning rate.
        processes: the workers (and servers) of ddp and pstrain.
    """
    models = {}
    for model in args.models:
        batch = batch_of[model]
        per = {c: [runs[(r, model, c)] for r in range(args.rounds)] for c in configs}
        entry = {"global_batch": batch, "clocks": clocks_of[model],
                 "timed_clocks": clocks_of[model] - args.warmup, "configs": {}}
        for c in configs:
            rates = [run["samples_per_s"] for run in per[c]]
            e = {"samples_per_s": summary(rates),
                 "per_round": [round(x, 1) for x in rates],
                 "final_loss": round(statistics.median(run["loss"] for run in per[c]), 4),
                 # Per run, median: its processes' slowest start (first step
                 # done, from the data read) and the whole run's wall time.
                 "to_first_step_s": round(statistics.median(
                     run["to_first_step_s"] for run in per[c]), 2),
                 "run_wall_s": round(statistics.median(run["wall_s"] for run in per[c]), 1),
                 "worker_cpu_ms_per_step": round(statistics.median(
                     run["cpu_ms_per_step"] for run in per[c]), 2)}
            if all("daemon_cpu_ms_per_clock" in run for run in per[c]):
                e["daemon_cpu_ms_per_clock"] = round(statistics.median(
                    run["daemon_cpu_ms_per_clock"] for run in per[c]), 2)
            for base in ("ddp", "alone"):
                if base in per:
                    e["vs_" + base] = summary([a["samples_per_s"] / b["samples_per_s"]
                                               for a, b in zip(per[c], per[base])])
            splits = [run["split"] for run in per[c] if run.get("split")]
            if splits:
                e["worker_clock_split_ms"] = {
                    k: round(statistics.median(w[k] for s in splits for w in s), 3)
                    for k in ("gate_ms", "pull_ms", "compute_ms", "push_ms")}
                e["worker_clock_split_ms"]["rpcs_per_clock"] = round(
                    statistics.median(w["rpcs"] for s in splits for w in s), 1)
                e["worker_clock_split_ms"]["bytes_per_clock"] = round(
                    statistics.median(w["bytes"] for s in splits for w in s))
                e["per_round_split"] = splits
            if args.keep:
                e["dirs"] = [run.get("dir") for run in per[c]]
            entry["configs"][c] = e
        models[model] = entry
    return {
        "bench": "torch_bench",
        "command": " ".join([sys.executable] + sys.argv),
        "machine": {"cpus": os.cpu_count(), "python": args.python,
                    "platform": platform.platform(),
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "threads_per_process": args.threads,
        "training_process_env": {k: runner_env.get(k, "") for k in (
            "GLIBC_TUNABLES", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        "rounds": args.rounds,
        "warmup_clocks": args.warmup,
        "optimizer": "Adam lr %g" % lr,
        "pstrain": {"bin": args.bin, "consistency": "BSP", "workers": processes, "servers": processes,
                    "chunk_bytes": args.chunk_bytes, "server_flags": args.server_flags},
        "models": models,
    }
