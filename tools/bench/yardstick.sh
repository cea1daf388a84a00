#!/bin/bash
# The simulator core against the speed-of-light yardstick, measured in the same minutes.
#
#   tools/bench/yardstick.sh BUILD [ROUNDS] [LIMIT_CPP]
#
# The yardstick (LIMIT_CPP, default ../shared/bench/limit.cpp beside the repository)
# computes the same kFkB schedule as `sim_bench`'s default scenario (64 stages, M = 1024,
# k = 4, 20 iterations, 10,000-point rate traces) with no memory levels, latency or op
# classes; it is built here with `g++ -O2 -std=c++20`, as its first lines ask. Each of
# ROUNDS rounds (default 7) runs `sim_bench --repeat 3` and then the yardstick three
# times, each side giving its best of three, so that both see the same machine: its
# speed drifts by 10 to 20% over minutes (docs/performance.md), a ratio within one round
# does not. Prints every round, the median of each side, and the median of the
# per-round ratios, which docs/performance.md reports against the target of one third.
#
# Exit status: 0, or 2 on bad arguments; 77 (skipped) when the yardstick's source or g++
# is missing.
set -euo pipefail

die() {
  echo "yardstick.sh: $*" >&2
  exit 2
}
build=${1:-}
rounds=${2:-7}
here=$(cd "$(dirname "$0")/../.." && pwd)
limit_cpp=${3:-$here/../shared/bench/limit.cpp}
[ -n "$build" ] || die "usage: tools/bench/yardstick.sh BUILD [ROUNDS] [LIMIT_CPP]"
[ -x "$build/tools/bench/sim_bench" ] || die "$build/tools/bench/sim_bench: not built (tools/run.sh bench builds it)"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS: a positive integer, got '$rounds'"
if [ ! -f "$limit_cpp" ] || ! command -v g++ >/dev/null; then
  echo "yardstick.sh: SKIP: no yardstick source at $limit_cpp (or no g++): the ratio is not measured"
  exit 77
fi
limit_bin="$build/tools/bench/limit"
g++ -O2 -std=c++20 -o "$limit_bin.tmp" "$limit_cpp" && mv "$limit_bin.tmp" "$limit_bin"

sims=() limits=() ratios=()
for ((r = 1; r <= rounds; r++)); do
  sim=$("$build/tools/bench/sim_bench" --repeat 3 | sed -n 's/^speed *\([0-9.]*\) million ops\/s.*/\1/p')
  lim=$(for _ in 1 2 3; do "$limit_bin" 64 1024 4 20 10000; done | sed -n 's/.*"ops_per_s": \([0-9.e+]*\).*/\1/p' |
        sort -g | tail -1)
  [ -n "$sim" ] && [ -n "$lim" ] || die "round $r: could not read a speed (sim_bench '$sim', yardstick '$lim')"
  lim=$(python3 -c "print(f'{float(\"$lim\") / 1e6:.1f}')")
  ratio=$(python3 -c "print(f'{$sim / $lim:.3f}')")
  printf 'round %d: sim_bench kfkb k=4 %6.1f M ops/s, yardstick %6.1f M ops/s, ratio %s\n' "$r" "$sim" "$lim" "$ratio"
  sims+=("$sim") limits+=("$lim") ratios+=("$ratio")
done
python3 - "${sims[*]}" "${limits[*]}" "${ratios[*]}" <<'EOF'
import statistics, sys
sim, lim, ratio = ([float(x) for x in a.split()] for a in sys.argv[1:4])
print(f"median: sim_bench {statistics.median(sim):.1f} M ops/s, yardstick {statistics.median(lim):.1f} M ops/s; "
      f"ratio {statistics.median(ratio):.3f} (range {min(ratio):.3f}-{max(ratio):.3f}; target >= 0.333)")
EOF
