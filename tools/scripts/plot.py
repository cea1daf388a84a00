#!/usr/bin/python3
"""Figures from adagrouper outputs (Debian's python3-matplotlib; no other packages).

  tools/scripts/plot.py gantt TIMELINE.json -o FIG        compute and transfer lanes per stage
                                                   from `adagrouper simulate --timeline`
  tools/scripts/plot.py severity SWEEP.csv|jsonl -o FIG   iteration time against preemption
                                                   severity, one line per schedule / k
  tools/scripts/plot.py heatmap SWEEP.csv|jsonl -o FIG    kFkB's speedup over 1F1B over (k, severity)
  tools/scripts/plot.py adapt ROWS.csv|jsonl -o FIG       an adaptive run (`adagrouper adapt --rows`):
                                                   plan and iteration time over time, with
                                                   the static policies for reference

SWEEP is the output of `adagrouper sweep` (docs/formats.md, "Sweep spec and output"),
ROWS the rows of `adagrouper adapt --rows` (docs/formats.md, "Adaptive run"); CSV or
JSON Lines, told apart by the extension (.jsonl / .ndjson / .json: JSON Lines). Column
names are options with defaults matching those outputs; a column that is missing or a
value that is not a number is reported as one line naming the file, the line and the
column, with exit status 2. Sweep rows with an error are skipped.
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
# the weight half grey and hatched (W ops are the ones dynamic W fill moves).
PHASE_COLORS = {"forward": "#4c72b0", "backward": "#dd8452", "backward-input": "#c44e52",
                "backward-weight": "#8c8c8c"}
PHASE_HATCH = {"backward-weight": "////"}
TRANSFER_COLOR = "#bbbbbb"


def shade(color, level, levels):
    """The color lightened for the level-th of `levels` model stages on one stage."""
    from matplotlib.colors import to_rgb
    if levels <= 1:
        return color
    mix = 0.55 * level / (levels - 1)
    return tuple(c + (1 - c) * mix for c in to_rgb(color))


def gantt_styles(slices, stages):
    """Slices grouped by (color, hatch): phase, and with several model stages per stage,
    a lighter shade for each later one (model stage j is the (j // stages)-th on its stage)."""
    levels = 1 + max((s.get("args", {}).get("model_stage", 0) // stages for s in slices), default=0)
    groups = {}
    for s in slices:
        cat = s.get("cat", "")
        if cat in PHASE_COLORS:
            level = s.get("args", {}).get("model_stage", 0) // stages
            key = (shade(PHASE_COLORS[cat], level, levels), PHASE_HATCH.get(cat))
        else:
            key = (TRANSFER_COLOR, None)
        groups.setdefault(key, []).append(s)
    return groups


def gantt_legend(slices):
    cats = {s.get("cat", "") for s in slices}
    handles = [Patch(facecolor=c, hatch=PHASE_HATCH.get(n), label=n.replace("backward-", "backward ("))
               for n, c in PHASE_COLORS.items() if n in cats]
    for h in handles:
        if "(" in h.get_label():
            h.set_label(h.get_label().replace("input", "input, I)").replace("weight", "weight, W)"))
    if any("model_stage" in s.get("args", {}) for s in slices):
        handles.append(Patch(facecolor="white", edgecolor="black", label="lighter: later model stage"))
    handles.append(Patch(facecolor=TRANSFER_COLOR, label="transfer"))
    return handles


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
    fig, ax = plt.subplots(figsize=(args.width, max(2.0, 0.32 * len(lanes) + 1)))
    scale = 1e-6  # microseconds -> seconds
    styles = gantt_styles(slices, len(stage_of) or 1)
    for (color, hatch), group in styles.items():
        by_row = {}
        for s in group:
            by_row.setdefault(row[(s["pid"], s["tid"])], []).append(((s["ts"] - t0) * scale, s["dur"] * scale))
        for y, bars in sorted(by_row.items()):
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=color, edgecolor="white", linewidth=0.3, hatch=hatch)
    if args.labels:
        for s in slices:
            if s.get("cat") in PHASE_COLORS and s["dur"] * scale > 0.02 * (t1 - t0) * scale:
                ax.text((s["ts"] - t0 + s["dur"] / 2) * scale, row[(s["pid"], s["tid"])], s["name"],
                        ha="center", va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"stage {stage_of.get(p, p)} {lane_name.get((p, t), t)}" for p, t in lanes], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since start (s)")
    ax.set_xlim(0, (t1 - t0) * scale)
    ax.set_title(args.title or os.path.basename(args.timeline))
    ax.legend(handles=gantt_legend(slices), loc="upper center", bbox_to_anchor=(0.5, -0.08), fontsize=7, ncol=6,
              frameon=False)
    save(fig, args.output)


# --- tables: sweep rows and adapt rows ---------------------------------------------

class Table:
    """Rows of a CSV or JSON Lines file; every value kept as a string ('' = null)."""

    def __init__(self, path):
        self.path = path
        self.columns = []
        self.rows = []  # (line number, {column: str})
        jsonl = os.path.splitext(path)[1].lower() in (".jsonl", ".ndjson", ".json")
        try:
            with open(path, encoding="utf-8", newline="") as f:
                if jsonl:
                    self._read_jsonl(f)
                else:
                    self._read_csv(f)
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror})")
        if not self.rows:
            raise InputError(f"{path}: no rows")

    def _read_csv(self, f):
        reader = csv.reader(f)
        try:
            self.columns = next(reader)
        except StopIteration:
            raise InputError(f"{self.path}: empty file (expected a CSV header line)")
        except csv.Error as e:
            raise InputError(f"{self.path}:1: not CSV ({e})")
        try:
            for fields in reader:
                line = reader.line_num
                if not fields:
                    continue
                if len(fields) != len(self.columns):
                    raise InputError(f"{self.path}:{line}: {len(fields)} fields, the header has {len(self.columns)}")
                self.rows.append((line, dict(zip(self.columns, fields))))
        except csv.Error as e:
            raise InputError(f"{self.path}:{reader.line_num}: not CSV ({e})")

    def _read_jsonl(self, f):
        seen = {}
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise InputError(f"{self.path}:{line}: not JSON ({e.msg})")
            if not isinstance(obj, dict):
                raise InputError(f"{self.path}:{line}: not a JSON object")
            row = {}
            for key, value in obj.items():
                if key not in seen:
                    seen[key] = True
                    self.columns.append(key)
                if value is None:
                    row[key] = ""
                elif isinstance(value, bool):
                    row[key] = "true" if value else "false"
                elif isinstance(value, (dict, list)):
                    row[key] = json.dumps(value, sort_keys=True)
                else:
                    row[key] = str(value)
            self.rows.append((line, row))

    def require(self, *columns):
        """Fails with one line naming the first column the file does not have."""
        for c in columns:
            if c and c not in self.columns:
                raise InputError(f"{self.path}: column '{c}': not in the file (columns: {', '.join(self.columns)})")

    def number(self, line, row, column, allow_empty=False):
        v = row.get(column, "")
        if v == "":
            if allow_empty:
                return None
            raise InputError(f"{self.path}:{line}: column '{column}': empty (expected a number)")
        try:
            x = float(v)
        except ValueError:
            raise InputError(f"{self.path}:{line}: column '{column}': '{v}' is not a number")
        if not math.isfinite(x):
            raise InputError(f"{self.path}:{line}: column '{column}': '{v}' is not a finite number")
        return x


def same_value(a, b):
    """Compares two cell values as numbers when both are numbers ('2' == '2.0'), else as text."""
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def parse_where(table, wheres):
    """--where COL=VALUE (repeatable): [(column, value)], each column checked."""
    out = []
    for w in wheres or []:
        if "=" not in w:
            raise InputError(f"--where {w}: expected COLUMN=VALUE")
        col, val = w.split("=", 1)
        table.require(col)
        out.append((col, val))
    return out


def sweep_rows(table, args):
    """The rows without an error that pass every --where filter."""
    table.require(args.error_column)
    where = parse_where(table, args.where)
    rows = [(line, r) for line, r in table.rows
            if not (args.error_column and r.get(args.error_column, ""))
            and all(same_value(r.get(c, ""), v) for c, v in where)]
    if not rows:
        raise InputError(f"{table.path}: no rows left after dropping error rows and applying --where")
    return rows


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
    p.add_argument("--fits-column", default="fits_memory",
                   help="column that is 'false' when a run exceeds the memory limit (default fits_memory; "
                        "'' to ignore memory)")
    p.add_argument("--error-column", default="error",
                   help="rows with a value here are skipped (default error; '' to keep every row)")
    p.add_argument("--title", help="figure title (default: the file name)")


# --- severity -----------------------------------------------------------------------

def cmd_severity(args):
    t = Table(args.sweep)
    series_cols = [c for c in args.series.split(",") if c and c != args.x]
    t.require(args.x, args.y, *series_cols)
    if args.fits_column:
        t.require(args.fits_column)
    rows = sweep_rows(t, args)
    facet = resolve_facet(t, rows, args.facet)
    facet_values = sorted({r.get(facet, "") for _, r in rows}, key=sort_key) if facet else [None]

    def label(r):
        parts = []
        for c in series_cols:
            v = r.get(c, "")
            if v == "":
                continue
            parts.append(v if c == args.schedule_column else f"{c}={fmt_value(v)}")
        return " ".join(parts) if parts else "all"

    nr, nc = panels(len(facet_values))
    fig, axes = plt.subplots(nr, nc, figsize=(args.width, 3.6 * nr + 0.6), squeeze=False, sharey=args.sharey)
    any_oom = False
    handles = {}
    cmap = plt.get_cmap("tab10")
    all_labels = sorted({label(r) for _, r in rows}, key=lambda s: [sort_key(p) for p in s.split()])
    color_of = {lab: cmap(i % 10) for i, lab in enumerate(all_labels)}
    for i, fv in enumerate(facet_values):
        ax = axes[i // nc][i % nc]
        series = {}
        refs = {}
        for line, r in rows:
            if facet and not same_value(r.get(facet, ""), fv):
                continue
            y = t.number(line, r, args.y)
            fits = not (args.fits_column and r.get(args.fits_column, "") == "false")
            xv = t.number(line, r, args.x, allow_empty=True)
            lab = label(r)
            if xv is None:
                if lab in refs:
                    raise InputError(f"{t.path}:{line}: two rows for '{lab}' with no {args.x} in one panel "
                                     f"(filter with --where or split with --facet)")
                refs[lab] = (y, fits)
                continue
            pts = series.setdefault(lab, {})
            if xv in pts:
                raise InputError(f"{t.path}:{line}: two rows for '{lab}' at {args.x}={fmt_value(str(xv))} in one "
                                 f"panel (filter with --where or split with --facet)")
            pts[xv] = (y, fits)
        for lab in sorted(series, key=all_labels.index):
            pts = sorted(series[lab].items())
            xs = [p[0] for p in pts]
            ys = [p[1][0] for p in pts]
            h, = ax.plot(xs, ys, "-", color=color_of[lab], linewidth=1.4, label=lab)
            handles.setdefault(lab, h)
            ok = [(x, y) for x, (y, f) in pts if f]
            bad = [(x, y) for x, (y, f) in pts if not f]
            if ok:
                ax.plot(*zip(*ok), "o", color=color_of[lab], markersize=4)
            if bad:
                any_oom = True
                ax.plot(*zip(*bad), "o", markerfacecolor="white", markeredgecolor=color_of[lab], markersize=5)
        for lab in sorted(refs, key=all_labels.index):
            y, fits = refs[lab]
            h = ax.axhline(y, color=color_of[lab], linestyle="--" if fits else ":", linewidth=1.2, label=lab)
            handles.setdefault(lab, h)
            any_oom = any_oom or not fits
        if args.logx:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(args.xlabel or args.x)
        ax.set_ylabel(args.ylabel or args.y)
        if facet:
            ax.set_title(f"{facet} = {fmt_value(fv)}", fontsize=9)
        ax.grid(True, alpha=0.3)
    for j in range(len(facet_values), nr * nc):
        axes[j // nc][j % nc].set_visible(False)
    note = "hollow marker / dotted line: exceeds the memory limit" if any_oom else None
    fig.suptitle(args.title or os.path.basename(args.sweep), fontsize=11)
    fig.legend([handles[k] for k in all_labels if k in handles], [k for k in all_labels if k in handles],
               loc="lower center", ncol=min(6, len(handles)), fontsize=8, bbox_to_anchor=(0.5, -0.02),
               title=note, title_fontsize=7)
    fig.tight_layout(rect=(0, 0.06 + 0.025 * ((len(handles) - 1) // 6), 1, 1))
    save(fig, args.output)


# --- heatmap ------------------------------------------------------------------------

def cmd_heatmap(args):
    t = Table(args.sweep)
    t.require(args.x, args.y, args.value, args.schedule_column)
    if args.fits_column:
        t.require(args.fits_column)
    rows = sweep_rows(t, args)
    facet = resolve_facet(t, rows, args.facet)

    base = {}  # (facet value, y) -> baseline value
    cells = {}  # (facet value, y, x) -> (value, fits, line)
    for line, r in rows:
        fv = r.get(facet, "") if facet else None
        fkey = float(fv) if facet and sort_key(fv)[0] == 0 else fv
        sched = r.get(args.schedule_column, "")
        if sched == args.baseline:
            y = t.number(line, r, args.y)
            if (fkey, y) in base:
                raise InputError(f"{t.path}:{line}: a second {args.baseline} row at {args.y}={fmt_value(str(y))}"
                                 + (f", {facet}={fv}" if facet else "") + " (filter with --where or split with --facet)")
            base[(fkey, y)] = t.number(line, r, args.value)
        elif sched == args.schedule:
            y = t.number(line, r, args.y)
            x = t.number(line, r, args.x)
            if (fkey, y, x) in cells:
                raise InputError(f"{t.path}:{line}: a second {args.schedule} row at {args.x}={fmt_value(str(x))}, "
                                 f"{args.y}={fmt_value(str(y))}" + (f", {facet}={fv}" if facet else "")
                                 + " (filter with --where or split with --facet)")
            fits = not (args.fits_column and r.get(args.fits_column, "") == "false")
            cells[(fkey, y, x)] = (t.number(line, r, args.value), fits, line)
    if not cells:
        raise InputError(f"{t.path}: column '{args.schedule_column}': no rows with '{args.schedule}'")
    fkeys = sorted({c[0] for c in cells}, key=lambda v: sort_key(str(v)) if v is not None else (0, 0, ""))
    xs = sorted({c[2] for c in cells})
    ys = sorted({c[1] for c in cells})
    speed = {}
    for (fk, y, x), (v, fits, line) in cells.items():
        if (fk, y) not in base:
            raise InputError(f"{t.path}:{line}: column '{args.schedule_column}': no '{args.baseline}' row at "
                             f"{args.y}={fmt_value(str(y))}" + (f", {facet}={fmt_value(str(fk))}" if facet else ""))
        if v <= 0:
            raise InputError(f"{t.path}:{line}: column '{args.value}': {v} is not positive")
        speed[(fk, y, x)] = (base[(fk, y)] / v, fits)
    vals = [s for s, _ in speed.values()]
    lo, hi = min(vals + [1.0]), max(vals + [1.0])
    span = max(hi - 1.0, 1.0 - lo, 1e-3)
    from matplotlib.colors import TwoSlopeNorm
    norm = TwoSlopeNorm(vcenter=1.0, vmin=1.0 - span, vmax=1.0 + span)
    nr, nc = panels(len(fkeys))
    fig, axes = plt.subplots(nr, nc, figsize=(args.width, (0.42 * len(ys) + 1.6) * nr + 0.4), squeeze=False,
                             layout="constrained")
    im = None
    any_oom = False
    for i, fk in enumerate(fkeys):
        ax = axes[i // nc][i % nc]
        grid = [[float("nan")] * len(xs) for _ in ys]
        for yi, y in enumerate(ys):
            for xi, x in enumerate(xs):
                if (fk, y, x) in speed:
                    grid[yi][xi] = speed[(fk, y, x)][0]
        im = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
        for yi, y in enumerate(ys):
            for xi, x in enumerate(xs):
                if (fk, y, x) not in speed:
                    continue
                s, fits = speed[(fk, y, x)]
                any_oom = any_oom or not fits
                ax.text(xi, yi, f"{s:.2f}" + ("" if fits else "*"), ha="center", va="center", fontsize=7,
                        color="white" if abs(s - 1.0) > 0.6 * span else "black")
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([fmt_value(str(x)) for x in xs])
        ax.set_yticks(range(len(ys)))
        ax.set_yticklabels([fmt_value(str(y)) for y in ys])
        ax.set_xlabel(args.xlabel or args.x)
        ax.set_ylabel(args.ylabel or args.y)
        if facet:
            ax.set_title(f"{facet} = {fmt_value(str(fk))}", fontsize=9)
    for j in range(len(fkeys), nr * nc):
        axes[j // nc][j % nc].set_visible(False)
    cb = fig.colorbar(im, ax=[a for row in axes for a in row if a.get_visible()], shrink=0.9)
    cb.set_label(f"speedup over {args.baseline} ({args.value})", fontsize=8)
    title = args.title or os.path.basename(args.sweep)
    if any_oom:
        title += "\n* exceeds the memory limit"
    fig.suptitle(title, fontsize=10)
    save(fig, args.output)


# --- adapt --------------------------------------------------------------------------

def cmd_adapt(args):
    t = Table(args.rows)
    t.require(args.policy_column, args.iteration_column, args.time_column, args.y, args.k_column, args.b_column,
              args.schedule_column)
    runs = {}  # policy -> [(iteration, start, time, schedule, k, b)]
    for line, r in t.rows:
        pol = r.get(args.policy_column, "")
        if pol == "":
            raise InputError(f"{t.path}:{line}: column '{args.policy_column}': empty")
        runs.setdefault(pol, []).append((t.number(line, r, args.iteration_column), t.number(line, r, args.time_column),
                                         t.number(line, r, args.y), r.get(args.schedule_column, ""),
                                         t.number(line, r, args.k_column), t.number(line, r, args.b_column)))
    for pol in runs:
        runs[pol].sort()
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
        a1.step([q[1] for q in pts], [q[4] for q in pts], where="post", label=p, **style.get(p, {}))
        for q in pts:
            name = f"kfkb k={q[4]:g} b={q[5]:g}" if q[3] == "kfkb" else f"{q[3]} b={q[5]:g}"
            plan_name.setdefault(q[4], set()).add(name)
    a1.set_yscale("log", base=2)
    ks = sorted(plan_name)
    a1.set_yticks(ks)
    a1.set_yticklabels([" / ".join(sorted(plan_name[k])) for k in ks], fontsize=7)
    a1.minorticks_off()
    a1.set_ylim(min(ks) / 1.3, max(ks) * 1.3)
    a1.set_ylabel(f"plan (log {args.k_column})")
    a1.legend(fontsize=7, loc="upper right")
    a1.grid(True, alpha=0.3)
    a1.set_title(args.title or os.path.basename(args.rows), fontsize=10)
    # 2. iteration time over time, every policy
    for p in pols:
        pts = runs[p]
        a2.plot([q[1] for q in pts], [q[2] for q in pts], label=f"{p} (total {total(p):,.0f} s)",
                **style.get(p, {"linewidth": 0.8}))
    a2.set_ylabel(args.ylabel or args.y)
    a2.legend(fontsize=7, loc="upper right", ncol=2)
    a2.grid(True, alpha=0.3)
    # 3. time gained over the baseline at each iteration
    base = {q[0]: q[1] for q in runs[args.baseline]}
    for p in pols:
        if p == args.baseline:
            continue
        pts = [q for q in runs[p] if q[0] in base]
        a3.plot([q[1] for q in pts], [base[q[0]] - q[1] for q in pts], label=p, **style.get(p, {"linewidth": 0.8}))
    a3.axhline(0, color="black", linewidth=0.6)
    a3.set_ylabel(f"ahead of {args.baseline} (s)")
    a3.set_xlabel(f"{args.time_column}: time since the start of the run (s)")
    a3.legend(fontsize=7, loc="upper left", ncol=3)
    a3.grid(True, alpha=0.3)
    fig.tight_layout()
    save(fig, args.output)


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/scripts/plot.py", description=__doc__,
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

    s = sub.add_parser("severity", help="iteration time against preemption severity, one line per schedule / k",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Line plot of a sweep (adagrouper sweep's CSV or JSONL output): --y against --x, "
                                   "one line per series (by default each schedule and k), one panel per --facet "
                                   "value. Rows with no --x value (1F1B and the other baselines when --x is k) are "
                                   "drawn as horizontal dashed lines. Runs that exceed the memory limit get hollow "
                                   "markers. Two rows for the same series and x in one panel is an error: pick a "
                                   "slice with --where or split with --facet.",
                       epilog="examples:\n"
                              "  tools/scripts/plot.py severity gpt-severity.csv -o sev             # panels per period\n"
                              "  tools/scripts/plot.py severity fig2.csv --x k --facet trace.severity -o fig2")
    s.add_argument("sweep", help="sweep output, CSV or JSONL")
    add_common_sweep_options(s)
    s.add_argument("--x", default="trace.severity", help="x column (default trace.severity)")
    s.add_argument("--y", default="mean_iteration_time_s", help="y column (default mean_iteration_time_s)")
    s.add_argument("--series", default="schedule,k",
                   help="comma-separated columns whose values name a line (default schedule,k; the x column "
                        "is left out)")
    s.add_argument("--logx", action="store_true", help="log2 x axis (for k)")
    s.add_argument("--sharey", action="store_true", help="the same y range in every panel")
    s.add_argument("--xlabel", help="x axis label (default: the x column)")
    s.add_argument("--ylabel", help="y axis label (default: the y column)")
    s.add_argument("--width", type=float, default=11.0, help="figure width in inches (default 11)")
    s.set_defaults(func=cmd_severity)

    h = sub.add_parser("heatmap", help="kFkB's speedup over 1F1B as a heatmap over (k, severity)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Heatmap of a sweep: for every (x, y) cell, the --baseline schedule's --value "
                                   "at the same y (and facet value) divided by the --schedule row's --value at "
                                   "(x, y): > 1 (blue) means kFkB is faster than 1F1B. Cells are annotated with "
                                   "the speedup; '*' marks a run that exceeds the memory limit. One panel per "
                                   "--facet value. A cell with no baseline row is an error naming the line.",
                       epilog="example:\n  tools/scripts/plot.py heatmap gpt-severity.csv -o heat   # panels per period")
    h.add_argument("sweep", help="sweep output, CSV or JSONL")
    add_common_sweep_options(h)
    h.add_argument("--x", default="k", help="x column (default k)")
    h.add_argument("--y", default="trace.severity", help="y column (default trace.severity)")
    h.add_argument("--value", default="mean_iteration_time_s",
                   help="the time compared (default mean_iteration_time_s; p99_iteration_time_s for the tail)")
    h.add_argument("--schedule", default="kfkb", help="schedule of the cells (default kfkb)")
    h.add_argument("--baseline", default="1f1b", help="schedule the speedup is over (default 1f1b)")
    h.add_argument("--xlabel", help="x axis label (default: the x column)")
    h.add_argument("--ylabel", help="y axis label (default: the y column)")
    h.add_argument("--width", type=float, default=11.0, help="figure width in inches (default 11)")
    h.set_defaults(func=cmd_heatmap)

    a = sub.add_parser("adapt", help="an adaptive run's plan and iteration time over time, with the static policies",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Three panels from `adagrouper adapt --rows FILE` (CSV or JSONL): (1) the group "
                                   "size k of the --plan-policies over time, each change of the first one labelled "
                                   "with its plan; (2) every policy's iteration time over time, the legend giving "
                                   "each total; (3) how far each policy is ahead of --baseline: the baseline's start "
                                   "time of iteration i minus the policy's (the last point is its saving over the run).",
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
    a.add_argument("--ylabel", help="label of the iteration-time axis (default: the column)")
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
