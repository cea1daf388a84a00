#!/usr/bin/env bash
# Builds the libFuzzer targets of the trace parsers with clang in build-fuzz/ and runs
# each for SECONDS (default 30), starting from the fixtures and shipped traces.
#
#   traces/fuzz/run.sh [SECONDS]
#
# Exits non-zero on the first crash; libFuzzer leaves the input that crashed as
# crash-* in the current directory.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
seconds=${1:-30}
if ! command -v clang++ >/dev/null; then
  echo "fuzz/run.sh: clang++ is missing (apt-get install clang): the fuzz targets need libFuzzer" >&2
  exit 1
fi
if [ ! -f build-fuzz/build.ninja ]; then
  CXX=clang++ meson setup build-fuzz -Dfuzz=true -Dtests=false -Dbenchmarks=false >&2
fi
targets=(csv samples simgrid iperf3 json auto)
ninja -C build-fuzz "${targets[@]/#/traces/fuzz/fuzz_}" >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seed() {  # seed TARGET FILES...
  local t=$1
  shift
  mkdir -p "$work/$t"
  cp "$@" "$work/$t/"
}
seed csv tests/traces/data/link.csv traces/data/bursty-onoff-25g.csv
seed samples tests/traces/data/samples.csv
seed simgrid tests/traces/data/*.profile
seed iperf3 tests/traces/data/iperf3-*.json
seed json traces/data/*.json
seed auto tests/traces/data/* traces/data/*.json traces/data/*.csv

for t in "${targets[@]}"; do
  echo "== fuzz_$t for $seconds s"
  status=0
  build-fuzz/traces/fuzz/fuzz_"$t" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
    "$work/$t" >"$work/$t.log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)' "$work/$t.log" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$work/$t.log" >&2
    echo "fuzz_$t: FAILED (the input is crash-* in $(pwd))" >&2
    exit 1
  fi
done
echo "fuzz: all targets ran for $seconds s each without a crash"
