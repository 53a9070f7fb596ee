#!/usr/bin/env bash
# Launches a local cluster on free loopback ports: one scheduler, the job's
# servers and workers, each a real process. Waits for the job to end, then
# returns the scheduler's exit status. Ctrl-C (or SIGTERM) stops every process
# it started; none is left behind.
#
#   deploy/local_cluster.sh --job=FILE [--bin=DIR] [--logs=DIR] [--servers=N]
#                           [--workers=N] [--worker_flags="FLAGS"]
#                           [--server_flags="FLAGS"] [--weights=DIR]
#                           [--torch=SCRIPT [--torch_args="ARGS"]]
#                           [--supervise] [--worker_links="LINK OPTIONS"]
#                           [-- extra ps_scheduler flags]
#
# --torch=SCRIPT: the workers are a PyTorch script using pstrain.torch
# (python/pstrain), run by $PSTRAIN_PYTHON (default: /usr/bin/python3 when it
# imports torch, else python3) with --torch_args; --worker_flags then go to
# pstrain.torch.init() (PSTRAIN_FLAGS). The job's model is EXTERNAL.
# --worker_flags, --server_flags: given to every worker or server (split at
# spaces), e.g. --worker_flags="--device=cuda --overlap=on".
# --weights=DIR: worker process i writes its final weights to
# DIR/worker<i>.weights.
# --worker_links="--rate=MBIT [--delay=MS] [--jitter=MS] [--loss=PCT]":
# slow links. Each worker runs in a network namespace of its own behind a
# link shaped by deploy/netem.sh with these options (tc: tbf for a rate
# alone, netem where the kernel has it); the scheduler and the servers stay
# on this host, listening on the host's end of worker 0's link, which every
# namespace reaches through its own link. Payloads then move in gRPC
# messages over the links (shared memory does not cross namespaces). Needs
# root; the namespaces are removed when the cluster stops. PyTorch workers
# (--torch) too.
# --supervise: a daemon that dies of a signal (SIGKILL, SIGSEGV, ...) is
# started again, as systemd's Restart=on-abnormal or a Kubernetes pod would
# be: a server or worker with --id of the id it had, the scheduler on the
# same port and its --state_dir (LOGS/scheduler-state unless given), so it
# takes the job over. An exit with a code (0 done, 1 aborted, 2 bad input,
# 3 refused) is not restarted. Unless the flags after -- or the job say
# otherwise, a supervised job checkpoints into LOGS/checkpoints every 50
# clocks (a restarted server needs one) and keeps a dead worker's place
# (--on_worker_failure=wait). LOGS/<daemon>.pid holds each daemon's current
# pid; LOGS/restarts.log a line per restart.
set -euo pipefail

JOB=""
BIN=""
LOGS=""
SERVERS=""
WORKERS=""
WORKER_FLAGS=""
SERVER_FLAGS=""
WEIGHTS=""
SUPERVISE=0
TORCH=""
TORCH_ARGS=""
WORKER_LINKS=""
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --job=*) JOB="${1#*=}" ;;
    --bin=*) BIN="${1#*=}" ;;
    --logs=*) LOGS="${1#*=}" ;;
    --servers=*) SERVERS="${1#*=}" ;;
    --workers=*) WORKERS="${1#*=}" ;;
    --worker_flags=*) WORKER_FLAGS="${1#*=}" ;;
    --server_flags=*) SERVER_FLAGS="${1#*=}" ;;
    --weights=*) WEIGHTS="${1#*=}" ;;
    --supervise) SUPERVISE=1 ;;
    --torch=*) TORCH="${1#*=}" ;;
    --torch_args=*) TORCH_ARGS="${1#*=}" ;;
    --worker_links=*) WORKER_LINKS="${1#*=}" ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "local_cluster: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$JOB" ] || { echo "local_cluster: --job=FILE is required" >&2; exit 2; }
[ -f "$JOB" ] || { echo "local_cluster: $JOB: no such job file" >&2; exit 2; }
if [ -n "$TORCH" ]; then
  [ -f "$TORCH" ] || { echo "local_cluster: --torch=$TORCH: no such script" >&2; exit 2; }
  [ "$SUPERVISE" -eq 0 ] || { echo "local_cluster: --supervise is for ps_worker workers, not --torch" >&2; exit 2; }
fi
if [ -n "$WORKER_LINKS" ] && [ "$(id -u)" -ne 0 ]; then
  echo "local_cluster: --worker_links needs root (network namespaces, tc)" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${BIN:-$ROOT/bazel-bin}"
LOGS="${LOGS:-$(mktemp -d /tmp/pstrain-logs.XXXXXX)}"
mkdir -p "$LOGS"
[ -z "$WEIGHTS" ] || mkdir -p "$WEIGHTS"

# Counts: --servers/--workers, else the scheduler flags after -- (the last
# --num_servers/--num_workers there, which the scheduler would obey: a
# cluster launched with fewer would wait for its missing members forever),
# else the job file, else 1.
field() { sed -n "s/^[[:space:]]*$1:[[:space:]]*\([0-9]*\).*/\1/p" "$JOB" | head -n1; }
override() {
  local v=""
  for a in "${EXTRA[@]}"; do
    case "$a" in --$1=*) v="${a#*=}" ;; esac
  done
  echo "$v"
}
SERVERS="${SERVERS:-$(override num_servers)}"
SERVERS="${SERVERS:-$(field num_servers)}"; SERVERS="${SERVERS:-1}"
WORKERS="${WORKERS:-$(override num_workers)}"
WORKERS="${WORKERS:-$(field num_workers)}"; WORKERS="${WORKERS:-1}"

# A supervised job: the scheduler keeps its state, servers can be restored
# from checkpoints, and a dead worker's place is kept for its restart.
if [ "$SUPERVISE" -eq 1 ]; then
  [ -n "$(override state_dir)" ] || EXTRA+=("--state_dir=$LOGS/scheduler-state")
  [ -n "$(override on_worker_failure)" ] || EXTRA+=("--on_worker_failure=wait")
  if [ -z "$(override checkpoint_every)" ] && [ -z "$(field checkpoint_every)" ]; then
    EXTRA+=("--checkpoint_every=50")
  fi
  if [ -z "$(override checkpoint_dir)" ] && ! grep -q "checkpoint_dir:" "$JOB"; then
    EXTRA+=("--checkpoint_dir=$LOGS/checkpoints")
  fi
fi

PIDS=()
LINKS=()  # the namespace indexes of --worker_links, worker i's at i
# Every pid to stop: the supervisors' and the daemons' (LOGS/*.pid).
all_pids() {
  echo "${PIDS[@]}"
  cat "$LOGS"/*.pid 2>/dev/null || true
}
cleanup() {
  trap - EXIT INT TERM
  touch "$LOGS/.stopping"
  PIDS=($(all_pids))
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  # Give them a moment to stop cleanly, then make sure.
  for _ in $(seq 1 30); do
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for n in "${LINKS[@]}"; do "$ROOT/deploy/netem.sh" down "$n" || true; done
}
trap cleanup EXIT
trap 'echo "local_cluster: interrupted; stopping the cluster" >&2; exit 130' INT TERM HUP

# Runs daemon NAME (LOGS/NAME.log, LOGS/NAME.pid) as `command...`; with
# --supervise, starts it again each time a signal kills it, with the flags
# restart_flags NAME prints. Returns the daemon's last exit code.
run_daemon() {
  local name=$1; shift
  local -a cmd=("$@")
  while :; do
    "${cmd[@]}" >>"$LOGS/$name.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$LOGS/$name.pid"
    local code=0
    wait "$pid" || code=$?
    # (wait itself returns >128 when this shell is signalled; the daemon is
    # then still running: wait for it again.)
    while kill -0 "$pid" 2>/dev/null; do wait "$pid" || code=$?; done
    if [ "$SUPERVISE" -eq 0 ] || [ "$code" -le 128 ] || [ -e "$LOGS/.stopping" ]; then
      rm -f "$LOGS/$name.pid"
      return "$code"
    fi
    # shellcheck disable=SC2207  # flags without spaces
    cmd=("$@" $(restart_flags "$name"))
    echo "$(date +%s.%N) $name died of signal $((code - 128)); started again: ${cmd[*]}" \
      >>"$LOGS/restarts.log"
    echo "local_cluster: $name died of signal $((code - 128)); starting it again" >&2
  done
}

# The flags of a daemon started again: the scheduler on the port it bound
# and its state dir; a server or worker with the id it had (its log names
# it once it registered).
restart_flags() {
  case "$1" in
    scheduler) echo "--listen=$(cat "$LOGS/scheduler.port")" ;;
    server*|worker*)
      local role=${1%%[0-9]*}
      local id
      id=$(grep -m1 -o "\[$role [0-9]*\]" "$LOGS/$1.log" | tr -dc 0-9 || true)
      [ -z "$id" ] || echo "--id=$id" ;;
  esac
}

# --worker_links: a shaped link per worker, on namespace indexes no other
# run holds (netem.sh up exits 3 for one in use). Exits with netem.sh's code
# when a link cannot be made.
links_up() {
  local n=$((10 + $$ % 90)) tries=0 code
  : >"$LOGS/links.log"
  while [ ${#LINKS[@]} -lt "$WORKERS" ]; do
    [ $tries -lt 90 ] || { echo "local_cluster: no free namespace index for --worker_links" >&2; exit 1; }
    code=0
    # shellcheck disable=SC2086  # WORKER_LINKS is a list of options
    "$ROOT/deploy/netem.sh" up "$n" $WORKER_LINKS >>"$LOGS/links.log" 2>&1 || code=$?
    case $code in
      0) LINKS+=("$n") ;;
      3) ;;
      *) echo "local_cluster: --worker_links=\"$WORKER_LINKS\": deploy/netem.sh up exited $code:" >&2
         tail -n 3 "$LOGS/links.log" >&2; exit "$code" ;;
    esac
    n=$((10 + (n - 9) % 90)) tries=$((tries + 1))
  done
}
LISTEN_HOST=127.0.0.1
if [ -n "$WORKER_LINKS" ]; then
  links_up
  LISTEN_HOST="10.213.${LINKS[0]}.1"
fi

# A port file left by an earlier run in the same --logs folder must not be read.
rm -f "$LOGS/scheduler.port" "$LOGS/status.json" "$LOGS"/*.pid "$LOGS/.stopping"
: >"$LOGS/scheduler.log"
run_daemon scheduler "$BIN/scheduler/ps_scheduler" --job="$JOB" --listen="$LISTEN_HOST:0" \
  --port_file="$LOGS/scheduler.port" --status_file="$LOGS/status.json" \
  --num_servers="$SERVERS" --num_workers="$WORKERS" "${EXTRA[@]}" &
SCHED_PID=$!
PIDS+=("$SCHED_PID")
for _ in $(seq 1 100); do
  [ -s "$LOGS/scheduler.port" ] && break
  kill -0 "$SCHED_PID" 2>/dev/null || { cat "$LOGS/scheduler.log" >&2; exit 2; }
  sleep 0.1
done
SCHED="$(cat "$LOGS/scheduler.port")"

for i in $(seq 0 $((SERVERS - 1))); do
  : >"$LOGS/server$i.log"
  # shellcheck disable=SC2086  # SERVER_FLAGS is a list of flags
  run_daemon "server$i" "$BIN/server/ps_server" --scheduler="$SCHED" --listen="$LISTEN_HOST:0" \
    $SERVER_FLAGS &
  PIDS+=("$!")
done
if [ -n "$TORCH" ]; then
  PY="${PSTRAIN_PYTHON:-}"
  if [ -z "$PY" ]; then
    PY=python3
    if /usr/bin/python3 -c "import torch" 2>/dev/null; then PY=/usr/bin/python3; fi
  fi
  export PSTRAIN_SCHEDULER="$SCHED" PSTRAIN_FLAGS="$WORKER_FLAGS"
  export PSTRAIN_LIB="$BIN/worker/external/libpstrain_torch.so"
  # The package beside the binaries: the repository's python/ beside
  # bazel-bin, or a bundle's (deploy/bundle.sh), whose lib/python holds the
  # libraries the front end needs that the machine may lack.
  HOME_DIR="$ROOT"
  [ -d "$BIN/../python/pstrain" ] && HOME_DIR="$(cd "$BIN/.." && pwd)"
  export PYTHONPATH="$HOME_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
  if [ -d "$HOME_DIR/lib/python" ]; then
    export LD_LIBRARY_PATH="$HOME_DIR/lib/python${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
for i in $(seq 0 $((WORKERS - 1))); do
  : >"$LOGS/worker$i.log"
  # With --worker_links: in its namespace, on its end of its link.
  inside=() listen=127.0.0.1:0
  if [ -n "$WORKER_LINKS" ]; then
    inside=("$ROOT/deploy/netem.sh" exec "${LINKS[$i]}" --)
    listen="10.213.${LINKS[$i]}.2:0"
  fi
  if [ -n "$TORCH" ]; then
    # shellcheck disable=SC2086  # TORCH_ARGS is a list of arguments
    PSTRAIN_FLAGS="--listen=$listen $WORKER_FLAGS" \
      run_daemon "worker$i" "${inside[@]}" "$PY" "$TORCH" $TORCH_ARGS &
    PIDS+=("$!")
    continue
  fi
  out=()
  [ -z "$WEIGHTS" ] || out=("--weights_out=$WEIGHTS/worker$i.weights")
  worker=("${inside[@]}" "$BIN/worker/ps_worker" "--listen=$listen")
  # shellcheck disable=SC2086  # WORKER_FLAGS is a list of flags
  run_daemon "worker$i" "${worker[@]}" --scheduler="$SCHED" $WORKER_FLAGS "${out[@]}" &
  PIDS+=("$!")
done
echo "local_cluster: scheduler at $SCHED, $SERVERS servers, $WORKERS workers$([ "$SUPERVISE" -eq 0 ] || echo ", supervised"); logs in $LOGS" >&2

# Show worker 0's progress (ids are handed out in order of registration,
# so find the log that says "worker 0").
(
  for _ in $(seq 1 600); do
    f=$(grep -l "\[worker 0\]" "$LOGS"/worker*.log 2>/dev/null | head -n1 || true)
    [ -n "$f" ] && exec tail -n +1 -f "$f"
    sleep 0.1
  done
) &
TAIL_PID=$!
PIDS+=("$TAIL_PID")

set +e
wait "$SCHED_PID"
code=$?
set -e
sleep 0.3
kill "$TAIL_PID" 2>/dev/null || true
if [ $code -eq 0 ]; then
  # (|| true: a job of the other kind has no such line.)
  acc=$(grep -ho "final test accuracy [0-9.]*" "$LOGS"/worker*.log | head -n1 | awk '{print $4}' || true)
  if [ -z "$acc" ] && [ -s "$LOGS/status.json" ]; then
    # (A torch script reports its accuracy to the scheduler: pst.finish.)
    acc=$(python3 -c 'import json, sys
m = [w["worker"] for w in json.load(open(sys.argv[1]))["members"] if w.get("role") == "WORKER" and w["worker"].get("test_accuracy", -1) >= 0]
print("%.4f" % m[0]["test_accuracy"] if m else "")' "$LOGS/status.json" 2>/dev/null || true)
  fi
  val=$(grep -ho "final validation loss [0-9.]*" "$LOGS"/worker*.log | head -n1 | awk '{print $4}' || true)
  if [ -n "$val" ]; then
    ent=$(grep -ho "unigram entropy [0-9.]*" "$LOGS"/worker*.log | tail -n1 | awk '{print $3}' || true)
    echo "local_cluster: job done; validation loss $val nats/byte (unigram entropy ${ent:-?}); logs and the final status.json in $LOGS"
  else
    echo "local_cluster: job done; test accuracy ${acc:-?}; logs and the final status.json in $LOGS"
  fi
else
  echo "local_cluster: the job failed (scheduler exit $code); logs and the final status.json in $LOGS" >&2
  grep -h "\[error\]" "$LOGS"/*.log >&2 || true
fi
exit $code
