"""Shared by the Python module's tests: the source tree, the command line, running it."""

import json
import os
import subprocess

ROOT = os.environ.get("ADAGROUPER_SOURCE_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CLI = os.environ.get("ADAGROUPER_CLI") or os.path.join(ROOT, "build", "adagrouper")

TOY = os.path.join(ROOT, "configs", "examples", "toy-4.json")
TOY_NET_2S = os.path.join(ROOT, "configs", "examples", "toy-net-2s.json")
TOY_NET_HALF = os.path.join(ROOT, "configs", "examples", "toy-net-0.5s.json")
GPT = os.path.join(ROOT, "configs", "pipelines", "gpt-8stage-v100.json")
PREEMPTED = os.path.join(ROOT, "configs", "networks", "preempted-25g.json")


def config(*parts):
    return os.path.join(ROOT, "configs", *parts)


def cli(*args):
    """Runs build/adagrouper: (exit status, stdout, stderr)."""
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, check=False)
    return p.returncode, p.stdout, p.stderr


def cli_json(*args):
    """The JSON build/adagrouper prints (it must succeed)."""
    rc, out, err = cli(*args)
    if rc != 0:
        raise AssertionError(f"adagrouper {' '.join(map(str, args))}: exit {rc}: {err}")
    return json.loads(out)


def cli_error(command, *args):
    """The one line build/adagrouper COMMAND prints on stderr for bad input (exit 2), with its
    "adagrouper COMMAND: " prefix taken off: what the Python exception carries."""
    rc, _, err = cli(command, *args)
    if rc != 2:
        raise AssertionError(f"adagrouper {command} {' '.join(map(str, args))}: exit {rc}, not 2: {err}")
    line = err.strip()
    prefix = f"adagrouper {command}: "
    if "\n" in line or not line.startswith(prefix):
        raise AssertionError(f"not one line starting with {prefix!r}: {err!r}")
    return line[len(prefix):]
