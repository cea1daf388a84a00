#!/usr/bin/env python3
"""Lists C++ functions longer than a limit (default 80 lines) in the given directories.

A function is a top-level or namespace/class-level brace block whose opening line looks
like a signature (a ')' before the '{', possibly with qualifiers). Lambdas and blocks
nested inside a function count towards that function. Data tables (brace blocks that
follow '=' or are initializer lists) are skipped.

    tools/scripts/long_functions.py [--limit N] DIR...   # exit 1 if any is found
"""
import argparse
import os
import re
import sys

SIG = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(final)?\s*(->\s*[\w:<>,\s*&]+)?\s*(:[^{;]*)?$")


def strip(line, state):
    """Removes comments and string literals (state carries /* */ and raw strings)."""
    out = []
    i = 0
    while i < len(line):
        if state["block"]:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out)
            state["block"] = False
            i = j + 2
            continue
        if state["raw"]:
            j = line.find(state["raw"], i)
            if j < 0:
                return "".join(out)
            i = j + len(state["raw"])
            state["raw"] = None
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        m = re.match(r'R"([^(]*)\(', line[i:])
        if m:
            state["raw"] = ")" + m.group(1) + '"'
            i += m.end()
            continue
        if c == '"' or c == "'":
            j = i + 1
            while j < len(line) and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            out.append('""')
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    state = {"block": False, "raw": None}
    depth = 0
    start = None
    name = None
    prev = ""
    found = []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    for n, raw in enumerate(lines, 1):
        line = strip(raw.rstrip("\n"), state)
        for k, ch in enumerate(line):
            if ch == "{":
                if start is None:
                    head = (prev + " " + line[:k]).strip()
                    if SIG.search(head) and not re.search(r"=\s*$", head) and not re.match(
                            r"^(namespace|struct|class|enum|union|extern)\b", head.split("(")[0].strip().split()[-1] if head.split("(")[0].strip() else ""):
                        if not re.search(r"\b(if|for|while|switch|catch)\s*\(", head.split(")")[0] + ")"):
                            start = n
                            name = head[-90:]
                            fdepth = depth
                depth += 1
            elif ch == "}":
                depth -= 1
                if start is not None and depth == fdepth:
                    found.append((n - start + 1, start, name))
                    start = None
        if line.strip():
            prev = line.strip() if start is None else ""
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    bad = []
    for d in a.dirs:
        for root, _, files in os.walk(d):
            for fn in sorted(files):
                if fn.endswith((".cpp", ".h", ".cu")):
                    p = os.path.join(root, fn)
                    for length, line, name in functions(p):
                        if length > a.limit:
                            bad.append((length, f"{p}:{line}", name))
    for length, where, name in sorted(bad, reverse=True):
        print(f"{length:5d}  {where}  {name}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
