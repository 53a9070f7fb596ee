#!/usr/bin/env bash
# The GPU proof in one go, on a machine with an NVIDIA GPU, its driver and
# PyTorch but no build tools: unpacks the bundle (deploy/bundle.sh --tar),
# runs the CUDA backend's tests, bench/worker_bench and the same step in
# PyTorch eager (bench/torch_gpt_step.py), interleaved round by round, and
# local clusters whose workers train the GPT on the GPU. Run from the
# repository root:
#
#   bench/gpu_proof.sh [--bundle=dist/pstrain-bundle.tar.gz] [--out=DIR]
#                      [--rounds=3] [--parts=test,sweep,bench,cluster,window,pipeline,train,torch,wheel]
#                      [--wheel=dist/pstrain-VERSION-py3-none-linux_x86_64.whl]
#
# sweep: bench/attention_sweep (every attention variant, cuDNN's and the own
# kernels in each dtype, checked against the definition and timed beside a
# cuBLAS GEMM of the same size, with ptxas's spills); window: bench/windowed_bench (a GPT under --device_memory_budget next to the
# same step resident) and a GPU cluster with and without a budget; pipeline:
# stage workers on the GPU, next to the same job unpipelined; train:
# bench/train_bench on gpt_fortunes_gpu with GPU workers (alone, 1+1 BSP,
# SSP s=1, 2+2 BSP); torch: examples/torch/transformer_fortunes.py on the
# GPU (6 layers x 512, context 256, global batch 32) alone and as one PyTorch
# worker with two servers (BSP, two workers sharing the GPU under BSP, BSP
# with --overlap=off, SSP s=1, and BSP for
# 50 clocks then SSP s=1 by the job's consistency_plan), interleaved round
# by round, with each worker's per-clock split (gate, pull, compute, push)
# from the final status and the validation loss; wheel: deploy/wheel.py's
# wheel installed with the machine's own pip (--no-index --target, no venv:
# such a machine may lack ensurepip) and imported by its own Python and
# PyTorch (the library and the gRPC/protobuf mapped), then the transformer
# on CUDA for 50 clocks through python -m pstrain.run (1 worker, 2 servers).
#
# Everything goes to DIR/proof.log (DIR: $OUT, else /tmp/gpu-proof) and the
# cluster logs to DIR/cluster-logs.tar.gz.
set -uo pipefail
BUNDLE=dist/pstrain-bundle.tar.gz
DIR="${OUT:-/tmp/gpu-proof}"
ROUNDS=3
PARTS=test,sweep,bench,cluster
WHEEL="$(ls dist/pstrain-*.whl 2>/dev/null | tail -n1)"
for arg in "$@"; do
  case "$arg" in
    --bundle=*) BUNDLE="${arg#*=}" ;;
    --out=*) DIR="${arg#*=}" ;;
    --rounds=*) ROUNDS="${arg#*=}" ;;
    --parts=*) PARTS="${arg#*=}" ;;
    --wheel=*) WHEEL="${arg#*=}" ;;
    *) echo "gpu_proof: unknown argument $arg" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$DIR"
LOG="$DIR/proof.log"
exec > >(tee -a "$LOG") 2>&1
has() { case ",$PARTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
say() { echo "=== $(date +%T) $*"; }

WORK=/tmp/gpu-proof-work
rm -rf "$WORK"; mkdir -p "$WORK"
tar -C "$WORK" -xzf "$BUNDLE" || { echo "gpu_proof: cannot unpack $BUNDLE"; exit 1; }
B="$WORK/pstrain-bundle"
# The driver's library, wherever this machine keeps it, for the bundle's loader.
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64; do
  [ -e "$d/libcuda.so.1" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
if [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  d="$(dirname "$(find / -name 'libcublas.so.13' -not -path '*/proc/*' 2>/dev/null | head -n1)")"
  [ -n "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
fi
say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
nproc
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# cuDNN 9 for the 16-bit attention (loaded at run time): the toolkit's, else
# the one PyTorch's wheels bring (nvidia/cudnn/lib).
if [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
  d="$(dirname "$(find / -name 'libcudnn.so.9' -not -path '*/proc/*' 2>/dev/null | head -n1)")"
  [ -n "$d" ] && [ "$d" != . ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
fi
echo "libcudnn.so.9: $(find / -name 'libcudnn.so.9*' -not -path '*/proc/*' 2>/dev/null | head -n3 | tr '\n' ' ')"

if has test; then
  say "kernels/cudnn_attention_test"
  timeout 120 "$B/bin/kernels/cudnn_attention_test"
  echo "cudnn_attention_test exit $?"
  # Every shape cuDNN takes must run on it (issue 68), and the own kernels
  # pass the same tests (CausalAttentionOnTheOwnKernels).
  say "kernels/cuda_backend_test (PSTRAIN_EXPECT_CUDNN=1)"
  PSTRAIN_EXPECT_CUDNN=1 timeout 300 "$B/bin/kernels/cuda_backend_test"
  echo "cuda_backend_test exit $?"
fi

if has sweep; then
  say "bench/attention_sweep"
  timeout 300 "$B/bin/bench/attention_sweep" --device=cuda --reps=10 | tee "$DIR/attention-sweep.json"
  echo "attention_sweep exit $?"
fi

SMALL=(--layers=6 --width=384 --heads=6 --context=256 --batch=16)
LARGE=(--layers=12 --width=768 --heads=12 --context=1024 --batch=8)
if has bench; then
  for r in $(seq 1 "$ROUNDS"); do
    for shape in SMALL LARGE; do
      declare -n s="$shape"
      say "round $r $shape worker_bench"
      timeout 300 "$B/bin/bench/worker_bench" --device=cuda "${s[@]}" --dtypes=fp32,tf32,bf16,fp16 \
        --steps="$([ "$shape" = SMALL ] && echo 10 || echo 5)" | tee "$DIR/bench-$r-$shape-pstrain.json"
      if [ "$r" = 1 ]; then
        say "round $r $shape worker_bench --attention=own (the tensor-core kernels cuDNN replaced)"
        timeout 300 "$B/bin/bench/worker_bench" --device=cuda "${s[@]}" --dtypes=bf16,fp16 \
          --attention=own --steps=5 | tee "$DIR/bench-$r-$shape-pstrain-own.json"
      fi
      say "round $r $shape torch"
      timeout 300 python3 "$ROOT/bench/torch_gpt_step.py" "${s[@]}" --dtypes=fp32,tf32,bf16,fp16 \
        --attention=manual,sdpa --steps="$([ "$shape" = SMALL ] && echo 10 || echo 5)" \
        | tee "$DIR/bench-$r-$shape-torch.json"
    done
  done
  # Issue 49's figures: pstrain's step and peak memory over SDPA's, paired
  # round by round, their median and range.
  say "bench summary: pstrain / PyTorch SDPA"
  python3 - "$DIR" "$ROUNDS" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
for shape in ("SMALL", "LARGE"):
    for dtype in ("fp32", "tf32", "bf16", "fp16"):
        step, peak, path = [], [], None
        for r in range(1, rounds + 1):
            try:
                ours = json.load(open(f"{d}/bench-{r}-{shape}-pstrain.json"))
                theirs = json.load(open(f"{d}/bench-{r}-{shape}-torch.json"))
            except (OSError, ValueError) as e:
                print(f"{shape} {dtype} round {r}: no figures ({e})")
                continue
            o = next(x for x in ours["runs"] if x["dtype"] == dtype)
            t = next(x for x in theirs["runs"] if x["dtype"] == dtype and x["attention"] == "sdpa")
            path = o.get("attention_path")
            step.append(o["step_ms"] / t["step_ms"])
            peak.append(o["peak_device_mib"] / t["peak_device_mib"])
        if step:
            print(json.dumps({"shape": shape, "dtype": dtype, "rounds": len(step),
                              "step_over_sdpa": round(statistics.median(step), 3),
                              "step_range": [round(min(step), 3), round(max(step), 3)],
                              "peak_memory_over_sdpa": round(statistics.median(peak), 3),
                              "attention_path": path}))
PY
fi

if has window; then
  for r in $(seq 1 "$ROUNDS"); do
    for shape in SMALL LARGE; do
      declare -n s="$shape"
      for f in 0.5 0.25; do
        say "round $r $shape windowed_bench budget $f"
        timeout 300 "$B/bin/bench/windowed_bench" --device=cuda "${s[@]}" --budget_fraction=$f \
          --rounds=5
      done
    done
  done
fi

if has train; then
  say "train_bench gpt_fortunes_gpu"
  (cd "$B/bin" && timeout 500 bench/train_bench --job="$B/jobs/gpt_fortunes_gpu.pbtxt" \
    --clocks=100 --rounds="$ROUNDS" --only=alone,bsp_1x1,ssp1_1x1,bsp_2x2 --worker_flags="--device=cuda --data_dir=$B/data/fortunes")
fi

TORCH_MODEL=(--device=cuda --layers=6 --width=512 --heads=8 --context=256 --threads=4)
TORCH_RUN=(--clocks=300 --batch_size=32 --lr=3e-3 --seed=42)
TORCH_JOB="$ROOT/tests/python/jobs/transformer_external.pbtxt"
# Item 4 of issue 47: BSP for a warm-up of 50 clocks, then SSP s = 1 (one
# worker: ZeRO-Offload's delayed parameter update), the job's own plan.
DELAYED_JOB="$WORK/transformer_delayed.pbtxt"
{ cat "$TORCH_JOB"; echo 'consistency_plan { clock: 50 consistency: SSP staleness: 1 }'; } \
  >"$DELAYED_JOB"
torch_cluster() {  # NAME WORKER_FLAGS SCHEDULER_FLAGS... (the job: $JOB, else TORCH_JOB; $WORKERS, else 1)
  local name="$1" wflags="$2"; shift 2
  mkdir -p "$WORK/logs/$name"
  OPENBLAS_NUM_THREADS=4 timeout 300 "$B/local_cluster.sh" --bin="$B/bin" \
    --job="${JOB:-$TORCH_JOB}" --servers=2 --workers="${WORKERS:-1}" \
    --logs="$WORK/logs/$name" --torch="$B/examples/torch/transformer_fortunes.py" \
    --worker_flags="$wflags" \
    --torch_args="${TORCH_MODEL[*]} --data_dir=$B/data/fortunes --log_every=100" \
    -- --clocks=300 "$@" 2>&1 | tail -n 3
  grep -h "final validation loss\|seconds of training\|s of training" "$WORK/logs/$name"/worker*.log
  python3 - "$WORK/logs/$name/status.json" <<'PY'
import json, sys
for m in json.load(open(sys.argv[1])).get("members", []):
    if m.get("role") == "WORKER":
        print("per clock (ms): " + ", ".join(
            "%s %.1f" % (k, m.get(k + "_ms", 0)) for k in ("gate", "pull", "compute", "push")))
PY
}
if has torch; then
  for r in $(seq 1 "$ROUNDS"); do
    say "round $r torch transformer alone"
    PSTRAIN_LIB="$B/bin/worker/external/libpstrain_torch.so" PYTHONPATH="$B/python" \
      LD_LIBRARY_PATH="$B/lib/python:${LD_LIBRARY_PATH:-}" OPENBLAS_NUM_THREADS=4 \
      timeout 300 python3 "$B/examples/torch/transformer_fortunes.py" --alone \
      "${TORCH_MODEL[@]}" "${TORCH_RUN[@]}" --data_dir="$B/data/fortunes" --log_every=100
    say "round $r torch transformer 1 worker + 2 servers BSP (overlap auto: on for CUDA)"
    torch_cluster "torch-bsp-$r" ""
    say "round $r torch transformer 2 workers sharing the GPU + 2 servers BSP (issue 67: >= 0.8 of 1)"
    WORKERS=2 torch_cluster "torch-bsp-2w-$r" ""
    say "round $r torch transformer 1 worker + 2 servers BSP, --overlap=off (the copies at step())"
    torch_cluster "torch-bsp-nooverlap-$r" "--overlap=off"
    say "round $r torch transformer 1 worker + 2 servers SSP s=1"
    torch_cluster "torch-ssp1-$r" "" --consistency=ssp --staleness=1
    say "round $r torch transformer 1 worker + 2 servers BSP 50 clocks, then SSP s=1 (planned)"
    JOB="$DELAYED_JOB" torch_cluster "torch-delayed-$r" ""
  done
  tar -C "$WORK" -czf "$DIR/cluster-logs.tar.gz" logs
fi

if has wheel; then
  say "wheel: python3 -m pip install --no-index --target $WORK/site $WHEEL"
  python3 --version; python3 -c "import torch; print('torch', torch.__version__)"
  python3 -m pip install -q --no-index --target "$WORK/site" "$WHEEL"
  echo "pip exit $?"
  say "wheel: import from /tmp (the library and the gRPC/protobuf mapped)"
  (cd /tmp && PYTHONPATH="$WORK/site" python3 - <<'PY'
import re
import pstrain, pstrain._capi as capi
import pstrain.torch as pst
print("pstrain", pstrain.__version__, "from", pstrain.__file__)
print("library", capi.lib()._name, "ABI", capi.lib().pst_abi_version())
maps = open("/proc/self/maps").read()
print("mapped", sorted(set(re.findall(r"(/\S*lib(?:grpc|protobuf)\S*)", maps))))
PY
  )
  say "wheel: python3 -m pstrain.run, the transformer on CUDA, 1 worker + 2 servers, 50 clocks"
  cp "$B/examples/torch/transformer_fortunes.py" "$WORK/"
  (cd "$WORK" && PYTHONPATH="$WORK/site" OPENBLAS_NUM_THREADS=4 timeout 300 \
    python3 -m pstrain.run --job="$TORCH_JOB" --servers=2 --workers=1 \
    --scheduler_flags=--clocks=50 --logs="$WORK/logs/wheel" transformer_fortunes.py \
    "${TORCH_MODEL[@]}" --data_dir="$B/data/fortunes" --log_every=25 2>&1 | tail -n 5;
    exit "${PIPESTATUS[0]}")
  echo "pstrain.run exit $?"
  python3 -c "import json; d = json.load(open('$WORK/logs/wheel/status.json')); \
print(d['job_state'], [(m['role'], m['state']) for m in d['members']])"
fi

# Local clusters: the scheduler and servers on this machine's cores, workers
# on the GPU. Each: PART NAME JOB CLUSTER_FLAGS WORKER_FLAGS SCHEDULER_FLAGS.
CLUSTERS=(
  "cluster|small-bsp|gpt_fortunes||--device=cuda --overlap=on|"
  "cluster|gpu-bsp|gpt_fortunes_gpu||--device=cuda --overlap=on|"
  "cluster|gpu-ssp1|gpt_fortunes_gpu||--device=cuda --overlap=on|--consistency=ssp --staleness=1 --clocks=200"
  "cluster|gpu-ssp1-b64|gpt_fortunes_gpu||--device=cuda --overlap=on|--consistency=ssp --staleness=1 --clocks=100 --batch_size=64"
  "cluster|gpu-bsp-2w|gpt_fortunes_gpu|--workers=2|--device=cuda --overlap=on|--batch_size=32 --clocks=200"
  "window|gpu-200|gpt_fortunes_gpu||--device=cuda|--clocks=200"
  "window|gpu-200-budget|gpt_fortunes_gpu||--device=cuda --device_memory_budget=400000000|--clocks=200"
  "pipeline|small-2w|gpt_fortunes||--device=cuda|"
  "pipeline|small-pipe|gpt_fortunes_pipeline||--device=cuda|"
  "pipeline|gpu-2w-200|gpt_fortunes_gpu||--device=cuda|--num_workers=2 --batch_size=32 --clocks=200"
  "pipeline|gpu-pipe-200|gpt_fortunes_gpu||--device=cuda|--num_workers=2 --pipeline_stages=2 --micro_batches=4 --batch_size=32 --clocks=200"
)
if has cluster && has bench; then
  say "worker_bench batch 64 (for the batch-64 clusters)"
  timeout 300 "$B/bin/bench/worker_bench" --device=cuda "${SMALL[@]}" --batch=64 --dtypes=fp32 \
    --steps=5
fi
for spec in "${CLUSTERS[@]}"; do
  IFS='|' read -r part name job cflags wflags sflags <<<"$spec"
  if has "$part"; then
    say "cluster $name: $job $cflags, workers $wflags, scheduler $sflags"
    mkdir -p "$WORK/logs/$name"
    # shellcheck disable=SC2086  # cflags and sflags are lists of flags
    timeout 150 "$B/local_cluster.sh" --bin="$B/bin" --job="$B/jobs/$job.pbtxt" $cflags \
      --logs="$WORK/logs/$name" --worker_flags="$wflags" \
      -- --data_dir="$B/data/fortunes" $sflags >/dev/null 2>"$WORK/logs/$name/local_cluster.err"
    echo "local_cluster exit $?"
    cat "$WORK/logs/$name/local_cluster.err"
    grep -h "device\|clock .*/\|final\|pushed\|memory plan" "$WORK/logs/$name"/worker*.log | tail -n 8
    tar -C "$WORK" -czf "$DIR/cluster-logs.tar.gz" logs
  fi
done
say "done"
