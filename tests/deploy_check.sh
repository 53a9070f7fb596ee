#!/bin/bash
# Runs tests/deploy_check.py, the offline check of deploy/{k8s,slurm,systemd,
# Dockerfile}: under `bazel test //tests:deploy_check_test` on the runfiles
# tree (the daemons and the files are its data), by hand on the source tree
# after `bazel build //scheduler:ps_scheduler //server:ps_server
# //worker:ps_worker //tools:psctl`. Needs python3 and PyYAML (python3-yaml).
set -euo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-pstrain}"
else
  root="$(cd "$(dirname "$0")/.." && pwd)"
fi
exec python3 "$root/tests/deploy_check.py" "$root"
