#!/usr/bin/env python3
"""How far apart the same candidate's measured runs are, next to how far the prediction is from each.

    tools/scripts/fidelity_noise.py [--adagrouper BIN] [--limit PCT] [--json FILE] DIR [DIR ...]

Each DIR is one run of tools/scripts/fidelity.sh (the run directory, or its preempted/
or constant/ scenario directory) or an output of --random-scenarios (random-I/run-J
below it). The runs of one scenario form a group: every run-J of a drawn scenario
random-I, and all the run directories given, in the order given (give the runs of one
scenario only: the shipped ring three times, say). Candidates are matched between the
runs of a group by their label.

For each candidate measured in two runs or more, every pair of its measurements is
compared with `adagrouper compare` as if the earlier run were the prediction and the
later one the measurement: the free-running MAPE of iteration time between two real
runs of the same plan, under the same trace from its start, on the same testbed. That
is how far a real run is from its own repeat (the run-to-run spread); a simulation
cannot be expected to come closer to every run than the runs come to each other.

The predictions are compared pair by pair the same way: each run predicts from its own
calibration, taken a minute before its candidates run, so two predictions of the same
candidate differ by as much as the calibrations do.

A run's own spread is the median MAPE of the pairs it is in: how far that measurement
is from the candidate's other runs. A run that is far from all the others has a large
one; a prediction that is far from every run while the runs agree does not.

Prints per group a table: the prediction's MAPE in each run (its compare.json), the MAPE
of each pair of measured runs, each run's own spread, the median pair of predictions,
and per run whether the prediction is within --limit (default 3%), above it but no
further than that run's own spread ("spread"), or neither ("miss"). Then the counts.
--json FILE writes the same as a list of rows.

Example:
  tools/scripts/fidelity_noise.py ring-1 ring-2 ring-3
  tools/scripts/fidelity_noise.py fidelity-out-random --json noise.json

Exit status 2 with one line on bad arguments or a directory that is not a fidelity run.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys


def fail(msg):
    print(f"fidelity_noise.py: {msg}", file=sys.stderr)
    sys.exit(2)


def scenario_dir(d):
    """The directory with compare.json of run directory d (d itself, preempted/ or constant/), or None."""
    for sub in ("", "preempted", "constant"):
        if os.path.isfile(os.path.join(d, sub, "compare.json")):
            return os.path.join(d, sub)
    return None


def groups_of(dirs):
    """[(name, [scenario directories])]: one group per drawn scenario of a --random-scenarios
    output, and one for the run directories given."""
    groups, given = [], []
    for d in dirs:
        if not os.path.isdir(d):
            fail(f"{d}: not a directory")
        drawn = sorted(glob.glob(os.path.join(d, "random-*")),
                       key=lambda p: int(p.rsplit("-", 1)[1]) if p.rsplit("-", 1)[1].isdigit() else -1)
        drawn = [p for p in drawn if os.path.isdir(p)]
        if drawn:
            for s in drawn:
                runs = sorted(glob.glob(os.path.join(s, "run-*")), key=lambda p: p.rsplit("-", 1)[1].zfill(6))
                groups.append((s, [x for x in map(scenario_dir, runs) if x]))
            continue
        sc = scenario_dir(d)
        if sc is None:
            fail(f"{d}: not a fidelity run (no compare.json in it, in preempted/ or in constant/, and no random-I/)")
        given.append(sc)
    if given:
        groups.append((", ".join(given), given))
    return groups


def candidates(sc):
    """{label: (prediction's MAPE, measured summary JSON, predicted summary JSON)} of the run in
    scenario directory sc."""
    path = os.path.join(sc, "compare.json")
    try:
        with open(path) as f:
            doc = json.load(f)
        return {c["label"]: (float(c["mape_pct"]), os.path.join(sc, os.path.basename(c["measured"])),
                             os.path.join(sc, os.path.basename(c["predicted"])))
                for c in doc["comparisons"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{path}: comparisons: {e}")


def pair_mape(exe, earlier, later):
    """The MAPE of `later`'s iterations against `earlier`'s, by adagrouper compare."""
    r = subprocess.run([exe, "compare", "--predicted", earlier, "--measured", later, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        fail(f"adagrouper compare of {earlier} with {later} failed (are they runs of one scenario?): {why}")
    return float(json.loads(r.stdout)["comparisons"][0]["mape_pct"])


def verdict(mape, limit, spread):
    if mape <= limit:
        return "within"
    return "spread" if spread is not None and mape <= spread else "miss"


def pairs(exe, files):
    """{runs: [a, b], mape_pct} for every pair a < b of {run: summary JSON}."""
    runs = sorted(files)
    return [{"runs": [a, b], "mape_pct": pair_mape(exe, files[a], files[b])}
            for n, a in enumerate(runs) for b in runs[n + 1:]]


def median(ps):
    """The median MAPE of the pairs ps, None without any."""
    return statistics.median(p["mape_pct"] for p in ps) if ps else None


def group_rows(exe, name, runs, limit):
    """One row per candidate of the group: its MAPE per run, per pair of runs, and the verdicts."""
    per_run = [candidates(sc) for sc in runs]
    labels = []
    for c in per_run:
        labels += [x for x in c if x not in labels]
    rows = []
    for label in labels:
        where = [i for i, c in enumerate(per_run) if label in c]
        measured = pairs(exe, {i + 1: per_run[i][label][1] for i in where})
        predicted = pairs(exe, {i + 1: per_run[i][label][2] for i in where})
        own = [median([p for p in measured if i + 1 in p["runs"]]) for i in where]
        mapes = [per_run[i][label][0] for i in where]
        rows.append({"group": name, "candidate": label, "runs": [i + 1 for i in where], "mape_pct": mapes,
                     "run_to_run_pct": measured, "run_to_run_median_pct": median(measured), "run_spread_pct": own,
                     "predictions_run_to_run_pct": predicted, "predictions_run_to_run_median_pct": median(predicted),
                     "verdicts": [verdict(m, limit, o) for m, o in zip(mapes, own)]})
    return rows


def pct(xs):
    return " / ".join(f"{x:.2f}" for x in xs) + "%"


def optional_pct(x):
    return f"{x:.2f}%" if x is not None else "-"


def table(name, runs, rows):
    lines = [f"== {name} ({len(runs)} runs)",
             "| candidate | prediction, MAPE in run ... | measured run to run, MAPE of pair ... | each run's own spread | "
             "predictions run to run, median pair | per run |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        runs_s = ", ".join(str(i) for i in r["runs"])
        measured = r["run_to_run_pct"]
        pairs_s = (", ".join(f"{a}-{b}" for a, b in (p["runs"] for p in measured)) + ": " +
                   pct([p["mape_pct"] for p in measured])) if measured else "-"
        lines.append(f"| {r['candidate']} | {runs_s}: {pct(r['mape_pct'])} | {pairs_s} | "
                     f"{' / '.join(optional_pct(x) for x in r['run_spread_pct'])} | "
                     f"{optional_pct(r['predictions_run_to_run_median_pct'])} | {' / '.join(r['verdicts'])} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adagrouper", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "adagrouper"),
                    help="the adagrouper binary whose compare it runs (default build/adagrouper)")
    ap.add_argument("--limit", default="3", help="the MAPE target in percent (default 3)")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    ap.add_argument("dirs", nargs="+", metavar="DIR", help="fidelity.sh runs of one scenario, or --random-scenarios outputs")
    ap.error = fail  # one line, exit 2
    a = ap.parse_args()
    try:
        limit = float(a.limit)
    except ValueError:
        limit = -1.0
    if not limit >= 0 or limit == float("inf"):
        fail(f"--limit: a percentage >= 0, got '{a.limit}'")
    if not os.access(a.adagrouper, os.X_OK):
        fail(f"--adagrouper: {a.adagrouper} is not an executable (build it: tools/run.sh build)")
    rows, lines = [], []
    for name, runs in groups_of(a.dirs):
        got = group_rows(a.adagrouper, name, runs, limit)
        rows += got
        lines += table(name, runs, got) + [""]
    verdicts = [v for r in rows for v in r["verdicts"]]
    lines.append(f"{len(verdicts)} candidate runs of {len(rows)} candidates: {verdicts.count('within')} within "
                 f"{limit:g}%, {verdicts.count('spread')} above it but within their run's own spread (its median "
                 f"MAPE from the other runs), {verdicts.count('miss')} neither")
    print("\n".join(lines))
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
