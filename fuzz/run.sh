#!/usr/bin/env bash
# Builds every fuzz target with Debian's clang under libFuzzer, AddressSanitizer
# and UBSan (bazel --config=libfuzzer) and runs each for a bounded time,
# starting from its seed corpus. One line per target, "fuzz: NAME passed"
# or "fuzz: NAME FAILED", then "N passed, M failed".
#
#   fuzz/run.sh [SECONDS_PER_TARGET]   (default 20)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SECONDS_PER_TARGET="${1:-20}"
TARGETS=(push_fuzz grad_codec_fuzz pull_response_fuzz rows_fuzz checkpoint_fuzz job_spec_fuzz scheduler_fuzz)

passed=0
failed=0
labels=()
for t in "${TARGETS[@]}"; do labels+=("//fuzz:${t}_libfuzzer"); done
if ! bazel build --config=libfuzzer --noshow_progress "${labels[@]}" >/tmp/pstrain-fuzz-build.log 2>&1; then
  tail -30 /tmp/pstrain-fuzz-build.log
  echo "fuzz: the libFuzzer build FAILED"
  echo "0 passed, ${#TARGETS[@]} failed"
  exit 1
fi
BIN="$(bazel info --config=libfuzzer bazel-bin 2>/dev/null)"
WORK="$(mktemp -d /tmp/pstrain-fuzz.XXXXXX)"
for t in "${TARGETS[@]}"; do
  corpus="$WORK/$t"
  mkdir -p "$corpus"
  cp fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null
  log="$WORK/$t.log"
  # -rss_limit_mb: a leak or an unbounded allocation is a failure too.
  if TEST_TMPDIR="$WORK" "$BIN/fuzz/${t}_libfuzzer" "$corpus" -max_total_time="$SECONDS_PER_TARGET" \
      -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
    echo "fuzz: $t passed (${runs:-?} inputs in ${SECONDS_PER_TARGET} s)"
    passed=$((passed + 1))
  else
    grep -E 'ERROR|SUMMARY|Test unit written|runtime error' "$log" | head -20
    echo "fuzz: $t FAILED (log: $log)"
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
