#!/usr/bin/env python3
"""Re-simulates the candidates of fidelity runs with one thing changed, against the same measurements.

    tools/scripts/fidelity_resim.py [--adagrouper BIN] [--burst-bytes B|auto [--refit [--tiny-quantile Q] [--latency-quantile Q]]]
                                    [--measured-compute] [--latency-situ on|off]
                                    [--latency-scale S] [--stall-fence K] [--op-spread N]
                                    [--message-spread on|off] [--pooled on|off] OUT [OUT ...]

For every run directory under OUT (one with pairs.txt, as tools/scripts/fidelity.sh
writes it), each candidate is simulated again with the same plan, pipeline, network,
iterations and start time as the run's own prediction, changed as asked, and both
predictions are compared with the measurement by `adagrouper compare` (free-running).
Give at least one of:

--burst-bytes B: a token bucket of B bytes on every channel (`burst_bytes`,
docs/model.md "Shaped links"). `auto` takes the bucket tbf had in that run
(`fidelity.sh --bucket fixed` or `lowest` prints it in its log: run-J.log beside the
run directory, or OUT.log beside a shipped scenario's OUT, when its output was saved
there). With --refit the channels are also fitted again with the bucket in the fit
(fidelity_calib.py fit --bucket-bytes B, on the run's own calibration replays in calib/
above it): those replays start most messages on an idle link, so their head start is
in the fitted rate unless the fit knows the bucket. The refit takes the replays the run
had: small and large (the two-size line), and tiny where the run was calibrated with
--calib-latency tiny (the latency from them, the rate from each large message with the
head start its bucket had). The latency is the quantile of the tiny messages' times that
the run's own fit took (its calibration.json), or --tiny-quantile Q's (0 to 1).
--latency-quantile Q gives the model another quantile of the tiny messages' times as
each channel's latency than the one the rate is fitted with (a diagnostic: the
pipelines' messages, spaced like the tiny ones, took 0.07 to 0.09 ms longer than the
model on 3 and 4 ranks; docs/fidelity.md, "Two latencies").
--refit writes calibration-refit.json into the run directory, and the networks from it
and the run's recorded rates (recorded-I.csv, recorded-I-F-T.csv).

--measured-compute: every op of candidate I takes the duration the replay measured for
it (stages-I.csv, `simulate --stage-trace`) instead of the profile's, so that what is
left of the error is the network's and the schedule's, not the host's CPU (ranks that
share cores, a descheduled thread).

--latency-situ on|off: every channel's latency with the latency in situ that
fidelity_situ.py measures on the run's own compute calibration (on), or without any
(off), in place of what the run's prediction had (its calibration.json's situ_latency_s,
0 before fidelity.sh --latency-situ); docs/fidelity.md, "The critical path, step by
step". With --refit the refitted channels get it.

--latency-scale S: every channel's latency (latency_s, top-level and per channel) times
S. A diagnostic, not a model: how much of the error the calibrated latency explains
(docs/fidelity.md, "The host's CPU, op by op").

--stall-fence K: the ops' overhead calibrated again from the run's own compute
calibration (calib/run-compute.trace.json above it, fidelity.sh --calib-compute on),
leaving out the ops beyond K interquartile ranges above their stage's third quartile
(fidelity_calib.py compute --stall-fence; inf keeps every op, as runs before the fence
did); writes pipeline-resim.json into the run directory.

--op-spread N: each candidate predicted as fidelity.sh --op-spread N predicts it: the
mean of N predictions, each with every op of the changed prediction's timeline lasting
its duration there plus a cost drawn from the costs beyond their profile of the run's
compute calibration's ops, less their mean (tools/scripts/fidelity_spread.py; the
run's own stall fence, or --stall-fence K's); 0: every op at the mean. Without it a
run predicted with the ops' spread is re-simulated with the same number of draws
(with --measured-compute, none); docs/fidelity.md, "The ops' spread".

--message-spread on|off: with the ops' spread, each draw also gives every message a
latency drawn around its channel's from the lags of the run's compute calibration's
transfers (fidelity_situ.py's lags_s; fidelity_spread.py predict --messages), or none
(off). Without it a run is re-simulated as its own prediction was made
(message-spread.json); docs/fidelity.md, "The messages' spread".

--pooled on|off: the compute calibration's replays pooled (on: fidelity.sh
--calib-compute-spread's, calib/run-compute and run-compute-K) or its first replay alone
(off), in place of what the run's predictions read (compute-replays.json in the run
directory marks those that pooled): the ops' overhead (calibrated again with the run's
own stall fence, or --stall-fence K's), their costs for the ops' spread and the latency
in situ (measured again, where the run had it or --latency-situ on asks for it) all
follow it; docs/fidelity.md, "The compute calibration spread over the run".

Prints, per run directory and candidate, the MAPE of the run's own prediction and of
the changed one, each with its mean signed error per iteration in parentheses (+: the
measurement was faster), and the bucket (bytes) of the changed one's channels; writes
net-resim-I.json (with a bucket or scaled latencies), sim-resim-I.json,
pairs-resim.txt and compare-resim.json into the run directory.

Exit status 2 with one line on bad arguments or a directory that is not a fidelity run.
"""
import argparse
import glob
import hashlib
import json
import math
import os
import re
import subprocess
import sys

import fidelity_calib
import fidelity_situ
import fidelity_spread


def fail(msg):
    print(f"fidelity_resim.py: {msg}", file=sys.stderr)
    sys.exit(2)


def run_dirs(roots):
    for root in roots:
        if not os.path.isdir(root):
            fail(f"{root}: not a directory")
        found = False
        for d, _, files in sorted(os.walk(root)):
            if "pairs.txt" in files and "plan.json" in files:
                found = True
                yield d
        if not found:
            fail(f"{root}: no fidelity run under it (no directory with pairs.txt and plan.json)")


def upward(d, levels=3):
    """d and the directories above it, nearest first."""
    d = os.path.abspath(d)
    for _ in range(levels + 1):
        yield d
        d = os.path.dirname(d)


def bucket_of(d, given):
    if given != "auto":
        return given
    # fidelity.sh --random-scenarios logs each run beside its directory: random-I/run-J.log.
    # The model's bucket where the log gives it; a run from before the model's bucket was
    # the payload of tbf's whole frames gave the model tbf's own.
    for up in upward(d):
        log = up + ".log"
        text = open(log).read() if os.path.exists(log) else ""
        m = (re.search(r"the model's bucket on \((\d+) bytes", text)
             or re.search(r"bucket (?:fixed|lowest) \((\d+) bytes at every rate\)", text))
        if m:
            return float(m.group(1))
    fail(f"{d}: --burst-bytes auto: no log above it says 'bucket fixed (N bytes' or 'bucket lowest (N bytes' "
         "(a run of fidelity.sh --bucket fixed or lowest)")


def own_pooled(d):
    """Whether the run's own predictions read its compute calibration's replays pooled
    (fidelity.sh --calib-compute-spread writes compute-replays.json)."""
    return os.path.exists(os.path.join(d, "compute-replays.json"))


def pipeline_of(d):
    """The pipeline the run's prediction read: the nearest pipeline-sim-pooled.json (where
    its predictions pooled the compute calibration's replays), pipeline-sim.json
    (fidelity.sh --calib-compute on: the profile with the ops' calibrated overhead) or
    pipeline.json (a drawn scenario's) in d or above it, in that order at each level;
    else the file the plan names as its pipeline (a shipped scenario's)."""
    names = ("pipeline-sim-pooled.json",) * own_pooled(d) + ("pipeline-sim.json", "pipeline.json")
    for up in upward(d):
        for name in names:
            if os.path.exists(os.path.join(up, name)):
                return os.path.join(up, name)
    named = [x for x in json.load(open(os.path.join(d, "plan.json"))).get("inputs", []) if x["role"] == "pipeline"]
    if not named or not os.path.exists(named[0]["path"]):
        fail(f"{d}: no pipeline.json in it or above it, and the pipeline its plan names is gone")
    if hashlib.sha256(open(named[0]["path"], "rb").read()).hexdigest() != named[0].get("sha256"):
        fail(f"{d}: no pipeline.json in it or above it, and {named[0]['path']} has changed since the plan was made")
    return named[0]["path"]


def calib_dir(d):
    """The calibration replays above run directory d: (calib/, sizes, shaped rates as named)."""
    for up in upward(d):
        c = os.path.join(up, "calib")
        names = [os.path.basename(p)[4:-11] for p in glob.glob(os.path.join(c, "run-*-*.trace.json"))]
        if names:  # run-LEVEL-SIZE; run-compute (the ops' calibration) is not a link's
            sizes = [s for s in ("small", "large", "tiny") if any(n.endswith("-" + s) for n in names)]
            levels = sorted({n.rsplit("-", 1)[0] for n in names}, key=float)
            return c, sizes, levels
    fail(f"{d}: --refit: no calib/ with replays (run-LEVEL-SIZE.trace.json) in it or above it")


def refit(d, burst, tiny_quantile=None, latency_quantile=None):
    """calibration-refit.json in d: the run's replays fitted with a bucket of `burst` bytes
    and the latency at tiny_quantile of the tiny messages (None: the quantile the run's own
    fit took, which its calibration.json beside calib/ records, else the default); on a
    ring (that calibration.json says "ring": N), with the ring's link closed as the run's
    own fit closed it."""
    c, sizes, levels = calib_dir(d)
    own = os.path.join(os.path.dirname(c), "calibration.json")
    own_doc = json.load(open(own)) if os.path.exists(own) else {}
    if tiny_quantile is None:
        tiny_quantile = own_doc.get("tiny_quantile", fidelity_calib.TINY_QUANTILE)
    if latency_quantile is None:
        latency_quantile = own_doc.get("latency_quantile")
    doc = fidelity_calib.fit(c, sizes, levels, burst, tiny_quantile, latency_quantile)
    ring = own_doc.get("ring")
    if ring:
        fidelity_calib.close_ring(doc, ring)
    path = os.path.join(d, "calibration-refit.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return path, max(float(x) for x in levels)


def scale_latency(net, scale, path):
    """Every latency_s of network `net` (read from `path`) times `scale`."""
    for where in [net] + net.get("channels", []):
        if "latency_s" in where:
            if not isinstance(where["latency_s"], (int, float)):
                fail(f"{path}: latency_s: --latency-scale needs a number of seconds, got {where['latency_s']!r}")
            where["latency_s"] *= scale


def resim_network(d, i, burst, refitted, latency_scale, latency_add=None):
    """The network of candidate i's new prediction: the run's own when nothing in it
    changes, else net-resim-I.json: with the bucket, its channels refitted (refitted: the
    calibration and its highest rate) or as the run had them, its latencies scaled, and
    latency_add (s) added to each of them (at least 0 each)."""
    own = os.path.join(d, f"net-sim-{i}.json")
    if not burst and latency_scale is None and latency_add is None:
        return own
    path = os.path.join(d, f"net-resim-{i}.json")
    if refitted:
        recorded = os.path.join(d, f"recorded-{i}.csv")
        if os.path.exists(recorded):
            fidelity_calib.network(refitted[0], refitted[1], path, "trace", recorded, True, burst)
        else:  # the constant scenario: its one rate
            fidelity_calib.network(refitted[0], refitted[1], path, "constant", bucket=burst)
        net = json.load(open(path))
    else:
        net = json.load(open(own))
        if burst:
            net["burst_bytes"] = burst
    if latency_scale is not None:
        scale_latency(net, latency_scale, own)
    if latency_add is not None:
        for ch in net.get("channels", []):
            ch["latency_s"] = max(0.0, ch.get("latency_s", net.get("latency_s", 0.0)) + latency_add)
    with open(path, "w") as f:
        json.dump(net, f, indent=1)
    return path


def call(args):
    """Runs an adagrouper command; its error, when it fails, is this tool's one line."""
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        fail(f"adagrouper {args[1]} failed: {why}")


def compare(exe, d, pairs_name, out_name):
    """(label, MAPE, mean signed error) per candidate of `adagrouper compare` on pairs_name."""
    call([exe, "compare", "--pairs", os.path.join(d, pairs_name), "--plan", os.path.join(d, "plan.json"),
          "--output", os.path.join(d, out_name)])
    doc = json.load(open(os.path.join(d, out_name)))
    return [(c["label"], c["mape_pct"], sum(x["error_pct"] for x in c["iterations"]) / max(1, len(c["iterations"])))
            for c in doc["comparisons"]]


def compute_calibration(d, option, pooled=False):
    """(timelines, micro-batch size, the run's stall fence) of the compute calibration
    above run directory d (calib/run-compute.trace.json and compute.json): its first
    replay's timeline, or with `pooled` every replay's (fidelity_situ.replays); `option`
    names the one that needs it."""
    for up in upward(d):
        c = os.path.join(up, "calib")
        measured = os.path.join(c, "compute.json")
        if os.path.exists(os.path.join(c, "run-compute.trace.json")) and os.path.exists(measured):
            break
    else:
        fail(f"{d}: {option}: no calib/run-compute.trace.json and compute.json in it or above it "
             "(a run of fidelity.sh --calib-compute on)")
    try:
        doc = json.load(open(measured))
        b, fence = doc["micro_batch_size"], doc.get("stall_fence")
    except (ValueError, KeyError, TypeError):
        fail(f"{measured}: micro_batch_size: the compute calibration's micro-batch size expected")
    timelines = [os.path.join(c, name + ".trace.json") for name in fidelity_situ.replays(c, pooled)]
    return timelines, b, math.inf if fence is None else fence


def recalibrate_compute(d, pipeline, fence, pooled):
    """pipeline-resim.json in d: `pipeline` with each stage's op overhead calibrated again
    from the run's compute calibration (every replay's with `pooled`, else the first's)
    with stall fence `fence` (None: the run's own); (its path, the measurement)."""
    timelines, b, own_fence = compute_calibration(d, "--stall-fence" if fence is not None else "--pooled", pooled)
    out = os.path.join(d, "pipeline-resim.json")
    return out, fidelity_calib.compute(timelines, pipeline, b, out, own_fence if fence is None else fence)


def spread_costs(d, pipeline, fence, pooled):
    """The compute calibration's ops' costs beyond their profile (seconds) above run directory
    d (every replay's with `pooled`, else the first's), less what stall fence `fence`
    leaves out (None: the run's own fence)."""
    timelines, b, own_fence = compute_calibration(d, "--op-spread", pooled)
    return fidelity_spread.calibration_costs(timelines, pipeline, b, own_fence if fence is None else fence)


def own_draws(d):
    """How many draws of the ops' costs the run's own predictions averaged (fidelity.sh
    --op-spread writes op-spread.json; 0: none)."""
    path = os.path.join(d, "op-spread.json")
    try:
        return json.load(open(path))["draws"] if os.path.exists(path) else 0
    except (ValueError, KeyError, TypeError):
        fail(f"{path}: draws: the number of draws of the run's predictions expected")


def own_message_spread(d):
    """Whether the run's own predictions drew the messages' latencies (fidelity.sh
    --message-spread writes message-spread.json)."""
    return os.path.exists(os.path.join(d, "message-spread.json"))


def message_lags(exe, d, pooled, compute=None):
    """The lags (s) of the transfers on the critical paths of the compute calibration above
    run directory d, its first replay's or with `pooled` every replay's (calib/situ.json's
    or situ-pooled.json's, else, or with `compute` the overhead of a compute calibration's
    measurement, measured again by fidelity_situ.py); None where the latency in situ was
    not measured."""
    for up in upward(d):
        if os.path.exists(os.path.join(up, "calibration.json")) and os.path.isdir(os.path.join(up, "calib")):
            break
    else:
        fail(f"{d}: --message-spread: no calibration.json and calib/ in it or above it")
    path = os.path.join(up, "calib", "situ-pooled.json" if pooled else "situ.json")
    doc = json.load(open(path)) if os.path.exists(path) and compute is None else {}
    if "lags_s" not in doc:
        doc = fidelity_situ.measure(up, exe, pooled, compute)
    return doc.get("lags_s") or None


def simulate_drawn(base, d, i, draws, costs, out, lags=None):
    """`out`: candidate i predicted by `base` (simulate without --output), averaged over
    `draws` draws of the ops' costs (fidelity_spread.py), each op drawn around its
    duration in that prediction's own timeline, and with `lags` each message's latency
    drawn around its channel's."""
    timeline = os.path.join(d, f"sim-resim-{i}.trace.json")
    call(base + ["--output", out, "--timeline", timeline])
    messages = None
    if lags:
        messages = (fidelity_spread.predicted_messages(timeline),
                    fidelity_spread.channel_latencies(fidelity_spread.network_of(base)), lags)
    fidelity_spread.predict(base, fidelity_spread.predicted_ops(timeline), costs, draws, i, out, messages)


def situ_change(exe, d, situ, refitted, pooled, compute=None):
    """What --latency-situ and --pooled add to each channel's latency of run directory d's
    networks: the latency in situ of its compute calibration (situ "on"; None: as the run
    had it, on or off), its first replay's or with `pooled` every replay's (with
    `compute`, the overhead of that compute calibration's measurement), or none ("off"),
    less what its own networks already had (nothing where the channels are refitted)."""
    for up in upward(d):
        if os.path.exists(os.path.join(up, "calibration.json")) and os.path.isdir(os.path.join(up, "calib")):
            break
    else:
        fail(f"{d}: --latency-situ: no calibration.json and calib/ in it or above it")
    own = json.load(open(os.path.join(up, "calibration-pooled.json" if own_pooled(d) else "calibration.json")))
    if situ is None:
        situ = "on" if "situ_latency_s" in own else "off"
    want = fidelity_situ.measure(up, exe, pooled, compute)["situ_latency_s"] if situ == "on" else 0.0
    had = 0.0 if refitted else own.get("situ_latency_s", 0.0)
    return want - had


def resim(exe, d, burst, with_refit, measured_compute, latency_scale, tiny_quantile=None, fence=None,
          latency_quantile=None, situ=None, spread=None, message_spread=None, pooled=None):
    pairs = [line.split() for line in open(os.path.join(d, "pairs.txt")) if line.strip()]
    pipeline = pipeline_of(d)
    # --pooled: the compute calibration's replays pooled (True) or its first alone (False),
    # in place of what the run's predictions read; the overhead, the costs and the latency
    # in situ all follow it.
    use_pooled = own_pooled(d) if pooled is None else pooled
    compute = None
    if fence is not None or pooled is not None:
        pipeline, measured = recalibrate_compute(d, pipeline, fence, use_pooled)
        compute = measured if pooled is not None else None
    costs = None
    refitted = refit(d, burst, tiny_quantile, latency_quantile) if with_refit else None
    changes_situ = situ is not None or pooled is not None
    latency_add = situ_change(exe, d, situ, refitted, use_pooled, compute) if changes_situ else None
    if message_spread is None:
        message_spread = "on" if own_message_spread(d) else "off"
    lags = message_lags(exe, d, use_pooled, compute) if message_spread == "on" else None
    with open(os.path.join(d, "pairs-resim.txt"), "w") as out:
        for sim_name, run_name in pairs:
            i = re.fullmatch(r"sim-(\d+)\.json", sim_name)
            if not i:
                fail(f"{d}/pairs.txt: '{sim_name}' is not sim-I.json")
            i = i.group(1)
            args = open(os.path.join(d, f"sim-{i}.args")).read().split()
            if measured_compute:
                stages = os.path.join(d, f"stages-{i}.csv")
                if not os.path.exists(stages):
                    fail(f"{d}: --measured-compute: no stages-{i}.csv (the replay's measured op durations)")
                args += ["--stage-trace", stages]
            base = [exe, "simulate", "--plan", os.path.join(d, "plan.json"), "--candidate", i, "--pipeline", pipeline,
                    "--network", resim_network(d, i, burst, refitted, latency_scale, latency_add), *args]
            draws = own_draws(d) if spread is None and not measured_compute else (spread or 0)
            if draws:
                costs = costs or spread_costs(d, pipeline_of(d), fence, use_pooled)
                simulate_drawn(base, d, i, draws, costs, os.path.join(d, f"sim-resim-{i}.json"), lags)
            else:
                call(base + ["--output", os.path.join(d, f"sim-resim-{i}.json")])
            out.write(f"sim-resim-{i}.json {run_name}\n")
    return compare(exe, d, "pairs.txt", "compare-resim-base.json"), compare(exe, d, "pairs-resim.txt",
                                                                             "compare-resim.json")


def own_bucket(d):
    """The bucket the run's own predictions had (burst_bytes of its first network; 0 if none)."""
    first = next(line.split()[0] for line in open(os.path.join(d, "pairs.txt")) if line.strip())
    return json.load(open(os.path.join(d, first.replace("sim-", "net-sim-", 1)))).get("burst_bytes", 0.0)


def burst_arg(text):
    if text is None or text == "auto":
        return text
    return fidelity_calib.number(text, "--burst-bytes", fail, "a number of bytes or auto")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adagrouper", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "adagrouper"))
    ap.add_argument("--burst-bytes", help="a token bucket of this many bytes on every channel, or auto (the run's tbf bucket)")
    ap.add_argument("--refit", action="store_true", help="fit the run's calibration again with the bucket")
    ap.add_argument("--measured-compute", action="store_true", help="each op as long as the replay measured it")
    ap.add_argument("--latency-scale", help="every channel's latency times this factor (a diagnostic)")
    ap.add_argument("--latency-situ", help="on: every channel's latency with the latency in situ of the run's "
                    "compute calibration (fidelity_situ.py); off: without it")
    ap.add_argument("--tiny-quantile", help="with --refit: the quantile of the tiny messages' times taken as "
                    "the latency, 0 to 1 (default: the run's own)")
    ap.add_argument("--latency-quantile", help="with --refit: the quantile of the tiny messages' times the "
                    "model takes as the latency (default: the run's own, else the --tiny-quantile the rate is fitted with)")
    ap.add_argument("--stall-fence", help="the ops' overhead calibrated again with this stall fence "
                    "(interquartile ranges; inf: every op)")
    ap.add_argument("--op-spread", help="each candidate predicted as the mean of N draws of its ops' costs from the "
                    "compute calibration's (0: every op at the mean; default: as the run's own prediction)")
    ap.add_argument("--message-spread", help="on: with the ops' spread, each message's latency drawn from the lags "
                    "of the compute calibration's transfers; off: at the channel's (default: as the run's own)")
    ap.add_argument("--pooled", help="on: the compute calibration's replays pooled (fidelity.sh "
                    "--calib-compute-spread); off: its first replay alone (default: as the run's own)")
    ap.add_argument("out", nargs="+")
    ap.error = fail  # one line, exit 2
    a = ap.parse_args()
    a.burst_bytes = burst_arg(a.burst_bytes)
    if a.latency_scale is not None:
        a.latency_scale = fidelity_calib.number(a.latency_scale, "--latency-scale", fail, "a factor >= 0")
    if a.stall_fence is not None:
        a.stall_fence = fidelity_calib.stall_fence_arg(a.stall_fence, "--stall-fence", fail)
    if a.op_spread is not None:
        a.op_spread = 0 if a.op_spread == "0" else fidelity_spread.draws_arg(a.op_spread, "--op-spread", fail)
        if a.op_spread and a.measured_compute:
            fail("--op-spread: not with --measured-compute (each gives the ops' durations)")
    if a.message_spread not in (None, "on", "off"):
        fail(f"--message-spread: on or off, got '{a.message_spread}'")
    if a.message_spread == "on" and (a.measured_compute or a.op_spread == 0):
        fail("--message-spread on: needs the ops' spread (the messages are drawn with the ops' draws)")
    if a.latency_situ not in (None, "on", "off"):
        fail(f"--latency-situ: on or off, got '{a.latency_situ}'")
    if a.pooled not in (None, "on", "off"):
        fail(f"--pooled: on or off, got '{a.pooled}'")
    if (a.burst_bytes is None and not a.measured_compute and a.latency_scale is None and a.stall_fence is None
            and a.latency_situ is None and a.op_spread is None and a.message_spread is None and a.pooled is None):
        fail("nothing to change: give --burst-bytes B|auto, --measured-compute, --latency-scale S, --stall-fence K, "
             "--latency-situ on|off, --op-spread N, --message-spread on|off or --pooled on|off")
    if a.refit and a.burst_bytes is None:
        fail("--refit: needs --burst-bytes (the bucket the fit assumes)")
    if a.tiny_quantile is not None:
        if not a.refit:
            fail("--tiny-quantile: only with --refit (the fit it changes)")
        a.tiny_quantile = fidelity_calib.quantile_arg(a.tiny_quantile, "--tiny-quantile", fail)
    if a.latency_quantile is not None:
        if not a.refit:
            fail("--latency-quantile: only with --refit (the fit it changes)")
        a.latency_quantile = fidelity_calib.quantile_arg(a.latency_quantile, "--latency-quantile", fail)
    if not os.access(a.adagrouper, os.X_OK):
        fail(f"--adagrouper: {a.adagrouper} is not an executable (build it: tools/run.sh build)")
    rows = []
    for d in run_dirs(a.out):
        burst = bucket_of(d, a.burst_bytes) if a.burst_bytes is not None else 0.0
        base, changed = resim(a.adagrouper, d, burst, a.refit, a.measured_compute, a.latency_scale, a.tiny_quantile,
                              a.stall_fence, a.latency_quantile, a.latency_situ, a.op_spread, a.message_spread,
                              None if a.pooled is None else a.pooled == "on")
        shown = burst if a.burst_bytes is not None else own_bucket(d)
        rows += [(d, label, shown, m0, e0, m1, e1) for (label, m0, e0), (_, m1, e1) in zip(base, changed)]
    refit_txt = "refit" + "".join(f", {what} {q:g}" for what, q in (("tiny quantile", a.tiny_quantile),
                                                                     ("latency quantile", a.latency_quantile))
                                  if q is not None)
    what = ", ".join(x for x, on in ((refit_txt, a.refit), ("bucket", a.burst_bytes is not None),
                                       ("measured compute", a.measured_compute),
                                       (f"latency x {a.latency_scale or 0:g}", a.latency_scale is not None),
                                       (f"stall fence {a.stall_fence}", a.stall_fence is not None),
                                       (f"latency in situ {a.latency_situ}", a.latency_situ is not None),
                                       (f"ops' spread, {a.op_spread} draws", a.op_spread is not None),
                                       (f"messages' spread {a.message_spread}", a.message_spread is not None),
                                       (f"pooled {a.pooled}", a.pooled is not None)) if on)
    print(f"{'run directory':40} {'candidate':28} {'bucket B':>9} {'MAPE % (signed)':>16}  {what}")
    for d, label, burst, m0, e0, m1, e1 in rows:
        print(f"{d[-40:]:40} {label[:28]:28} {burst:9.6g} {m0:7.2f} ({e0:+6.2f}) {m1:13.2f} ({e1:+6.2f})")


if __name__ == "__main__":
    main()
