#!/usr/bin/env bash
# The sweep benchmark of docs/performance.md: configs/sweeps/bench-1000.json (1,000 runs,
# S = 8, M = 32, 5 iterations, an onoff trace on every channel) with --jobs 1, --jobs 2
# and, when the binary has MPI and mpirun exists, under mpirun with 2 ranks. Each mode
# runs REPEAT times (default 3) into a fresh output; the best is reported:
#   run phase   runs / the time from the first run started to the last row written
#               (what `adagrouper sweep` prints at the end)
#   command     runs / the wall time of the whole command (reading the spec, building
#               the traces, and for MPI starting the ranks)
#   CPU         user + system CPU seconds of the whole command (all threads and ranks):
#               what the sweep costs whatever else the machine runs
# The outputs of the modes are checked to be equal after sorting.
#
#   tools/bench/sweep_bench.sh [BUILD_DIR] [REPEAT]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-build}
repeat=${2:-3}
bin="$root/$build/adagrouper"
spec="$root/configs/sweeps/bench-1000.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[ -x "$bin" ] || { echo "bench.sh: $bin not found (build it first)" >&2; exit 1; }

now() { date +%s.%N; }

# measure NAME CMD...: best run-phase and whole-command rates over $repeat runs.
measure() {
  local name=$1
  shift
  local best_run=0 best_cmd=0 best_cpu=1e9 i wall user sys rate cmd_rate
  local TIMEFORMAT='%3R %3U %3S'
  for ((i = 0; i < repeat; i++)); do
    rm -f "$tmp/$name.csv"
    { time "$@" -o "$tmp/$name.csv" 2>"$tmp/$name.err" || { cat "$tmp/$name.err" >&2; return 1; }; } 2>"$tmp/$name.time"
    read -r wall user sys <"$tmp/$name.time"
    rate=$(sed -n 's/.*(\([0-9.]*\) runs\/s).*/\1/p' "$tmp/$name.err" | tail -1)
    cmd_rate=$(awk -v w="$wall" 'BEGIN { printf "%.1f", 1000 / w }')
    best_run=$(awk -v x="$best_run" -v y="$rate" 'BEGIN { print (y > x ? y : x) }')
    best_cmd=$(awk -v x="$best_cmd" -v y="$cmd_rate" 'BEGIN { print (y > x ? y : x) }')
    best_cpu=$(awk -v x="$best_cpu" -v y="$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" \
      'BEGIN { print (y < x ? y : x) }')
  done
  sort "$tmp/$name.csv" >"$tmp/$name.sorted"
  echo "$best_run $best_cmd $best_cpu"
}

echo "sweep bench: $(basename "$spec"), 1000 runs, best of $repeat; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
read -r r1 c1 u1 < <(measure jobs1 "$bin" sweep "$spec" --jobs 1)
printf '  %-14s %8.1f runs/s (run phase) %8.1f runs/s (command) %6.2f s CPU\n' "--jobs 1" "$r1" "$c1" "$u1"
read -r r2 c2 u2 < <(measure jobs2 "$bin" sweep "$spec" --jobs 2)
printf '  %-14s %8.1f runs/s (run phase) %8.1f runs/s (command) %6.2f s CPU  speedup %.2fx (run phase), %.2fx (command)\n' \
  "--jobs 2" "$r2" "$c2" "$u2" "$(awk -v a="$r2" -v b="$r1" 'BEGIN { print a / b }')" \
  "$(awk -v a="$c2" -v b="$c1" 'BEGIN { print a / b }')"
cmp -s "$tmp/jobs1.sorted" "$tmp/jobs2.sorted" || { echo "bench.sh: --jobs 1 and --jobs 2 differ" >&2; exit 1; }

if "$bin" sweep --help | grep -q "This build has MPI" && command -v mpirun >/dev/null; then
  read -r rm cm um < <(measure mpi2 mpirun --oversubscribe --allow-run-as-root -np 2 "$bin" sweep "$spec")
  printf '  %-14s %8.1f runs/s (run phase) %8.1f runs/s (command) %6.2f s CPU  speedup %.2fx (run phase), %.2fx (command)\n' \
    "mpirun -np 2" "$rm" "$cm" "$um" "$(awk -v a="$rm" -v b="$r1" 'BEGIN { print a / b }')" \
    "$(awk -v a="$cm" -v b="$c1" 'BEGIN { print a / b }')"
  cmp -s "$tmp/jobs1.sorted" "$tmp/mpi2.sorted" || { echo "bench.sh: mpirun and --jobs 1 differ" >&2; exit 1; }
else
  echo "  mpirun -np 2    skipped: this build has no MPI or mpirun is missing"
fi
echo "  outputs identical after sorting"
