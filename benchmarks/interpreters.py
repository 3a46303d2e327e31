"""The interpreters a run's systems run on: this one, or others named with
``--python NAME=PATH`` (a free-threaded build beside the GIL build of the same
Python, say), each system once per interpreter, in the same interleaved rounds.

An interpreter is a property of one run of one system (``harness.Entry``), not of
the whole benchmark: the parent (options, preparation, verification, the report)
stays on the interpreter that started it, and only the processes it starts for a
system (``benchmarks.child``, ``benchmarks.webserver``) run on the named one. Those
import this run's ``benchmarks`` through ``PYTHONPATH``, and adb from the
interpreter's own installation where it has one (a venv with a wheel of another
commit: two builds of adb side by side in one run), else from where this process
imports it (the checkout, for a bare free-threaded build). The drivers and
frameworks must be installed in the other interpreter itself. ``probe`` asks it,
before any work, what it is, which adb it runs and what it can run (``python -m
benchmarks.child --probe``).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Optional

import adb

#: where this process imports ``benchmarks`` and ``adb`` from: what another
#: interpreter's processes import them from too
SOURCES = tuple(dict.fromkeys(os.path.dirname(os.path.dirname(os.path.abspath(module)))
                              for module in (__file__, adb.__file__ or "")))


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """A Python to run systems on: ``name`` labels its rows (``threads@ft``); the
    empty name is the interpreter running the benchmark, whose rows keep their
    plain names."""

    name: str
    path: str

    def label(self, row: str) -> str:
        """The report's name for ``row`` run on this interpreter."""
        return f"{row}@{self.name}" if self.name else row

    def command(self, module: str, *args: str) -> list[str]:
        """``python -m benchmarks.MODULE ARGS`` on this interpreter."""
        return [self.path, "-m", f"{__package__}.{module}", *args]

    def env(self) -> Optional[dict[str, str]]:
        """The environment of its processes: this one's, with ``PYTHONPATH`` leading
        to this run's ``benchmarks``, and to this run's ``adb`` too unless the
        interpreter has an adb of its own (None, for this interpreter: the
        environment as it is)."""
        if not self.name:
            return None
        sources = [_benchmarks_only()] if own_adb(self.path) else list(SOURCES)
        paths = [*sources, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


@functools.lru_cache(maxsize=None)
def own_adb(path: str) -> Optional[str]:
    """Where the interpreter at ``path`` imports adb from by itself (isolated: no
    ``PYTHONPATH``, no current directory), or None if it has none."""
    try:
        proc = subprocess.run([path, "-I", "-c", "import adb; print(adb.__file__)"],
                              capture_output=True, text=True, timeout=60,
                              cwd=tempfile.gettempdir())
    except (OSError, subprocess.SubprocessError):
        return None  # the probe says why it cannot run
    found = proc.stdout.strip()
    return os.path.dirname(found) if proc.returncode == 0 and found else None


@functools.lru_cache(maxsize=None)
def _benchmarks_only() -> str:
    """A directory holding nothing but a link to this run's ``benchmarks``: on
    ``PYTHONPATH`` it cannot put another adb (a checkout's, beside ``benchmarks``)
    before the interpreter's own."""
    where = tempfile.mkdtemp(prefix="adb-bench-path-")
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    package = os.path.dirname(os.path.abspath(__file__))
    os.symlink(package, os.path.join(where, os.path.basename(package)))
    return where


#: the interpreter running the benchmark
THIS = Interpreter("", sys.executable)


def parse(text: str) -> Interpreter:
    """``--python NAME=PATH`` (or a bare ``PATH``, named after its file); ValueError
    if either part is empty or the name could be mistaken for another part of a
    row's name."""
    name, sep, path = text.partition("=")
    if not sep:
        name, path = os.path.basename(text), text
    name, path = name.strip(), path.strip()
    if not name or not path:
        raise ValueError(f"must be NAME=PATH (or PATH), not {text!r}")
    if any(c in name for c in "@, "):
        raise ValueError(f"an interpreter's name has no '@', ',' or space: {name!r}")
    return Interpreter(name, path)


class Unusable(Exception):
    """The interpreter cannot run this benchmark's systems; the message says why,
    in one line."""


def probe(python: Interpreter, scenario: str, url: str, systems: list[str],
          timeout: float = 120.0) -> dict[str, Any]:
    """What ``python`` is (version, free-threaded build, the GIL after importing
    what the run imports, the adb it imports) and why each of ``systems`` cannot
    run ``scenario`` on ``url`` there (None: it can). Unusable when the interpreter
    is missing, fails to start the benchmark's child (cannot import adb, say) or
    lacks the URL's driver, which adb's systems and the plain threads all use."""
    where = f"--python {python.name}={python.path}"
    request = json.dumps({"scenario": scenario, "url": url, "systems": systems})
    try:
        proc = subprocess.run(python.command("child", "--probe", request), env=python.env(),
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unusable(f"{where}: cannot run it: {exc}") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise Unusable(f"{where}: cannot run the benchmark's child there: "
                       f"{lines[-1].strip() if lines else f'exit status {proc.returncode}'}")
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if found.get("driver_missing"):
        raise Unusable(f"{where}: the URL's driver, {found['driver_missing']}, is not installed "
                       "there; install it in that interpreter, or name in the URL a driver it "
                       "has (postgresql+psycopg://..., say)")
    return found
