#!/usr/bin/python3
"""Figures from adagrouper outputs (Debian's python3-matplotlib; no other packages).

  tools/scripts/plot.py gantt TIMELINE.json -o FIG        compute and transfer lanes per stage
                                                   from `adagrouper simulate --timeline`
  tools/scripts/plot.py severity SWEEP.csv|jsonl -o FIG   iteration time (or speedup over 1F1B)
                                                   against preemption severity, one line
                                                   per schedule / k
  tools/scripts/plot.py heatmap SWEEP.csv|jsonl -o FIG    kFkB's speedup over 1F1B over (k, severity)
  tools/scripts/plot.py adapt ROWS.csv|jsonl -o FIG       an adaptive run (`adagrouper adapt --rows`):
                                                   plan and iteration time over time, with
                                                   the static policies for reference

SWEEP is the output of `adagrouper sweep` (docs/formats.md, "Sweep spec and output"),
ROWS the rows of `adagrouper adapt --rows` (docs/formats.md, "Adaptive run"); CSV or
JSON Lines, told apart by the extension (.jsonl / .ndjson / .json: JSON Lines). Column
names are options with defaults matching those outputs; a column that is missing or a
value that is not a number is reported as one line naming the file, the line and the
column, with exit status 2. Sweep rows with an error are skipped; repeated runs of a point
(seeds, start times) are averaged, with a band of one standard deviation.

Speedup, in every figure as in the planner's "vs 1F1B" (PlanResult::speedup_over_1f1b):
a run's throughput over 1F1B's at 1F1B's largest micro-batch size b that fits the memory
limit, under the same conditions. Sweeps that run 1F1B at one b compare with that b.
Figures for the shipped studies: configs/studies/run.sh (docs/studies.md).

Each figure is written as FIG.png and FIG.svg (FIG without an extension). Every
subcommand has --help. Inputs are described in docs/formats.md.
"""
import argparse
import csv
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
matplotlib.rcParams["svg.hashsalt"] = "adagrouper"  # stable SVG ids: same data, same file
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
        meta = {"Date": None} if fmt == "svg" else {}  # no timestamp: same data, same file
        fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight", metadata=meta)
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

# Ops by phase: forward blue, backward orange, the input half of a split backward red,
# the weight half grey and hatched (W ops are the ones dynamic W fill moves); optimizer
# steps dark grey.
PHASE_COLORS = {"forward": "#4c72b0", "backward": "#dd8452", "backward-input": "#c44e52",
                "backward-weight": "#8c8c8c"}
PHASE_HATCH = {"backward-weight": "////"}
OPTIMIZER_COLOR = "#3b3b3b"
# Transfers as thin lanes, dark enough to stand out against the white background:
# activations teal, gradients purple; a message waiting for its channel in a light tint.
TRANSFER_COLORS = {"F": "#138d75", "B": "#7d3c98"}
QUEUED_COLORS = {"F": "#7fcdbb", "B": "#c39bd3"}
BANDWIDTH_COLOR = "#b03a2e"
COMPUTE_H, LANE_H, BW_H, GAP_H = 1.0, 0.5, 0.55, 0.35  # lane heights, in compute-lane units


def shade(color, level, levels):
    """The color lightened for the level-th of `levels` model stages on one stage."""
    from matplotlib.colors import to_rgb
    if levels <= 1:
        return color
    mix = 0.55 * level / (levels - 1)
    return tuple(c + (1 - c) * mix for c in to_rgb(color))


def message_kind(name):
    """'F' (activation) or 'B' (gradient) from a transfer's name: F3 0->1, 2B3 1->0."""
    head = str(name).lstrip("0123456789")
    return "B" if head[:1] == "B" else "F"


class Timeline:
    """The parts of `adagrouper simulate --timeline` that the Gantt chart draws."""

    def __init__(self, path):
        doc = load_json(path)
        events = doc.get("traceEvents") if isinstance(doc, dict) else None
        if not isinstance(events, list):
            raise InputError(f"{path}: traceEvents: missing (not a timeline from adagrouper simulate --timeline)")
        self.stage_of = {}   # pid -> stage number
        self.lane_name = {}  # (pid, tid) -> thread name
        self.slices = []     # X events: ops, optimizer steps, transfers
        self.queued = []     # (pid, tid, start, end, kind, iteration): a message waiting for its channel
        self.bandwidth = {}  # (pid, name) -> [(ts, bytes/s)]
        begins = {}
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                raise InputError(f"{path}: traceEvents[{i}]: not an object")
            ph = e.get("ph")
            if ph == "M":
                self._meta(e)
            elif ph == "X":
                for field in ("pid", "tid", "ts", "dur", "name"):
                    if field not in e:
                        raise InputError(f"{path}: traceEvents[{i}].{field}: missing")
                self.slices.append(e)
            elif ph in ("b", "e") and e.get("cat") == "queued":
                key = (e.get("pid"), e.get("id"))
                if ph == "b":
                    begins[key] = e
                elif key in begins:
                    b = begins.pop(key)
                    args = b.get("args", {})
                    self.queued.append((b["pid"], b.get("tid"), b["ts"], e["ts"], message_kind(args.get("message", "")),
                                        args.get("iteration")))
            elif ph == "C" and str(e.get("name", "")).startswith("bandwidth to "):
                v = e.get("args", {}).get("bytes_per_s")
                if isinstance(v, (int, float)):
                    self.bandwidth.setdefault((e["pid"], e["name"]), []).append((e["ts"], float(v)))
        if not self.slices:
            raise InputError(f"{path}: traceEvents: no op or transfer slices")
        for series in self.bandwidth.values():
            series.sort()

    def _meta(self, e):
        if e.get("name") == "process_name":
            name = str(e.get("args", {}).get("name", ""))
            if name.startswith("stage "):
                self.stage_of[e["pid"]] = int(name.split()[1])
        elif e.get("name") == "thread_name":
            self.lane_name[(e["pid"], e["tid"])] = str(e.get("args", {}).get("name", ""))

    def stage(self, pid):
        return self.stage_of.get(pid, pid)

    def iteration_starts(self):
        """iteration -> the earliest start of its ops (the iteration's start)."""
        starts = {}
        for s in self.slices:
            it = s.get("args", {}).get("iteration")
            if isinstance(it, int) and s.get("cat") != "transfer":
                starts[it] = min(starts.get(it, s["ts"]), s["ts"])
        return starts


def gantt_layout(tl, slices, recv_lanes):
    """Rows top to bottom: per stage its compute lane, its send lanes (to the next stage
    first), with --recv-lanes its receive lanes, and a bandwidth strip when the timeline
    has the bandwidth of its outgoing channels. Returns [(key, y centre, height, label)]."""
    lanes = {(s["pid"], s["tid"]) for s in slices
             if s["tid"] == 1 or recv_lanes or tl.lane_name.get((s["pid"], s["tid"]), "").startswith("send")}
    by_stage = {}
    for pid, tid in lanes:
        by_stage.setdefault(pid, []).append(tid)
    for pid, _ in tl.bandwidth:
        by_stage.setdefault(pid, [])
    rows, y = [], 0.0

    def add(key, h, label):
        nonlocal y
        rows.append((key, y + h / 2, h, label))
        y += h

    for pid in sorted(by_stage, key=tl.stage):
        s = tl.stage(pid)

        def lane_order(tid, pid=pid, s=s):
            name = tl.lane_name.get((pid, tid), "")
            peer = name.split()[-1] if name else ""
            return (tid != 1, not name.startswith("send"), peer != str(s + 1), name)

        for tid in sorted(by_stage[pid], key=lane_order):
            name = tl.lane_name.get((pid, tid), str(tid))
            if tid == 1:
                add((pid, tid), COMPUTE_H, f"stage {s}")
            else:
                add((pid, tid), LANE_H, name.replace("send to ", "\u2192 ").replace("recv from ", "\u2190 "))
        if any(p == pid for p, _ in tl.bandwidth):
            add((pid, "bandwidth"), BW_H, "bandwidth")
        y += GAP_H
    return rows


def draw_bandwidth(ax, tl, rows, t0, t1, scale):
    """Each sender's channel rates as thin step lines in its bandwidth strip, as a fraction
    of the largest rate in the figure (the strip's top)."""
    top = max((v for series in tl.bandwidth.values() for _, v in series), default=0.0)
    if top <= 0:
        return
    strip = {key[0]: (yc, h) for key, yc, h, _ in rows if key[1] == "bandwidth"}
    styles = ["-", "--", ":", "-."]
    for (pid, name), series in sorted(tl.bandwidth.items(), key=lambda kv: kv[0][1]):
        if pid not in strip:
            continue
        yc, h = strip[pid]
        inside = [(ts, v) for ts, v in series if t0 < ts < t1]
        before = [v for ts, v in series if ts <= t0]
        first = before[-1] if before else series[0][1]
        pts = [(t0, first)] + inside + [(t1, inside[-1][1] if inside else first)]
        xs = [(ts - t0) * scale for ts, _ in pts]
        ys = [yc + h * 0.42 - 0.84 * h * v / top for _, v in pts]
        k = sum(1 for key in tl.bandwidth if key[0] == pid and key[1] < name)
        ax.step(xs, ys, where="post", color=BANDWIDTH_COLOR, linewidth=0.7, linestyle=styles[k % len(styles)])


def label_iterations(ax, tl, t0, t1, scale):
    """Dotted lines where iterations start, and 'iteration i' on the top axis."""
    starts = sorted((ts, it) for it, ts in tl.iteration_starts().items() if t0 <= ts < t1)
    if not starts:
        return
    ends = [ts for ts, _ in starts[1:]] + [t1]
    for ts, _ in starts[1:]:
        ax.axvline((ts - t0) * scale, color="black", linewidth=0.6, linestyle=":", zorder=0)
    step = max(1, len(starts) // 12)
    top = ax.secondary_xaxis("top")
    top.set_xticks([((ts + e) / 2 - t0) * scale for (ts, _), e in list(zip(starts, ends))[::step]])
    top.set_xticklabels([f"iteration {it}" for _, it in starts[::step]], fontsize=7)
    top.tick_params(length=0)


def gantt_legend(slices, queued, bandwidth):
    cats = {s.get("cat", "") for s in slices}
    handles = []
    for n, c in PHASE_COLORS.items():
        if n in cats:
            label = {"backward-input": "backward (input, I)", "backward-weight": "backward (weight, W)"}.get(n, n)
            handles.append(Patch(facecolor=c, hatch=PHASE_HATCH.get(n), label=label))
    if "optimizer" in cats:
        handles.append(Patch(facecolor=OPTIMIZER_COLOR, label="optimizer step"))
    if any("model_stage" in s.get("args", {}) for s in slices):
        handles.append(Patch(facecolor="white", edgecolor="black", label="lighter: later model stage"))
    kinds = {message_kind(s["name"]) for s in slices if s.get("cat") == "transfer"}
    for k, what in (("F", "activation"), ("B", "gradient")):
        if k in kinds:
            handles.append(Patch(facecolor=TRANSFER_COLORS[k], label=f"{what} moving"))
    if queued:
        handles.append(Patch(facecolor=QUEUED_COLORS["F"], label="waiting for its channel (under the lane)"))
    if bandwidth:
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], color=BANDWIDTH_COLOR, linewidth=0.8,
                              label="channel bandwidth (strip top: the largest rate)"))
    return handles


def gantt_bars(ax, tl, slices, queued, where, t0, scale):
    """The slices as bars, grouped by style so that matplotlib draws each group at once."""
    stages = len(tl.stage_of) or 1
    levels = 1 + max((s.get("args", {}).get("model_stage", 0) // stages for s in slices), default=0)
    groups = {}  # (color, hatch, zorder) -> {(y, h): [(x, w)]}

    def put(key, lane, start, dur, part=(0.0, 1.0)):
        """A bar in the part (top, bottom as fractions) of the lane's height."""
        if lane in where:
            yc, h = where[lane]
            pad = 0.1 if lane[1] == 1 else 0.06
            top, bottom = yc - h / 2 + pad, yc + h / 2 - pad
            span = bottom - top
            groups.setdefault(key, {}).setdefault((top + part[0] * span, (part[1] - part[0]) * span), []).append(
                ((start - t0) * scale, dur * scale))

    # A channel lane: the transfers in its upper part, the messages waiting under them.
    transfer_part = (0.0, 0.62) if queued else (0.0, 1.0)
    for pid, tid, start, end, kind, _ in queued:
        put((QUEUED_COLORS[kind], None, 1), (pid, tid), start, end - start, (0.7, 1.0))
    for s in slices:
        cat = s.get("cat", "")
        if cat in PHASE_COLORS:
            level = s.get("args", {}).get("model_stage", 0) // stages
            key = (shade(PHASE_COLORS[cat], level, levels), PHASE_HATCH.get(cat), 2)
        elif cat == "optimizer":
            key = (OPTIMIZER_COLOR, None, 2)
        else:
            put((TRANSFER_COLORS[message_kind(s["name"])], None, 2), (s["pid"], s["tid"]), s["ts"], s["dur"],
                transfer_part)
            continue
        put(key, (s["pid"], s["tid"]), s["ts"], s["dur"])
    transfer_colors = set(TRANSFER_COLORS.values()) | set(QUEUED_COLORS.values())
    for (color, hatch, z), by_row in groups.items():
        # Ops: a white hairline between neighbours. Transfers and waits: edged in their own
        # colour, so that one far shorter than a pixel still shows.
        edge = color if color in transfer_colors else "white"
        for (y, h), bars in by_row.items():
            ax.broken_barh(bars, (y, h), facecolors=color, edgecolor=edge, linewidth=0.2 if edge == "white" else 0.5,
                           hatch=hatch, zorder=z)


def cmd_gantt(args):
    tl = Timeline(args.timeline)
    slices, queued = tl.slices, tl.queued
    t0 = min(s["ts"] for s in slices)
    t1 = max(s["ts"] + s["dur"] for s in slices)
    if args.iteration is not None:
        slices = [s for s in slices if s.get("args", {}).get("iteration") == args.iteration]
        if not slices:
            raise InputError(f"{args.timeline}: --iteration {args.iteration}: no slices of that iteration")
        queued = [q for q in queued if q[5] == args.iteration]
        t0 = min([s["ts"] for s in slices] + [q[2] for q in queued])
        t1 = max(s["ts"] + s["dur"] for s in slices)
    rows = gantt_layout(tl, slices, args.recv_lanes)
    where = {key: (yc, h) for key, yc, h, _ in rows}
    height = rows[-1][1] + rows[-1][2] / 2
    fig, ax = plt.subplots(figsize=(args.width, max(2.2, 0.3 * height + 1.3)))
    scale = 1e-6  # microseconds -> seconds
    for i, (key, yc, h, _) in enumerate(rows):
        if key[1] == 1 and tl.stage(key[0]) % 2 == 1:  # every other stage block on a grey band
            end = next((r[1] - r[2] / 2 for r in rows[i + 1:] if r[0][1] == 1), height)
            ax.axhspan(yc - h / 2 - GAP_H / 2, end - GAP_H / 2, color="#f2f2f2", zorder=0, linewidth=0)
    gantt_bars(ax, tl, slices, queued, where, t0, scale)
    draw_bandwidth(ax, tl, rows, t0, t1, scale)
    if args.labels:
        for s in slices:
            if s.get("cat") in PHASE_COLORS and (s["pid"], s["tid"]) in where and s["dur"] > 0.02 * (t1 - t0):
                ax.text((s["ts"] - t0 + s["dur"] / 2) * scale, where[(s["pid"], s["tid"])][0], s["name"],
                        ha="center", va="center", fontsize=6, color="white", zorder=3)
    ax.set_yticks([yc for _, yc, _, _ in rows])
    ax.set_yticklabels([label for *_, label in rows])
    for tick, (key, *_rest) in zip(ax.get_yticklabels(), rows):
        tick.set_fontsize(8 if key[1] == 1 else 6)
        tick.set_fontweight("bold" if key[1] == 1 else "normal")
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(height, -0.1)
    ax.set_xlabel("time since the first op started (s)")
    ax.set_xlim(0, (t1 - t0) * scale)
    label_iterations(ax, tl, t0, t1, scale)
    ax.set_title(args.title or os.path.basename(args.timeline), fontsize=10, pad=18)
    ax.legend(handles=gantt_legend(slices, queued, tl.bandwidth), loc="upper center", bbox_to_anchor=(0.5, -0.1),
              fontsize=7, ncol=5, frameon=False)
    save(fig, args.output)


# --- tables: sweep rows and adapt rows ---------------------------------------------

# Axis labels, with units, for the columns of sweep and adapt outputs (docs/formats.md).
LABELS = {
    "trace.severity": "preemption severity (share of the link another job takes)",
    "trace.period_s": "preemption period (s)",
    "trace.low_fraction": "share of each period preempted",
    "k": "group size k (micro-batches per group)",
    "micro_batch_size": "micro-batch size b (samples)",
    "micro_batches": "micro-batches per iteration M",
    "mean_iteration_time_s": "mean iteration time (s)",
    "p50_iteration_time_s": "median iteration time (s)",
    "p99_iteration_time_s": "99th-percentile iteration time (s)",
    "total_time_s": "total time (s)",
    "throughput_samples_per_s": "throughput (samples/s)",
    "bubble_fraction": "bubble fraction (idle share of stage time)",
    "peak_memory_bytes": "peak memory per stage (bytes)",
    "iteration_time_s": "iteration time (s)",
    "start_s": "time since the start of the run (s)",
    "start_time_s": "start time (s)",
}
# Panel titles: a column's short name and unit ("preemption period 20 s").
FACET_NAMES = {"trace.period_s": ("preemption period", " s"), "trace.severity": ("severity", ""),
               "trace.low_fraction": ("preempted share", ""), "micro_batch_size": ("b", ""), "seed": ("seed", "")}
SCHEDULE_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "dapple-b": "DAPPLE-B", "kfkb": "kFkB"}
# The one speedup of the figures and of the planner's "vs 1F1B" (PlanResult::speedup_over_1f1b).
SPEEDUP_LABEL = "speedup over 1F1B at its largest feasible b"


def human(column):
    return LABELS.get(column, column)


def schedule_name(s):
    return SCHEDULE_NAMES.get(s, s)


def facet_title(column, value):
    name, unit = FACET_NAMES.get(column, (column, ""))
    return f"{name} {fmt_value(str(value))}{unit}" if column in FACET_NAMES else f"{column} = {fmt_value(str(value))}"


class Table:
    """Rows of one or more CSV or JSON Lines files; every value kept as a string ('' = null).
    Each row comes with its place, 'FILE:LINE', for messages."""

    def __init__(self, paths):
        paths = [paths] if isinstance(paths, str) else list(paths)
        self.path = " + ".join(paths)
        self.columns = []
        self.rows = []  # ('file:line', {column: str})
        self.file_columns = {}  # path -> its columns
        for path in paths:
            self._read(path)

    def _read(self, path):
        self.file_columns[path] = []
        jsonl = os.path.splitext(path)[1].lower() in (".jsonl", ".ndjson", ".json")
        before = len(self.rows)
        try:
            with open(path, encoding="utf-8", newline="") as f:
                if jsonl:
                    self._read_jsonl(path, f)
                else:
                    self._read_csv(path, f)
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror})")
        if len(self.rows) == before:
            raise InputError(f"{path}: no rows")
        for c in self.file_columns[path]:
            if c not in self.columns:
                self.columns.append(c)

    def _read_csv(self, path, f):
        reader = csv.reader(f)
        try:
            columns = next(reader)
        except StopIteration:
            raise InputError(f"{path}: empty file (expected a CSV header line)")
        except csv.Error as e:
            raise InputError(f"{path}:1: not CSV ({e})")
        self.file_columns[path] = columns
        try:
            for fields in reader:
                line = reader.line_num
                if not fields:
                    continue
                if len(fields) != len(columns):
                    raise InputError(f"{path}:{line}: {len(fields)} fields, the header has {len(columns)}")
                self.rows.append((f"{path}:{line}", dict(zip(columns, fields))))
        except csv.Error as e:
            raise InputError(f"{path}:{reader.line_num}: not CSV ({e})")

    def _read_jsonl(self, path, f):
        columns = self.file_columns[path]
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{line}: not JSON ({e.msg})")
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{line}: not a JSON object")
            row = {}
            for key, value in obj.items():
                if key not in columns:
                    columns.append(key)
                if value is None:
                    row[key] = ""
                elif isinstance(value, bool):
                    row[key] = "true" if value else "false"
                elif isinstance(value, (dict, list)):
                    row[key] = json.dumps(value, sort_keys=True)
                else:
                    row[key] = str(value)
            self.rows.append((f"{path}:{line}", row))

    def require(self, *columns):
        """Fails with one line naming the first column a file does not have."""
        for c in columns:
            for path, have in self.file_columns.items():
                if c and c not in have:
                    raise InputError(f"{path}: column '{c}': not in the file (columns: {', '.join(have)})")

    def number(self, where, row, column, allow_empty=False):
        v = row.get(column, "")
        if v == "":
            if allow_empty:
                return None
            raise InputError(f"{where}: column '{column}': empty (expected a number)")
        try:
            x = float(v)
        except ValueError:
            raise InputError(f"{where}: column '{column}': '{v}' is not a number")
        if not math.isfinite(x):
            raise InputError(f"{where}: column '{column}': '{v}' is not a finite number")
        return x


def same_value(a, b):
    """Compares two cell values as numbers when both are numbers ('2' == '2.0'), else as text."""
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def parse_filters(table, items, option):
    """--where / --exclude COL=VALUE (repeatable): [(column, value)], each column checked."""
    out = []
    for w in items or []:
        if "=" not in w:
            raise InputError(f"{option} {w}: expected COLUMN=VALUE")
        col, val = w.split("=", 1)
        table.require(col)
        out.append((col, val))
    return out


def sweep_rows(table, args):
    """The rows without an error that pass every --where filter."""
    table.require(args.error_column)
    where = parse_filters(table, args.where, "--where")
    rows = [(loc, r) for loc, r in table.rows
            if not (args.error_column and r.get(args.error_column, ""))
            and all(same_value(r.get(c, ""), v) for c, v in where)]
    if not rows:
        raise InputError(f"{table.path}: no rows left after dropping error rows and applying --where")
    return rows


def excluded(table, args):
    """A predicate: whether --exclude drops a row from the drawn series (never from the baseline)."""
    rules = parse_filters(table, getattr(args, "exclude", None), "--exclude")
    return lambda r: any(same_value(r.get(c, ""), v) for c, v in rules)


def resolve_facet(table, rows, facet):
    """'auto': trace.period_s when the file has it with more than one value; 'none': no panels."""
    if facet == "none":
        return None
    if facet == "auto":
        c = "trace.period_s"
        if c in table.columns and len({r.get(c, "") for _, r in rows}) > 1:
            return c
        return None
    table.require(facet)
    return facet


def sort_key(v):
    try:
        return (0, float(v), "")
    except ValueError:
        return (1, 0.0, v)


def num_key(v):
    """A cell value as a dictionary key: numbers by value ('2' and '2.0' alike)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def fmt_value(v):
    try:
        x = float(v)
        return f"{x:g}"
    except ValueError:
        return v


def panels(n):
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    return rows, cols


def mean_std(xs):
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


# --- speedup over 1F1B ------------------------------------------------------------

class Speedup:
    """The speedup of the figures, the planner's "vs 1F1B" (PlanResult::speedup_over_1f1b):
    a run's throughput over the --baseline schedule's (1F1B's) at its largest micro-batch
    size b that fits the memory limit, under the same conditions (the panel and the axis
    value, and per seed and start time where the file has them). Throughput is B / time
    with B = b x M, so runs at different b compare fairly. A condition where the baseline
    fits at no b has no speedup (the planner reports none either)."""

    def __init__(self, table, rows, args, condition):
        self.t, self.args, self.condition = table, args, condition
        self.pairs = [c for c in args.pair_columns.split(",") if c and c in table.columns]
        cand = {}  # (condition, pairing) -> {b: [throughput]}; b -> None when a run does not fit
        self.any_baseline = set()
        for where, r in rows:
            if r.get(args.schedule_column, "") != args.baseline:
                continue
            cond = condition(r)
            self.any_baseline.add(cond)
            by_b = cand.setdefault((cond, self.pairing(r)), {})
            by_b.setdefault(self.b(where, r), []).append(self.throughput(where, r) if self.fits(r) else None)
        self.base = {}    # (condition, pairing) -> (throughput, b)
        by_cond = {}
        for key, by_b in cand.items():
            fitting = [b for b, xs in by_b.items() if None not in xs]
            if fitting:
                b = max(fitting)
                self.base[key] = (sum(by_b[b]) / len(by_b[b]), b)
                by_cond.setdefault(key[0], []).append(self.base[key])
        # Where a run's seed or start time has no baseline run: the mean over the others.
        self.fallback = {c: (sum(x for x, _ in v) / len(v), max(b for _, b in v)) for c, v in by_cond.items()}

    def is_baseline(self, where, r):
        """Whether the row is one of the baseline runs itself (the baseline schedule at its b)."""
        if r.get(self.args.schedule_column, "") != self.args.baseline:
            return False
        base = self.fallback.get(self.condition(r))
        return base is not None and self.b(where, r) == base[1]

    def pairing(self, r):
        return tuple(num_key(r.get(c, "")) for c in self.pairs)

    def b(self, where, r):
        c = self.args.b_column
        if not c or c not in r:
            return 0
        return self.t.number(where, r, c, allow_empty=True) or 0

    def fits(self, r):
        return not (self.args.fits_column and r.get(self.args.fits_column, "") == "false")

    def throughput(self, where, r):
        c = self.args.value
        v = self.t.number(where, r, c)
        if c.startswith("throughput"):
            return v
        if v <= 0:
            raise InputError(f"{where}: column '{c}': {v:g} is not positive")
        batch = 1.0
        if r.get("micro_batch_size", "") != "" and r.get("micro_batches", "") != "":
            batch = self.t.number(where, r, "micro_batch_size") * self.t.number(where, r, "micro_batches")
        return batch / v

    def of(self, where, r):
        """(speedup, the baseline's b), or None where the baseline fits at no b."""
        cond = self.condition(r)
        if cond not in self.any_baseline:
            raise InputError(f"{where}: column '{self.args.schedule_column}': no '{self.args.baseline}' row "
                             f"for the same conditions ({self.describe(cond)}); add the baseline runs")
        base = self.base.get((cond, self.pairing(r))) or self.fallback.get(cond)
        if base is None:
            return None
        return self.throughput(where, r) / base[0], base[1]

    def describe(self, cond):
        return ", ".join(f"{c}={fmt_value(str(v))}" for c, v in cond if c) or "all rows"

    def points(self, rows, cell):
        """cell(r) -> the point a row belongs to (None: not drawn). Where a point has runs at
        several b, those at the largest b that fits (the planner's memory-limit curve), else
        at the smallest. {point: (mean speedup, std, runs, fits, baseline b)}."""
        groups = {}  # point -> {b: [(speedup, fits, baseline b)]}
        for where, r in rows:
            key = cell(r)
            if key is None or self.is_baseline(where, r):
                continue
            s = self.of(where, r)
            if s is not None:
                groups.setdefault(key, {}).setdefault(self.b(where, r), []).append((s[0], self.fits(r), s[1]))
        out = {}
        for key, by_b in groups.items():
            fitting = [b for b, xs in by_b.items() if all(f for _, f, _ in xs)]
            xs = by_b[max(fitting)] if fitting else by_b[min(by_b)]
            m, sd = mean_std([s for s, _, _ in xs])
            out[key] = (m, sd, len(xs), all(f for _, f, _ in xs), max(b for _, _, b in xs))
        return out


def baseline_note(points, baseline):
    """'1F1B at b = 4' (or the b it ran at in each condition)."""
    bs = sorted({p[4] for p in points.values()})
    if not bs or bs == [0]:
        return f"{schedule_name(baseline)}: the largest b that fits the memory limit"
    return (f"{schedule_name(baseline)} at b = {', '.join(fmt_value(str(b)) for b in bs)}, "
            f"its largest b that fits the memory limit")


def add_common_sweep_options(p):
    p.add_argument("-o", "--output", required=True, help="figure path without extension (writes .png and .svg)")
    p.add_argument("--where", action="append", metavar="COL=VALUE",
                   help="keep only rows whose COL equals VALUE (numbers compare as numbers); repeatable, "
                        "e.g. --where trace.period_s=20")
    p.add_argument("--facet", default="auto",
                   help="one panel per value of this column; 'auto' (default): trace.period_s when it has "
                        "more than one value, else one panel; 'none': one panel")
    p.add_argument("--schedule-column", default="schedule", help="column of the schedule (default schedule)")
    p.add_argument("--k-column", default="k", help="column of kFkB's group size k (default k)")
    p.add_argument("--b-column", default="micro_batch_size",
                   help="column of the micro-batch size b (default micro_batch_size; '' when every run has one b)")
    p.add_argument("--fits-column", default="fits_memory",
                   help="column that is 'false' when a run exceeds the memory limit (default fits_memory; "
                        "'' to ignore memory)")
    p.add_argument("--error-column", default="error",
                   help="rows with a value here are skipped (default error; '' to keep every row)")
    p.add_argument("--baseline", default="1f1b",
                   help="schedule the speedup is over (default 1f1b), taken at its largest b that fits")
    p.add_argument("--pair-columns", default="seed,trace.seed,start_time_s",
                   help="columns that pair a run with its baseline run, where the file has them (default "
                        "seed,trace.seed,start_time_s): repeated runs are averaged, with a band of one "
                        "standard deviation")
    p.add_argument("--title", help="figure title (default: the file name)")


# --- severity -----------------------------------------------------------------------

def series_label(r, cols, args, varying):
    """'kFkB k=2': the schedule's name and the other series columns that vary in the figure
    (with --relative-to, b always for the baseline schedule at another b: '1F1B b=1')."""
    parts = []
    if args.relative_to and r.get(args.schedule_column, "") == args.relative_to and args.b_column:
        cols = cols + [args.b_column]
        varying = varying | {args.b_column}
    for c in cols:
        v = r.get(c, "")
        if v == "" or (c != args.schedule_column and c not in varying):
            continue
        if c == args.schedule_column:
            parts.append(schedule_name(v))
        else:
            parts.append(f"{'b' if c == args.b_column else c}={fmt_value(v)}")
    return " ".join(parts) if parts else "all"


def label_order(lab):
    return [sort_key(p.split("=")[-1]) for p in lab.split()]


def severity_points(t, rows, args, facet, cols, drawn):
    """{(facet value, label, x or None): (mean, std, runs, fits)}; x None: a row without an x
    value (the schedules that take no k when x is k). With --relative-to, the speedup."""
    def cell(r):
        fv = num_key(r.get(facet, "")) if facet else None
        xv = r.get(args.x, "")
        return fv, series_label(r, cols, args, varying), num_key(xv) if xv != "" else None

    if args.relative_to:
        # The baseline under the same panel and x value; when its rows have no x (x is
        # k), under the same panel.
        by_x = any(r.get(args.x, "") != "" for _, r in rows if r.get(args.schedule_column, "") == args.baseline)

        def condition(r):
            c = ((facet, num_key(r.get(facet, ""))),) if facet else ()
            return c + ((args.x, num_key(r.get(args.x, ""))),) if by_x else c
        sp = Speedup(t, rows, args, condition)
        drawn = [(w, r) for w, r in drawn if not sp.is_baseline(w, r)]
        varying = {c for c in cols if len({num_key(r.get(c, "")) for _, r in drawn}) > 1}
        keep = {id(r) for _, r in drawn}
        pts = sp.points(rows, lambda r: cell(r) if id(r) in keep else None)
        return {k: v[:4] for k, v in pts.items()}, baseline_note(pts, args.baseline)
    varying = {c for c in cols if len({num_key(r.get(c, "")) for _, r in drawn}) > 1}
    groups = {}
    for where, r in drawn:
        key = cell(r)
        groups.setdefault(key, []).append((t.number(where, r, args.y),
                                           not (args.fits_column and r.get(args.fits_column, "") == "false")))
    out = {}
    for key, ys in groups.items():
        m, sd = mean_std([y for y, _ in ys])
        out[key] = (m, sd, len(ys), all(f for _, f in ys))
    return out, None


def draw_series(ax, pts, labels, color_of, xpos, handles):
    """Lines with markers (hollow: exceeds the memory limit), a band of one standard
    deviation where a point averages several runs, dashed lines for rows without x.
    Returns whether a point does not fit and whether one averages several runs."""
    oom = repeated = False
    for lab in labels:
        line = sorted((x, v) for (_, l, x), v in pts.items() if l == lab and x is not None)
        ref = [v for (_, l, x), v in pts.items() if l == lab and x is None]
        c = color_of[lab]
        if line:
            xs = [xpos(x) for x, _ in line]
            ys = [v[0] for _, v in line]
            h, = ax.plot(xs, ys, "-", color=c, linewidth=1.4, label=lab)
            handles.setdefault(lab, h)
            if any(v[2] > 1 for _, v in line):
                repeated = True
                ax.fill_between(xs, [v[0] - v[1] for _, v in line], [v[0] + v[1] for _, v in line], color=c,
                                alpha=0.18, linewidth=0)
            for x, v in line:
                oom = oom or not v[3]
                ax.plot([xpos(x)], [v[0]], "o", color=c, markersize=4 if v[3] else 5,
                        markerfacecolor=c if v[3] else "white")
        for v in ref:
            h = ax.axhline(v[0], color=c, linestyle="--" if v[3] else ":", linewidth=1.2, label=lab)
            handles.setdefault(lab, h)
            oom = oom or not v[3]
            if v[2] > 1:
                repeated = True
                ax.axhspan(v[0] - v[1], v[0] + v[1], color=c, alpha=0.1, linewidth=0)
    return oom, repeated


def cmd_severity(args):
    t = Table(args.sweep)
    cols = [c for c in args.series.split(",") if c and c != args.x]
    if args.relative_to:
        cols = [c for c in cols if c != args.b_column]
        args.baseline, args.value = args.relative_to, args.y
    t.require(args.x, args.y, *cols)
    if args.fits_column:
        t.require(args.fits_column)
    rows = sweep_rows(t, args)
    drop = excluded(t, args)
    drawn = [(w, r) for w, r in rows if not drop(r)]
    if not drawn:
        raise InputError(f"{t.path}: no rows left to draw after --exclude")
    for where, r in drawn:
        t.number(where, r, args.x, allow_empty=True)  # a value that is not a number: one line naming it
    facet = resolve_facet(t, rows, args.facet)
    facet_values = sorted({num_key(r.get(facet, "")) for _, r in drawn}, key=lambda v: sort_key(str(v))) \
        if facet else [None]
    pts, note = severity_points(t, rows, args, facet, cols, drawn)
    labels = sorted({k[1] for k in pts}, key=label_order)
    cmap = plt.get_cmap("tab10")
    color_of = {lab: cmap(i % 10) for i, lab in enumerate(labels)}
    xs_all = sorted({k[2] for k in pts if k[2] is not None})
    xpos = (lambda x: xs_all.index(x)) if args.x_categorical else (lambda x: x)
    nr, nc = panels(len(facet_values))
    fig, axes = plt.subplots(nr, nc, figsize=(args.width, 3.6 * nr + 0.8), squeeze=False, sharey=args.sharey)
    handles, oom, repeated = {}, False, False
    for i, fv in enumerate(facet_values):
        ax = axes[i // nc][i % nc]
        mine = {k: v for k, v in pts.items() if k[0] == fv}
        o, rep = draw_series(ax, mine, labels, color_of, xpos, handles)
        oom, repeated = oom or o, repeated or rep
        if args.relative_to:
            ax.axhline(1.0, color="black", linewidth=0.9, linestyle="--", zorder=1)
        if args.logx:
            ax.set_xscale("log", base=2)
        if args.x_categorical:
            ax.set_xticks(range(len(xs_all)))
            ax.set_xticklabels([fmt_value(str(x)) for x in xs_all])
        if i // nc == (len(facet_values) - 1) // nc or i + nc >= len(facet_values):  # the bottom panels
            ax.set_xlabel(args.xlabel or human(args.x), fontsize=9)
        if i % nc == 0:
            ax.set_ylabel(args.ylabel or (f"speedup over {schedule_name(args.relative_to)}\nat its largest feasible b"
                                          if args.relative_to else human(args.y)), fontsize=9)
        if facet:
            ax.set_title(facet_title(facet, fv), fontsize=9)
        ax.grid(True, alpha=0.3)
    for j in range(len(facet_values), nr * nc):
        axes[j // nc][j % nc].set_visible(False)
    notes = [n for n in (note and f"dashed line at 1: {note}",
                         oom and "hollow marker / dotted line: exceeds the memory limit",
                         repeated and "band: one standard deviation over repeated runs (seeds, start times)") if n]
    fig.suptitle(args.title or os.path.basename(args.sweep[0]), fontsize=11)
    fig.legend([handles[k] for k in labels if k in handles], [k for k in labels if k in handles],
               loc="lower center", ncol=min(6, len(handles)), fontsize=8, bbox_to_anchor=(0.5, -0.02),
               title="\n".join(notes) or None, title_fontsize=7)
    fig.tight_layout(rect=(0, 0.06 + 0.025 * ((len(handles) - 1) // 6 + len(notes)), 1, 1))
    save(fig, args.output)


# --- heatmap ------------------------------------------------------------------------

def cmd_heatmap(args):
    t = Table(args.sweep)
    t.require(args.x, args.y, args.value, args.schedule_column)
    if args.fits_column:
        t.require(args.fits_column)
    rows = sweep_rows(t, args)
    facet = resolve_facet(t, rows, args.facet)

    def fkey(r):
        return num_key(r.get(facet, "")) if facet else None

    def condition(r):
        return (((facet, fkey(r)),) if facet else ()) + ((args.y, num_key(r.get(args.y, ""))),)

    def cell(r):
        if r.get(args.schedule_column, "") != args.schedule:
            return None
        return fkey(r), num_key(r.get(args.y, "")), num_key(r.get(args.x, ""))

    for where, r in rows:
        if r.get(args.schedule_column, "") in (args.schedule, args.baseline):
            t.number(where, r, args.y)
            if r.get(args.schedule_column, "") == args.schedule:
                t.number(where, r, args.x)
    speed = Speedup(t, rows, args, condition).points(rows, cell)
    if not speed:
        raise InputError(f"{t.path}: column '{args.schedule_column}': no rows with '{args.schedule}' "
                         f"(or '{args.baseline}' fits at no b)")
    fkeys = sorted({c[0] for c in speed}, key=lambda v: sort_key(str(v)) if v is not None else (0, 0, ""))
    xs = sorted({c[2] for c in speed})
    ys = sorted({c[1] for c in speed})
    vals = [v[0] for v in speed.values()]
    lo, hi = min(vals + [1.0]), max(vals + [1.0])
    span = max(hi - 1.0, 1.0 - lo, 1e-3)
    from matplotlib.colors import TwoSlopeNorm
    norm = TwoSlopeNorm(vcenter=1.0, vmin=1.0 - span, vmax=1.0 + span)
    nr, nc = panels(len(fkeys))
    fig, axes = plt.subplots(nr, nc, figsize=(args.width, (0.42 * len(ys) + 1.6) * nr + 0.6), squeeze=False,
                             layout="constrained")
    im = None
    any_oom = False
    for i, fk in enumerate(fkeys):
        ax = axes[i // nc][i % nc]
        grid = [[speed[(fk, y, x)][0] if (fk, y, x) in speed else float("nan") for x in xs] for y in ys]
        im = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
        for yi, y in enumerate(ys):
            for xi, x in enumerate(xs):
                if (fk, y, x) not in speed:
                    continue
                s, _, _, fits, _ = speed[(fk, y, x)]
                any_oom = any_oom or not fits
                ax.text(xi, yi, f"{s:.2f}" + ("" if fits else "*"), ha="center", va="center", fontsize=7,
                        color="white" if abs(s - 1.0) > 0.6 * span else "black")
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([fmt_value(str(x)) for x in xs])
        ax.set_yticks(range(len(ys)))
        ax.set_yticklabels([fmt_value(str(y)) for y in ys])
        ax.set_xlabel(args.xlabel or human(args.x), fontsize=9)
        ax.set_ylabel(args.ylabel or human(args.y), fontsize=9)
        if facet:
            ax.set_title(facet_title(facet, fk), fontsize=9)
    for j in range(len(fkeys), nr * nc):
        axes[j // nc][j % nc].set_visible(False)
    cb = fig.colorbar(im, ax=[a for row in axes for a in row if a.get_visible()], shrink=0.9)
    what = SPEEDUP_LABEL.replace("1F1B", schedule_name(args.baseline))
    cb.set_label(f"{schedule_name(args.schedule)}'s {what}" + ("" if args.value.startswith("mean")
                                                                else f" ({human(args.value)})"), fontsize=8)
    title = (args.title or os.path.basename(args.sweep[0])) + f"\n{baseline_note(speed, args.baseline)}"
    if any_oom:
        title += "; * exceeds the memory limit"
    fig.suptitle(title, fontsize=10)
    save(fig, args.output)


# --- families -----------------------------------------------------------------------

FAMILY_COLORS = {"1f1b": "#9e9e9e", "dapple-b": "#bdbdbd", "gpipe": "#e0e0e0", "kfkb": "#4c72b0",
                 "kfkb-dynamic": "#64b5f6", "interleaved-1f1b": "#dd8452", "looped-bfs": "#f2c28c",
                 "interleaved-zb": "#55a868", "zbv": "#8172b3", "dualpipev": "#c44e52"}


def cmd_families(args):
    """Two panels from the families study's CSV: the planner's winning family over
    (severity, period), and each family's best time against severity at one period."""
    t = Table([args.table])
    t.require("severity", "period_s", "family", "label", "iteration_time_s", "chosen", "speedup_over_1f1b")
    for where, r in t.rows:
        for column in ("severity", "period_s", "iteration_time_s"):
            t.number(where, r, column)
        t.number(where, r, "speedup_over_1f1b", allow_empty=r["chosen"] != "true")
    rows = [r for _, r in t.rows]
    sevs = sorted({float(r["severity"]) for r in rows})
    pers = sorted({float(r["period_s"]) for r in rows})
    fams = [f for f in FAMILY_COLORS if any(r["family"] == f for r in rows)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(args.width, 0.42 * len(sevs) + 2.4), layout="constrained",
                                      gridspec_kw={"width_ratios": [1, 1.2]})
    winners = set()
    for r in rows:
        if r["chosen"] != "true":
            continue
        x, y = pers.index(float(r["period_s"])), sevs.index(float(r["severity"]))
        winners.add(r["family"])
        left.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color=FAMILY_COLORS.get(r["family"], "white")))
        left.text(x, y, f"{r['label']}\n{float(r['speedup_over_1f1b']):.2f}x", ha="center", va="center", fontsize=6)
    left.set_xlim(-0.5, len(pers) - 0.5)
    left.set_ylim(-0.5, len(sevs) - 0.5)
    left.set_xticks(range(len(pers)), [fmt_value(str(p)) for p in pers])
    left.set_yticks(range(len(sevs)), [fmt_value(str(v)) for v in sevs])
    left.set_xlabel("preemption period (s)", fontsize=9)
    left.set_ylabel("preemption severity (share of the link taken)", fontsize=9)
    left.set_title("the planner's choice (and its speedup over 1F1B)", fontsize=9)
    left.legend(handles=[Patch(color=FAMILY_COLORS[f], label=f) for f in fams if f in winners], fontsize=7,
                loc="upper left", bbox_to_anchor=(0, -0.12), ncol=3, frameon=False)
    at = min(pers, key=lambda p: abs(p - args.period))
    for f in fams:
        pts = sorted((float(r["severity"]), float(r["iteration_time_s"])) for r in rows
                     if r["family"] == f and float(r["period_s"]) == at)
        if pts:
            right.plot(range(len(pts)), [y for _, y in pts], marker="o", ms=3, label=f, color=FAMILY_COLORS[f],
                       linestyle="--" if f in ("1f1b", "dapple-b", "gpipe") else "-")
    right.set_xticks(range(len(sevs)), [fmt_value(str(v)) for v in sevs])
    right.set_xlabel("preemption severity (evenly spaced)", fontsize=9)
    right.set_ylabel("iteration time (s), best feasible b and k", fontsize=9)
    right.set_title(f"each family's best plan that fits, period {fmt_value(str(at))} s", fontsize=9)
    right.legend(fontsize=7, ncol=2)
    right.grid(alpha=0.3)
    fig.suptitle(args.title or os.path.basename(args.table), fontsize=10)
    save(fig, args.output)


# --- adapt --------------------------------------------------------------------------

POLICY_NAMES = {"1f1b": "static 1F1B", "dapple-b": "static DAPPLE-B", "first-window": "planned at launch",
                "best-static": "best static (hindsight)", "oracle": "oracle (hindsight)", "adaptive": "adaptive"}


def adapt_runs(t, args):
    """policy -> [(iteration, start, time, schedule, k, b)], by iteration."""
    runs = {}
    for where, r in t.rows:
        pol = r.get(args.policy_column, "")
        if pol == "":
            raise InputError(f"{where}: column '{args.policy_column}': empty")
        runs.setdefault(pol, []).append((t.number(where, r, args.iteration_column),
                                         t.number(where, r, args.time_column), t.number(where, r, args.y),
                                         r.get(args.schedule_column, ""), t.number(where, r, args.k_column),
                                         t.number(where, r, args.b_column)))
    for pol in runs:
        runs[pol].sort()
    return runs


def cmd_adapt(args):
    t = Table(args.rows)
    t.require(args.policy_column, args.iteration_column, args.time_column, args.y, args.k_column, args.b_column,
              args.schedule_column)
    runs = adapt_runs(t, args)
    plan_policies = [p for p in args.plan_policies.split(",") if p]
    for p in plan_policies:
        if p not in runs:
            raise InputError(f"{t.path}: column '{args.policy_column}': no rows of policy '{p}' "
                             f"(policies: {', '.join(runs)}); see --plan-policies")
    if args.baseline not in runs:
        raise InputError(f"{t.path}: column '{args.policy_column}': no rows of policy '{args.baseline}' "
                         f"(policies: {', '.join(runs)}); see --baseline")

    def total(p):
        it, start, dt, *_ = runs[p][-1]
        return start + dt

    def name(p):
        return POLICY_NAMES.get(p, p)

    order = ["1f1b", "dapple-b", "first-window", "best-static", "oracle", "adaptive"]
    pols = sorted(runs, key=lambda p: (order.index(p) if p in order else len(order), p))
    style = {"adaptive": dict(color="#c44e52", linewidth=1.6, zorder=5),
             "oracle": dict(color="#55a868", linewidth=1.0, linestyle="--", zorder=4),
             "1f1b": dict(color="#4c72b0", linewidth=0.9),
             "dapple-b": dict(color="#8172b2", linewidth=0.9),
             "first-window": dict(color="#937860", linewidth=0.9),
             "best-static": dict(color="#da8bc3", linewidth=0.9)}
    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(args.width, 9.0), sharex=True,
                                     gridspec_kw={"height_ratios": [1, 1.4, 1.2]})
    # 1. the plan: k of the plan policies over time; the y ticks name the plans
    plan_name = {}
    for p in plan_policies:
        pts = runs[p]
        a1.step([q[1] for q in pts], [q[4] for q in pts], where="post", label=name(p), **style.get(p, {}))
        for q in pts:
            plan = f"kFkB k={q[4]:g} b={q[5]:g}" if q[3] == "kfkb" else f"{schedule_name(q[3])} b={q[5]:g}"
            plan_name.setdefault(q[4], set()).add(plan)
    a1.set_yscale("log", base=2)
    ks = sorted(plan_name)
    a1.set_yticks(ks)
    a1.set_yticklabels([" / ".join(sorted(plan_name[k])) for k in ks], fontsize=7)
    a1.minorticks_off()
    a1.set_ylim(min(ks) / 1.3, max(ks) * 1.3)
    a1.set_ylabel("plan run\n(group size k, log scale)", fontsize=9)
    a1.legend(fontsize=7, loc="upper right")
    a1.grid(True, alpha=0.3)
    base = runs[args.baseline]
    a1.set_title((args.title or os.path.basename(args.rows))
                 + f"\nspeedup: over {name(args.baseline)} at its largest feasible b (b = {base[0][5]:g}), "
                   "total time of the run", fontsize=10)
    # 2. iteration time over time, every policy
    for p in pols:
        pts = runs[p]
        a2.plot([q[1] for q in pts], [q[2] for q in pts],
                label=f"{name(p)}: {total(p):,.0f} s, {total(args.baseline) / total(p):.2f}x",
                **style.get(p, {"linewidth": 0.8}))
    a2.set_ylabel(args.ylabel or human(args.y), fontsize=9)
    a2.legend(fontsize=7, loc="upper right", ncol=2, title="policy: total time, speedup", title_fontsize=7)
    a2.grid(True, alpha=0.3)
    # 3. time gained over the baseline at each iteration
    start_of = {q[0]: q[1] for q in base}
    for p in pols:
        if p == args.baseline:
            continue
        pts = [q for q in runs[p] if q[0] in start_of]
        a3.plot([q[1] for q in pts], [start_of[q[0]] - q[1] for q in pts], label=name(p),
                **style.get(p, {"linewidth": 0.8}))
    a3.axhline(0, color="black", linewidth=0.6)
    a3.set_ylabel(f"time ahead of {name(args.baseline)} (s)", fontsize=9)
    a3.set_xlabel(human(args.time_column) if args.time_column in LABELS else args.time_column, fontsize=9)
    a3.legend(fontsize=7, loc="upper left", ncol=3)
    a3.grid(True, alpha=0.3)
    fig.tight_layout()
    save(fig, args.output)


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/scripts/plot.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    g = sub.add_parser("gantt", help="compute and transfer lanes per stage from a timeline file",
                       description="Gantt chart of `adagrouper simulate --timeline FILE`: per stage its compute "
                                   "lane (ops by phase, optimizer steps), a thin lane per channel it sends on "
                                   "(activations teal, gradients purple, from when the bytes start to move; a "
                                   "message waiting for its channel in a light tint), and a thin line of each "
                                   "of those channels' bandwidth when the timeline has it. Dotted lines and "
                                   "the top axis mark the iterations.")
    g.add_argument("timeline", help="timeline JSON written by adagrouper simulate --timeline")
    g.add_argument("-o", "--output", required=True, help="figure path without extension (writes .png and .svg)")
    g.add_argument("--iteration", type=int, help="plot only this iteration (default: all)")
    g.add_argument("--labels", action="store_true", help="write op names (F3, B3) on wide enough slices")
    g.add_argument("--recv-lanes", action="store_true",
                   help="also a lane per receiving channel end (the same transfers, seen by the receiver)")
    g.add_argument("--width", type=float, default=12.0, help="figure width in inches (default 12)")
    g.add_argument("--title", help="figure title (default: the file name)")
    g.set_defaults(func=cmd_gantt)

    s = sub.add_parser("severity", help="iteration time (or speedup over 1F1B) against preemption severity",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Line plot of one or more sweeps (adagrouper sweep's CSV or JSONL output, "
                                   "their rows together): --y against --x, one line per series (by default each "
                                   "schedule and k, and b where it varies), one panel per --facet value. Repeated "
                                   "runs of a point (seeds, start times) are averaged, with a band of one "
                                   "standard deviation. Rows with no --x value (1F1B and the other baselines "
                                   "when --x is k) are drawn as horizontal dashed lines. Runs that exceed the "
                                   "memory limit get hollow markers. With --relative-to 1f1b the y axis is the "
                                   "speedup over 1F1B at its largest feasible b, as the planner's 'vs 1F1B'.",
                       epilog="examples:\n"
                              "  tools/scripts/plot.py severity gpt-severity.csv -o sev             # panels per period\n"
                              "  tools/scripts/plot.py severity fig2.csv --x k --facet trace.severity -o fig2\n"
                              "  tools/scripts/plot.py severity sev.csv base.csv --relative-to 1f1b --x-categorical "
                              "--exclude k=16 -o rel")
    s.add_argument("sweep", nargs="+", help="sweep output, CSV or JSONL (several: their rows together)")
    add_common_sweep_options(s)
    s.add_argument("--x", default="trace.severity", help="x column (default trace.severity)")
    s.add_argument("--y", default="mean_iteration_time_s", help="y column (default mean_iteration_time_s)")
    s.add_argument("--series", default="schedule,k,micro_batch_size",
                   help="comma-separated columns whose values name a line (default schedule,k,micro_batch_size; "
                        "the x column is left out, and so is a column with one value in the figure)")
    s.add_argument("--relative-to", metavar="SCHEDULE",
                   help="plot the speedup over SCHEDULE (1f1b) at its largest b that fits the memory limit, "
                        "from the --y times, instead of --y itself")
    s.add_argument("--exclude", action="append", metavar="COL=VALUE",
                   help="leave out the series of rows whose COL equals VALUE (not from the baseline); "
                        "repeatable, e.g. --exclude k=16")
    s.add_argument("--x-categorical", action="store_true",
                   help="the x values evenly spaced, in order (for severities crowded near 1)")
    s.add_argument("--logx", action="store_true", help="log2 x axis (for k)")
    s.add_argument("--sharey", action="store_true", help="the same y range in every panel")
    s.add_argument("--xlabel", help="x axis label (default: the x column's name in words, with its unit)")
    s.add_argument("--ylabel", help="y axis label (default: the y column's name in words, with its unit)")
    s.add_argument("--width", type=float, default=11.0, help="figure width in inches (default 11)")
    s.set_defaults(func=cmd_severity)

    h = sub.add_parser("heatmap", help="kFkB's speedup over 1F1B as a heatmap over (k, severity)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Heatmap of one or more sweeps: for every (x, y) cell, the --schedule run's "
                                   "speedup over the --baseline schedule at its largest b that fits the memory "
                                   "limit, at the same y (and facet value): its throughput (B / --value) over "
                                   "the baseline's, the planner's 'vs 1F1B'. > 1 (blue) means kFkB is faster. "
                                   "Cells are annotated with the speedup; '*' marks a run that exceeds the "
                                   "memory limit. Repeated runs are averaged. One panel per --facet value. A cell "
                                   "with no baseline row is an error naming the line.",
                       epilog="example:\n  tools/scripts/plot.py heatmap gpt-severity.csv -o heat   # panels per period")
    h.add_argument("sweep", nargs="+", help="sweep output, CSV or JSONL (several: their rows together)")
    add_common_sweep_options(h)
    h.add_argument("--x", default="k", help="x column (default k)")
    h.add_argument("--y", default="trace.severity", help="y column (default trace.severity)")
    h.add_argument("--value", default="mean_iteration_time_s",
                   help="the time compared (default mean_iteration_time_s; p99_iteration_time_s for the tail)")
    h.add_argument("--schedule", default="kfkb", help="schedule of the cells (default kfkb)")
    h.add_argument("--xlabel", help="x axis label (default: the x column's name in words)")
    h.add_argument("--ylabel", help="y axis label (default: the y column's name in words)")
    h.add_argument("--width", type=float, default=11.0, help="figure width in inches (default 11)")
    h.set_defaults(func=cmd_heatmap)

    f = sub.add_parser("families", help="the planner's winning schedule family over (severity, period)",
                       description="Two panels from the CSV of configs/studies/run.sh families (columns severity, "
                                   "period_s, family, label, iteration_time_s, chosen, speedup_over_1f1b): the "
                                   "family of the plan chosen at every (severity, period), with its speedup over "
                                   "1F1B; and each family's best feasible plan's iteration time against severity "
                                   "at --period.")
    f.add_argument("table", help="families CSV")
    f.add_argument("-o", "--output", required=True, help="figure path without extension (writes .png and .svg)")
    f.add_argument("--period", type=float, default=5.0, help="period of the right panel, seconds (default 5)")
    f.add_argument("--width", type=float, default=12.0, help="figure width in inches (default 12)")
    f.add_argument("--title", help="figure title (default: the file name)")
    f.set_defaults(func=cmd_families)

    a = sub.add_parser("adapt", help="an adaptive run's plan and iteration time over time, with the static policies",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Three panels from `adagrouper adapt --rows FILE` (CSV or JSONL): (1) the group "
                                   "size k of the --plan-policies over time, each change of the first one labelled "
                                   "with its plan; (2) every policy's iteration time over time, the legend giving "
                                   "each total; (3) how far each policy is ahead of --baseline: the baseline's start "
                                   "time of iteration i minus the policy's (the last point is its saving over the run). "
                                   "The speedup in the legend is the planner's: the baseline's total time over "
                                   "the policy's, the baseline being static 1F1B at its largest feasible b.",
                       epilog="example:\n"
                              "  adagrouper adapt --pipeline configs/pipelines/unet-4stage-v100.json \\\n"
                              "      --network configs/networks/bursty-minutes-25g.json --iterations 1000 --rows a.csv\n"
                              "  tools/scripts/plot.py adapt a.csv -o adapt")
    a.add_argument("rows", help="rows of adagrouper adapt --rows, CSV or JSONL")
    a.add_argument("-o", "--output", required=True, help="figure path without extension (writes .png and .svg)")
    a.add_argument("--plan-policies", default="adaptive,oracle",
                   help="comma-separated policies whose plan is drawn in the top panel (default adaptive,oracle)")
    a.add_argument("--baseline", default="1f1b", help="policy of the bottom panel's zero line (default 1f1b)")
    a.add_argument("--policy-column", default="policy", help="(default policy)")
    a.add_argument("--iteration-column", default="iteration", help="(default iteration)")
    a.add_argument("--time-column", default="start_s", help="x axis: start of the iteration (default start_s)")
    a.add_argument("--y", default="iteration_time_s", help="iteration time column (default iteration_time_s)")
    a.add_argument("--schedule-column", default="schedule", help="(default schedule)")
    a.add_argument("--k-column", default="k", help="(default k)")
    a.add_argument("--b-column", default="micro_batch_size", help="(default micro_batch_size)")
    a.add_argument("--ylabel", help="label of the iteration-time axis (default: iteration time (s))")
    a.add_argument("--width", type=float, default=12.0, help="figure width in inches (default 12)")
    a.add_argument("--title", help="figure title (default: the file name)")
    a.set_defaults(func=cmd_adapt)

    args = p.parse_args(argv)
    try:
        args.func(args)
    except InputError as e:
        print(f"plot.py {args.cmd}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
