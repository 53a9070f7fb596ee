#!/usr/bin/env bash
# The test command: installs what is missing, runs `bazel test //...`, and
# ends with one line "N passed, M failed" counting test targets.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

"$ROOT/deploy/setup.sh" || { echo "tests: setup failed"; echo "0 passed, 1 failed"; exit 1; }

LOG="$(mktemp /tmp/pstrain-tests.XXXXXX.log)"
bazel test //... --nocache_test_results --test_summary=short --noshow_progress "$@" 2>&1 | tee "$LOG"
code=${PIPESTATUS[0]}

# Bazel prints one line per test target: "//pkg:target   [(cached)] PASSED in 1.2s",
# or FAILED, TIMEOUT, FLAKY, NO STATUS, FAILED TO BUILD, ...
passed=$(grep -cE '^//[^ ]+ +(\(cached\) +)?PASSED' "$LOG")
failed=$(grep -E '^//[^ ]+ +' "$LOG" | grep -vcE '^//[^ ]+ +(\(cached\) +)?(PASSED|SKIPPED)')
rm -f "$LOG"
if [ "$code" -ne 0 ] && [ "$failed" -eq 0 ]; then
  # Bazel failed before any test ran (e.g. a build error).
  failed=1
fi
echo "$passed passed, $failed failed"
[ "$code" -eq 0 ] && [ "$failed" -eq 0 ]
