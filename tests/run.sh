#!/usr/bin/env bash
# The test command: installs what is missing, runs `bazel test //...`, the
# clang thread-safety build, the libFuzzer runs of the fuzz targets
# (fuzz/run.sh), the real Slurm run (deploy/slurm/local_slurm_test.sh, as
# root; PSTRAIN_SLURM_TEST=0 leaves it out) and the documentation check
# (tests/docs_check.py), and ends with one
# line "N passed, M failed" counting test targets, that build, the fuzz
# runs, the Slurm run's facts and the docs check.
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

# Clang's thread-safety analysis (-Wthread-safety -Werror) over every
# target: one more entry in the count.
TSA_LOG="$(mktemp /tmp/pstrain-tsa.XXXXXX.log)"
if bazel build --config=thread_safety --noshow_progress //... >"$TSA_LOG" 2>&1; then
  echo "thread-safety: clang -Wthread-safety -Werror build passed"
  passed=$((passed + 1))
else
  # The compiler's errors, else Bazel's own (a failure never goes unsaid).
  grep -iE "error" "$TSA_LOG" | head -30 | grep . || tail -n 20 "$TSA_LOG"
  echo "thread-safety: clang -Wthread-safety -Werror build FAILED"
  failed=$((failed + 1))
fi
rm -f "$TSA_LOG"

# The fuzz targets under libFuzzer with clang's sanitizers, a bounded time
# each (PSTRAIN_FUZZ_SECONDS, 20 by default; 0 skips them).
FUZZ_SECONDS="${PSTRAIN_FUZZ_SECONDS:-20}"
if [ "$FUZZ_SECONDS" -gt 0 ]; then
  FUZZ_LOG="$(mktemp /tmp/pstrain-fuzz.XXXXXX.log)"
  "$ROOT/fuzz/run.sh" "$FUZZ_SECONDS" 2>&1 | tee "$FUZZ_LOG"
  fuzz_passed=$(grep -c '^fuzz: .* passed' "$FUZZ_LOG")
  fuzz_failed=$(grep -c '^fuzz: .*FAILED' "$FUZZ_LOG")
  rm -f "$FUZZ_LOG"
  passed=$((passed + fuzz_passed))
  failed=$((failed + fuzz_failed))
fi
# deploy/slurm/pstrain.sbatch run by a real Slurm on this machine (Debian's
# slurmctld, slurmd, slurmdbd, munge and MariaDB, installed by the script
# when missing; root only): one entry per fact it checks. Where the machine
# cannot host Slurm the script says why and exits 77: skipped, not failed.
if [ "$(id -u)" = 0 ] && [ "${PSTRAIN_SLURM_TEST:-1}" = 1 ]; then
  SLURM_LOG="$(mktemp /tmp/pstrain-slurm.XXXXXX.log)"
  "$ROOT/deploy/slurm/local_slurm_test.sh" --dir="$(mktemp -d /tmp/pstrain-slurm.XXXXXX)" 2>&1 |
    tee "$SLURM_LOG"
  slurm_passed=$(grep -c '^slurm: .*: passed$' "$SLURM_LOG")
  slurm_failed=$(grep -c '^slurm: .*: FAILED$' "$SLURM_LOG")
  # A run that ended before its closing line failed too, unless it skipped.
  grep -q '^slurm: [0-9]* passed, [0-9]* failed$\|^slurm: skipped: ' "$SLURM_LOG" ||
    slurm_failed=$((slurm_failed + 1))
  rm -f "$SLURM_LOG"
  passed=$((passed + slurm_passed))
  failed=$((failed + slurm_failed))
else
  echo "slurm: skipped (needs root; PSTRAIN_SLURM_TEST=0 was given or this is not root)"
fi
# The documentation check: README.md within 400 lines, every docs/ file
# linked from it, every relative link resolving. One more entry in the count.
if /usr/bin/python3 "$ROOT/tests/docs_check.py" "$ROOT"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$code" -eq 0 ] && [ "$failed" -eq 0 ]
