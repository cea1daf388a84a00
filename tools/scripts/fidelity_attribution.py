#!/usr/bin/env python3
# Where a fidelity run's error comes from: per iteration measured vs predicted, per transfer measured vs simulated (matched by channel and message), stalls, and the links' counters at each rate change.
"""Attribute a fidelity run's error (tools/scripts/fidelity.sh) to what happened on the links.

Reads one scenario directory of a fidelity run (the `preempted` directory, or the
directory above it) and one replayed candidate, and prints:

  iterations   measured vs predicted time per iteration (free-running: sim-I.json;
               aligned: sim-aligned-I.json), the rate changes inside each one, and
               whether a stalled transfer lies in it
  transfers    per transfer (sender side, matched by channel and message: F/B, iteration,
               micro-batch) the measured and simulated duration, and the model's duration
               at the measured start (bytes integrated over the channel's recorded rate,
               net-sim-I-F-T.csv: free of drift between the two runs); the distance to the
               nearest recorded rate change (0 = a change lies inside the transfer)
  stalls       transfers and compute ops that took much longer than the model says, where,
               and whether a rate change (rise or fall) was near; for a stalled transfer,
               whether it ended at the next rate change (a link that passed nothing until
               the rate was changed again); the compute ops' start latency (from the
               later of the stage's previous op's end and the op's input's arrival to
               its start; the model's is 0); the ops' cost beyond their profile as the
               compute calibration measures it (start latency + run past the profile,
               per phase) against the op overhead the model added (pipeline-sim.json);
               the transfers' measured minus simulated duration by their place in the
               channel's stream (with the next message
               queued right behind, right behind the previous one, the rest): a
               message whose last packet the sender shared with the next message's
               first bytes ran late and the next one early (fidelity.sh --tcp-push);
               with one receive stream per stage (fidelity.sh --streams plan), the
               transfers whose end was the stream's, not the link's (held by the
               receive stream: their bytes were in when the stream, done with a
               receive from another peer, reached them), left out of the stalls
  links        the links apart from the schedule: each channel's model (net-sim-I.json:
               latency, rate trace, bucket) fed the measured sends' posts (raw-I.jsonl),
               its arrivals against the measured receives' ends, by rate and by whether
               the other direction of the link carried data (busy, partly, idle). A
               transfer against its counterpart in the free-running prediction compares
               two histories of its channel (at a low rate its time depends on the
               tokens gathered since the previous message, so on when the schedule
               posted it); this line is the link's own error
  testbed      with the testbed's own record (fidelity.sh writes tc-calls-I.csv and
               netstat-I.txt): how long each change's tc calls took (first start to last
               end), the links' drops and backlog, and per period between two changes the
               qdiscs that held a backlog and sent nothing (stuck); TCP retransmissions,
               timeouts and loss probes over the replay; the compute ops that ran late
               (--op-stall-ms over the simulated) and how many of them overlap a tc call
               (the driver runs above the ranks)
  attribution  the MAPE split by iteration class: iterations with a stalled transfer at a
               rate change, with a stall and no change near, with a change and no stall,
               and the rest (the classes add up to the MAPE)

Example:
  tools/scripts/fidelity_attribution.py /tmp/fid/random-0/run-3 --candidate 4
  tools/scripts/fidelity_attribution.py /tmp/fid/random-0/run-3/preempted --label 'kfkb k=2 b=1'
  tools/scripts/fidelity_attribution.py DIR --all --summary     # every candidate, summaries only
  tools/scripts/fidelity_attribution.py OUT --tree               # a --random-scenarios output: a table
  tools/scripts/fidelity_attribution.py OUT --levels             # ... its error by rate level
"""
import argparse
import bisect
import csv
import json
import os
import re
import statistics
import sys

import fidelity_calib


def load_json(path):
    with open(path) as f:
        return json.load(f)


def scenario_dir(d):
    if os.path.exists(os.path.join(d, "pairs.txt")):
        return d
    p = os.path.join(d, "preempted")
    if os.path.exists(os.path.join(p, "pairs.txt")):
        return p
    sys.exit(f"fidelity_attribution.py: no pairs.txt in {d} or {p} (a fidelity.sh scenario directory?)")


def candidates(d):
    """(index, label) of the candidates replayed in scenario directory d."""
    out = []
    cmp_path = os.path.join(d, "compare.json")
    labels = {}
    if os.path.exists(cmp_path):
        for c in load_json(cmp_path)["comparisons"]:
            m = re.search(r"run-(\d+)\.json$", c["measured"])
            if m:
                labels[int(m.group(1))] = c["label"]
    with open(os.path.join(d, "pairs.txt")) as f:
        for line in f:
            m = re.search(r"run-(\d+)\.json", line)
            if m:
                i = int(m.group(1))
                out.append((i, labels.get(i, f"candidate {i}")))
    return out


def read_rates(path):
    """[(time_s, value)] of a time_s,value CSV."""
    rows = []
    with open(path) as f:
        for r in csv.reader(f):
            if r and r[0][:1].isdigit():
                rows.append((float(r[0]), float(r[1])))
    return rows


class Trace:
    """A piecewise-constant rate (bytes/s) from a list of (time, value)."""

    def __init__(self, rows):
        self.t = [t for t, _ in rows]
        self.v = [v for _, v in rows]

    def at(self, t):
        i = bisect.bisect_right(self.t, t) - 1
        return self.v[max(i, 0)]

    def duration(self, start, nbytes):
        """Time to move nbytes from start on, integrating the rate."""
        t, left = start, nbytes
        i = max(bisect.bisect_right(self.t, t) - 1, 0)
        while True:
            rate = self.v[i]
            end = self.t[i + 1] if i + 1 < len(self.t) else float("inf")
            if rate > 0 and t + left / rate <= end:
                return t + left / rate - start
            if end == float("inf"):
                return float("inf")
            left -= rate * (end - t)
            t, i = end, i + 1

    def bytes_between(self, a, b):
        """The bytes the rate moves over [a, b] (0 if b <= a)."""
        total, t = 0.0, a
        i = max(bisect.bisect_right(self.t, t) - 1, 0)
        while t < b:
            end = min(self.t[i + 1] if i + 1 < len(self.t) else b, b)
            total += self.v[i] * (end - t)
            t, i = end, i + 1
        return total


def net_channels(d, idx):
    """The model's channels of candidate idx, from net-sim-I.json in d: ({(from, to):
    (latency_s, Trace of the rate)}, burst_bytes); ({}, 0) without the file."""
    path = os.path.join(d, f"net-sim-{idx}.json")
    if not os.path.exists(path):
        return {}, 0.0
    net = load_json(path)
    chans = {}
    for ch in net["channels"]:
        r = ch["rate"]
        tr = Trace(read_rates(os.path.join(d, r["file"]))) if "file" in r else Trace([(0.0, r["constant"])])
        chans[(ch["from"], ch["to"])] = (ch.get("latency_s", 0.0), tr)
    return chans, net.get("burst_bytes", 0.0)


def channel_arrivals(sends, latency, trace, bucket):
    """The model's arrival of each of a channel's messages, [(post_s, bytes)] in the order
    they leave: a FIFO with a latency, the rate trace and a token bucket of `bucket`
    bytes, full at the first message (docs/model.md, "Transfers" and "Shaped links")."""
    out, prev_end, left = [], None, bucket
    for post, nbytes in sends:
        t0 = post if prev_end is None else max(post, prev_end)
        flow = t0 + latency
        tokens = bucket if prev_end is None else min(bucket, left + trace.bytes_between(prev_end, flow))
        burst = min(tokens, nbytes)
        end = flow + trace.duration(flow, nbytes - burst) if nbytes > burst else flow
        out.append(end)
        prev_end, left = end, tokens - burst
    return out


def merged(spans):
    """The union of [(start, end)] spans as disjoint spans, in order."""
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def links_given_sends(d, idx):
    """The links alone, apart from the schedule: each channel of net-sim-I.json fed the
    measured sends of raw-I.jsonl (their posts, in the order they left), its model's
    arrivals against the measured receives' ends. Returns ({(rate, other): [measured minus
    model arrival, s]}, left out): rate the nominal rate at the post (recorded-I-F-T.csv,
    else None), other whether the other direction of the link carried a message for at
    least 90% of this one's span, post to receive end ("busy"), at most 10% ("idle") or
    between ("partly"). Left out: the warm-up's transfers (they still go through the
    channel), and those whose receive was posted after the model's arrival (their end is
    the receiver's). ({}, 0) without the files."""
    raw_path = os.path.join(d, f"raw-{idx}.jsonl")
    chans, burst = net_channels(d, idx)
    if not (os.path.exists(raw_path) and chans):
        return {}, 0
    sends, recvs = {}, {}
    with open(raw_path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "send":
                sends.setdefault((r["stage"], r["peer"]), []).append(r)
            elif r.get("kind") == "recv":
                recvs[(r["peer"], r["stage"], r["iteration"], r["tag"])] = r
    spans, rows = {}, []  # spans: {(from, to): [(post, end)]}
    for key, (latency, trace) in chans.items():
        nominal_path = os.path.join(d, f"recorded-{idx}-{key[0]}-{key[1]}.csv")
        nominal = Trace(read_rates(nominal_path)) if os.path.exists(nominal_path) else None
        msgs = sorted(sends.get(key, []), key=lambda r: (r["iteration"], r["start_s"]))
        model = channel_arrivals([(r["start_s"], r["bytes"]) for r in msgs], latency, trace, burst)
        for r, arrival in zip(msgs, model):
            got = recvs.get((key[0], key[1], r["iteration"], r["tag"]))
            if got is None:
                continue
            spans.setdefault(key, []).append((r["start_s"], got["end_s"]))
            if r["iteration"] >= 0:
                rows.append((key, r["start_s"], got["start_s"], got["end_s"], arrival,
                             nominal.at(r["start_s"]) if nominal else None))
    busy = {key: merged(v) for key, v in spans.items()}
    out, left_out = {}, 0
    for key, post, recv_post, end, arrival, level in rows:
        if recv_post > arrival:
            left_out += 1
            continue
        span = max(end - post, 1e-9)
        cover = sum(max(0.0, min(end, b) - max(post, a)) for a, b in busy.get(key[::-1], [])) / span
        other = "busy" if cover >= 0.9 else "idle" if cover <= 0.1 else "partly"
        out.setdefault((level, other), []).append(end - arrival)
    return out, left_out


def late_changes(recorded, due, late_s=0.1):
    """The rate driver's changes made more than late_s after they were due, [(due_s,
    made_s)]: the k-th row of `recorded` (time_s, value: when the driver's k-th change
    took effect, recorded-I.csv) against the k-th of `due` (the trace it played,
    trace-unrolled.csv), k >= 1 (row 0 is the rate the run starts with)."""
    return [(d[0], r[0]) for r, d in zip(recorded[1:], due[1:]) if r[0] - d[0] > late_s]


def transfers(events):
    """{(name, iteration, micro_batch): (start_s, dur_s, bytes)} of a timeline's sends."""
    out = {}
    for e in events:
        if e.get("cat") == "transfer" and e.get("flow_out"):
            a = e["args"]
            out[(e["name"], a["iteration"], a["micro_batch"])] = (e["ts"] * 1e-6, e["dur"] * 1e-6, a["bytes"])
    return out


def ops(events):
    """{(stage, name, iteration): (start_s, dur_s)} of a timeline's forward and backward ops."""
    out = {}
    for e in events:
        if e.get("cat") in ("forward", "backward") and e.get("ph") == "X":
            out[(e["pid"] - 1, e["name"], e["args"]["iteration"])] = (e["ts"] * 1e-6, e["dur"] * 1e-6)
    return out


def boundaries(run):
    t, b = run["start_time_s"], [run["start_time_s"]]
    for x in run["iteration_times_s"]:
        t += x
        b.append(t)
    return b


def parse_burst(line):
    """The bucket in bytes that a `tc -s qdisc show` line of tbf prints ("burst 4Kb",
    "burst 124987b": K and M are 1024 and 1024^2), or None."""
    m = re.search(r"\bburst (\d+(?:\.\d+)?)([KMG]?)b\b", line)
    if not m:
        return None
    return int(round(float(m.group(1)) * {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}[m.group(2)]))


def parse_netstat(path):
    """[(label, unix_time, {ns: {"qdisc": {dev: counters}, "tcp": {name: value}}})]."""
    snaps, origin = [], None
    cur = ns = part = dev = None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("origin "):
                origin = float(line.split()[1])
            elif line.startswith("## "):
                words = line[3:].split()
                cur = {}
                snaps.append((" ".join(words[:-1]), float(words[-1]), cur))
            elif line.startswith("# ns "):
                w = line.split()
                ns, part = int(w[2]), w[3]
                cur.setdefault(ns, {"qdisc": {}, "tcp": {}})
            elif part == "qdisc":
                m = re.match(r"qdisc (\S+) \S+ dev (\S+)", line)
                if m:
                    # The shaper: tbf (a root one, or the leaf under --acks free's htb), else a
                    # root htb (its totals).
                    kind, dev = m.group(1), m.group(2)
                    if kind != "tbf" and (kind != "htb" or dev in cur[ns]["qdisc"]):
                        dev = None
                    if dev:
                        cur[ns]["qdisc"][dev] = {}
                        burst = parse_burst(line)
                        if burst is not None:
                            cur[ns]["qdisc"][dev]["burst"] = burst
                    continue
                if not dev:
                    continue
                q = cur[ns]["qdisc"][dev]
                m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)", line)
                if m:
                    q.update(sent=int(m.group(1)), pkts=int(m.group(2)), dropped=int(m.group(3)),
                             overlimits=int(m.group(4)))
                m = re.search(r"backlog (\d+)b (\d+)p", line)
                if m:
                    q.update(backlog=int(m.group(1)), backlog_p=int(m.group(2)))
            elif part == "nstat" and line.strip():
                w = line.split()
                cur[ns]["tcp"][w[0]] = int(w[1])
    return origin, snaps


def pct(x):
    return f"{100 * x:+.2f}%"


def start_latencies(events):
    """Each compute op's start minus the instant it could start (fidelity_calib.ready_ops:
    the later of its stage's previous op's end and its input's arrival), in seconds,
    sorted. The model starts an op at that instant: 0."""
    return sorted((e["ts"] - ready) * 1e-6 for e, ready in fidelity_calib.ready_ops(events))


def op_costs(measured, simulated, overhead_of):
    """{phase letter: [(start latency, run past the profile)]} in seconds: each compute op's
    cost beyond its profile as the compute calibration measures it (fidelity_calib.py
    compute): from the instant the model would start it (fidelity_calib.ready_ops) to its
    start, and its measured duration less its profile, the simulated duration less the
    op overhead the model added (overhead_of(pid), seconds). measured and simulated are
    the two timelines' events; ops the simulation lacks are left out."""
    sim = {(e["pid"], e["name"], e["args"]["iteration"]): e["dur"] for e in simulated
           if e.get("ph") == "X" and e.get("cat") in fidelity_calib.OP_CATS}
    out = {}
    for e, ready in fidelity_calib.ready_ops(measured):
        key = (e["pid"], e["name"], e["args"]["iteration"])
        if key in sim:
            phase = e["args"].get("phase") or fidelity_calib.model_stage_and_phase(e["name"], e["pid"])[1]
            out.setdefault(phase, []).append(((e["ts"] - ready) * 1e-6,
                                              (e["dur"] - sim[key]) * 1e-6 + overhead_of(e["pid"])))
    return out


def op_overheads(path):
    """overhead_of(pid) for op_costs: the op overhead the model adds to an op of stage pid - 1,
    from the pipeline the simulation read (pipeline-sim.json, op_overhead_s per stage). With
    more model stages than a run has stages the model gave each the stages' mean, and an op
    of merged model stages pays their mean once: then the mean. None without the file."""
    if not os.path.exists(path):
        return None
    per = [st.get("op_overhead_s", 0.0) for st in load_json(path)["stages"]]
    mean = sum(per) / len(per) if per else 0.0
    return lambda pid, stages=None: per[pid - 1] if stages == len(per) and pid <= len(per) else mean


def links_line(links, left_out, idx):
    """The summary line of links_given_sends' result: per rate, measured minus model
    arrival (ms, median and mean) and the count, by the other direction's traffic."""
    parts = []
    for level in sorted({k[0] for k in links}, key=lambda x: (x is None, x)):
        by_other = ", ".join(f"{o} {1e3 * statistics.median(v):+.3f} ({1e3 * statistics.mean(v):+.3f}) {len(v)}"
                             for o in ("busy", "partly", "idle") for v in [links.get((level, o), [])] if v)
        parts.append((f"at {level / 1e6:g} MB/s " if level else "") + by_other)
    return (f"  the links given the measured sends (each channel's model, net-sim-{idx}.json, fed the sends' "
            f"posts), measured arrival minus the model's, ms, median (mean) count, by the other direction: "
            f"{'; '.join(parts)}; left out {left_out} whose receive was posted after the model's arrival")


def op_cost_line(costs, model_s):
    """The summary line of op_costs' result beside the overhead the model added (model_s,
    seconds per op): the mean over every op and per phase, in us."""
    every = [c for v in costs.values() for c in v]
    past = sorted(p for _, p in every)
    per_phase = ", ".join(f"{ph} {1e6 * statistics.mean(a + b for a, b in v):.0f} us ({len(v)})"
                          for ph, v in sorted(costs.items()))
    return (f"  the ops' cost beyond their profile, as the compute calibration measures it (start latency + "
            f"run past the profile): {1e6 * statistics.mean(a + b for a, b in every):.0f} us per op (start "
            f"{1e6 * statistics.mean(a for a, _ in every):.0f} + past the profile {1e6 * statistics.mean(past):.0f}, "
            f"whose 90th percentile is {1e6 * past[int(0.9 * (len(past) - 1))]:.0f} us); by phase: {per_phase}; "
            f"the model adds {1e6 * model_s:.0f} us per op (pipeline-sim.json's op_overhead_s)")


def late_during(measured, simulated, windows, late_s):
    """(late, during, overlapping): of the ops in `measured` ({key: (start_s, dur_s)}),
    how many ran more than late_s longer than in `simulated`, how many of those overlap
    one of `windows` ([(start_s, end_s)]: the driver's tc calls), and how many ops in all
    overlap one."""
    def overlaps(s, e):
        return any(s < we and e > ws for ws, we in windows)
    late = [(ms, md) for key, (ms, md) in measured.items() if key in simulated and md - simulated[key][1] > late_s]
    return (len(late), sum(overlaps(ms, ms + md) for ms, md in late),
            sum(overlaps(ms, ms + md) for ms, md in measured.values()))


def reverse_traffic(rows):
    """{"busy": [...], "idle": [...]}: for each transfer that left right behind the previous
    one on its channel (within 0.1 ms: the bucket had no time to refill, so the link's
    rate alone set its time), lay 60 ms or more from a rate change and took between half
    and twice the model's duration (not a stall, nor a record whose send was posted
    after its data had left), the model's duration at its measured start over its
    measured one, split by whether the other direction of its link carried data for at
    least 90% of it (busy) or at most 10% (idle). rows: (key, channel, start, measured,
    model duration, distance to the nearest rate change), times in seconds."""
    by = {}
    for key, ch, ms, md, model, dist in rows:
        by.setdefault(ch, []).append((ms, md, model, dist))
    out = {"busy": [], "idle": []}
    for ch, xs in by.items():
        back = by.get("->".join(ch.split("->")[::-1]), [])
        prev_end = None
        for ms, md, model, dist in sorted(xs):
            if prev_end is not None and ms - prev_end < 1e-4 and dist >= 0.06 and model and 0.5 <= md / model <= 2:
                cover = sum(max(0.0, min(ms + md, b + bd) - max(ms, b)) for b, bd, _, _ in back) / md
                if cover >= 0.9 or cover <= 0.1:
                    out["busy" if cover >= 0.9 else "idle"].append(model / md)
            prev_end = ms + md
    return out


def queued_behind(rows):
    """{"followed": [...], "behind": [...], "alone": [...]}: measured minus simulated duration
    (s) of each transfer 60 ms or more from a rate change, by where it lay in its channel's
    stream: followed (the next message left within 0.1 ms of its end: the sender had
    queued it behind this one), behind (it left right behind the previous one and nothing
    followed it so closely) and alone. A message whose last, short packet the sender's
    TCP kept back while earlier packets waited in the shaper shares that packet with the
    next message's first bytes, and the shaper sends it only when it has the tokens for
    all of it: followed late, behind early, by about the same amount (docs/fidelity.md,
    "A message's last packet"). rows: (channel, start, measured, simulated, distance to
    the nearest rate change), times in seconds, simulated None where the model has no
    such transfer."""
    by = {}
    for ch, ms, md, sd, dist in rows:
        by.setdefault(ch, []).append((ms, md, sd, dist))
    out = {"followed": [], "behind": [], "alone": []}
    for xs in by.values():
        xs.sort()
        for i, (ms, md, sd, dist) in enumerate(xs):
            if sd is None or dist < 0.06:
                continue
            followed = i + 1 < len(xs) and xs[i + 1][0] - (ms + md) < 1e-4
            behind = i > 0 and ms - (xs[i - 1][0] + xs[i - 1][1]) < 1e-4
            out["followed" if followed else "behind" if behind else "alone"].append(md - sd)
    return out


TRANSFER_NAME = re.compile(r"^(\d*)([FBI])(\d+) (\d+)->(\d+)$")


def held_by_stream(d, idx):
    """{(sending model stage, gradient, from, to, iteration, micro_batch)} of candidate idx's
    transfers whose receive its stage's one receive stream (replay --streams plan, as its
    log replay-I.log says) reached only when the previous receive, from another peer,
    ended, and which then took under 1 ms: their bytes were in, or came within that
    millisecond. Such a transfer's measured end is when the stream got to it, not when
    the link delivered it, and costs no iteration time (a stage's receives are in the
    order its ops consume them, so its consumer runs after the previous receive's
    anyway). Read from the replay's --raw lines (raw-I.jsonl); empty without them or
    with per-channel streams."""
    return set(held_receives(d, idx))


def held_receives(d, idx):
    """held_by_stream's transfers, each with the transfer (the same tuple) whose receive it
    waited behind."""
    raw_path, log_path = os.path.join(d, f"raw-{idx}.jsonl"), os.path.join(d, f"replay-{idx}.log")
    if not (os.path.exists(raw_path) and os.path.exists(log_path)):
        return {}
    with open(log_path) as f:
        if ", plan streams," not in f.read():
            return {}
    streams = {}
    with open(raw_path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "recv":
                streams.setdefault(r["stage"], []).append(r)
    def received(r, stage):
        gradient = r["tag"] % 2 == 1  # tags: even for activations, odd for gradients
        sender = r["model_stage"] + 1 if gradient else r["model_stage"] - 1
        return (sender, gradient, r["peer"], stage, r["iteration"], r["micro_batch"])

    held = {}
    for stage, recvs in streams.items():
        recvs.sort(key=lambda r: r["start_s"])
        for prev, r in zip(recvs, recvs[1:]):
            if (r["iteration"] >= 0 and r["peer"] != prev["peer"] and r["start_s"] - prev["end_s"] < 1e-4
                    and r["end_s"] - r["start_s"] < 1e-3):
                held[received(r, stage)] = received(prev, stage)
    return held


def transfer_id(key):
    """held_by_stream's tuple for a transfers(...) key (name, iteration, micro_batch). A name
    without the sending model stage ("F3 0->1": one model stage per stage) is sent by the
    model stage of the sending stage."""
    m = TRANSFER_NAME.match(key[0])
    if not m:
        return None
    sender = int(m.group(1)) if m.group(1) else int(m.group(4))
    return (sender, m.group(2) != "F", int(m.group(4)), int(m.group(5)), key[1], key[2])


def analyse(d, idx, label, args):
    run = load_json(os.path.join(d, f"run-{idx}.json"))
    sim = load_json(os.path.join(d, f"sim-{idx}.json"))
    al_path = os.path.join(d, f"sim-aligned-{idx}.json")
    al = load_json(al_path) if os.path.exists(al_path) else None
    rec_path = os.path.join(d, f"recorded-{idx}.csv")
    changes = []  # (time, old, new)
    if os.path.exists(rec_path):
        rows = read_rates(rec_path)
        for (t0, v0), (t1, v1) in zip(rows, rows[1:]):
            if v1 != v0:
                changes.append((t1, v0, v1))
    unrolled_path = os.path.join(os.path.dirname(os.path.abspath(d)), "trace-unrolled.csv")
    driver_late = (late_changes(read_rates(rec_path), read_rates(unrolled_path))
                   if os.path.exists(rec_path) and os.path.exists(unrolled_path) else [])
    ctimes = [c[0] for c in changes]
    # The model's channels at the recorded rates (calibrated), for durations at the measured time.
    chans = {f"{a}->{b}": model for (a, b), model in net_channels(d, idx)[0].items()}

    mb, sb = boundaries(run), boundaries(sim)
    end = mb[-1]
    n = len(run["iteration_times_s"])
    print(f"=== {d} candidate {idx}: {label}, {n} iterations, measured {run['start_time_s']:.3f} .. {end:.3f} s")
    inside = [c for c in changes if mb[0] <= c[0] <= end]
    print(f"    {len(inside)} recorded rate changes inside the measured span "
          f"({sum(c[2] < c[1] for c in inside)} falls, {sum(c[2] > c[1] for c in inside)} rises)")
    if driver_late:
        due, made = max(driver_late, key=lambda x: x[1] - x[0])
        print(f"    the driver made {len(driver_late)} change(s) more than 0.1 s late (the worst due at {due:.3f} s, made "
              f"at {made:.3f} s): the run played other rates than the scenario's; both runs here have the "
              f"recorded ones")

    def near(t0, t1):
        """(distance in s to the nearest change from [t0, t1], that change); 0 if inside."""
        best = None
        for c in changes:
            dist = 0.0 if t0 <= c[0] <= t1 else min(abs(c[0] - t0), abs(c[0] - t1))
            if best is None or dist < best[0]:
                best = (dist, c)
        return best or (float("inf"), None)

    # --- transfers (each timeline is read once, here)
    mev = load_json(os.path.join(d, f"run-{idx}.trace.json"))["traceEvents"]
    sev = load_json(os.path.join(d, f"sim-{idx}.trace.json"))["traceEvents"]
    mt, st = transfers(mev), transfers(sev)
    rows = []
    for key in sorted(mt, key=lambda k: mt[k][0]):
        ms, md, nb = mt[key]
        ch = key[0].split()[1]
        sd = st[key][1] if key in st else None
        lat, tr = chans.get(ch, (0.0, None))
        model = lat + tr.duration(ms, nb) if tr else None
        dist, c = near(ms, ms + md)
        rows.append((key, ch, ms, md, sd, model, nb, dist, c))
    # A message's usual measured duration (median over the iterations): a measured transfer
    # runs from the send's start to the receive's end, and where the receiver posts its
    # receive late it is long in every iteration, without costing iteration time.
    usual = {}
    for key, ch, ms, md, *_ in rows:
        usual.setdefault(key[0], []).append(md)
    usual = {k: sorted(v)[len(v) // 2] for k, v in usual.items()}
    held_ids = held_by_stream(d, idx)
    held = {r[0] for r in rows if transfer_id(r[0]) in held_ids}  # their keys, as rows name them
    on_link = [r for r in rows if r[0] not in held]
    in_stream = queued_behind([(ch, ms, md, sd, dist) for key, ch, ms, md, sd, model, nb, dist, c in on_link])
    both_ways = reverse_traffic([(key, ch, ms, md, model, dist) for key, ch, ms, md, sd, model, nb, dist, c in on_link])
    stall_x, stall_r = args.stall_ms * 1e-3, args.stall_ratio
    # (key, ch, start, measured, simulated, expected, bytes, near, change): expected is the
    # longer of the model's duration at the measured start and the message's usual one.
    rows = [(key, ch, ms, md, sd, max(model, usual[key[0]]) if model is not None else None, nb, dist, c)
            for key, ch, ms, md, sd, model, nb, dist, c in rows]
    stalls = [r for r in rows if r[5] is not None and r[3] - r[5] > stall_x and r[3] > stall_r * r[5]
              and r[0] not in held]

    # --- ops
    mo, so = ops(mev), ops(sev)
    op_stalls = []
    for key, (ms, md) in mo.items():
        if key in so:
            sd = so[key][1]
            if md - sd > args.op_stall_ms * 1e-3 and md > stall_r * sd:
                op_stalls.append((key, ms, md, sd, near(ms, ms + md)))

    # CPU: how much longer the compute ops ran than the profile says (ranks sharing cores,
    # the driver, other work on the host), per iteration summed over the ops.
    op_excess = [0.0] * n
    ratios = []
    for key, (ms, md) in mo.items():
        if key in so and so[key][1] > 0:
            ratios.append(md / so[key][1])
            k = min(max(bisect.bisect_right(mb, ms) - 1, 0), n - 1)
            op_excess[k] += md - so[key][1]
    ratios.sort()

    def it_of(t):
        return min(max(bisect.bisect_right(mb, t) - 1, 0), n - 1)

    stalled_its = {}
    for r in stalls:
        stalled_its.setdefault(it_of(r[2]), []).append(r)

    # --- iterations
    pf = sim["iteration_times_s"]
    pa = al["iteration_times_s"] if al else pf
    print()
    print("  it   start_s   measured_s  predicted_s  err(free)  aligned_s  err(aligned)  changes  stalled transfers")
    ape_f, ape_a, cls = [], [], []
    for k in range(n):
        m = run["iteration_times_s"][k]
        f, a = pf[k], pa[k]
        ape_f.append(abs(f - m) / m)
        ape_a.append(abs(a - m) / m)
        cs = [c for c in changes if mb[k] <= c[0] < mb[k + 1]]
        cs_txt = " ".join(f"{c[0]:.3f}{'v' if c[2] < c[1] else '^'}" for c in cs) or "-"
        s = stalled_its.get(k, [])
        s_txt = f"{len(s)}, +{1e3 * max(r[3] - r[5] for r in s):.0f} ms" if s else "-"
        if s and any(r[7] <= args.near_ms * 1e-3 for r in s):
            cls.append("stall at a rate change")
        elif s:
            cls.append("stall, no change near")
        elif cs:
            cls.append("rate change, no stall")
        else:
            cls.append("no change, no stall")
        print(f"  {k:2d}  {mb[k]:8.3f}  {m:10.4f}  {f:11.4f}  {pct((f - m) / m):>9}  {a:9.4f}  {pct((a - m) / m):>12}"
              f"  {cs_txt:7}  {s_txt}")
    print(f"  MAPE free-running {100 * sum(ape_f) / n:.2f}%, aligned {100 * sum(ape_a) / n:.2f}%")

    if not args.summary:
        print()
        print("  transfers (sender side; expected = the longer of the model's duration at the measured start,")
        print("  latency + bytes over the recorded rate, and the message's median measured duration;")
        print("  near = ms to the nearest recorded change, 0 = inside; v fall, ^ rise)")
        print("    start_s  transfer              bytes  measured_ms  sim_ms  expect_ms  excess_ms  near_ms")
        for key, ch, ms, md, sd, model, nb, dist, c in rows:
            if args.near_only and dist > args.near_ms * 1e-3:
                continue
            sd_txt = f"{1e3 * sd:7.1f}" if sd is not None else "      -"
            mo_txt = f"{1e3 * model:8.1f}" if model is not None else "       -"
            ex = f"{1e3 * (md - model):9.1f}" if model is not None else "        -"
            nr = (f"{1e3 * dist:7.0f}{'v' if c[2] < c[1] else '^'}" if c else "      -")
            mark = "  held by the receive stream" if key in held else ""
            print(f"    {ms:7.3f}  {key[0]:12} it{key[1]:<3d} {nb:8.0f}  {1e3 * md:11.1f}  {sd_txt}  {mo_txt}  {ex}  {nr}{mark}")

    print()
    print(f"  stalled transfers (measured > {stall_r:g} x expected and > expected + {args.stall_ms:g} ms): {len(stalls)}")
    for key, ch, ms, md, sd, model, nb, dist, c in stalls:
        nxt = [x for x in changes if x[0] > ms + 1e-3]
        end_t = ms + md
        after = ""
        if nxt:
            gap = min((abs(end_t - x[0]), x) for x in nxt)
            after = f"; ends {1e3 * (end_t - gap[1][0]):+.0f} ms from the change at {gap[1][0]:.3f}"
        where = (f"{1e3 * dist:.0f} ms from the {'fall' if c[2] < c[1] else 'rise'} at {c[0]:.3f}" if c else "no change")
        print(f"    {ms:8.3f}  {key[0]:12} it{key[1]:<3d} {1e3 * md:7.1f} ms, expected {1e3 * model:6.1f} ms "
              f"(+{1e3 * (md - model):.0f} ms); {where}{after}")
    if held:
        excess = sorted(r[3] - r[5] for r in rows if r[5] is not None and r[0] in held)
        med = f", measured minus expected median {1e3 * excess[len(excess) // 2]:+.1f} ms" if excess else ""
        print(f"  transfers held by the receive stream: {len(held)}{med} (replay --streams plan: their bytes "
              f"were in, or came within 1 ms, when the stage's one receive stream reached them at the end "
              f"of a receive from another peer; left out of the stalls and of the lines below)")
    if both_ways["busy"] or both_ways["idle"]:
        med = {k: f"{sorted(v)[len(v) // 2]:.3f} ({len(v)})" if v else "- (0)" for k, v in both_ways.items()}
        print(f"  transfers right behind the previous one on their channel, the model's duration at the "
              f"measured start over the measured: the other direction busy {med['busy']}, idle {med['idle']} "
              f"(median, count; > 1: faster than the model)")
    links, links_left_out = links_given_sends(d, idx)
    if links:
        print(links_line(links, links_left_out, idx))
    if any(in_stream.values()):
        med = {k: f"{1e3 * sorted(v)[len(v) // 2]:+.2f} ms ({len(v)})" if v else "- (0)" for k, v in in_stream.items()}
        print(f"  transfers 60 ms or more from a change, measured minus simulated duration (median, count): "
              f"with the next message queued right behind them {med['followed']}, right behind the previous "
              f"one {med['behind']}, the rest {med['alone']} (a message's last packet shared with the next "
              f"one: the first late, the second early)")
    if ratios:
        print(f"  compute ops: measured / simulated duration median {ratios[len(ratios) // 2]:.3f}, "
              f"90th percentile {ratios[int(0.9 * (len(ratios) - 1))]:.3f}; ops' excess per iteration "
              f"(all stages) median {1e3 * sorted(op_excess)[n // 2]:.1f} ms, max {1e3 * max(op_excess):.1f} ms")
    lat = start_latencies(mev)
    if lat:
        per = sum(lat) / max(1, len({k[0] for k in mo})) / max(1, len({k[2] for k in mo}))
        print(f"  compute ops' start latency (start minus the later of the stage's previous op's end and its "
              f"input's arrival; the model's is 0): median {1e6 * lat[len(lat) // 2]:.0f} us, mean "
              f"{1e6 * sum(lat) / len(lat):.0f} us, 90th percentile {1e6 * lat[int(0.9 * (len(lat) - 1))]:.0f} us; "
              f"{1e3 * per:.2f} ms per stage and iteration")
    overheads = op_overheads(os.path.join(os.path.dirname(os.path.abspath(d)), "pipeline-sim.json"))
    costs = {}
    if overheads:
        n_stages = len({e["pid"] for e in mev if e.get("cat") in fidelity_calib.OP_CATS})
        costs = op_costs(mev, sev, lambda pid: overheads(pid, n_stages))
    if costs:
        model = sum(overheads(pid, n_stages) for pid in range(1, n_stages + 1)) / max(1, n_stages)
        print(op_cost_line(costs, model))
    print(f"  stalled ops (measured > {stall_r:g} x simulated and > +{args.op_stall_ms:g} ms): {len(op_stalls)}")
    for (stage, name, it), ms, md, sd, (dist, c) in sorted(op_stalls, key=lambda x: x[1])[: args.max_ops]:
        where = f"{1e3 * dist:.0f} ms from a change" if c else "no change"
        print(f"    {ms:8.3f}  stage {stage} {name:5} it{it:<3d} {1e3 * md:6.1f} ms, simulated {1e3 * sd:6.1f} ms; {where}")
    if len(op_stalls) > args.max_ops:
        print(f"    ... {len(op_stalls) - args.max_ops} more")

    # --- the testbed's record
    tcp_path, ns_path = os.path.join(d, f"tc-calls-{idx}.csv"), os.path.join(d, f"netstat-{idx}.txt")
    testbed = {}
    if os.path.exists(tcp_path) and os.path.exists(ns_path):
        origin, snaps = parse_netstat(ns_path)
        calls = []
        with open(tcp_path) as f:
            for r in csv.DictReader(f):
                calls.append((float(r["start"]) - origin, float(r["end"]) - origin, r["link"], r["dev"]))
        calls.sort()
        per_link = 2 * max(1, len({c[2] for c in calls}))
        groups = [calls[i:i + per_link] for i in range(0, len(calls), per_link)]
        spans = [g[-1][1] - g[0][0] for g in groups]
        durs = sorted(c[1] - c[0] for c in calls)
        print()
        if durs:
            print(f"  tc calls: {len(calls)} in {len(groups)} changes; one call {1e3 * durs[len(durs) // 2]:.1f} ms median, "
                  f"{1e3 * durs[-1]:.1f} ms max; a change's calls span {1e3 * sorted(spans)[len(spans) // 2]:.1f} ms "
                  f"median, {1e3 * max(spans):.1f} ms max (the recorded time is their middle)")
        testbed["tc_span_median_ms"] = 1e3 * sorted(spans)[len(spans) // 2] if spans else None
        # Compute ops that ran late while the driver's tc calls did: the driver runs above
        # the ranks (docs/fidelity.md, "The driver's own processes"). Where the driver
        # writes to a long-lived tc, a call's window is that write (under a millisecond).
        late, during, overlapping = late_during(mo, so, [(c[0], c[1]) for c in calls], args.op_stall_ms * 1e-3)
        if mo:
            print(f"  compute ops more than {args.op_stall_ms:g} ms over the simulated: {late} of {len(mo)}, "
                  f"{during} of them during a tc call (ops during a tc call: {overlapping}, "
                  f"{100 * overlapping / len(mo):.1f}%)")
        testbed["late_ops"], testbed["late_ops_during_tc"] = late, during
        # Stuck qdiscs: between the snapshot after one change and the one before the next, a
        # backlog at both ends and no byte sent.
        stuck = []
        after = None
        for lab, t, snap in snaps:
            if lab.startswith("after-change"):
                after = (lab, t, snap)
            elif lab.startswith("before-change") and after:
                for ns, v in snap.items():
                    for dev, q in v["qdisc"].items():
                        q0 = after[2].get(ns, {}).get("qdisc", {}).get(dev)
                        if q0 and q0.get("backlog", 0) > 0 and q.get("backlog", 0) > 0 and q["sent"] == q0["sent"]:
                            stuck.append((after[1] - origin, t - origin, ns, dev, q0["backlog"], q0["backlog_p"],
                                          after[0].split()[2], q0.get("burst")))
                after = None
        print(f"  periods in which a qdisc held a backlog and sent nothing (stuck): {len(stuck)}")
        for t0, t1, ns, dev, b, p, v, burst in stuck:
            if mb[0] - 1 <= t0 <= end:
                # The bucket tc reported after the change; a record without it (htb, or an
                # older run) shows what --bucket per-rate sets: 1 ms at the rate, >= 4096 B.
                burst_text = (f"burst {burst} B" if burst is not None
                              else f"burst about {max(4096, int(float(v) / 1000))} B if per-rate")
                print(f"    {t0:8.3f} .. {t1:8.3f} s  ns {ns} dev {dev}: {b} bytes in {p} packets "
                      f"({b / max(p, 1):.0f} B each) held at rate {float(v) / 1e6:.2f} MB/s ({burst_text})")
        testbed["stuck_periods"] = len(stuck)
        first = next((s for s in snaps if s[0] == "replay-start"), None)
        last = next((s for s in reversed(snaps) if s[0] == "replay-end"), None)
        if first and last:
            tot = {}
            for ns, v in last[2].items():
                for k, x in v["tcp"].items():
                    tot[k] = tot.get(k, 0) + x - first[2].get(ns, {}).get("tcp", {}).get(k, 0)
                for dev, q in v["qdisc"].items():
                    q0 = first[2].get(ns, {}).get("qdisc", {}).get(dev, {})
                    tot["qdisc dropped"] = tot.get("qdisc dropped", 0) + q.get("dropped", 0) - q0.get("dropped", 0)
            keys = ["qdisc dropped", "TcpOutSegs", "TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes",
                    "TcpExtTCPFastRetrans", "TcpExtTCPSlowStartRetrans", "TcpExtTCPSpuriousRTOs"]
            print("  over the replay (all namespaces): " + ", ".join(f"{k} {tot.get(k, 0)}" for k in keys))
            testbed.update({k: tot.get(k, 0) for k in keys})
        # Per change: qdisc drops and TCP timeouts between the snapshot before it and the next one.
        ch_rows = []
        for (lab, t, snap), nxt in zip(snaps, snaps[1:]):
            if not lab.startswith("after-change"):
                continue
            drops = sum(q.get("dropped", 0) - snap.get(ns, {}).get("qdisc", {}).get(dev, {}).get("dropped", 0)
                        for ns, v in nxt[2].items() for dev, q in v["qdisc"].items())
            tos = sum(v["tcp"].get("TcpExtTCPTimeouts", 0) - snap.get(ns, {}).get("tcp", {}).get("TcpExtTCPTimeouts", 0)
                      for ns, v in nxt[2].items())
            rtx = sum(v["tcp"].get("TcpRetransSegs", 0) - snap.get(ns, {}).get("tcp", {}).get("TcpRetransSegs", 0)
                      for ns, v in nxt[2].items())
            if drops or tos or rtx:
                ch_rows.append((t - origin, lab, drops, rtx, tos))
        if ch_rows:
            print("  periods after a change with drops or retransmissions (until the next snapshot):")
            for t, lab, drops, rtx, tos in ch_rows:
                if mb[0] - 1 <= t <= end:
                    print(f"    {t:8.3f} s ({lab}): qdisc drops {drops}, retransmitted segments {rtx}, timeouts {tos}")

    # --- attribution
    classes = ["stall at a rate change", "stall, no change near", "rate change, no stall", "no change, no stall"]
    print()
    print("  attribution of the MAPE by iteration class (the shares add up to the MAPE):")
    print("    class                      iterations  free-running  aligned  excess of stalled transfers")
    res = {"dir": d, "candidate": idx, "label": label, "iterations": n,
           "mape_free_pct": 100 * sum(ape_f) / n, "mape_aligned_pct": 100 * sum(ape_a) / n, "classes": {}}
    for c in classes:
        ks = [k for k in range(n) if cls[k] == c]
        ex = sum(r[3] - r[5] for k in ks for r in stalled_its.get(k, []))
        sf, sa = 100 * sum(ape_f[k] for k in ks) / n, 100 * sum(ape_a[k] for k in ks) / n
        res["classes"][c] = {"iterations": len(ks), "mape_free_pct": sf, "mape_aligned_pct": sa}
        print(f"    {c:26} {len(ks):10d}  {sf:11.2f}%  {sa:6.2f}%  {1e3 * ex:8.0f} ms")
    res["stalled_transfers"] = len(stalls)
    res["held_by_receive_stream"] = len(held)
    res["stalls"] = [{"transfer": r[0][0], "iteration": r[0][1], "start_s": r[2], "measured_s": r[3],
                      "expected_s": r[5], "near_change_s": r[7] if r[8] else None} for r in stalls]
    res["op_ratio_median"] = ratios[len(ratios) // 2] if ratios else None
    res["op_ratio_p90"] = ratios[int(0.9 * (len(ratios) - 1))] if ratios else None
    res["stalls_at_change"] = sum(r[7] <= args.near_ms * 1e-3 for r in stalls)
    res["op_cost_us"] = {ph: {"count": len(v), "start": 1e6 * statistics.mean(a for a, _ in v),
                              "past_profile": 1e6 * statistics.mean(b for _, b in v)} for ph, v in costs.items()}
    res["late_changes"] = [{"due_s": due, "made_s": made} for due, made in driver_late]
    res["links_given_sends"] = [
        {"rate": level, "other_direction": o, "count": len(v), "median_ms": 1e3 * statistics.median(v),
         "mean_ms": 1e3 * statistics.mean(v)} for (level, o), v in sorted(links.items(), key=str)]
    res["testbed"] = testbed
    print()
    return res


def tree(root, args):
    """Every candidate of every run under a --random-scenarios output directory: one line each."""
    import contextlib
    import glob
    import io
    # Runs that did not finish (no pairs.txt) are left out.
    dirs = sorted((p for p in glob.glob(os.path.join(root, "random-*", "run-*", "preempted"))
                   if os.path.exists(os.path.join(p, "pairs.txt")) and os.path.exists(os.path.join(p, "compare.json"))),
                  key=lambda p: [int(x) for x in re.findall(r"-(\d+)", p)[-2:]])
    if not dirs:
        sys.exit(f"fidelity_attribution.py: no random-*/run-*/preempted under {root}")
    out = []
    print("| scenario | run | candidate | MAPE free | MAPE aligned | stalled transfers (at a change) | "
          "aligned MAPE of iterations with a stall at a change | of the others | tc span median | "
          "qdisc drops | TCP retrans. / timeouts | ops measured/simulated (median, p90) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in dirs:
        sc, rn = re.findall(r"random-(\d+)", d)[-1], re.findall(r"run-(\d+)", d)[-1]
        for i, label in candidates(d):
            with contextlib.redirect_stdout(io.StringIO()):
                r = analyse(d, i, label, args)
            c = r["classes"]
            st = c["stall at a rate change"]["mape_aligned_pct"]
            tb = r["testbed"]
            span = f"{tb['tc_span_median_ms']:.0f} ms" if tb.get("tc_span_median_ms") is not None else "-"
            print(f"| {sc} | {rn} | {label} | {r['mape_free_pct']:.2f}% | {r['mape_aligned_pct']:.2f}% | "
                  f"{r['stalled_transfers']} ({r['stalls_at_change']}) | {st:.2f}% | {r['mape_aligned_pct'] - st:.2f}% | "
                  f"{span} | {tb.get('qdisc dropped', '-')} | {tb.get('TcpRetransSegs', '-')} / "
                  f"{tb.get('TcpExtTCPTimeouts', '-')} | {r['op_ratio_median']:.3f}, {r['op_ratio_p90']:.3f} |")
            r["scenario"], r["run"] = int(sc), int(rn)
            out.append(r)
    return out


def levels(root):
    """Per scenario of a --random-scenarios output: the aligned error of the iterations that lie
    entirely at the trace's lowest rate, entirely at another rate, and across a change."""
    import glob
    import statistics
    res = {}
    for d in sorted(glob.glob(os.path.join(root, "random-*", "run-*", "preempted"))):
        if not os.path.exists(os.path.join(d, "pairs.txt")):
            continue  # a run that did not finish
        sc = int(re.findall(r"random-(\d+)", d)[-1])
        for i, _ in candidates(d):
            al_path = os.path.join(d, f"sim-aligned-{i}.json")
            if not os.path.exists(al_path):
                continue
            run, al = load_json(os.path.join(d, f"run-{i}.json")), load_json(al_path)
            rec = read_rates(os.path.join(d, f"recorded-{i}.csv"))
            low, t = min(v for _, v in rec), run["start_time_s"]
            for m, a in zip(run["iteration_times_s"], al["iteration_times_s"]):
                inside = [v for ct, v in rec if t < ct < t + m]
                at = [v for ct, v in rec if ct <= t][-1]
                k = "across a change" if inside else ("at the lowest rate" if at == low else "at a higher rate")
                res.setdefault((sc, k), []).append((a - m) / m)
                t += m
    print("| scenario | iterations | count | mean signed error (aligned; - = slower than predicted) | mean absolute |")
    print("|---|---|---|---|---|")
    for (sc, k), v in sorted(res.items()):
        print(f"| {sc} | {k} | {len(v)} | {100 * statistics.mean(v):+.2f}% | {100 * statistics.mean(abs(x) for x in v):.2f}% |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a fidelity.sh scenario directory (preempted/, or the run directory above it)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--candidate", type=int, help="the candidate's index (run-I.json)")
    g.add_argument("--label", help="the candidate's label as compare.txt prints it, e.g. 'kfkb k=2 b=1'")
    g.add_argument("--all", action="store_true", help="every replayed candidate")
    g.add_argument("--tree", action="store_true",
                   help="DIR is a --random-scenarios output: one table line per candidate and run")
    g.add_argument("--levels", action="store_true",
                   help="DIR is a --random-scenarios output: per scenario, the aligned error of the iterations at "
                        "the lowest rate, at a higher one, and across a change")
    ap.add_argument("--summary", action="store_true", help="leave out the per-transfer table")
    ap.add_argument("--near-only", action="store_true", help="per-transfer table: only transfers near a change")
    ap.add_argument("--near-ms", type=float, default=50, help="'near a change': within this many ms (default 50)")
    ap.add_argument("--stall-ms", type=float, default=20, help="a stalled transfer: this many ms over the model (20)")
    ap.add_argument("--stall-ratio", type=float, default=2, help="... and this many times the model (2)")
    ap.add_argument("--op-stall-ms", type=float, default=5, help="a stalled op: this many ms over the simulated (5)")
    ap.add_argument("--max-ops", type=int, default=20, help="stalled ops printed at most (20)")
    ap.add_argument("--json", help="also write the summaries (attribution, counters) to this file")
    args = ap.parse_args()
    if args.levels:
        levels(args.dir)
        return
    if args.tree:
        out = tree(args.dir, args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        return
    d = scenario_dir(args.dir)
    cands = candidates(d)
    if args.candidate is not None:
        cands = [c for c in cands if c[0] == args.candidate]
    elif args.label:
        cands = [c for c in cands if c[1] == args.label]
    elif not args.all:
        ap.error("give --candidate I, --label L or --all (replayed: " + ", ".join(f"{i} ({l})" for i, l in cands) + ")")
    if not cands:
        sys.exit("fidelity_attribution.py: no such candidate in " + d)
    out = [analyse(d, i, l, args) for i, l in cands]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
