#!/bin/bash
# Regenerates the figures of the shipped studies (docs/studies.md) with one command.
#
#   configs/studies/run.sh fig2|severity|adaptive|all
#
#   fig2      (a) Ada-Grouper's Fig. 2 setting, kFkB for k = 1..8, with and without
#                 preemption                      sweep fig2.json       (44 runs, < 1 s)
#   severity  (b) GPT 8-stage: preemption severity and period against the schedule
#                                                 sweep severity.json   (224 runs, ~1 s)
#   adaptive  (c) adaptive re-planning against static plans, U-Net 4-stage, 1000
#                 iterations on bursty-minutes-25g.json (minutes-long preemption) and on
#                 bursty-seconds-4stage-25g.json (seconds-long bursts)
#                                                 two adapt runs        (~10-20 s each)
#   all       the three
#
# Data (CSV, JSON) goes to $STUDIES_OUT (default build/studies/), figures (PNG + SVG)
# to $FIGURES (default docs/figures/). Every run starts from scratch (its old output
# is removed first: a sweep would otherwise resume and keep old rows).
# Environment: ADAGROUPER (default build/adagrouper: needs the sweep and adapt
# commands), PLOT (default tools/scripts/plot.py, run by /usr/bin/python3 with Debian's
# matplotlib). Exit status: 0 done, 2 bad usage, else the failing step's.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
studies="$root/configs/studies"
ADAGROUPER=${ADAGROUPER:-$root/build/adagrouper}
PLOT=${PLOT:-$root/tools/scripts/plot.py}
OUT=${STUDIES_OUT:-$root/build/studies}
FIGS=${FIGURES:-$root/docs/figures}

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }

need() {  # need COMMAND: the adagrouper binary must have it
    if ! "$ADAGROUPER" "$1" --help >/dev/null 2>&1; then
        echo "run.sh: $ADAGROUPER has no '$1' command (build it, or set ADAGROUPER=path)" >&2
        exit 1
    fi
}

sweep() {  # sweep SPEC OUTPUT
    need sweep
    rm -f "$2"
    echo "== adagrouper sweep $1 -> $2" >&2
    "$ADAGROUPER" sweep "$1" --output "$2" --quiet
}

fig2() {
    local csv="$OUT/fig2.csv"
    sweep "$studies/fig2.json" "$csv"
    "$PLOT" severity "$csv" --x k --facet trace.severity -o "$FIGS/fig2-k" \
        --xlabel "group size k (kFkB; dashed: the other schedules)" --ylabel "mean iteration time (s)" \
        --title "(a) Fig. 2 setting: S = 4, M = 8, F = 1 s, B = 2 s, transfer 0.5 s; link preempted 6 s of every 12 s"
    "$PLOT" heatmap "$csv" -o "$FIGS/fig2-heatmap" --xlabel "group size k" \
        --ylabel "severity (share of the link taken)" --width 7 \
        --title "(a) Fig. 2 setting: kFkB speedup over 1F1B"
}

severity() {
    local csv="$OUT/severity.csv"
    sweep "$studies/severity.json" "$csv"
    "$PLOT" severity "$csv" -o "$FIGS/severity-lines" --xlabel "severity (share of the link taken 40% of each period)" \
        --ylabel "mean iteration time (s)" \
        --title "(b) GPT-3 2.7B, 8 stages, b = 1, M = 64, 25 GbE preempted periodically"
    "$PLOT" heatmap "$csv" -o "$FIGS/severity-heatmap" --xlabel "group size k" --ylabel "severity" \
        --title "(b) GPT 8-stage: kFkB speedup over 1F1B, one panel per period"
}

adapt_run() {  # adapt_run NAME NETWORK TITLE
    need adapt
    local rows="$OUT/$1.csv" json="$OUT/$1.json"
    rm -f "$rows" "$json"
    echo "== adagrouper adapt $2 -> $rows" >&2
    "$ADAGROUPER" adapt --pipeline "$root/configs/pipelines/unet-4stage-v100.json" \
        --network "$2" --iterations 1000 --replan-every 10 --window 64 \
        --rows "$rows" --output "$json" | tee "$OUT/$1.txt"
    "$PLOT" adapt "$rows" -o "$FIGS/$1" --title "$3"
}

adaptive() {
    adapt_run adaptive-minutes "$root/configs/networks/bursty-minutes-25g.json" \
        "(c) U-Net 4-stage, 1000 iterations on bursty-minutes-25g (preempted for minutes), re-plan every 10"
    adapt_run adaptive-seconds "$studies/bursty-seconds-4stage-25g.json" \
        "(c) U-Net 4-stage, 1000 iterations on bursts of seconds (bursty-seconds-4stage-25g), re-plan every 10"
}

if [ $# -ne 1 ]; then usage >&2; exit 2; fi
case "$1" in
    fig2|severity|adaptive) what=("$1") ;;
    all) what=(fig2 severity adaptive) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown study '$1' (fig2, severity, adaptive or all)" >&2; exit 2 ;;
esac
mkdir -p "$OUT" "$FIGS"
for w in "${what[@]}"; do "$w"; done
