#!/bin/bash
# Regenerates the figures of the shipped studies (docs/studies.md) with one command.
#
#   configs/studies/run.sh fig2|severity|adaptive|timeline|families|all
#
#   fig2      (a) Ada-Grouper's Fig. 2 setting, kFkB for k = 1..8, with and without
#                 preemption                      sweep fig2.json       (44 runs, < 1 s)
#   severity  (b) GPT 8-stage: preemption severity and period against the schedule
#                                                 sweep severity.json   (224 runs, ~1 s)
#   adaptive  (c) adaptive re-planning against static plans, U-Net 4-stage, 1000
#                 iterations on bursty-minutes-25g.json (minutes-long preemption) and on
#                 bursty-seconds-4stage-25g.json (seconds-long bursts)
#                                                 two adapt runs        (~1-2 s each)
#   timeline  Gantt charts of one iteration of study (b)'s GPT 8-stage pipeline, 1F1B
#                 and kFkB, on a link preempted every second    two simulations (< 1 s)
#   families  (d) GPT-3 2.7B cut into 16 model stages on 8 devices: the planner across
#                 every schedule family (plan --devices 8) against preemption severity
#                 and period (study (b)'s grid) under the V100's 32 GiB
#                                                 28 plans               (~5 s)
#   all       the five
#
# Speedup, in every figure as in the planner's "vs 1F1B": throughput over 1F1B's at
# 1F1B's largest feasible b, the b the planner's 1F1B baseline runs at (asked of
# `adagrouper plan`; a sweep that runs 1F1B at another b gets a second sweep of 1F1B
# at that b, whose rows the figures read with the first's).
# Data (CSV, JSON) goes to $STUDIES_OUT (default build/studies/), figures (PNG + SVG)
# to $FIGURES (default docs/figures/). Every run starts from scratch (its old output
# is removed first: a sweep would otherwise resume and keep old rows).
# Environment: ADAGROUPER (default build/adagrouper: needs the sweep and adapt
# commands), PLOT (default tools/scripts/plot.py, run by /usr/bin/python3 with Debian's
# matplotlib). Exit status: 0 done, 2 bad usage, else the failing step's.
set -euo pipefail

csvs=()
root=$(cd "$(dirname "$0")/../.." && pwd)
studies="$root/configs/studies"
ADAGROUPER=${ADAGROUPER:-$root/build/adagrouper}
PLOT=${PLOT:-$root/tools/scripts/plot.py}
OUT=${STUDIES_OUT:-$root/build/studies}
FIGS=${FIGURES:-$root/docs/figures}

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

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
    "$ADAGROUPER" sweep "$1" --output "$2" --quiet >&2
}

# baseline_sweep SPEC NAME: runs SPEC's sweep to $OUT/NAME.csv and, when the planner's
# 1F1B baseline runs at a b that SPEC does not, 1F1B at that b over SPEC's grid to
# $OUT/NAME-1f1b.csv; sets csvs to the files whose rows the figures read together.
baseline_sweep() {
    local spec=$1 csv="$OUT/$2.csv" extra="$OUT/$2-1f1b.json" b
    rm -f "$extra" "${extra%.json}.csv"
    sweep "$spec" "$csv"
    need plan
    b=$(/usr/bin/python3 - "$ADAGROUPER" "$spec" "$extra" <<'PY'
import json, os, subprocess, sys
exe, spec_path, out = sys.argv[1:]
with open(spec_path) as f:
    spec = json.load(f)
d = dict(spec["defaults"])
here = os.path.dirname(os.path.abspath(spec_path))
for key in ("pipeline", "network"):
    if isinstance(d.get(key), str):
        d[key] = os.path.join(here, d[key])
with open(d["pipeline"]) as f:
    limited = "memory_limit_bytes" in json.load(f)
cmd = [exe, "plan", "--pipeline", d["pipeline"], "--network", d["network"], "--json"]
plan = json.loads(subprocess.run(cmd + ([] if limited else ["--memory-limit", "1e18"]),
                                 check=True, capture_output=True, text=True).stdout)
b = [c["micro_batch_size"] for c in plan["candidates"] if c.get("baseline") and c["schedule"] == "1f1b"]
if b and b[0] != d.get("micro_batch_size"):
    d.update(schedule="1f1b", micro_batch_size=b[0])
    grid = {k: v for k, v in spec.get("grid", {}).items() if k not in ("schedule", "k", "micro_batch_size")}
    with open(out, "w") as f:
        json.dump({"description": f"1F1B at b = {b[0]}, the b of the planner's 1F1B baseline, over the grid "
                                  f"of {os.path.basename(spec_path)}", "defaults": d, "grid": grid}, f, indent=1)
    print(b[0])
PY
)
    csvs=("$csv")
    if [ -n "$b" ]; then
        echo "== the planner's 1F1B baseline runs at b = $b" >&2
        sweep "$extra" "${extra%.json}.csv"
        csvs+=("${extra%.json}.csv")
    fi
}

fig2() {
    baseline_sweep "$studies/fig2.json" fig2
    "$PLOT" severity "${csvs[@]}" --x k --facet trace.severity -o "$FIGS/fig2-k" \
        --xlabel "group size k of kFkB (dashed: the schedules without k)" \
        --title "(a) Fig. 2 setting: S = 4, M = 8, F = 1 s, B = 2 s, transfer 0.5 s; link preempted 6 s of every 12 s"
    "$PLOT" heatmap "${csvs[@]}" -o "$FIGS/fig2-heatmap" --width 7 \
        --ylabel "preemption severity (share of the link taken)" \
        --title "(a) Fig. 2 setting: kFkB's speedup over 1F1B"
}

severity() {
    baseline_sweep "$studies/severity.json" severity
    "$PLOT" severity "${csvs[@]}" -o "$FIGS/severity-lines" --relative-to 1f1b --x-categorical \
        --exclude k=8 --exclude k=16 --sharey \
        --xlabel "preemption severity: share of the link taken 40% of each period (evenly spaced)" \
        --title "(b) GPT-3 2.7B, 8 stages, M = 64 at b = 1, 25 GbE preempted periodically (kFkB k = 8, 16: heatmap)"
    "$PLOT" heatmap "${csvs[@]}" -o "$FIGS/severity-heatmap" \
        --ylabel "preemption severity (share of the link taken)" \
        --title "(b) GPT 8-stage at b = 1: kFkB's speedup over 1F1B, one panel per period"
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

# timeline_run NAME SCHEDULE-ARGS...: one iteration of study (b)'s pipeline on its link
# preempted every second at severity 0.95, as a timeline and its Gantt chart.
timeline_run() {
    local name=$1; shift
    local net="$OUT/timeline-net.json" t="$OUT/$name.trace.json"
    cat >"$net" <<'JSON'
{"description": "Study (b)'s link: 25 GbE (2.8e9 B/s, 30 us) that another job takes 95% of for 40% of every 1 s period",
 "latency_s": 30e-6,
 "default": {"pattern": "periodic", "high": 2.8e9, "low": 1.4e8, "period_s": 1, "low_fraction": 0.4}}
JSON
    echo "== adagrouper simulate $* -> $t" >&2
    "$ADAGROUPER" simulate --pipeline "$root/configs/pipelines/gpt-8stage-v100.json" --network "$net" \
        "$@" --start-time 3.7 --timeline "$t" >"$OUT/$name.txt"
    "$PLOT" gantt "$t" -o "$FIGS/$name" \
        --title "GPT 8-stage, $(head -1 "$OUT/$name.txt" | sed 's/^[^:]*: //'); link at 5% for 0.4 s of every 1 s"
}

timeline() {
    timeline_run timeline-1f1b --schedule 1f1b -b 1
    timeline_run timeline-kfkb3 --schedule kfkb --k 3 -b 1
}

# (d): the 16-model-stage GPT (partitioned from the layer model, as `plan --model` would),
# then `plan --devices 8 --json` at every (severity, period) of study (b)'s grid; per
# point and family the best feasible candidate into families.csv, and the figure.
families() {
    need partition
    local dir="$OUT/families" pipe="$OUT/families/gpt-16stage.json" csv="$OUT/families.csv"
    rm -rf "$dir" "$csv"
    mkdir -p "$dir"
    echo "== adagrouper partition gpt3-2.7b into 16 model stages -> $pipe" >&2
    "$ADAGROUPER" partition --model "$root/configs/models/gpt3-2.7b.json" --stages 16 --micro-batch-size 1 \
        --network "$root/configs/networks/eth-25g.json" --output "$pipe" >"$dir/partition.txt"
    local sev per
    for sev in 0 0.5 0.75 0.875 0.9 0.95 0.975; do
        for per in 1 5 20 60; do
            /usr/bin/python3 -c 'import json, sys
sev, per = float(sys.argv[1]), float(sys.argv[2])
json.dump({"description": f"25 GbE (2.8e9 B/s, 30 us); another job takes {sev:g} of it for 40% of every {per:g} s",
           "latency_s": 30e-6,
           "default": {"pattern": "periodic", "high": 2.8e9, "low": 2.8e9 * (1 - sev), "period_s": per,
                       "low_fraction": 0.4}}, open(sys.argv[3], "w"), indent=1)' "$sev" "$per" "$dir/net-$sev-$per.json"
            "$ADAGROUPER" plan --pipeline "$pipe" --network "$dir/net-$sev-$per.json" --devices 8 \
                --iterations 10 --start-time 3.7 --json >"$dir/plan-$sev-$per.json"
        done
    done
    echo "== $dir/plan-*.json -> $csv" >&2
    /usr/bin/python3 - "$dir" >"$csv" <<'PY'
import csv, glob, json, os, sys
def family(c):  # the schedule, with kFkB (and 1F1B) under dynamic W fill apart: the planner's families
    if c["split_backward"] and c["w_fill"] == "dynamic" and c["schedule"] in ("kfkb", "1f1b"):
        return "kfkb-dynamic"
    return c["schedule"]
def label(c):
    parts = [c["schedule"]]
    if c["schedule"] == "kfkb": parts.append(f"k={c['k']}")
    if c["virtual_stages"] != 1 and c["schedule"] not in ("zbv", "dualpipev"): parts.append(f"v={c['virtual_stages']}")
    if c["w_fill"] == "dynamic": parts.append("dyn" + ("" if c["max_pending_w"] is None else f" P={c['max_pending_w']}"))
    return " ".join(parts) + f" b={c['micro_batch_size']}"
w = csv.writer(sys.stdout, lineterminator="\n")
w.writerow(["severity", "period_s", "family", "label", "micro_batch_size", "iteration_time_s", "peak_memory_bytes",
            "chosen", "speedup_over_1f1b"])
rows = []
for path in glob.glob(os.path.join(sys.argv[1], "plan-*.json")):
    sev, per = os.path.basename(path)[5:-5].split("-")
    plan = json.load(open(path))
    one = [c["predicted_iteration_time_s"] for c in plan["candidates"] if c.get("baseline") and c["schedule"] == "1f1b"
           and c["predicted_iteration_time_s"] is not None and not c["split_backward"]]
    best = {}
    for c in plan["candidates"]:
        if c["status"] not in ("chosen", "lost"): continue
        f = family(c)
        if f not in best or c["predicted_iteration_time_s"] < best[f]["predicted_iteration_time_s"]: best[f] = c
    for f, c in best.items():
        t = c["predicted_iteration_time_s"]
        rows.append([float(sev), float(per), f, label(c), c["micro_batch_size"], t, max(c["peak_memory_bytes"]),
                     "true" if c["status"] == "chosen" else "false", f"{one[0] / t:.4f}" if one else ""])
for r in sorted(rows): w.writerow(r)
PY
    "$PLOT" families "$csv" -o "$FIGS/families" \
        --title "(d) GPT-3 2.7B, 16 model stages on 8 V100s (32 GiB), B = 64, 25 GbE preempted for 40% of each period"
}

adaptive() {
    adapt_run adaptive-minutes "$root/configs/networks/bursty-minutes-25g.json" \
        "(c) U-Net 4-stage, 1000 iterations on bursty-minutes-25g (preempted for minutes), re-plan every 10"
    adapt_run adaptive-seconds "$studies/bursty-seconds-4stage-25g.json" \
        "(c) U-Net 4-stage, 1000 iterations on bursts of seconds (bursty-seconds-4stage-25g), re-plan every 10"
}

if [ $# -ne 1 ]; then usage >&2; exit 2; fi
case "$1" in
    fig2|severity|adaptive|timeline|families) what=("$1") ;;
    all) what=(fig2 severity adaptive timeline families) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown study '$1' (fig2, severity, adaptive, timeline, families or all)" >&2; exit 2 ;;
esac
mkdir -p "$OUT" "$FIGS"
for w in "${what[@]}"; do "$w"; done
