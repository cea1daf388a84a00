"""What the derive_*.py scripts beside this file share: rounding to significant digits,
the layout of the pipeline files they write, and writing them here."""

import json
import os
import sys
from math import floor, log10


def sig(x, digits=4):
    """x rounded to `digits` significant digits."""
    if x == 0:
        return 0
    return round(x, digits - 1 - int(floor(log10(abs(x)))))


def dumps(value, indent=0, width=140):
    """JSON with short objects and arrays on one line."""
    flat = json.dumps(value)
    if len(flat) + indent <= width or not isinstance(value, (dict, list)):
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 2, width)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 2, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write_here(doc, name, width):
    """Writes `doc` (dumps, lines of `width`) to NAME beside this file and says so, unless
    the command line has --print."""
    if "--print" in sys.argv[1:]:
        return
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    with open(out, "w") as f:
        f.write(dumps(doc, width=width) + "\n")
    print(f"wrote {out}")
