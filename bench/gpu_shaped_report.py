"""The report of bench/gpu_shaped_bench.py: the model's parameters as the
transformer example has them, and the JSON over the rounds (medians and
ranges, ratios paired within a round)."""

import os
import platform
import statistics
import sys

# The transformer as bench/gpu_proof.sh trains it (6 layers x 512, 8 heads,
# context 256, bytes).
CONTEXT, WIDTH, LAYERS, HEADS, VOCAB = 256, 512, 6, 8, 256
GLOBAL_BATCH = 32  # tests/python/jobs/transformer_external.pbtxt's


def param_shapes(context=CONTEXT, width=WIDTH, layers=LAYERS, vocab=VOCAB):
    """ByteTransformer's parameters in registration order: (name, shape)."""
    d, f = width, 4 * width
    shapes = [("tokens.weight", (vocab, d)), ("positions.weight", (context, d))]
    for i in range(layers):
        p = "blocks.layers.%d." % i
        shapes += [(p + "self_attn.in_proj_weight", (3 * d, d)),
                   (p + "self_attn.in_proj_bias", (3 * d,)),
                   (p + "self_attn.out_proj.weight", (d, d)), (p + "self_attn.out_proj.bias", (d,)),
                   (p + "linear1.weight", (f, d)), (p + "linear1.bias", (f,)),
                   (p + "linear2.weight", (d, f)), (p + "linear2.bias", (d,)),
                   (p + "norm1.weight", (d,)), (p + "norm1.bias", (d,)),
                   (p + "norm2.weight", (d,)), (p + "norm2.bias", (d,))]
    return shapes + [("norm.weight", (d,)), ("norm.bias", (d,)), ("head.weight", (vocab, d)),
                     ("head.bias", (vocab,))]


def model_numel():
    total = 0
    for _, shape in param_shapes():
        n = 1
        for s in shape:
            n *= s
        total += n
    return total



def summary(values):
    return {"median": round(statistics.median(values), 4),
            "range": [round(min(values), 4), round(max(values), 4)]}


def report(args, runs, configs, ceilings):
    rounds = range(args.rounds)
    model_bytes = 4 * model_numel()
    pass_ms = [1e3 * model_bytes / (gb * 1e9) for gb in ceilings]
    out = {}
    for c in configs:
        per = [runs[(r, c)] for r in rounds]
        e = {"clocks_per_s": summary([run["clocks_per_s"] for run in per]),
             "ms_per_clock": summary([1e3 / run["clocks_per_s"] for run in per]),
             "per_round": [round(run["clocks_per_s"], 3) for run in per],
             "worker_cpu_ms_per_clock": round(statistics.median(
                 x["cpu_ms_per_clock"] for run in per for x in run["results"]), 2)}
        if "alone" in configs:
            e["vs_alone"] = summary([run["clocks_per_s"] / runs[(r, "alone")]["clocks_per_s"]
                                     for r, run in zip(rounds, per)])
        cpus = [run["cpu_ms_per_clock"] for run in per if "cpu_ms_per_clock" in run]
        if cpus:
            e["cpu_ms_per_clock"] = {n: round(statistics.median(x[n] for x in cpus), 2)
                                     for n in cpus[0]}
            e["busiest_thread_ms_per_clock"] = {
                n: round(statistics.median(run["busiest_thread_ms_per_clock"][n]
                                           for run in per if "cpu_ms_per_clock" in run), 2)
                for n in cpus[0]}
            # Every process's CPU together, in whole passes over the model's
            # bytes at the round's memcpy speed.
            e["cluster_cpu_in_model_passes"] = round(statistics.median(
                sum(run["cpu_ms_per_clock"].values()) / pass_ms[r]
                for r, run in zip(rounds, per) if "cpu_ms_per_clock" in run), 1)
        splits = [w for run in per for w in run.get("split", [])]
        if splits:
            e["worker_clock_split_ms"] = {k: round(statistics.median(w[k] for w in splits), 2)
                                          for k in ("gate_ms", "pull_ms", "compute_ms",
                                                    "push_ms", "rpcs")}
            e["per_round_split"] = [run.get("split") for run in per]
        stale = [x.get("stale_reads") for run in per for x in run["results"]]
        if any(s is not None for s in stale):
            e["weight_reads"] = sum(x.get("weight_reads", 0) for run in per for x in run["results"])
            e["stale_reads"] = sum(s or 0 for s in stale)
            e["stale_examples"] = [ex for run in per for x in run["results"]
                                   for ex in x.get("stale_examples", [])][:5]
        if args.keep:
            e["dirs"] = [run.get("dir") for run in per]
        out[c] = e
    ideal = args.forward_ms + args.backward_ms + args.adam_ms
    return {
        "bench": "gpu_shaped_bench",
        "command": " ".join([sys.executable] + sys.argv),
        "machine": {"cpus": os.cpu_count(), "python": args.python,
                    "platform": platform.platform(),
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "model": {"of": "examples/torch/transformer_fortunes.py --layers=%d --width=%d "
                        "--heads=%d --context=%d" % (LAYERS, WIDTH, HEADS, CONTEXT),
                  "params": len(param_shapes()), "numel": model_numel(), "bytes": model_bytes},
        "device_ms": {"forward": args.forward_ms, "backward": args.backward_ms,
                      "adam": args.adam_ms, "cpu_lead": args.cpu_lead_ms,
                      "compute_per": args.compute_per},
        "pstrain": {"bin": args.bin, "consistency": "BSP", "global_batch": GLOBAL_BATCH,
                    "chunk_bytes": args.chunk_bytes, "overlap": args.overlap,
                    "worker_flags": args.worker_flags, "server_flags": args.server_flags},
        "rounds": args.rounds, "clocks": args.clocks, "warmup_clocks": args.warmup,
        "ceilings": {"ideal_ms_per_clock": ideal,
                     "memcpy_gb_s": summary(ceilings),
                     "model_pass_ms": summary(pass_ms)},
        "configs": out,
    }
