#!/usr/bin/env python3
"""pstrain's training step on the CPU against PyTorch's, in one run on one
machine: interleaved pairs (the order flips each pair), the median of the
paired ratios and their range. Prints JSON.

- gpt: bench/worker_bench --device=cpu (fp32) against
  bench/torch_gpt_step.py --device=cpu (fp32, attention materialised as
  pstrain's is), same shape and cores: PyTorch in the fastest of its
  ways to use them (torch_configs); the ratio is PyTorch's step time over
  pstrain's (above 1: pstrain is faster).
- mlp: ps_worker --standalone on the quick start's job cut to --mlp_epochs
  against bench/torch_mlp_step.py (the same model, batch, optimizer and
  data); the ratio is pstrain's samples/s over PyTorch's.

Run with an interpreter that has torch (Debian's python3-torch: /usr/bin/python3):

  bazel build //bench:worker_bench //worker:ps_worker
  /usr/bin/python3 bench/cpu_vs_torch.py --pairs=5 --threads=1,2
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
MLP_JOB = os.path.join(ROOT, "deploy", "jobs", "mlp_fashion_mnist.pbtxt")


def torch_env(blas_threads):
    """The environment of a PyTorch run whose matrix products get `blas_threads`
    threads: torch.set_num_threads does not reach OpenBLAS, which starts one
    thread a core unless told."""
    return dict(os.environ, OPENBLAS_NUM_THREADS=str(blas_threads))


def torch_configs(threads):
    """PyTorch's ways of using `threads` cores: (torch.set_num_threads, OpenBLAS
    threads). On 2 cores its own and OpenBLAS's threads together (2, 2) ran
    3-5x slower than either alone, so each way is tried and the fastest kept."""
    return sorted({(threads, threads), (threads, 1), (1, threads)}, reverse=True)


def run(argv, env=None):
    """Runs argv; its stdout. A failure raises, with the end of its stderr."""
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(argv), done.returncode,
                                                   done.stderr[-2000:]))
    return done.stdout


def run_json(argv, env=None):
    """Runs argv; the JSON object its stdout ends with (lines before it may be logs)."""
    out = run(argv, env)
    return json.loads(out[out.index("{"):])


def gpt_shape(text):
    """'LAYERSxWIDTHxHEADSxCONTEXTxBATCH' as flags common to both GPT benches."""
    try:
        layers, width, heads, context, batch = (int(v) for v in text.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            "a GPT shape is LAYERSxWIDTHxHEADSxCONTEXTxBATCH, e.g. 2x128x4x64x16, not %r" % text)
    return ["--layers=%d" % layers, "--width=%d" % width, "--heads=%d" % heads,
            "--context=%d" % context, "--batch=%d" % batch]


def gpt_torch(args, shape, config):
    """PyTorch's GPT step in ms, `config` from torch_configs."""
    flags = gpt_shape(shape) + ["--steps=%d" % args.steps, "--dtypes=fp32"]
    return run_json([sys.executable, os.path.join(BENCH, "torch_gpt_step.py"), "--device=cpu",
                     "--threads=%d" % config[0], "--attention=manual"] + flags,
                    env=torch_env(config[1]))["runs"][0]["step_ms"]


def mlp_torch(args, config):
    """PyTorch's samples/s on the MLP, `config` from torch_configs."""
    return run_json([sys.executable, os.path.join(BENCH, "torch_mlp_step.py"),
                     "--epochs=%d" % args.mlp_epochs, "--threads=%d" % config[0]],
                    env=torch_env(config[1]))["samples_per_s"]


def fastest_config(threads, measure, higher_is_faster):
    """The torch_configs entry that `measure(config)` finds fastest (one run each)."""
    configs = torch_configs(threads)
    if len(configs) == 1:
        return configs[0]
    scores = {c: measure(c) for c in configs}
    pick = max if higher_is_faster else min
    return pick(configs, key=lambda c: scores[c])


def gpt_pair(args, shape, threads, config, pstrain_first):
    """(PyTorch's step ms, pstrain's step ms), run in the given order."""
    flags = gpt_shape(shape) + ["--steps=%d" % args.steps, "--dtypes=fp32"]
    runs = {
        "pstrain": lambda: run_json(
            [args.worker_bench, "--device=cpu", "--compute_threads=%d" % threads,
             "--per_op=false"] + flags)["runs"][0]["step_ms"],
        "torch": lambda: gpt_torch(args, shape, config),
    }
    order = ["pstrain", "torch"] if pstrain_first else ["torch", "pstrain"]
    ms = {name: runs[name]() for name in order}
    return ms["torch"], ms["pstrain"]


def mlp_pair(args, threads, config, job, pstrain_first):
    """(pstrain's samples/s, PyTorch's samples/s), run in the given order."""
    status = job + ".status.json"
    def pstrain():
        run([args.ps_worker, "--standalone", "--job=" + job, "--compute_threads=%d" % threads,
             "--status_file=" + status])
        with open(status) as f:
            st = json.load(f)["worker"]
        # Over all the training clocks, evaluations left out (as PyTorch's is).
        return int(st["clocks_trained"]) * batch_size(job) / st["train_s"]  # int64: a JSON string
    runs = {"pstrain": pstrain, "torch": lambda: mlp_torch(args, config)}
    order = ["pstrain", "torch"] if pstrain_first else ["torch", "pstrain"]
    rate = {name: runs[name]() for name in order}
    return rate["pstrain"], rate["torch"]


def batch_size(job):
    """The job file's batch_size."""
    with open(job) as f:
        return int(re.search(r"^batch_size:\s*(\d+)", f.read(), re.M).group(1))


def config_json(config):
    return {"intra_op": config[0], "openblas": config[1]}


def summary(numerators, denominators):
    ratios = sorted(n / d for n, d in zip(numerators, denominators))
    return {"paired_median": round(statistics.median(ratios), 3),
            "paired_range": [round(ratios[0], 3), round(ratios[-1], 3)]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--threads", default="1,2", help="thread counts, each measured")
    p.add_argument("--gpt_shapes", default="2x128x4x64x16,6x384x6x256x4",
                   help="LAYERSxWIDTHxHEADSxCONTEXTxBATCH, comma-separated ('' for none)")
    p.add_argument("--steps", type=int, default=10, help="GPT steps per run (medians)")
    p.add_argument("--mlp_epochs", type=int, default=2, help="0: no MLP comparison")
    p.add_argument("--worker_bench", default=os.path.join(ROOT, "bazel-bin/bench/worker_bench"))
    p.add_argument("--ps_worker", default=os.path.join(ROOT, "bazel-bin/worker/ps_worker"))
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    shapes = [s for s in args.gpt_shapes.split(",") if s]
    for shape in shapes:
        gpt_shape(shape)  # a bad one fails before any run
    for binary in (args.worker_bench, args.ps_worker):
        if not os.access(binary, os.X_OK):
            p.error("%s is not built (bazel build //bench:worker_bench //worker:ps_worker)"
                    % binary)
    result = {"bench": "cpu_vs_torch", "pairs": args.pairs, "gpt": [], "mlp": []}
    for shape in shapes:
        for t in threads:
            config = fastest_config(t, lambda c: gpt_torch(args, shape, c), False)
            torch_ms, pstrain_ms = [], []
            for i in range(args.pairs):
                a, b = gpt_pair(args, shape, t, config, pstrain_first=i % 2 == 0)
                torch_ms.append(a)
                pstrain_ms.append(b)
            entry = {"shape": shape, "threads": t, "pstrain_step_ms": pstrain_ms,
                     "torch_step_ms": torch_ms, "torch_threads": config_json(config)}
            entry["torch_over_pstrain"] = summary(torch_ms, pstrain_ms)
            result["gpt"].append(entry)
            print(json.dumps(entry), file=sys.stderr)
    if args.mlp_epochs > 0:
        with tempfile.TemporaryDirectory() as tmp:
            job = os.path.join(tmp, "mlp.pbtxt")
            with open(MLP_JOB) as f:
                spec = f.read()
            with open(job, "w") as f:
                f.write(spec.replace("epochs: 10", "epochs: %d" % args.mlp_epochs))
            for t in threads:
                config = fastest_config(t, lambda c: mlp_torch(args, c), True)
                pstrain_rate, torch_rate = [], []
                for i in range(args.pairs):
                    a, b = mlp_pair(args, t, config, job, pstrain_first=i % 2 == 0)
                    pstrain_rate.append(a)
                    torch_rate.append(b)
                entry = {"threads": t, "pstrain_samples_per_s": pstrain_rate,
                         "torch_samples_per_s": torch_rate, "torch_threads": config_json(config)}
                entry["pstrain_over_torch"] = summary(pstrain_rate, torch_rate)
                result["mlp"].append(entry)
                print(json.dumps(entry), file=sys.stderr)
    result["goal_met"] = all(e["torch_over_pstrain"]["paired_median"] >= 1 for e in result["gpt"]) \
        and all(e["pstrain_over_torch"]["paired_median"] >= 1 for e in result["mlp"])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
