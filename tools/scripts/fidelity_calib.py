#!/usr/bin/env python3
"""The fidelity testbed's calibration: the fit of replayed transfers and the network it
gives; the ops' cost beyond their profile and the pipeline it gives.

    tools/scripts/fidelity_calib.py fit CALIB_DIR SIZES LEVEL [LEVEL ...] [--bucket-bytes B] [--ring N]
                                    [--tiny-quantile Q]
    tools/scripts/fidelity_calib.py network CALIBRATION NOMINAL FILE KIND [RATES_CSV [per-channel]]
    tools/scripts/fidelity_calib.py compute TIMELINE[,TIMELINE...] PIPELINE B OUT [--stall-fence K]

fit: per shaped rate LEVEL (bytes/s) and channel, the effective rate R and per-message
latency L (transfer time = L + bytes / R) from the replays tools/scripts/fidelity.sh
ran in CALIB_DIR (run-LEVEL-SIZE.trace.json, SIZES "small large" or one of them): each
gives a channel's median transfer time, and the two sizes the line through the two
medians; a latency outside [0, 1 ms] (noise, or the head start of a shaper's bucket) is
clamped and the rate taken from the large messages. With --bucket-bytes B the fit
assumes a token bucket of B bytes in front of the rate (docs/model.md, "Shaped links"),
full at each message, so that a message of x bytes takes L + (x - B) / R. SIZES may
also name tiny (with --bucket-bytes only): replays of messages smaller than the bucket,
spaced for it to refill, which leave at once; the latency is then the 10th percentile of
their times (--tiny-quantile Q: their Q-quantile, 0 <= Q <= 1; the 10th percentile is a
message the host did not delay: in those replays both ranks send at once, and on 2 cores
the median ran 0.04 to 0.27 ms from run to run where the pipelines' messages saw 0.03 to
0.07; on a quiet host the median came closer to the runs; docs/fidelity.md, "A message's
last packet", "The ring's stall was the receive stream"),
and the rate comes from the largest other size with it, each message given the head
start the bucket had for it (none for a message sent as the previous one ended; the
model's rule). With --ring N (a ring of N namespaces: netns.sh create N --ring) the ring's
link N-1 gets both its channels, N-1 -> 0 and 0 -> N-1, at each level with the mean rate
and latency of the chain's channels: the replays are 1F1B, which never use it, and every
link is shaped alike. Prints the calibration JSON.

network: a network file FILE with the calibrated channels of CALIBRATION. KIND
constant: each channel's effective rate at the shaped rate NOMINAL; trace: RATES_CSV
(time_s,shaped bytes/s; with per-channel, RATES_CSV-F-T.csv for channel F->T where it
exists) with every value times the channel's efficiency at that rate (interpolated
linearly between the calibrated levels), written beside FILE as FILE-F-T.csv. With
--bucket-bytes B every channel gets burst_bytes B. Where CALIBRATION has situ_latency_s
(tools/scripts/fidelity_situ.py --apply), every channel's latency is its own plus that
(at least 0).

compute: per stage of a replay of PIPELINE at micro-batch size B (its measured
TIMELINE; several replays of the same plan as TIMELINE,TIMELINE,...: their ops pooled,
"replays" in the measurement counts them), the mean cost of an op beyond its profiled duration: from the instant the
model would start it (the later of the stage's previous op's end and its input's
arrival) to its end, minus the profile's duration; an op that cost more than K
interquartile ranges above its stage's third quartile (--stall-fence K; default inf,
every op counts; 3 is Tukey's far-out fence) counts as stalled by the host and is left
out of the mean, and counted. Every op of an iteration in which one op cost more than
20 ms beyond its profile (the host froze) is left out, and the iterations are listed
(frozen_iterations, per replay). Writes PIPELINE with that overhead
as each stage's op_overhead_s (the model adds it to every op: F, B, and each half of a
split backward; with more model stages than the replay had stages, the stages' mean to
each) to OUT; prints the measurement as JSON.

Exit status 2 with one line on bad arguments.
"""
import csv
import json
import math
import os
import statistics
import sys


def fail(msg):
    print(f"fidelity_calib.py: {msg}", file=sys.stderr)
    sys.exit(2)


def transfers(path):
    """Per channel (from, to) of a replay's timeline: its transfers (bytes, start, seconds)
    in the order they started (start in seconds on the timeline's clock)."""
    per = {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("cat") == "transfer" and e.get("flow_out"):
            ends = e["name"].split()[1].split("->")
            per.setdefault((int(ends[0]), int(ends[1])), []).append(
                (e["args"]["bytes"], e["ts"] * 1e-6, e["dur"] * 1e-6))
    return {k: sorted(v, key=lambda m: m[1]) for k, v in per.items()}


def medians_of(per):
    """Per channel of transfers(...): (bytes, median transfer time, count)."""
    return {k: (v[0][0], statistics.median(t for _, _, t in v), len(v)) for k, v in per.items()}


# The quantile of the tiny messages' times taken as the latency (fit's docstring above).
TINY_QUANTILE = 0.1


def quantiles(path, q):
    """Per channel (from, to) of a replay's timeline: (bytes, the q-quantile of its transfer
    times (the nearest sample at or below it), count)."""
    out = {}
    for k, v in transfers(path).items():
        times = sorted(t for _, _, t in v)
        out[k] = (v[0][0], times[int(q * (len(times) - 1))], len(times))
    return out


def bucket_rate(messages, bucket, lat):
    """The rate of a channel with a bucket of `bucket` bytes and latency `lat` from its
    messages (bytes, start, seconds), each given the head start the model gives it: the
    tokens that accrued at the rate since the previous message ended, from that end to
    its own start plus the latency (docs/model.md, "Shaped links"), at most the bucket;
    the first finds it full. A message of x bytes taking t after a refill window g then
    gives R = (x - B) / (t - L) where g R >= B, else R = x / (t - L + g). The median over
    the messages: messages sent back to back get no head start, which a fit assuming a
    full bucket at each would take for a slower rate."""
    rates, prev_end = [], None
    for x, start, t in messages:
        busy = max(t - lat, 1e-9)
        full = (x - bucket) / busy
        g = math.inf if prev_end is None else max(start + lat - prev_end, 0.0)
        rates.append(full if g * full >= bucket else x / (busy + g))
        prev_end = start + t
    return statistics.median(rates)


def fit_channel(small, large, bucket=0.0, tiny=None):
    """(latency, rate) through (bytes, seconds) of the small and the large messages (small
    None: one size), with a bucket of `bucket` bytes giving each message a head start;
    with `tiny`, (bytes, seconds) of messages within the bucket, the latency is its time."""
    xb, tb = large
    lat, rate = 0.0, (xb - bucket) / tb
    if tiny is not None:  # capped, so that a stray tiny time cannot leave no time for the bytes
        lat = min(max(tiny[1], 0.0), tb / 2)
        return lat, (xb - bucket) / (tb - lat)
    if small is not None:
        xa, ta = small
        if tb > ta and xb > xa:
            rate = (xb - xa) / (tb - ta)
            lat = ta - (xa - bucket) / rate
        if not 0 <= lat <= 1e-3:
            lat = min(max(lat, 0.0), 1e-3)
            rate = (xb - bucket) / (tb - lat)
    return lat, rate


def fit(calib_dir, sizes, levels, bucket=0.0, tiny_quantile=TINY_QUANTILE, latency_quantile=None):
    """The calibration of the replays in calib_dir: levels are the shaped rates as their
    files name them (run-LEVEL-SIZE.trace.json); where sizes has tiny, the rate fitted
    with the tiny_quantile of the tiny messages' times as the latency, and the latency
    the model gets their latency_quantile (None: the same)."""
    out = []
    for name in levels:
        level = float(name)
        msgs = [transfers(os.path.join(calib_dir, f"run-{name}-{s}.trace.json")) for s in sizes if s != "tiny"]
        runs = [medians_of(m) for m in msgs]
        tiny_path = os.path.join(calib_dir, f"run-{name}-tiny.trace.json")
        tiny = quantiles(tiny_path, tiny_quantile) if "tiny" in sizes else None
        model_tiny = quantiles(tiny_path, latency_quantile) if tiny is not None and latency_quantile is not None else None
        chans = []
        for (f, t) in sorted(runs[0], key=lambda c: (c[0] > c[1], min(c))):
            (xb, tb, nb) = runs[-1][(f, t)]
            small = None
            n = nb
            if len(runs) == 2:
                (xa, ta, na) = runs[0][(f, t)]
                small, n = (xa, ta), n + na
            if tiny is not None:
                n += tiny[(f, t)][2]
            lat, rate = fit_channel(small, (xb, tb), bucket, tiny[(f, t)][:2] if tiny is not None else None)
            if tiny is not None:  # the latency measured: each large message's own head start
                rate = bucket_rate(msgs[-1][(f, t)], bucket, lat)
            if model_tiny is not None:  # the model's latency apart from the one the rate was fitted with
                lat = fit_channel(small, (xb, tb), bucket, model_tiny[(f, t)][:2])[0]
            chans.append({"from": f, "to": t, "latency_s": lat, "rate": rate, "efficiency": rate / level,
                          "samples": n})
        out.append({"nominal_bytes_per_s": level, "channels": chans})
    doc = {"method": "replay", "levels": out}
    if bucket > 0:
        doc["bucket_bytes"] = bucket
    if "tiny" in sizes:
        doc["latency_from"] = "tiny"  # messages within the bucket, not the line's intercept
        doc["tiny_quantile"] = tiny_quantile
        if latency_quantile is not None:
            doc["latency_quantile"] = latency_quantile
    return doc


def close_ring(doc, ranks):
    """Adds the channels of a ring's link ranks-1 (ranks-1 -> 0 and 0 -> ranks-1) to every
    level of the calibration doc, at the mean rate and latency of the level's measured
    channels, with 0 samples: the calibration's 1F1B replays never use that link."""
    for lv in doc["levels"]:
        measured = [c for c in lv["channels"] if c["samples"] > 0]
        if not measured:
            fail("fit: --ring: a level with no measured channel")
        lat = sum(c["latency_s"] for c in measured) / len(measured)
        rate = sum(c["rate"] for c in measured) / len(measured)
        for f, t in ((ranks - 1, 0), (0, ranks - 1)):
            lv["channels"].append({"from": f, "to": t, "latency_s": lat, "rate": rate,
                                   "efficiency": rate / lv["nominal_bytes_per_s"], "samples": 0})
    doc["ring"] = ranks
    return doc


OP_CATS = ("forward", "backward", "backward-input", "backward-weight")


def model_stage_and_phase(name, pid):
    """(model stage, phase letter) of a timeline name: an op's ("F3", or with model stages
    "2F3": model stage 2) or a transfer's first word ("F3 0->1", "2F3 0->1": its
    sender's). Without the model stage in the name it is the stage's own (pid - 1) for
    an op and the sender's ("0->1": 0) for a transfer."""
    word = name.split()[0]
    rest = word.lstrip("0123456789")
    if rest != word:
        return int(word[:len(word) - len(rest)]), rest[:1]
    if " " in name:
        return int(name.split()[1].split("->")[0]), rest[:1]
    return pid - 1, rest[:1]


def ready_ops(events):
    """(op, ready) for the compute ops of a timeline's events (ready in its microseconds):
    the instant the model would start the op, the later of its stage's previous op's end
    and its input's arrival: the end of the receive, on its stage, of the message its
    model stage consumes for that micro-batch and iteration (a forward's from the model
    stage before it, a backward's or an I op's from the one after it; a W op, or an op
    whose input is a local message, waits for an op of its own stage only). Every kind
    of op counts as a stage's previous op (F, B, I, W). The first op of an iteration on a
    stage counts from its input only (between it and the stage's previous op lie the
    optimizer step and, on stage 0, the wait for every stage to finish the iteration);
    where it has none (stage 0's first forward), it is left out."""
    recv, stage_ops = {}, {}
    for e in events:
        if e.get("ph") != "X":
            continue
        a = e.get("args", {})
        if e.get("cat") in OP_CATS:
            stage_ops.setdefault(e["pid"], []).append(e)
        elif e.get("cat") == "transfer" and e.get("flow_in"):
            sender, phase = model_stage_and_phase(e["name"], e["pid"])
            consumer = sender + 1 if phase == "F" else sender - 1
            key = (e["pid"], consumer, phase, a.get("iteration"), a.get("micro_batch"))
            recv.setdefault(key, []).append(e["ts"] + e["dur"])
    out = []
    for pid in sorted(stage_ops):
        prev = None
        for e in sorted(stage_ops[pid], key=lambda e: e["ts"]):
            a = e.get("args", {})
            ms, phase = model_stage_and_phase(e["name"], pid)
            phase = a.get("phase", phase)
            wanted = {"F": "F", "B": "B", "I": "B"}.get(phase)
            ends = [t for t in recv.get((pid, ms, wanted, a.get("iteration"), a.get("micro_batch")), [])
                    if t <= e["ts"]]
            if prev is not None and prev["args"].get("iteration") == a.get("iteration"):
                ends.append(prev["ts"] + prev["dur"])
            if ends:
                out.append((e, max(ends)))
            prev = e
    return out


def profile_at(stage, b):
    """(forward_s, backward_s) of a pipeline file's stage at micro-batch size b, linear
    between its measured sizes (as the simulator reads it)."""
    pts = sorted(stage["profile"], key=lambda p: p["micro_batch_size"])
    for lo, hi in zip(pts, pts[1:] + pts[-1:]):
        if lo["micro_batch_size"] <= b <= hi["micro_batch_size"]:
            w = 0.0 if hi is lo else (b - lo["micro_batch_size"]) / (hi["micro_batch_size"] - lo["micro_batch_size"])
            return tuple(lo[k] + w * (hi[k] - lo[k]) for k in ("forward_s", "backward_s"))
    fail(f"compute: b = {b} lies outside a stage's profile")


def read_pipeline(path):
    """A pipeline file's JSON, checked for what compute reads: stages, each with a profile
    of entries with numbers micro_batch_size, forward_s and backward_s; else one line
    naming the file and the field."""
    pipe = json.load(open(path))
    stages = pipe.get("stages") if isinstance(pipe, dict) else None
    if not isinstance(stages, list) or not stages:
        fail(f"compute: {path}: stages: a non-empty list of stages expected")
    for i, st in enumerate(stages):
        prof = st.get("profile") if isinstance(st, dict) else None
        if not isinstance(prof, list) or not prof:
            fail(f"compute: {path}: stages[{i}].profile: a non-empty list expected")
        for j, p in enumerate(prof):
            for k in ("micro_batch_size", "forward_s", "backward_s"):
                if not isinstance(p, dict) or not isinstance(p.get(k), (int, float)) or isinstance(p.get(k), bool):
                    fail(f"compute: {path}: stages[{i}].profile[{j}].{k}: a number expected")
    return pipe


def read_events(path, fail_with=None):
    """A timeline's traceEvents, checked for what ready_ops reads: every complete event
    of an op or a transfer has a whole-number pid, a name, numbers ts and dur, and args;
    else one line naming the file and the event (fail_with(message): the caller's line;
    by default this tool's, for compute)."""
    say = fail_with or (lambda msg: fail(f"compute: {msg}"))
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        say(f"{path}: not a readable JSON timeline ({e})")
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        say(f"{path}: traceEvents: a list of events expected")
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") not in OP_CATS + ("transfer",):
            continue
        ok = (isinstance(e.get("pid"), int) and isinstance(e.get("name"), str) and e["name"]
              and all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur")) and isinstance(e.get("args"), dict))
        if not ok:
            say(f"{path}: traceEvents[{i}]: an op or transfer needs pid, name, ts, dur and args")
    return events


# The compute calibration's stall fence: an op whose cost beyond its profile lies more
# than this many interquartile ranges above its stage's third quartile counts as stalled
# by the host (a rank descheduled for about an op's length) and is left out of the
# stage's mean. By default none is (inf): the runs pay for their stalls too, and the
# model adds a stage's mean to every op. Tukey's far-out fence (3) is there to tell the
# stalls' share apart: on the 2-core machine it took one 3-rank run from 4.81% to 1.01%
# worst (its calibration held 2 stalls of 4 ms in 93 ops, the run 4 in 1920) and one
# 4-rank run from 1.63% to 3.54% (its runs stalled as often as its calibration)
# (docs/fidelity.md, "Stalls in the compute calibration").
STALL_FENCE = math.inf


def stalled(costs, fence):
    """Which of a stage's op costs (a list) lie above its fence (Tukey's: the third quartile
    plus `fence` interquartile ranges); none with fewer than 4 ops, too few for quartiles."""
    if len(costs) < 4 or math.isinf(fence):
        return [False] * len(costs)
    q1, _, q3 = statistics.quantiles(costs, n=4)
    top = q3 + fence * (q3 - q1)
    return [c > top for c in costs]


def stage_row(s, ops, fence):
    """The compute calibration of stage s from its ops' (start latency, duration excess) in
    us: the means over the ops that did not stall, and the stalls left out."""
    out = stalled([x + y for x, y in ops], fence)
    kept = [op for op, o in zip(ops, out) if not o]
    stalls = [x + y for (x, y), o in zip(ops, out) if o]
    return {"stage": s, "ops": len(ops), "start_latency_s": sum(x for x, _ in kept) / len(kept) * 1e-6,
            "duration_excess_s": sum(y for _, y in kept) / len(kept) * 1e-6, "stalls": len(stalls),
            "stall_mean_s": sum(stalls) / len(stalls) * 1e-6 if stalls else 0.0}


# A host freeze: an op that cost this much beyond its profile was not a cost of the op
# but the host stopping the ranks (on the 2-core machine, once in over 800 replays: one
# op on every stage of one iteration held 94 to 98 ms). The calibration leaves out every
# op of an iteration that holds one, and the latency in situ its transfers
# (fidelity_situ.py). Kept, that freeze added 43 to 107 us to each stage's mean cost per
# op (53 to 98 us without it), and drawn into the ops' spread it gave every simulation a
# few stalls of 98 ms: each candidate predicted 0.6 to 2.0% slow. The largest op cost in
# 678 candidate runs (1.59 million ops) was 10.9 ms, and in every other calibration 9.7
# ms: nothing below twice that is left out (docs/fidelity.md, "A host that froze during
# the calibration").
FREEZE_S = 0.020


def stage_op_costs(timeline, pipe, b):
    """Per stage of a 1F1B replay's timeline at micro-batch size b of pipeline pipe (as
    read_pipeline reads it): each op's (start latency, duration excess) in us, from the
    instant the model would start it (ready_ops) to its start, and its duration less its
    profile's, in the order ready_ops gives them, without the ops of the iterations in
    which an op cost more than FREEZE_S (a host freeze); and those iterations, sorted.
    Returns (per stage ops, frozen iterations)."""
    ops = []
    for e, ready in ready_ops(read_events(timeline)):
        s = e["pid"] - 1
        if not 0 <= s < len(pipe["stages"]) or e["name"][0] not in "FB":
            fail(f"compute: {timeline}: op {e['name']} of stage {s}, not an F or B of the pipeline's stages")
        nominal = profile_at(pipe["stages"][s], b)[e["name"][0] == "B"] * 1e6
        ops.append((s, e["args"].get("iteration"), e["ts"] - ready, e["dur"] - nominal))
    frozen = sorted({it for _, it, x, y in ops if x + y > FREEZE_S * 1e6}, key=lambda it: (it is None, it or 0))
    per = {}
    for s, it, x, y in ops:
        if it not in frozen:
            per.setdefault(s, []).append((x, y))
    return per, frozen


def pooled_op_costs(timelines, pipe, b):
    """stage_op_costs of several replays of the same pipeline and plan (a list of
    timelines), each stage's ops of every replay together; and each replay's frozen
    iterations, a list per replay."""
    per, frozen = {}, []
    for timeline in timelines:
        ops, left_out = stage_op_costs(timeline, pipe, b)
        frozen.append(left_out)
        for s, kept in ops.items():
            per.setdefault(s, []).extend(kept)
    return per, frozen


def compute(timelines, pipeline_path, b, out_path, fence=STALL_FENCE):
    """The compute calibration of one or more replays (a timeline, or a list of them, whose
    ops are pooled) at micro-batch size b of pipeline_path's ops: per stage, each op's cost
    beyond its profiled duration, from the instant it could start (ready_ops) to its end,
    less the iterations the host froze in (stage_op_costs), averaged over the stage's ops
    that did not stall (beyond `fence`: stalled(); math.inf
    keeps every op). Writes the pipeline with that overhead as each stage's op_overhead_s
    to out_path (with more model stages than the replay had stages, the stages' mean to
    each; a negative mean, ops faster than their profile, as 0) and returns the
    measurement."""
    timelines = [timelines] if isinstance(timelines, str) else list(timelines)
    pipe = read_pipeline(pipeline_path)
    per, frozen = pooled_op_costs(timelines, pipe, b)
    stages = sorted(per)
    missing = sorted(set(range(max(stages, default=-1) + 2)) - set(stages))
    if missing[0] < len(stages) or not stages:
        fail(f"compute: {','.join(timelines)}: no op that could be measured on stage {missing[0]}")
    rows = [stage_row(s, per[s], fence) for s in stages]
    for r in rows:
        r["op_overhead_s"] = r["start_latency_s"] + r["duration_excess_s"]
        r["overhead_share"] = r["op_overhead_s"] / profile_at(pipe["stages"][r["stage"]], b)[0]
    mean = sum(r["op_overhead_s"] for r in rows) / len(rows)
    # The model adds a stage's op_overhead_s to each of its ops, once per op also where
    # the planner merges model stages into one (docs/model.md, "Op overhead").
    for s, st in enumerate(pipe["stages"]):
        st["op_overhead_s"] = max(0.0, rows[s]["op_overhead_s"] if len(pipe["stages"]) == len(rows) else mean)
    pipe["description"] = (f"{pipe.get('description', '')} Calibrated: every op costs the overhead the testbed "
                           f"measured (fidelity_calib.py compute, b = {b}).").strip()
    with open(out_path + ".tmp", "w") as f:  # renamed when complete
        json.dump(pipe, f, indent=1)
        f.write("\n")
    os.replace(out_path + ".tmp", out_path)
    # JSON has no infinity: no fence is null.
    return {"micro_batch_size": b, "stages": rows, "mean_op_overhead_s": mean,
            "stall_fence": None if math.isinf(fence) else fence, "replays": len(timelines),
            "frozen_iterations": frozen, "freeze_s": FREEZE_S}


# The share of a stage's forward above which the compute calibration's overhead says
# the ranks are short of CPU. On the 2-core development machine (forwards of 4 ms) it
# was 0.4% with 2 ranks and 2% with 3, where every candidate came within 3%; 3 to 7% with
# 4 ranks and 10 to 26% with 3 ranks on a host that slowed them, where candidates missed
# by 3 to 6% free-running (docs/fidelity.md, "The host's CPU, op by op").
HOST_BUSY_SHARE = 0.05


def host_warning(m):
    """A warning for a compute calibration m (compute()'s result) whose overhead on some
    stage exceeds HOST_BUSY_SHARE of its forward, or ""."""
    worst = max(m["stages"], key=lambda r: r["overhead_share"])
    if worst["overhead_share"] <= HOST_BUSY_SHARE:
        return ""
    return (f"the host adds {1e6 * worst['op_overhead_s']:.0f} us to every op of stage {worst['stage']} "
            f"({100 * worst['overhead_share']:.1f}% of its forward at b = {m['micro_batch_size']}; above "
            f"{100 * HOST_BUSY_SHARE:g}% the ranks are short of CPU): the ops' cost then changes with the load, "
            f"which a calibration taken before the candidates does not follow, so expect errors beyond the model's own")


def efficiency(cal, i, v):
    """Channel i's efficiency at shaped rate v, interpolated between the levels of cal."""
    pts = [(lv["nominal_bytes_per_s"], lv["channels"][i]["efficiency"]) for lv in cal]
    if v <= pts[0][0]:
        return pts[0][1]
    for (a, ea), (b, eb) in zip(pts, pts[1:]):
        if v <= b:
            return ea + (eb - ea) * (v - a) / (b - a)
    return pts[-1][1]


def network(calibration_path, nominal, path, kind, rates_csv=None, per_channel=False, bucket=0.0, situ=True):
    doc = json.load(open(calibration_path))
    cal = sorted(doc["levels"], key=lambda lv: lv["nominal_bytes_per_s"])
    # The latency in situ (fidelity_situ.py --apply), on every channel unless situ is False.
    extra = doc.get("situ_latency_s", 0.0) if situ else 0.0
    top = min(cal, key=lambda lv: abs(lv["nominal_bytes_per_s"] - nominal))
    chs = []
    for i, ch in enumerate(top["channels"]):
        if kind == "constant":
            rate = {"constant": nominal * efficiency(cal, i, nominal)}
        else:
            # The channel's own record of when its link changed, where there is one.
            own = f"{rates_csv[:-4]}-{ch['from']}-{ch['to']}.csv"
            src = own if per_channel and os.path.exists(own) else rates_csv
            rows = [r for r in csv.reader(open(src)) if r and r[0][:1].isdigit()]
            name = f"{os.path.basename(path)[:-5]}-{ch['from']}-{ch['to']}.csv"
            with open(os.path.join(os.path.dirname(path), name), "w") as f:
                f.write("time_s,value\n")
                for t, v in rows:
                    f.write(f"{t},{float(v) * efficiency(cal, i, float(v))!r}\n")
            rate = {"file": name}
        chs.append({"from": ch["from"], "to": ch["to"], "latency_s": max(0.0, ch["latency_s"] + extra), "rate": rate})
    doc = {"description": f"fidelity testbed, {kind}: calibrated channels ({calibration_path})", "channels": chs}
    if bucket > 0:
        doc["burst_bytes"] = bucket
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def number(text, what, fail_with=fail, expected="a number"):
    """text as a number >= 0, else one line through fail_with (the calling tool's)."""
    try:
        v = float(text)
    except ValueError:
        fail_with(f"{what}: {expected}, got '{text}'")
    if not v >= 0:
        fail_with(f"{what}: must be >= 0, got '{text}'")
    return v


def quantile_arg(text, what, fail_with=fail):
    """text as a quantile, a number from 0 to 1, else one line through fail_with."""
    q = number(text, what, fail_with, "a number from 0 to 1")
    if q > 1:
        fail_with(f"{what}: a number from 0 to 1, got '{text}'")
    return q


def stall_fence_arg(text, what, fail_with=fail):
    """text as a stall fence, interquartile ranges above the third quartile: a number > 0,
    or inf (no op is a stall); else one line through fail_with."""
    k = number(text, what, fail_with, "a number of interquartile ranges > 0, or inf")
    if not k > 0:
        fail_with(f"{what}: a number of interquartile ranges > 0, or inf, got '{text}'")
    return k


def take_option(argv, name, parse, default):
    """The value of option `name` in argv (parse(text, name)), removed from argv with its
    flag; `default` where argv does not give it."""
    if name not in argv:
        return default
    i = argv.index(name)
    if i + 1 >= len(argv):
        fail(f"{name}: needs a value")
    value = parse(argv[i + 1], name)
    del argv[i:i + 2]
    return value


def ring_arg(text, what):
    """text as the ranks of a ring, at least 3; else one line."""
    if not text.isdigit() or int(text) < 3:
        fail(f"{what}: needs N, the ranks of the ring (at least 3)")
    return int(text)


def main(argv):
    ring = take_option(argv, "--ring", ring_arg, 0)
    bucket = take_option(argv, "--bucket-bytes", number, 0.0)
    fence = take_option(argv, "--stall-fence", stall_fence_arg, STALL_FENCE)
    tiny_q = take_option(argv, "--tiny-quantile", quantile_arg, TINY_QUANTILE)
    if len(argv) >= 4 and argv[0] == "fit":
        sizes = argv[2].split()
        lines = [x for x in sizes if x != "tiny"]
        if not 1 <= len(lines) <= 2 or not set(lines) <= {"small", "large"} or len(set(sizes)) != len(sizes):
            fail(f"fit: SIZES is 'small large' or one of them, with tiny or not, got '{argv[2]}'")
        if "tiny" in sizes and not bucket > 0:
            fail("fit: SIZES tiny: needs --bucket-bytes B > 0 (a message smaller than the bucket)")
        for x in argv[3:]:
            number(x, "fit: LEVEL")
        doc = fit(argv[1], sizes, argv[3:], bucket, tiny_q)
        json.dump(close_ring(doc, ring) if ring else doc, sys.stdout, indent=1)
    elif 5 <= len(argv) <= 7 and argv[0] == "network":
        kind = argv[4]
        if kind not in ("constant", "trace") or (kind == "trace") != (len(argv) >= 6):
            fail("network: KIND is constant, or trace followed by RATES_CSV")
        network(argv[1], number(argv[2], "network: NOMINAL"), argv[3], kind,
                argv[5] if len(argv) >= 6 else None, len(argv) == 7 and argv[6] == "per-channel", bucket)
    elif len(argv) == 5 and argv[0] == "compute":
        b = number(argv[3], "compute: B")
        if b != int(b) or b < 1:
            fail(f"compute: B: a micro-batch size (a whole number >= 1), got '{argv[3]}'")
        try:
            json.dump(compute(argv[1].split(","), argv[2], int(b), argv[4], fence), sys.stdout, indent=1)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            fail(f"compute: {type(e).__name__}: {e}")
    else:
        fail("usage: fidelity_calib.py fit CALIB_DIR SIZES LEVEL... | network CALIBRATION NOMINAL FILE KIND "
             "[RATES_CSV [per-channel]] | compute TIMELINE[,TIMELINE...] PIPELINE B OUT [--stall-fence K] (see its first lines)")


if __name__ == "__main__":
    main(sys.argv[1:])
