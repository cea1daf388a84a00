#!/usr/bin/env python3
"""The ops' and messages' spread in the fidelity testbed's prediction, drawn from the compute calibration's.

    tools/scripts/fidelity_spread.py costs TIMELINE[,TIMELINE...] PIPELINE B OUT [--stall-fence K]
    tools/scripts/fidelity_spread.py predict COSTS TIMELINE DRAWS TAG OUT [--messages SITU] -- ADAGROUPER simulate ARGS...

The model gives every op its profile plus the stage's op overhead, the mean cost per op
beyond the profile that the compute calibration measured (fidelity_calib.py compute).
The ops of a replay on a shared host do not all cost that mean: most cost less, a few
much more. Where an op waits for the later of two others (a stage's previous op and its
input), their spread lengthens the wait on average even when the mean is right, so a
prediction with every op at the mean is fast (docs/fidelity.md, "The ops' spread").

costs: the compute calibration's ops' costs beyond their profile (TIMELINE, a 1F1B
replay of PIPELINE at micro-batch size B, or several such replays joined by commas,
pooled; measured as fidelity_calib.py compute measures them: start latency plus the
run past the profile), every stage's together, without the iterations the host froze in
and the ops that stage's --stall-fence K leaves out (default inf: none), written to OUT as
JSON: {"costs_s": [...], "mean_s": M}.

predict: candidate predicted DRAWS times by `ADAGROUPER simulate ARGS...` (the run's own
prediction's arguments, without --output), each time with a stage timing trace
(simulate --stage-trace) giving every op of the prediction's timeline TIMELINE (its ops
and their durations: the profile plus the overhead) its duration plus a cost drawn at
random from COSTS less their mean. Draw k is seeded with "TAG-k", so that the same
arguments give the same prediction. OUT is the first draw's summary with the iteration
times averaged over the draws (and the totals, mean and throughput that follow from
them).

--messages SITU: each draw also gives every message of TIMELINE a latency of its own
(simulate --message-trace): its channel's (the network file of ARGS, which has the
latency in situ already) plus a lag drawn at random from SITU's lags_s less their mean,
at least 0. SITU is the latency in situ's measurement (fidelity_situ.py writes it to
calib/situ.json): what each transfer on the compute calibration's critical paths took
beyond the links' calibration. A message that a waiting op needs is late by that mean
in the prediction without it, but a few are late by milliseconds and most by less, and
a wait for the later of two is longer than at their means (docs/fidelity.md, "The
messages' spread"). The messages are drawn from their own seed ("TAG-k-messages"), so
that the ops' draws are the same with and without it.

Exit status 2 with one line on bad arguments or inputs.
"""
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile

import fidelity_calib


def fail(msg):
    print(f"fidelity_spread.py: {msg}", file=sys.stderr)
    sys.exit(2)


def calibration_costs(timelines, pipeline, b, fence=math.inf):
    """The costs (s) of the compute calibration's ops beyond their profile (one replay's
    timeline, or a list of them pooled), every stage's, less those its stall fence leaves
    out (fidelity_calib.stalled) and those of the iterations the host froze in
    (fidelity_calib.stage_op_costs)."""
    timelines = [timelines] if isinstance(timelines, str) else list(timelines)
    per, _ = fidelity_calib.pooled_op_costs(timelines, fidelity_calib.read_pipeline(pipeline), b)
    costs = []
    for ops in per.values():
        total = [x + y for x, y in ops]
        costs += [c * 1e-6 for c, out in zip(total, fidelity_calib.stalled(total, fence)) if not out]
    if not costs:
        fail(f"costs: {','.join(timelines)}: the compute calibration has no op to draw a cost from")
    return costs


def read_costs(path):
    """COSTS as `costs` wrote it: the list of costs (s)."""
    try:
        costs = json.load(open(path))["costs_s"]
        if costs and all(isinstance(c, (int, float)) for c in costs):
            return costs
    except (OSError, ValueError, KeyError, TypeError):
        pass
    fail(f"{path}: costs_s: a non-empty list of seconds expected (fidelity_spread.py costs writes it)")


def predicted_ops(timeline):
    """The ops of a prediction's timeline: (iteration, model stage, micro-batch, phase, duration s)."""
    ops = []
    for e in fidelity_calib.read_events(timeline, fail):
        if e.get("ph") == "X" and e.get("cat") in fidelity_calib.OP_CATS:
            stage, phase = fidelity_calib.model_stage_and_phase(e["name"], e["pid"])
            a = e["args"]
            if not isinstance(a.get("iteration"), int) or not isinstance(a.get("micro_batch"), int):
                fail(f"{timeline}: op {e['name']}: args.iteration and args.micro_batch expected")
            ops.append((a["iteration"], stage, a["micro_batch"], a.get("phase", phase), e["dur"] * 1e-6))
    if not ops:
        fail(f"{timeline}: no op to draw a cost for")
    return ops


def read_lags(path):
    """SITU's lags (s), as fidelity_situ.py writes them."""
    try:
        lags = json.load(open(path))["lags_s"]
        if lags and all(isinstance(x, (int, float)) for x in lags):
            return lags
    except (OSError, ValueError, KeyError, TypeError):
        pass
    fail(f"{path}: lags_s: a non-empty list of seconds expected (fidelity_situ.py writes it, with the latency in "
         "situ measured)")


def predicted_messages(timeline):
    """The messages of a prediction's timeline: (iteration, sending model stage, micro-batch,
    F or B, from stage, to stage), from the sender's record of each transfer."""
    msgs = []
    for e in fidelity_calib.read_events(timeline, fail):
        if e.get("ph") == "X" and e.get("cat") == "transfer" and e.get("flow_out"):
            m = re.fullmatch(r"(\d+)?([FB])(\d+) (\d+)->(\d+)", e.get("name", ""))
            it = e.get("args", {}).get("iteration")
            if not m or not isinstance(it, int):
                fail(f"{timeline}: transfer '{e.get('name')}': 'JFm S->T' or 'Fm S->T' and args.iteration expected")
            j, phase, mb, src, dst = m.groups()
            msgs.append((it, int(j if j is not None else src), int(mb), phase, int(src), int(dst)))
    return msgs


def channel_latencies(network):
    """{(from, to): latency s} of a network file's listed channels, and the latency of the others."""
    try:
        doc = json.load(open(network))
    except (OSError, ValueError) as e:
        fail(f"{network}: not readable JSON ({e})")
    top = doc.get("latency_s", 0.0)
    per = {}
    for ch in doc.get("channels", []):
        per[(ch.get("from"), ch.get("to"))] = ch.get("latency_s", top)
    if not all(isinstance(x, (int, float)) for x in [top, *per.values()]):
        fail(f"{network}: latency_s: numbers of seconds expected")
    return per, top


def network_of(simulate):
    """The network file of a simulate command line (its --network)."""
    if "--network" not in simulate[:-1]:
        fail("predict --messages: the simulate arguments have no --network FILE (the channels' latencies)")
    return simulate[simulate.index("--network") + 1]


def drawn_latencies(msgs, latencies, lags, rng):
    """Message timing trace rows: each message (predicted_messages) with its channel's latency
    plus a lag drawn from lags less their mean, at least 0."""
    per, top = latencies
    mean = sum(lags) / len(lags)
    return [(it, j, mb, ph, max(0.0, per.get((src, dst), top) + rng.choice(lags) - mean))
            for it, j, mb, ph, src, dst in msgs]


def drawn(ops, costs, rng):
    """Stage timing trace rows: each op (predicted_ops) lasting its duration plus a cost drawn
    from costs less their mean, at least 0."""
    mean = sum(costs) / len(costs)
    return [(it, stage, mb, phase, max(0.0, dur + rng.choice(costs) - mean)) for it, stage, mb, phase, dur in ops]


def run(args):
    """Runs an adagrouper command; its error, when it fails, is this tool's one line."""
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        fail(f"adagrouper {args[1] if len(args) > 1 else ''} failed: {why}")


def averaged(results):
    """The first summary with the iteration times averaged over all of them."""
    r = results[0]
    r["iteration_times_s"] = [sum(t) / len(results) for t in zip(*(x["iteration_times_s"] for x in results))]
    r["total_time_s"] = sum(r["iteration_times_s"])
    r["mean_iteration_time_s"] = r["total_time_s"] / len(r["iteration_times_s"])
    r["throughput_samples_per_s"] = r["global_batch_size"] * len(r["iteration_times_s"]) / r["total_time_s"]
    return r


def write_rows(path, header, rows):
    with open(path, "w") as f:
        f.write(header + "\n")
        f.writelines(f"{it},{s},{mb},{ph},{x!r}\n" for it, s, mb, ph, x in rows)


def predict(simulate, ops, costs, draws, tag, out, messages=None):
    """`out`: the prediction of `simulate` (an adagrouper simulate command line without
    --output) averaged over `draws` draws of the ops' costs (drawn) and, with `messages`
    (predicted_messages, channel_latencies, lags), of the messages' latencies
    (drawn_latencies)."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(draws):
            trace, result = os.path.join(tmp, f"stages-{k}.csv"), os.path.join(tmp, f"sim-{k}.json")
            write_rows(trace, "iteration,stage,micro_batch,phase,duration_s",
                       drawn(ops, costs, random.Random(f"{tag}-{k}")))
            extra = []
            if messages:
                extra = ["--message-trace", os.path.join(tmp, f"messages-{k}.csv")]
                write_rows(extra[1], "iteration,stage,micro_batch,phase,latency_s",
                           drawn_latencies(*messages, random.Random(f"{tag}-{k}-messages")))
            run(simulate + ["--stage-trace", trace, *extra, "--output", result])
            results.append(json.load(open(result)))
    with open(out + ".tmp", "w") as f:  # renamed when complete
        json.dump(averaged(results), f, indent=2)
        f.write("\n")
    os.replace(out + ".tmp", out)


def draws_arg(text, what, fail_with=fail):
    """A number of draws, 1 to 1000."""
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        fail_with(f"{what}: a number of draws from 1 to 1000, got '{text}'")
    return int(text)


def main(argv):
    usage = ("usage: fidelity_spread.py costs TIMELINE[,TIMELINE...] PIPELINE B OUT [--stall-fence K] | "
             "predict COSTS TIMELINE DRAWS TAG OUT [--messages SITU] -- ADAGROUPER simulate ARGS... (see its first lines)")
    if argv[:1] == ["costs"]:
        rest = argv[1:]
        fence = math.inf
        if "--stall-fence" in rest:
            k = rest.index("--stall-fence")
            if k + 1 >= len(rest):
                fail("--stall-fence: a number of interquartile ranges expected")
            fence = fidelity_calib.stall_fence_arg(rest[k + 1], "--stall-fence", fail)
            rest = rest[:k] + rest[k + 2:]
        if len(rest) != 4:
            fail(usage)
        timeline, pipeline, b, out = rest
        costs = calibration_costs(timeline.split(","), pipeline, fidelity_calib.number(b, "B", fail, "a micro-batch size"),
                                  fence)
        with open(out + ".tmp", "w") as f:
            json.dump({"costs_s": costs, "mean_s": sum(costs) / len(costs)}, f)
        os.replace(out + ".tmp", out)
    elif argv[:1] == ["predict"] and "--" in argv and argv.index("--") in (6, 8) and len(argv) > argv.index("--") + 2:
        costs_path, timeline, draws, tag, out = argv[1:6]
        sep = argv.index("--")
        if sep == 8 and argv[6] != "--messages":
            fail(usage)
        draws = draws_arg(draws, "DRAWS")
        costs = read_costs(costs_path)
        simulate = argv[sep + 1:]
        messages = None
        if sep == 8:
            lags = read_lags(argv[7])
            messages = (predicted_messages(timeline), channel_latencies(network_of(simulate)), lags)
        predict(simulate, predicted_ops(timeline), costs, draws, tag, out, messages)
    else:
        fail(usage)


if __name__ == "__main__":
    main(sys.argv[1:])
