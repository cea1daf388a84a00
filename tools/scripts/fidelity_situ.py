#!/usr/bin/env python3
# The latency that the messages an op waits for have in a pipeline run, from the compute calibration's replay.
"""How much later than the calibrated links say the messages an op waits for arrive, in a pipeline.

    tools/scripts/fidelity_situ.py OUT [--adagrouper BIN] [--pooled] [--apply]

OUT is the output directory of a tools/scripts/fidelity.sh run with --calib-compute on:
its calibration.json (the links' fit) and calib/ (the compute calibration's 1F1B replay:
plan-compute.json, pipeline-compute.json, compute.json, run-compute.json and its
timeline). The replay is simulated on the calibrated links at the run's shaped rate with
the ops' calibrated overhead (calib/situ-sim.json and its timeline), and each of its
measured iterations is walked back along what it waited for (fidelity_path.py). The
latency in situ is the mean, over the transfers on those paths, of the measured time
from the later of the message's producer's end and the previous message's arrival on
its channel to its arrival, less the simulated one: what the links' calibration, made
with messages alone on their links, leaves out of a pipeline's messages on a busy host
(a receiving thread that has to wake up, a core that another rank holds). It is 0.03 to
0.18 ms on the 2-core development machine with 2 to 4 ranks; docs/fidelity.md, "The
critical path, step by step". The iterations in which the host froze
(fidelity_calib.FREEZE_S: an op held 20 ms beyond its profile) are left out and listed
per replay (frozen_iterations); "iterations" counts the others.

Where the compute calibration says the host was short of CPU while it ran
(fidelity_calib.host_warning: an op overhead above 5% of a forward), what the replay's
messages took then is not what the runs' will take, and the latency in situ is 0 (the
measurement says why). Prints the measurement as JSON: situ_latency_s, the path's
transfers, every step class's total (us) over the replay's iterations, and
"not_measured" with the reason where it is 0 for that. With --apply, also writes it into
calibration.json as situ_latency_s, which fidelity_calib.py network adds to every
channel's latency (at least 0 in all). "lags_s" lists each transfer's own (measured
less simulated, s), whose mean it is: the spread that fidelity_spread.py --messages
draws from. The measurement itself ignores a situ_latency_s
already there.

--pooled: the compute calibration of fidelity.sh --calib-compute-spread N, which
replayed the same 1F1B plan again after each candidate (calib/run-compute-2,
run-compute-3, ...): every replay is simulated with the overhead of all of them pooled
(calib/compute-pooled.json), and the latency in situ is the mean over the transfers on
the critical paths of every replay's iterations. --apply then writes a copy of
calibration.json with it as calibration-pooled.json, and leaves calibration.json (the
first replay's) as it is.

Exit status 2 with one line on bad arguments or a run without the files above.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

import fidelity_calib
import fidelity_path


def fail(msg):
    print(f"fidelity_situ.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: not readable JSON ({e})")


def compute_candidate(plan_path):
    """(index, micro-batch size) of the candidate the compute calibration replays (fidelity.sh
    asks here): the 1F1B one with the smallest micro-batch size."""
    cands = load(plan_path).get("candidates")
    picks = [(c.get("micro_batch_size"), i) for i, c in enumerate(cands or []) if c.get("schedule") == "1f1b"]
    if not picks:
        fail(f"{plan_path}: candidates: no 1f1b candidate (the compute calibration's plan?)")
    b, i = min(picks)
    return i, b


def replays(c, pooled):
    """The compute calibration's replays in calib/ directory c that the measurement reads
    (names without .json): run-compute, and with `pooled` the later ones in their order
    (run-compute-2, run-compute-3, ...: fidelity.sh --calib-compute-spread)."""
    later = []
    if pooled:
        for path in glob.glob(os.path.join(c, "run-compute-*.json")):
            m = re.fullmatch(r"run-compute-(\d+)\.json", os.path.basename(path))
            if m:
                later.append(int(m.group(1)))
    return ["run-compute"] + [f"run-compute-{k}" for k in sorted(later)]


def simulate(out, exe, replay, overhead, source):
    """Simulates one of the compute calibration's replays (calib/REPLAY.json) as the model
    sees it, with the ops' overhead of a compute calibration's measurement (its stages;
    `source` names where it came from, for the error); (measured summary, the simulated
    one's path: situ-sim.json, or situ-sim-K.json for run-compute-K)."""
    c = os.path.join(out, "calib")
    run = load(os.path.join(c, replay + ".json"))
    pipe = load(os.path.join(c, "pipeline-compute.json"))
    if len(overhead) != len(pipe.get("stages", [])):
        fail(f"{source}: stages: one per stage of {c}/pipeline-compute.json expected")
    for st, row in zip(pipe["stages"], overhead):
        st["op_overhead_s"] = max(0.0, row.get("op_overhead_s", 0.0))
    with open(os.path.join(c, "situ-pipeline.json"), "w") as f:
        json.dump(pipe, f, indent=1)
    cal_path = os.path.join(out, "calibration.json")
    cal = load(cal_path)
    top = max(lv["nominal_bytes_per_s"] for lv in cal["levels"])
    net = os.path.join(c, "situ-net.json")
    fidelity_calib.network(cal_path, top, net, "constant", bucket=cal.get("bucket_bytes", 0.0), situ=False)
    sim = os.path.join(c, "situ-sim" + replay[len("run-compute"):] + ".json")
    r = subprocess.run([exe, "simulate", "--plan", os.path.join(c, "plan-compute.json"), "--candidate",
                        str(compute_candidate(os.path.join(c, "plan-compute.json"))[0]), "--pipeline",
                        os.path.join(c, "situ-pipeline.json"), "--network", net, "--iterations",
                        str(len(run["iteration_times_s"])), "--start-time", str(run.get("start_time_s", 0.0)),
                        "--output", sim, "--timeline", sim[:-5] + ".trace.json"], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"adagrouper simulate failed: {(r.stderr.strip().splitlines() or ['exit status %d' % r.returncode])[-1]}")
    return run, sim


def measure(out, exe, pooled=False, compute=None):
    """The latency in situ of run directory `out` and the steps it comes from: of its
    compute calibration's first replay with calib/compute.json's overhead, or with
    `pooled` of every replay (replays()) with calib/compute-pooled.json's, their
    transfers together. `compute`, a compute calibration's measurement
    (fidelity_calib.compute's), gives the overhead in place of that file's."""
    c = os.path.join(out, "calib")
    name = "compute-pooled.json" if pooled else "compute.json"
    names = replays(c, pooled)
    for f in ["plan-compute.json", "pipeline-compute.json"] + ([name] if compute is None else []) + [
            n + ext for n in names for ext in (".json", ".trace.json")]:
        if not os.path.exists(os.path.join(c, f)):
            fail(f"{c}/{f}: missing (a run of fidelity.sh --calib-compute on)")
    if not os.path.exists(os.path.join(out, "calibration.json")):
        fail(f"{out}/calibration.json: missing (a fidelity.sh run's output directory?)")
    source = "the compute calibration measured again (not a file)"
    if compute is None:
        source = os.path.join(c, name)
        compute = load(source)
    warning = fidelity_calib.host_warning(compute)
    if warning:
        return {"situ_latency_s": 0.0, "not_measured": f"the compute calibration's host was short of CPU: {warning}"}
    steps = dict.fromkeys(fidelity_path.CLASSES, 0.0)
    counts = dict.fromkeys(fidelity_path.CLASSES, 0)
    path, iterations, frozen = [], 0, []
    pipe = fidelity_calib.read_pipeline(os.path.join(c, "pipeline-compute.json"))
    b = compute_candidate(os.path.join(c, "plan-compute.json"))[1]
    for name in names:
        run, sim = simulate(out, exe, name, compute.get("stages", []), source)
        measured = fidelity_path.Timeline(os.path.join(c, name + ".trace.json"))
        simulated = fidelity_path.Timeline(sim[:-5] + ".trace.json")
        graph = fidelity_path.Graph(measured)
        frozen.append(fidelity_calib.stage_op_costs(os.path.join(c, name + ".trace.json"), pipe, b)[1])
        for it in range(len(run["iteration_times_s"])):
            if it in frozen[-1]:
                continue
            iterations += 1
            walked = fidelity_path.walk_iteration(measured, simulated, graph, {}, it, path)
            if not walked:
                continue
            _, s, n, _ = walked
            for k in fidelity_path.CLASSES:
                steps[k] += s[k]
                counts[k] += n[k]
    if not counts["transfer"]:
        fail(f"{c}/{names[0]}.trace.json: no transfer on the replay's critical paths")
    lags = [step[0] * 1e-6 for step in path if step[1] == "transfer"]
    return {"situ_latency_s": steps["transfer"] / counts["transfer"] * 1e-6, "transfers": counts["transfer"],
            "iterations": iterations, "replays": len(names), "frozen_iterations": frozen, "steps_us": steps,
            "counts": counts, "lags_s": lags}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="a fidelity.sh output directory (calibration.json, calib/)")
    ap.add_argument("--adagrouper", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "adagrouper"))
    ap.add_argument("--apply", action="store_true", help="write it into calibration.json as situ_latency_s")
    ap.add_argument("--pooled", action="store_true",
                    help="every replay of the compute calibration pooled; --apply writes calibration-pooled.json")
    ap.error = fail
    a = ap.parse_args()
    if not os.path.isdir(a.out):
        fail(f"{a.out}: not a directory")
    if not os.access(a.adagrouper, os.X_OK):
        fail(f"--adagrouper: {a.adagrouper} is not an executable (build it: tools/run.sh build)")
    m = measure(a.out, a.adagrouper, a.pooled)
    if a.apply:
        cal = load(os.path.join(a.out, "calibration.json"))
        cal["situ_latency_s"] = m["situ_latency_s"]
        path = os.path.join(a.out, "calibration-pooled.json" if a.pooled else "calibration.json")
        with open(path + ".tmp", "w") as f:  # renamed when complete
            json.dump(cal, f, indent=1)
            f.write("\n")
        os.replace(path + ".tmp", path)
    json.dump(m, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
