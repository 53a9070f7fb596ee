#!/usr/bin/env bash
# The quick start: installs what is missing, builds, and trains the default
# MLP on Fashion-MNIST on a local cluster (1 scheduler, 2 servers, 2 workers
# on free loopback ports) under BSP, then prints the test accuracy.
# Extra arguments go to ps_scheduler (e.g. --consistency=ssp --staleness=2).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
start=$(date +%s)

"$ROOT/deploy/setup.sh"

echo "quickstart: building (bazel build //scheduler //server //worker //tools)" >&2
bazel build --noshow_progress //scheduler:ps_scheduler //server:ps_server \
  //worker:ps_worker //tools:psctl 2>&1 | grep -Ev '^(INFO|Loading|Analyzing|Target|  bazel-bin)' >&2 || true
for b in scheduler/ps_scheduler server/ps_server worker/ps_worker; do
  [ -x "bazel-bin/$b" ] || { echo "quickstart: build failed ($b missing)" >&2; exit 1; }
done

echo "quickstart: built in $(( $(date +%s) - start )) s" >&2
# exec: a signal sent to this script reaches the launcher, which stops the
# whole cluster.
exec "$ROOT/deploy/local_cluster.sh" --job="$ROOT/deploy/jobs/mlp_fashion_mnist.pbtxt" -- "$@"
