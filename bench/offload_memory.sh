#!/usr/bin/env bash
# Peak anonymous memory of one offloaded ps_server training a dense MLP,
# measured on real daemons on loopback: a scheduler, ONE server (with
# --offload_dir and --memory_budget unless --budget_mb=0) and WORKERS
# workers. The server runs in a memory cgroup limited to budget + --slack_mb
# when /sys/fs/cgroup/memory (cgroup v1) is writable, so going over is an
# OOM kill, as in a container; its RssAnon is sampled every 20 ms. First an
# in-memory reference run (no limit); every run's final weights are
# compared with its. Prints one JSON line per run.
#
#   bench/offload_memory.sh [--units=4096] [--budget_mb=80] [--slack_mb=64]
#       [--clocks=30] [--workers=1] [--runs=3] [--chunk_bytes=1048576]
#       [--bin=bazel-bin] [--dir=/var/tmp] [--no_cgroup]
#
# The default is issue 24's figure: a 784-4096-4096-10 MLP (20.0M
# parameters, Adam, BSP: 16 bytes a parameter, 321 MB of server state) with
# an 80 MiB budget, a quarter of it.
set -euo pipefail

UNITS=4096
BUDGET_MB=80
SLACK_MB=64
CLOCKS=30
WORKERS=1
RUNS=3
CHUNK=1048576
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/bazel-bin"
DIR=/var/tmp
CGROUP=1
SERVER_ENV=""
for a in "$@"; do
  case "$a" in
    --units=*) UNITS="${a#*=}" ;;
    --budget_mb=*) BUDGET_MB="${a#*=}" ;;
    --slack_mb=*) SLACK_MB="${a#*=}" ;;
    --clocks=*) CLOCKS="${a#*=}" ;;
    --workers=*) WORKERS="${a#*=}" ;;
    --runs=*) RUNS="${a#*=}" ;;
    --chunk_bytes=*) CHUNK="${a#*=}" ;;
    --bin=*) BIN="${a#*=}" ;;
    --dir=*) DIR="${a#*=}" ;;
    --no_cgroup) CGROUP=0 ;;
    --server_env=*) SERVER_ENV="${a#*=}" ;;
    *) echo "offload_memory: unknown argument $a" >&2; exit 2 ;;
  esac
done

WORK="$(mktemp -d "$DIR/offload_memory.XXXXXX")"
CG=""
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -z "$CG" ] || rmdir "$CG" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/job.pbtxt" <<EOF
name: "offload-memory"
model {
  input_dim: 784
  layers { type: DENSE name: "fc1" units: $UNITS }
  layers { type: RELU }
  layers { type: DENSE name: "fc2" units: $UNITS }
  layers { type: RELU }
  layers { type: DENSE name: "fc3" units: 10 }
  layers { type: SOFTMAX_XENT }
}
data { dataset: FASHION_MNIST path: "/usr/share/datasets/fashion-mnist" }
optimizer { type: ADAM learning_rate: 0.0001 }
consistency: BSP
batch_size: 64
clocks: $CLOCKS
seed: 7
chunk_bytes: $CHUNK
num_servers: 1
num_workers: $WORKERS
log_every: 10
EOF

budget=$((BUDGET_MB << 20))
limit=$(((BUDGET_MB + SLACK_MB) << 20))

# one_run N [ref]: run N; "ref" is the in-memory reference (no offload,
# no limit) whose final weights every run is compared with.
one_run() {
  local run=$1 logs="$WORK/run$1" ref=${2:-}
  mkdir -p "$logs/offload"
  local prefix=()
  CG=""
  if [ "$CGROUP" -eq 1 ] && [ -z "$ref" ] && mkdir "/sys/fs/cgroup/memory/pstrain_offload_$$_$run" 2>/dev/null; then
    CG="/sys/fs/cgroup/memory/pstrain_offload_$$_$run"
    echo "$limit" >"$CG/memory.limit_in_bytes"
    prefix=(/bin/sh -c "echo \$\$ >$CG/cgroup.procs && exec \"\$@\"" sh)
  fi
  "$BIN/scheduler/ps_scheduler" --job="$logs/../job.pbtxt" --listen=127.0.0.1:0 \
    --port_file="$logs/scheduler.port" --num_workers="$WORKERS" >"$logs/scheduler.log" 2>&1 &
  local sched=$!
  PIDS+=("$sched")
  for _ in $(seq 1 100); do [ -s "$logs/scheduler.port" ] && break; sleep 0.1; done
  local addr
  addr="$(cat "$logs/scheduler.port")"
  local offload=()
  [ "$BUDGET_MB" -eq 0 ] || [ -n "$ref" ] || offload=(--offload_dir="$logs/offload" --memory_budget="$budget")
  local t0
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086  # SERVER_ENV is a list of NAME=VALUE
  "${prefix[@]}" env $SERVER_ENV "$BIN/server/ps_server" --scheduler="$addr" --listen=127.0.0.1:0 \
    "${offload[@]}" >"$logs/server.log" 2>&1 &
  local server=$!
  PIDS+=("$server")
  for w in $(seq 0 $((WORKERS - 1))); do
    "$BIN/worker/ps_worker" --scheduler="$addr" --listen=127.0.0.1:0 --device=cpu \
      --weights_out="$logs/worker$w.weights" >"$logs/worker$w.log" 2>&1 &
    PIDS+=("$!")
  done
  # RssAnon of the server every 20 ms (kB), with the time since start.
  local peak=0
  : >"$logs/rss.tsv"
  while kill -0 "$server" 2>/dev/null; do
    local kb
    kb=$(awk '/^RssAnon:/ {print $2}' "/proc/$server/status" 2>/dev/null || true)
    if [ -n "$kb" ]; then
      echo "$(date +%s.%N) $kb" >>"$logs/rss.tsv"
      [ "$kb" -le "$peak" ] || peak=$kb
    fi
    sleep 0.02
  done
  local code=0
  wait "$server" || code=$?
  local t1
  t1=$(date +%s.%N)
  local sched_code=0
  wait "$sched" || sched_code=$?
  local oom=0 cg_peak=0
  CG_USED="$CG"
  if [ -n "$CG" ]; then
    oom=$(awk '/^oom_kill / {print $2}' "$CG/memory.oom_control")
    cg_peak=$(cat "$CG/memory.max_usage_in_bytes")
    rmdir "$CG" 2>/dev/null || true
    CG=""
  fi
  local same=null
  if [ -n "$ref" ]; then
    cp "$logs/worker0.weights" "$WORK/reference.weights" 2>/dev/null || true
  elif [ -s "$WORK/reference.weights" ]; then
    cmp -s "$WORK/reference.weights" "$logs/worker0.weights" && same=true || same=false
  fi
  local limit_mib=null
  [ -z "$CG_USED" ] || limit_mib=$((BUDGET_MB + SLACK_MB))
  printf '{"run":"%s","units":%d,"budget_mib":%d,"limit_mib":%s,"server_exit":%d,' \
    "${ref:-$run}" "$UNITS" "$([ -n "$ref" ] && echo 0 || echo "$BUDGET_MB")" "$limit_mib" "$code"
  printf '"scheduler_exit":%d,"oom_kills":%s,"peak_rss_anon_mib":%.1f,"cgroup_peak_mib":%.1f,' \
    "$sched_code" "$oom" "$(echo "$peak / 1024" | bc -l)" "$(echo "$cg_peak / 1048576" | bc -l)"
  printf '"seconds":%.1f,"bit_identical_to_in_memory":%s}\n' "$(echo "$t1 - $t0" | bc -l)" "$same"
  cp "$logs/rss.tsv" "$DIR/offload_memory_rss_run$run.tsv" 2>/dev/null || true
  cp "$logs/server.log" "$DIR/offload_memory_server_run$run.log" 2>/dev/null || true
  cp "$logs/worker0.log" "$DIR/offload_memory_worker_run$run.log" 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done  # workers of an aborted job
  wait 2>/dev/null || true
  PIDS=()
}

[ "$BUDGET_MB" -eq 0 ] || one_run 0 ref
for r in $(seq 1 "$RUNS"); do one_run "$r"; done
