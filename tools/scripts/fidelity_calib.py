#!/usr/bin/env python3
"""The fidelity testbed's channel calibration: the fit of replayed transfers, and the network it gives.

    tools/scripts/fidelity_calib.py fit CALIB_DIR SIZES LEVEL [LEVEL ...] [--bucket-bytes B]
    tools/scripts/fidelity_calib.py network CALIBRATION NOMINAL FILE KIND [RATES_CSV [per-channel]]

fit: per shaped rate LEVEL (bytes/s) and channel, the effective rate R and per-message
latency L (transfer time = L + bytes / R) from the replays tools/scripts/fidelity.sh
ran in CALIB_DIR (run-LEVEL-SIZE.trace.json, SIZES "small large" or one of them): each
gives a channel's median transfer time, and the two sizes the line through the two
medians; a latency outside [0, 1 ms] (noise, or the head start of a shaper's bucket) is
clamped and the rate taken from the large messages. With --bucket-bytes B the fit
assumes a token bucket of B bytes in front of the rate (docs/model.md, "Shaped links"),
full at each message, so that a message of x bytes takes L + (x - B) / R. SIZES may
also name tiny (with --bucket-bytes only): replays of messages smaller than the bucket,
spaced for it to refill, which leave at once; their median time is then the latency,
and the rate comes from the largest other size with it. Prints the calibration JSON.

network: a network file FILE with the calibrated channels of CALIBRATION. KIND
constant: each channel's effective rate at the shaped rate NOMINAL; trace: RATES_CSV
(time_s,shaped bytes/s; with per-channel, RATES_CSV-F-T.csv for channel F->T where it
exists) with every value times the channel's efficiency at that rate (interpolated
linearly between the calibrated levels), written beside FILE as FILE-F-T.csv. With
--bucket-bytes B every channel gets burst_bytes B.

Exit status 2 with one line on bad arguments.
"""
import csv
import json
import os
import statistics
import sys


def fail(msg):
    print(f"fidelity_calib.py: {msg}", file=sys.stderr)
    sys.exit(2)


def medians(path):
    """Per channel (from, to) of a replay's timeline: (bytes, median transfer time, count)."""
    per = {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("cat") == "transfer" and e.get("flow_out"):
            ends = e["name"].split()[1].split("->")
            per.setdefault((int(ends[0]), int(ends[1])), []).append((e["args"]["bytes"], e["dur"] * 1e-6))
    return {k: (v[0][0], statistics.median(t for _, t in v), len(v)) for k, v in per.items()}


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


def fit(calib_dir, sizes, levels, bucket=0.0):
    """The calibration of the replays in calib_dir: levels are the shaped rates as their
    files name them (run-LEVEL-SIZE.trace.json)."""
    out = []
    for name in levels:
        level = float(name)
        runs = [medians(os.path.join(calib_dir, f"run-{name}-{s}.trace.json")) for s in sizes if s != "tiny"]
        tiny = medians(os.path.join(calib_dir, f"run-{name}-tiny.trace.json")) if "tiny" in sizes else None
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
            chans.append({"from": f, "to": t, "latency_s": lat, "rate": rate, "efficiency": rate / level,
                          "samples": n})
        out.append({"nominal_bytes_per_s": level, "channels": chans})
    doc = {"method": "replay", "levels": out}
    if bucket > 0:
        doc["bucket_bytes"] = bucket
    if "tiny" in sizes:
        doc["latency_from"] = "tiny"  # messages within the bucket, not the line's intercept
    return doc


def efficiency(cal, i, v):
    """Channel i's efficiency at shaped rate v, interpolated between the levels of cal."""
    pts = [(lv["nominal_bytes_per_s"], lv["channels"][i]["efficiency"]) for lv in cal]
    if v <= pts[0][0]:
        return pts[0][1]
    for (a, ea), (b, eb) in zip(pts, pts[1:]):
        if v <= b:
            return ea + (eb - ea) * (v - a) / (b - a)
    return pts[-1][1]


def network(calibration_path, nominal, path, kind, rates_csv=None, per_channel=False, bucket=0.0):
    cal = sorted(json.load(open(calibration_path))["levels"], key=lambda lv: lv["nominal_bytes_per_s"])
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
        chs.append({"from": ch["from"], "to": ch["to"], "latency_s": ch["latency_s"], "rate": rate})
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


def main(argv):
    bucket = 0.0
    if "--bucket-bytes" in argv:
        i = argv.index("--bucket-bytes")
        if i + 1 >= len(argv):
            fail("--bucket-bytes: needs a value")
        bucket = number(argv[i + 1], "--bucket-bytes")
        del argv[i:i + 2]
    if len(argv) >= 4 and argv[0] == "fit":
        sizes = argv[2].split()
        lines = [x for x in sizes if x != "tiny"]
        if not 1 <= len(lines) <= 2 or not set(lines) <= {"small", "large"} or len(set(sizes)) != len(sizes):
            fail(f"fit: SIZES is 'small large' or one of them, with tiny or not, got '{argv[2]}'")
        if "tiny" in sizes and not bucket > 0:
            fail("fit: SIZES tiny: needs --bucket-bytes B > 0 (a message smaller than the bucket)")
        for x in argv[3:]:
            number(x, "fit: LEVEL")
        json.dump(fit(argv[1], sizes, argv[3:], bucket), sys.stdout, indent=1)
    elif 5 <= len(argv) <= 7 and argv[0] == "network":
        kind = argv[4]
        if kind not in ("constant", "trace") or (kind == "trace") != (len(argv) >= 6):
            fail("network: KIND is constant, or trace followed by RATES_CSV")
        network(argv[1], number(argv[2], "network: NOMINAL"), argv[3], kind,
                argv[5] if len(argv) >= 6 else None, len(argv) == 7 and argv[6] == "per-channel", bucket)
    else:
        fail("usage: fidelity_calib.py fit CALIB_DIR SIZES LEVEL... | network CALIBRATION NOMINAL FILE KIND "
             "[RATES_CSV [per-channel]] (see its first lines)")


if __name__ == "__main__":
    main(sys.argv[1:])
