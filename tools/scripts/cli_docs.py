#!/usr/bin/env python3
"""Generates adagrouper's bash completion and man pages from the programs' own --help.

Meson runs it at build time on the programs it just built, so that neither can drift
from the options, commands, schedules and choices the programs really take:

  cli_docs.py --completion adagrouper.bash [--man DIR --help2man PATH --version V] PROGRAM...

PROGRAM is build/adagrouper and, when built, build/adagrouper-calib. Commands are the
rows of the "Commands:" (or "Modes:") list of PROGRAM --help, one level deeper where a
command has a list of its own (adagrouper trace); options are the rows of each
command's "Options:" list (Boost.Program_options' layout); an option's choices are the
NAME|NAME alternatives of the usage lines, and --schedule takes the families that
`adagrouper schedule --help` lists.
"""

import argparse
import concurrent.futures
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile

# Modes a program runs that its --help list leaves out (probed: kept when `PROGRAM
# MODE --help` succeeds).
UNLISTED = {"adagrouper-calib": ["replay"]}
# Commands whose first positional argument is a schedule family.
FAMILY_POSITIONAL = {("adagrouper", "schedule")}

# "  --pipeline FILE   help", "  -b [ --micro-batch-size ] b   help", "  --k K (=1) help": the
# name, and the value's name when it takes one (Boost pads the help to a column, or leaves
# one blank when the option is wider).
OPTION_ROW = re.compile(r"^  (?:-(\w) \[ --([\w-]+) \]|--([\w-]+))(?: ([^ (][^ ]*))?(?: \(=[^)]*\))?(?:\s|$)")
LIST_HEADING = re.compile(r"^(Commands|Modes):$")
ROW = re.compile(r"^  ([a-z0-9][\w-]*)(?:\s+(.*))?$")
USAGE_CHOICE = re.compile(r"--([\w-]+)[ =]([\w.-]+(?:\|[\w.-]+)+)")


def run_help(argv):
    """The --help text of argv (stdout and stderr), and whether it exited 0."""
    p = subprocess.run(argv + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    return p.stdout, p.returncode == 0


def list_rows(text, heading):
    """(name, help) of each row of the list under the heading matching `heading`; a row's
    help runs on over the more indented lines under it."""
    rows, inside = [], False
    for line in text.splitlines():
        if not inside:
            inside = bool(heading.match(line))
            continue
        if not line.strip() or not line.startswith(" "):
            break
        m = ROW.match(line)
        if m:
            rows.append((m.group(1), (m.group(2) or "").strip()))
        elif rows:
            rows[-1] = (rows[-1][0], (rows[-1][1] + " " + line.strip()).strip())
    return rows


class Command:
    """One program or command: its words, help text, subcommands, options and choices."""

    def __init__(self, words, argv, summary, help_text):
        self.words, self.argv, self.summary, self.help = words, argv, summary, help_text
        self.subcommands = []
        self.options = []  # (names, value name or None)
        self.choices = {}  # option -> words
        usage = self.help.split("\n\n", 1)[0]
        for name, choices in USAGE_CHOICE.findall(usage):
            self.choices["--" + name] = [w for w in choices.split("|") if re.fullmatch(r"[a-z][\w.-]*", w)]
        in_options = False
        for line in self.help.splitlines():
            if re.match(r"^Options.*:$", line):
                in_options = True
                continue
            m = OPTION_ROW.match(line) if in_options else None
            if m:
                names = ["-" + m.group(1), "--" + m.group(2)] if m.group(1) else ["--" + m.group(3)]
                self.options.append((names, m.group(4)))

    def listed(self):
        """(name, summary) of the commands its help lists, and of the unlisted ones to probe."""
        rows = [(n, h.split(";")[0].rstrip(".,")) for n, h in list_rows(self.help, LIST_HEADING)]
        if len(self.words) == 1:
            rows += [(n, None) for n in UNLISTED.get(self.words[0], []) if n not in dict(rows)]
        return rows

    def walk(self):
        yield self
        for c in self.subcommands:
            yield from c.walk()


def load_programs(paths):
    """Every program and command, their --help run in parallel a level at a time (the
    calibration harness takes a second to start)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        level = []
        for path, (text, _) in zip(paths, pool.map(run_help, [[os.path.abspath(p)] for p in paths])):
            level.append(Command([os.path.basename(path)], [os.path.abspath(path)], "", text))
        programs = list(level)
        while level:
            pending = [(parent, name, summary) for parent in level for name, summary in parent.listed()]
            results = pool.map(run_help, [parent.argv + [name] for parent, name, _ in pending])
            level = []
            for (parent, name, summary), (text, ok) in zip(pending, results):
                if not ok and summary is not None:
                    raise SystemExit(f"cli_docs.py: {' '.join(parent.argv)} {name} --help failed:\n{text}")
                if ok:
                    child = Command(parent.words + [name], parent.argv + [name], summary or "", text)
                    parent.subcommands.append(child)
                    level.append(child)
    return programs


def schedule_families(programs):
    for program in programs:
        for c in program.walk():
            if c.words == ["adagrouper", "schedule"]:
                return [n for n, _ in list_rows(c.help, re.compile(r"^Schedules:$"))]
    return []


# --- bash completion -------------------------------------------------------------------

def value_kind(c, names, value, families):
    """What completes an option's value: a word list, @file, @dir or @none."""
    for n in names:
        if n in c.choices and c.choices[n]:
            return " ".join(c.choices[n])
    if "--schedule" in names and families:
        return " ".join(families + (["custom"] if c.words[-1] == "simulate" else []))
    if value is None:
        return None
    if "DIR" in value or value == "arg" and any("dir" in n for n in names):
        return "@dir"
    # A value Boost names only "arg" may be anything: file names, as bash would offer.
    if re.search(r"FILE|PATH", value) or value == "arg":
        return "@file"
    return "@none"


def case_arm(key, value):
    return f"    {shlex.quote(key)}) echo {shlex.quote(value)} ;;"


def completion_tables(programs, families):
    subs, opts, values, positional = [], [], [], []
    for program in programs:
        for c in program.walk():
            path = " ".join(c.words)
            if c.subcommands:
                subs.append(case_arm(path, " ".join(s.words[-1] for s in c.subcommands)))
            if c.options:
                opts.append(case_arm(path, " ".join(n for names, _ in c.options for n in names)))
            for names, value in c.options:
                kind = value_kind(c, names, value, families)
                for n in names:
                    if kind:
                        values.append(case_arm(f"{path} {n}", kind))
            if tuple(c.words) in FAMILY_POSITIONAL:
                positional.append(case_arm(path, " ".join(families)))
    return subs, opts, values, positional


COMPLETION_TEMPLATE = r"""# bash completion for {programs}: generated at build time by tools/scripts/cli_docs.py
# from the programs' --help (commands, options, choices, schedule families); do not edit.

_adagrouper_subcommands() {{
  case "$1" in
{subs}
  esac
}}

_adagrouper_options() {{
  case "$1" in
{opts}
  esac
}}

# What completes an option's value: words, @file, @dir, @none; nothing: the option takes none.
_adagrouper_value() {{
  case "$1" in
{values}
  esac
}}

_adagrouper_positional() {{
  case "$1" in
{positional}
  esac
}}

_adagrouper_complete() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
  local path=${{COMP_WORDS[0]##*/}} i w subs kind positional=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${{COMP_WORDS[i]}}
    subs=" $(_adagrouper_subcommands "$path") "
    if [[ $positional -eq 0 && $w != -* && $subs == *" $w "* ]]; then
      path="$path $w"
    elif [[ $w != -* && -z $(_adagrouper_value "$path ${{COMP_WORDS[i-1]}}") ]]; then
      positional=1
    fi
  done
  COMPREPLY=()
  if [[ $COMP_CWORD -gt 1 || $prev == -* ]]; then
    kind=$(_adagrouper_value "$path $prev")
    case "$kind" in
      "") ;;
      @file) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
      @dir) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
      @none) return 0 ;;
      *) COMPREPLY=($(compgen -W "$kind" -- "$cur")); return 0 ;;
    esac
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_adagrouper_options "$path")" -- "$cur"))
  elif [[ -n $(_adagrouper_subcommands "$path") && $positional -eq 0 ]]; then
    COMPREPLY=($(compgen -W "$(_adagrouper_subcommands "$path")" -- "$cur"))
  elif [[ -n $(_adagrouper_positional "$path") ]]; then
    COMPREPLY=($(compgen -W "$(_adagrouper_positional "$path")" -- "$cur"))
  else
    compopt -o filenames 2>/dev/null
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
  return 0
}}
complete -F _adagrouper_complete {programs}
"""


def write_completion(programs, output):
    families = schedule_families(programs)
    subs, opts, values, positional = completion_tables(programs, families)
    text = COMPLETION_TEMPLATE.format(programs=" ".join(p.words[0] for p in programs), subs="\n".join(subs),
                                      opts="\n".join(opts), values="\n".join(values),
                                      positional="\n".join(positional))
    write_atomic(output, text)


# --- man pages ---------------------------------------------------------------------------

def page_name(c):
    return "-".join(c.words)


def first_sentence(text):
    """The first sentence of the paragraph after the usage lines, for a page's NAME line."""
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    body = " ".join(paragraphs[1].split()) if len(paragraphs) > 1 else ""
    sentence = body.split(". ", 1)[0].rstrip(".")
    return sentence[:1].lower() + sentence[1:]


def see_also(programs, this):
    pages = [page_name(c) for p in programs for c in p.walk() if c is not this]
    return "[SEE ALSO]\n" + ",\n".join(f".BR {p} (1)" for p in pages) + "\n"


def write_man_pages(programs, output, help2man, version):
    os.makedirs(output, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for program in programs:
            for c in program.walk():
                name = page_name(c)
                # help2man names the page after the program it runs: a wrapper of that name
                # prints the command's --help, as read already.
                with open(os.path.join(tmp, name + ".txt"), "w", encoding="utf-8") as f:
                    f.write(c.help)
                wrapper = os.path.join(tmp, name)
                with open(wrapper, "w", encoding="utf-8") as f:
                    f.write(f"#!/bin/sh\nexec cat {shlex.quote(os.path.join(tmp, name + '.txt'))}\n")
                os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
                include = os.path.join(tmp, name + ".h2m")
                with open(include, "w", encoding="utf-8") as f:
                    f.write(see_also(programs, c))
                target = os.path.join(output, name + ".1")
                subprocess.run([help2man, "--no-info", "--version-string", version,
                                "--name", c.summary or first_sentence(c.help), "--section", "1",
                                "--include", include, "--output", target + ".tmp", wrapper], check=True)
                os.replace(target + ".tmp", target)


def write_atomic(path, text):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--completion", metavar="FILE", help="write the bash completion to FILE")
    parser.add_argument("--man", metavar="DIR", help="write a man page per command into DIR (help2man)")
    parser.add_argument("--help2man", default="help2man")
    parser.add_argument("--version", default="0")
    parser.add_argument("programs", nargs="+")
    args = parser.parse_args()
    programs = load_programs(args.programs)
    if args.completion:
        write_completion(programs, args.completion)
    if args.man:
        write_man_pages(programs, args.man, args.help2man, args.version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
