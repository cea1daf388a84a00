#!/usr/bin/env bash
# Builds the libFuzzer targets of the loaders in build-sanitize/ (clang, ASan+UBSan:
# tools/scripts/sanitize-build.sh) and runs each on its corpus (tests/fuzz/corpus/TARGET)
# for SECONDS (default 30), one target per core at a time; or replays the saved findings
# (tests/fuzz/findings/TARGET-*) once each and says which still fail.
#
#   tests/fuzz/run.sh [SECONDS]     exits non-zero on the first crash, hang or sanitizer report
#   tests/fuzz/run.sh findings      exits non-zero when a finding still fails
#
# The targets run from the repository root: sweep specs, network files and plans name
# other files relative to it. The corpora are copied first, so a run does not change
# them; a failing input is kept as build-sanitize/artifacts/TARGET-crash-* (or -timeout-*,
# -oom-*, -leak-*).
#
# ADAGROUPER_FUZZ_OPTIMIZATION (default 1) is the targets' optimization level; CI's
# few-second runs take 0, which builds in about half the time, still finds what crashes
# on the corpora, and is the level of the sanitizer suite (tools/run.sh test-sanitize),
# so the two share one build (a long fuzzing session wants 1).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
mode=${1:-30}

# sanitize-build.sh refuses a level it does not know (exit 2, one line).
tools/scripts/sanitize-build.sh --optimization "${ADAGROUPER_FUZZ_OPTIMIZATION:-1}" fuzz
mapfile -t targets < <(find build-sanitize/tests/fuzz -maxdepth 1 -type f -name 'fuzz_*' -perm -u+x -printf '%f\n' | sort)
mkdir -p build-sanitize/artifacts
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(-rss_limit_mb=2048 -timeout=20 -max_len=65536 -dict=tests/fuzz/fuzz.dict)

if [ "$mode" = findings ]; then
  status=0
  for f in tests/fuzz/findings/*-*; do
    [ -f "$f" ] || continue
    case "$f" in *.md) continue ;; esac
    t=$(basename "$f")
    t=fuzz_${t%%-*}
    if build-sanitize/tests/fuzz/"$t" "${common[@]}" "$f" >"$work/log" 2>&1; then
      echo "fixed    $f ($t)"
    else
      echo "FAILS    $f ($t): $(grep -m1 -E 'ERROR|runtime error|fuzz:|terminate|Assertion' "$work/log" || tail -1 "$work/log")"
      status=1
    fi
  done
  exit $status
fi

# fuzz_one TARGET: runs TARGET on a copy of its corpus for $mode s; its log in $work.
fuzz_one() {
  local t=$1 name=${1#fuzz_} status=0
  build-sanitize/tests/fuzz/"$t" "${common[@]}" -max_total_time="$mode" -print_final_stats=1 \
    -artifact_prefix="build-sanitize/artifacts/$name-" "$work/$name" >"$work/$name.log" 2>&1 || status=$?
  echo "$status" >"$work/$name.status"
}

# One target per core at a time (each is one process, one thread); their reports follow
# in name order.
jobs=$(nproc 2>/dev/null || echo 1)
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  for t in "${batch[@]}"; do
    name=${t#fuzz_}
    mkdir -p "$work/$name"
    if [ -d "tests/fuzz/corpus/$name" ]; then cp tests/fuzz/corpus/"$name"/* "$work/$name/"; fi
    fuzz_one "$t" &
  done
  wait
  for t in "${batch[@]}"; do
    name=${t#fuzz_}
    echo "== $t for $mode s ($(ls tests/fuzz/corpus/"$name" 2>/dev/null | wc -l) seeds)"
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)' "$work/$name.log" || true
    if [ "$(cat "$work/$name.status")" -ne 0 ]; then
      tail -60 "$work/$name.log" >&2
      echo "$t: FAILED (the input is in build-sanitize/artifacts/$name-*)" >&2
      exit 1
    fi
  done
done
echo "fuzz: all ${#targets[@]} targets ran for $mode s each without a failure"
