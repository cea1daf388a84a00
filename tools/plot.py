#!/usr/bin/python3
"""Figures from adagrouper outputs (Debian's python3-matplotlib; no other packages).

  tools/plot.py gantt TIMELINE.json -o FIG        compute and transfer lanes per stage
                                                   from `adagrouper simulate --timeline`

Each figure is written as FIG.png and FIG.svg (FIG without an extension). Every
subcommand has --help. Inputs are described in docs/formats.md.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


class InputError(Exception):
    """Bad input: reported as one line naming the file and the field, exit status 2."""


def save(fig, out):
    """Writes OUT.png and OUT.svg atomically (temporary file, then rename)."""
    base, ext = os.path.splitext(out)
    if ext.lower() in (".png", ".svg"):
        out = base
    d = os.path.dirname(out)
    if d:
        os.makedirs(d, exist_ok=True)
    written = []
    for fmt in ("png", "svg"):
        final = f"{out}.{fmt}"
        tmp = f"{final}.tmp.{os.getpid()}"
        fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight")
        os.replace(tmp, final)
        written.append(final)
    plt.close(fig)
    print("wrote " + ", ".join(written), file=sys.stderr)


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not JSON ({e.msg})")


# --- gantt ------------------------------------------------------------------------

def cmd_gantt(args):
    doc = load_json(args.timeline)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise InputError(f"{args.timeline}: traceEvents: missing (not a timeline from adagrouper simulate --timeline)")
    stage_of = {}  # pid -> stage number
    lane_name = {}  # (pid, tid) -> name
    slices = []
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise InputError(f"{args.timeline}: traceEvents[{i}]: not an object")
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "process_name":
            name = str(e.get("args", {}).get("name", ""))
            if name.startswith("stage "):
                stage_of[e["pid"]] = int(name.split()[1])
        elif ph == "M" and e.get("name") == "thread_name":
            lane_name[(e["pid"], e["tid"])] = str(e.get("args", {}).get("name", ""))
        elif ph == "X":
            for field in ("pid", "tid", "ts", "dur", "name"):
                if field not in e:
                    raise InputError(f"{args.timeline}: traceEvents[{i}].{field}: missing")
            slices.append(e)
    if not slices:
        raise InputError(f"{args.timeline}: traceEvents: no op or transfer slices")
    t0 = min(s["ts"] for s in slices)
    t1 = max(s["ts"] + s["dur"] for s in slices)
    if args.iteration is not None:
        slices = [s for s in slices if s.get("args", {}).get("iteration") == args.iteration]
        if not slices:
            raise InputError(f"{args.timeline}: --iteration {args.iteration}: no slices of that iteration")
        t0 = min(s["ts"] for s in slices)
        t1 = max(s["ts"] + s["dur"] for s in slices)

    # One row per (stage, lane): compute first, then the channel ends in name order.
    lanes = sorted({(s["pid"], s["tid"]) for s in slices},
                   key=lambda k: (stage_of.get(k[0], k[0]), k[1] != 1, lane_name.get(k, "")))
    row = {k: i for i, k in enumerate(lanes)}
    colors = {"forward": "#4c72b0", "backward": "#dd8452", "transfer": "#8c8c8c"}
    fig, ax = plt.subplots(figsize=(args.width, max(2.0, 0.32 * len(lanes) + 1)))
    scale = 1e-6  # microseconds -> seconds
    for cat, color in colors.items():
        bars = [((s["ts"] - t0) * scale, s["dur"] * scale) for s in slices if s.get("cat", "") == cat]
        ys = [row[(s["pid"], s["tid"])] for s in slices if s.get("cat", "") == cat]
        for y in sorted(set(ys)):
            ax.broken_barh([b for b, yy in zip(bars, ys) if yy == y], (y - 0.4, 0.8),
                           facecolors=color, edgecolor="white", linewidth=0.3)
    if args.labels:
        for s in slices:
            if s.get("cat") in ("forward", "backward") and s["dur"] * scale > 0.02 * (t1 - t0) * scale:
                ax.text((s["ts"] - t0 + s["dur"] / 2) * scale, row[(s["pid"], s["tid"])], s["name"],
                        ha="center", va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"stage {stage_of.get(p, p)} {lane_name.get((p, t), t)}" for p, t in lanes], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since start (s)")
    ax.set_xlim(0, (t1 - t0) * scale)
    ax.set_title(args.title or os.path.basename(args.timeline))
    ax.legend(handles=[Patch(facecolor=c, label=n) for n, c in colors.items()], loc="upper right", fontsize=7,
              ncol=3)
    save(fig, args.output)


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/plot.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    g = sub.add_parser("gantt", help="compute and transfer lanes per stage from a timeline file",
                       description="Gantt chart of `adagrouper simulate --timeline FILE`: one row for each "
                                   "stage's compute stream and one per channel end (send to / recv from).")
    g.add_argument("timeline", help="timeline JSON written by adagrouper simulate --timeline")
    g.add_argument("-o", "--output", required=True, help="figure path without extension (writes .png and .svg)")
    g.add_argument("--iteration", type=int, help="plot only this iteration (default: all)")
    g.add_argument("--labels", action="store_true", help="write op names (F3, B3) on wide enough slices")
    g.add_argument("--width", type=float, default=12.0, help="figure width in inches (default 12)")
    g.add_argument("--title", help="figure title (default: the file name)")
    g.set_defaults(func=cmd_gantt)

    args = p.parse_args(argv)
    try:
        args.func(args)
    except InputError as e:
        print(f"plot.py {args.cmd}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
