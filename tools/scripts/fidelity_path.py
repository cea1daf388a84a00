#!/usr/bin/env python3
# The measured critical path of each iteration of a fidelity run, and the lag each of its steps adds against the prediction.
"""Where each iteration's error comes from, step by step along what the run waited for.

    tools/scripts/fidelity_path.py DIR [--candidate I | --label L | --all] [--iterations]
                                   [--worst N] [--channels [MS]] [--near-ms MS] [--json FILE]
    tools/scripts/fidelity_path.py DIR --tree [--near-ms MS]

DIR is a scenario directory of tools/scripts/fidelity.sh (preempted/, or the run
directory above it). For each replayed candidate, each measured iteration is walked
back from its last op to the iteration before it, along what each step waited for in
the measurement:

  an op      waited for the later of its stage's previous op and the message it
             consumes (its input), whichever ended last before it started;
  a message  waited for the later of the op that produced it and the message before
             it on its channel (the link was busy; not where that one was held, below,
             whose recorded arrival is the stream's), or, where its stage's one receive
             stream reached it only when a receive from another peer ended
             (replay --streams plan; fidelity_attribution.py's "held by the receive
             stream"), for that receive.

Each step's measured time minus its time in the free-running prediction (sim-I.trace.json:
the same step, between the same two events) is the lag the step adds; along the path
they add up to the growth of the lag over the iteration: the lag of the iteration's
last op minus that of the op of the iteration before where the path starts. The steps
fall in classes:

  compute          an op's duration
  start, stage     from its stage's previous op's end to its start
  start, message   from its input's arrival to its start
  transfer         from the later of the producing op's end and the previous message's
                   arrival on its channel to its own arrival (the send's post, the
                   link, the receive)
  receive stream   from the end of the receive a held message waited behind to its own

A step the prediction took longer for than the measurement adds a negative lag: the
"start" classes are where the model waited for something the run did not (its own
critical path went elsewhere). The mean per iteration over the iterations at least
--near-ms (default 50) from a recorded rate change ("steady") and over all is printed per
candidate, with the steps' counts; --iterations prints every iteration, with the
measured minus predicted iteration time (free-running) beside its growth; --worst N
the N steps of steady iterations that added the most lag; --channels the transfer steps
of steady iterations by channel: per iteration, how many, the lag they add, and how much
of it is in transfers that added more than MS each (default 1 ms: a few single
transfers, or many small lags). --tree prints a line for
every run under DIR (a --random-scenarios output, or a directory of runs): the mean
over its candidates' steady iterations.

Example:
  tools/scripts/fidelity_path.py fidelity-out/preempted --all
  tools/scripts/fidelity_path.py fidelity-out/preempted --label "zbv b=1" --iterations --worst 10
  tools/scripts/fidelity_path.py fidelity-out-random --tree

Exit status 2 with one line on bad arguments or a directory that is not a fidelity run.
"""
import argparse
import json
import os
import sys

import fidelity_attribution
import fidelity_calib

CLASSES = ("compute", "start_stage", "start_message", "transfer", "stream")
TITLES = {"compute": "compute", "start_stage": "start, stage", "start_message": "start, message",
          "transfer": "transfer", "stream": "receive stream"}


def fail(msg):
    print(f"fidelity_path.py: {msg}", file=sys.stderr)
    sys.exit(2)


def gradient(phase):
    """Whether a message or an op of this phase letter carries or makes a gradient."""
    return phase != "F"


class Timeline:
    """A timeline's compute ops and messages, in microseconds: ops {(pid, name, iteration,
    micro_batch): (start, end)}, messages {(name, iteration, micro_batch): (start, end)}
    (the sender's record: from the send's post, or in a prediction from the transfer's
    start after its latency, to the arrival)."""

    def __init__(self, path):
        events = fidelity_calib.read_events(path, fail)
        self.ops, self.messages, self.sender = {}, {}, {}
        for e in events:
            if not isinstance(e, dict) or e.get("ph") != "X":
                continue
            a = e.get("args", {})
            if e.get("cat") in fidelity_calib.OP_CATS:
                self.ops[(e["pid"], e["name"], a.get("iteration"), a.get("micro_batch"))] = (e["ts"], e["ts"] + e["dur"])
            elif e.get("cat") == "transfer" and e.get("flow_out"):
                key = (e["name"], a.get("iteration"), a.get("micro_batch"))
                self.messages[key] = (e["ts"], e["ts"] + e["dur"])
                self.sender[key] = e["pid"]


class Graph:
    """What each op and message of the measured timeline can wait for: an op its stage's
    previous op (prev) and its input message (input_of), a message its producing op
    (producer) and the message before it on its channel (prev)."""

    def __init__(self, run):
        self.prev, self.input, self.producer = {}, {}, {}
        by_channel = {}
        for m in run.messages:
            by_channel.setdefault(m[0].split()[1], []).append(m)
        for keys in by_channel.values():
            keys.sort(key=lambda m: run.messages[m][0])
            self.prev.update(zip(keys[1:], keys))
        by_stage = {}
        for k in run.ops:
            by_stage.setdefault(k[0], []).append(k)
        for keys in by_stage.values():
            keys.sort(key=lambda k: run.ops[k][0])
            self.prev.update(zip(keys[1:], keys))
        made = {}  # (pid, model stage, gradient, iteration, micro_batch) -> op
        for k in run.ops:
            ms, phase = fidelity_calib.model_stage_and_phase(k[1], k[0])
            if phase in "FBI":
                made[(k[0], ms, gradient(phase), k[2], k[3])] = k
        for m, pid in run.sender.items():
            ms, phase = fidelity_calib.model_stage_and_phase(m[0], pid)
            to = int(m[0].split()[1].split("->")[1])
            consumer = ms - 1 if gradient(phase) else ms + 1
            self.input[(to + 1, consumer, gradient(phase), m[1], m[2])] = m
            op = made.get((pid, ms, gradient(phase), m[1], m[2]))
            if op is not None:
                self.producer[m] = op

    def input_of(self, k):
        ms, phase = fidelity_calib.model_stage_and_phase(k[1], k[0])
        if phase == "W":
            return None
        return self.input.get((k[0], ms, gradient(phase), k[2], k[3]))


def walk(run, sim, graph, held, last, record=None):
    """The path of the iteration whose last op is `last`: (steps per class in us, counts per
    class, the lag at its root in us). The walk stops at an event of an earlier iteration
    (its end's lag is the root's), or at one with nothing to wait for that both timelines
    have (its start's lag: the first op of the run). With `record` (a list), each step is
    appended to it: (lag added, class, what, measured, predicted), times in us, `what`
    the op's or message's key."""
    steps = dict.fromkeys(CLASSES, 0.0)
    counts = dict.fromkeys(CLASSES, 0)
    events = {"op": (run.ops, sim.ops), "message": (run.messages, sim.messages)}

    def add(cls, measured, predicted, what):
        steps[cls] += measured - predicted
        counts[cls] += 1
        if record is not None:
            record.append((measured - predicted, cls, what, measured, predicted))

    def latest(candidates, by):
        """The waited-for event among (kind, key) candidates both timelines have that ended
        last in the measurement, at or before `by`: (end, kind, key), or None."""
        ends = [(events[kind][0][key][1], kind, key) for kind, key in candidates
                if key in events[kind][1] and events[kind][0][key][1] <= by]
        return max(ends) if ends else None

    kind, k = "op", last
    while True:
        (ms, me), (ss, se) = events[kind][0][k], events[kind][1][k]
        if kind == "op":
            add("compute", me - ms, se - ss, k)
            wait = latest((("op", graph.prev.get(k)), ("message", graph.input_of(k))), ms)
            cls, until, predicted_until = ("start_stage" if wait and wait[1] == "op" else "start_message"), ms, ss
        else:
            before = held.get(k)
            wait = latest((("message", before),), me)
            cls = "stream"
            if wait is None:
                # A held message's recorded arrival is the stream's, not when the link was
                # done with it: the message behind it on the channel waits for its producer.
                p = graph.prev.get(k)
                wait = latest((("op", graph.producer.get(k)), ("message", None if p in held else p)), me)
                cls = "transfer"
            until, predicted_until = me, se
        if wait is None:
            return steps, counts, ms - ss
        step = k
        t, kind, k = wait
        add(cls, until - t, predicted_until - events[kind][1][k][1], step)
        if k[-2] != last[-2]:  # the key's iteration
            return steps, counts, t - events[kind][1][k][1]


def held_messages(d, idx, run):
    """{held message: the message whose receive it waited behind}, as Timeline keys."""
    ids = {fidelity_attribution.transfer_id(k): k for k in run.messages}
    out = {}
    for h, before in fidelity_attribution.held_receives(d, idx).items():
        if h in ids and before in ids:
            out[ids[h]] = ids[before]
    return out


def iteration_times(path):
    """(start_time_s, iteration_times_s) of a run's or a prediction's summary."""
    try:
        doc = fidelity_attribution.load_json(path)
    except (OSError, ValueError) as e:
        fail(f"{path}: not a readable summary ({e})")
    times = doc.get("iteration_times_s") if isinstance(doc, dict) else None
    if not isinstance(times, list) or not all(isinstance(x, (int, float)) for x in times):
        fail(f"{path}: iteration_times_s: a list of seconds expected")
    return doc.get("start_time_s", 0.0), times


def walk_iteration(run, sim, graph, held, it, record=None):
    """walk() from iteration it's last measured op that the prediction also has: (last op,
    steps, counts, root lag), or None where it has none."""
    ops = [k for k in run.ops if k[2] == it and k in sim.ops]
    if not ops:
        return None
    last = max(ops, key=lambda k: run.ops[k][1])
    return (last, *walk(run, sim, graph, held, last, record))


def analyse(d, idx, near_s, record=None):
    """Per measured iteration of candidate idx: (iteration, start s, measured minus
    predicted time in us, near a change, growth in us, steps, counts); with `record`,
    each steady iteration's steps appended to it as walk() records them, with the
    iteration in front."""
    paths = {n: os.path.join(d, f"{n}-{idx}.trace.json") for n in ("run", "sim")}
    for p in paths.values():
        if not os.path.exists(p):
            fail(f"{p}: no such timeline (fidelity.sh writes run-I.trace.json and sim-I.trace.json)")
    run, sim = Timeline(paths["run"]), Timeline(paths["sim"])
    graph, held = Graph(run), held_messages(d, idx, run)
    t0, measured = iteration_times(os.path.join(d, f"run-{idx}.json"))
    _, predicted = iteration_times(os.path.join(d, f"sim-{idx}.json"))
    changes = changes_of(d, idx)
    rows, start = [], t0
    for it, m in enumerate(measured):
        end = start + m
        near = any(start - near_s <= c <= end + near_s for c in changes)
        path = [] if record is not None and not near else None
        walked = walk_iteration(run, sim, graph, held, it, path)
        if walked:
            last, steps, counts, root = walked
            growth = run.ops[last][1] - sim.ops[last][1] - root
            if path:
                record.extend((it,) + x for x in path)
            error = (m - predicted[it]) * 1e6 if it < len(predicted) else None
            rows.append((it, start, error, near, growth, steps, counts))
        start = end
    return rows


def changes_of(d, idx):
    """The times (s) at which candidate idx's recorded rates (recorded-I.csv) changed."""
    path = os.path.join(d, f"recorded-{idx}.csv")
    if not os.path.exists(path):
        return []
    rows = fidelity_attribution.read_rates(path)
    return [t1 for (_, v0), (t1, v1) in zip(rows, rows[1:]) if v1 != v0]


def mean_of(rows):
    """(iterations, growth, steps, counts) averaged over rows (us, counts per iteration)."""
    n = len(rows)
    if not n:
        return 0, 0.0, dict.fromkeys(CLASSES, 0.0), dict.fromkeys(CLASSES, 0.0)
    return (n, sum(r[4] for r in rows) / n, {c: sum(r[5][c] for r in rows) / n for c in CLASSES},
            {c: sum(r[6][c] for r in rows) / n for c in CLASSES})


def summary_line(what, rows):
    n, growth, steps, counts = mean_of(rows)
    if not n:
        return f"    {what:8} no iteration"
    parts = "  ".join(f"{TITLES[c]} {steps[c] / 1e3:+.2f} ({counts[c]:.0f})" for c in CLASSES)
    return f"    {what:8} {n:2} iterations, growth {growth / 1e3:+.2f} ms = {parts}"


def by_channel(record, iterations, late_us):
    """{channel: (transfers, lag us, lag us of those above late_us, how many of those)}, each
    per iteration, from the transfer steps of `record` (walk()'s, over `iterations` steady
    iterations)."""
    out = {}
    for _, added, cls, what, _, _ in record:
        if cls != "transfer":
            continue
        row = out.setdefault(what[0].split()[-1], [0, 0.0, 0.0, 0])
        row[0] += 1
        row[1] += added
        if added > late_us:
            row[2] += added
            row[3] += 1
    n = max(1, iterations)
    return {ch: (k / n, lag / n, late / n, m / n) for ch, (k, lag, late, m) in sorted(out.items())}


def print_candidates(d, cands, a):
    """The paths of candidates [(index, label)] of scenario directory d as the options `a`
    ask; returns their means for --json."""
    print("lag added per iteration along the measured critical path, measured minus predicted, ms "
          "(in brackets: the steps per iteration)")
    out = []
    for idx, label in cands:
        record = [] if a.worst or a.channels is not None else None
        rows = analyse(d, idx, a.near_ms * 1e-3, record)
        print(f"=== {d} candidate {idx}: {label}")
        if a.iterations:
            for it, start, error, near, growth, steps, counts in rows:
                err = f"{error / 1e3:+7.2f}" if error is not None else "      -"
                print(f"    it {it:2} {start:8.3f} s  iteration {err} ms  growth {growth / 1e3:+7.2f} ms ="
                      + "".join(f"  {TITLES[c]} {steps[c] / 1e3:+.2f}" for c in CLASSES) + ("  (rate change)" if near else ""))
        steady = [r for r in rows if not r[3]]
        print(summary_line("steady", steady))
        print(summary_line("all", rows))
        for it, added, cls, what, measured, predicted in sorted(record or [], key=lambda x: -x[1])[:a.worst]:
            name = (f"{what[0]}, micro-batch {what[2]}" if len(what) == 3
                    else f"{what[1]} on stage {what[0] - 1}, micro-batch {what[3]}")
            print(f"      it {it:2} {TITLES[cls]:15} {name:36} {added / 1e3:+7.2f} ms (measured {measured / 1e3:.2f}, "
                  f"predicted {predicted / 1e3:.2f})")
        channels = None
        if a.channels is not None:
            channels = by_channel(record, len(steady), a.channels * 1e3)
            print(f"    transfers on the path by channel, per steady iteration: how many, their lag, and of it "
                  f"in transfers that added more than {a.channels:g} ms")
            for ch, (k, lag, late, m) in channels.items():
                print(f"      {ch:8} {k:5.1f}  {lag / 1e3:+8.2f} ms  {late / 1e3:+8.2f} ms in {m:.1f}")
        out.append({"candidate": idx, "label": label,
                    **{k: dict(zip(("iterations", "growth_us", "steps_us", "counts"), mean_of(r)))
                       for k, r in (("steady", steady), ("all", rows))}})
        if channels is not None:
            out[-1]["channels"] = {ch: dict(zip(("transfers", "lag_us", "late_us", "late"), v))
                                   for ch, v in channels.items()}
    return out


def print_tree(root, near_ms):
    """One line per scenario directory under root (a --random-scenarios output, or any
    directory of runs): its candidates' steady iterations, the mean over the candidates."""
    dirs = sorted(d for d, _, files in os.walk(root) if "pairs.txt" in files)
    if not dirs:
        fail(f"{root}: no fidelity run under it (no directory with pairs.txt)")
    print("steady iterations, mean over each run's candidates, ms per iteration (transfers on the path in brackets)")
    print(f"{'run directory':48} {'cands':>5} {'growth':>7} {'compute':>8} {'start,st':>8} {'start,msg':>9} "
          f"{'transfer':>14} {'each':>7} {'stream':>7}")
    for d in dirs:
        means = [mean_of([r for r in analyse(d, idx, near_ms * 1e-3) if not r[3]]) for idx, _ in
                 fidelity_attribution.candidates(d)]
        means = [m for m in means if m[0]]
        if not means:
            print(f"{d[-48:]:48} {0:5} no steady iteration")
            continue
        n = len(means)
        growth = sum(m[1] for m in means) / n / 1e3
        step = {c: sum(m[2][c] for m in means) / n / 1e3 for c in CLASSES}
        transfers = sum(m[3]["transfer"] for m in means) / n
        each = f"{1e3 * step['transfer'] / transfers:+5.0f}us" if transfers else "      -"
        print(f"{d[-48:]:48} {n:5} {growth:+7.2f} {step['compute']:+8.2f} {step['start_stage']:+8.2f} "
              f"{step['start_message']:+9.2f} {step['transfer']:+8.2f} ({transfers:3.0f}) {each:>7} {step['stream']:+7.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="a fidelity.sh scenario directory (preempted/, or the run directory above it)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--candidate", type=int, help="the candidate's index (run-I.json)")
    g.add_argument("--label", help="the candidate's label as compare.txt prints it, e.g. 'zbv b=1'")
    g.add_argument("--all", action="store_true", help="every replayed candidate (the default)")
    g.add_argument("--tree", action="store_true", help="every run under DIR, a line each: its candidates' mean "
                   "over their steady iterations")
    ap.add_argument("--iterations", action="store_true", help="print every iteration's path")
    ap.add_argument("--worst", type=int, default=0, help="print the N steps of steady iterations that added "
                    "the most lag")
    ap.add_argument("--channels", type=float, nargs="?", const=1.0, metavar="MS",
                    help="the transfer steps of steady iterations by channel, and how much of their lag is in "
                    "transfers that added more than MS each (default 1)")
    ap.add_argument("--near-ms", type=float, default=50, help="a steady iteration lies this many ms from any "
                    "recorded rate change (default 50)")
    ap.add_argument("--json", help="also write the per-candidate means (steady and all) to this file")
    ap.error = fail
    a = ap.parse_args()
    if not os.path.isdir(a.dir):
        fail(f"{a.dir}: not a directory")
    if a.worst < 0:
        fail(f"--worst: a number of steps >= 0, got {a.worst}")
    if a.channels is not None and not a.channels >= 0:
        fail(f"--channels: a number of milliseconds >= 0, got {a.channels}")
    if not a.near_ms >= 0:
        fail(f"--near-ms: a number of milliseconds >= 0, got {a.near_ms}")
    if a.tree:
        return print_tree(a.dir, a.near_ms)
    d = next((x for x in (a.dir, os.path.join(a.dir, "preempted")) if os.path.exists(os.path.join(x, "pairs.txt"))), None)
    if d is None:
        fail(f"no pairs.txt in {a.dir} or its preempted/ (a fidelity.sh scenario directory?)")
    cands = fidelity_attribution.candidates(d)
    if a.candidate is not None:
        cands = [c for c in cands if c[0] == a.candidate]
    elif a.label is not None:
        cands = [c for c in cands if c[1] == a.label]
    if not cands:
        fail(f"no such candidate in {d}")
    out = print_candidates(d, cands, a)
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
