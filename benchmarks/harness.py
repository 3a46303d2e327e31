"""Run systems in fresh processes, interleaved over repeats, and check every run.

Round r runs every system once (A B C, A B C, ...), so slow drift on a shared
machine hits every system alike. Before each run the scenario prepares the
database; after it the scenario verifies it, and a wrong result is recorded as
an error, never as a figure. Each run may name the interpreter it runs on
(``benchmarks.interpreters``): then every system runs once per interpreter in
each round, its rows named ``system@interpreter``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import subprocess
import threading
import time
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

from .interpreters import THIS, Interpreter
from .report import Summary
from .scenarios.base import Progress, Scenario, Variant, WrongResult
from .systems.common import Figures, Options


@dataclasses.dataclass(frozen=True)
class Entry:
    """One row of the report: a system on one interpreter at one pool size in one of
    the scenario's variants (iibench's modes, say); ``name`` is how the report
    shows it."""

    name: str
    system: str
    pool_size: int
    variant: str = ""
    options: Options = dataclasses.field(default_factory=dict, hash=False, compare=False)
    python: Interpreter = THIS


def entries(systems: Sequence[str], pool_sizes: Sequence[int],
            variants: Sequence[Variant] = (("", {}),),
            pythons: Sequence[Interpreter] = (THIS,)) -> list[Entry]:
    """Every system on every interpreter in every variant at every pool size (a
    system's interpreters side by side); the interpreter is in the name when it is
    not this one (``threads@ft``), the pool size only when there is more than one."""
    return [Entry(" ".join(filter(None, [python.label(system), variant]))
                  + (f" @{pool}" if len(pool_sizes) > 1 else ""), system, pool, variant,
                  dict(options), python)
            for system in systems for python in pythons for variant, options in variants
            for pool in pool_sizes]


@dataclasses.dataclass
class Run:
    system: str          # the entry's name
    round: int
    ok: bool
    figures: Figures = dataclasses.field(default_factory=dict)
    error: str = ""
    base: str = ""       # the system itself
    pool_size: int = 0
    variant: str = ""
    python: str = ""     # the interpreter's name ("": the one running the benchmark)


#: what one run gives: ok, its figures, and the error if it failed
Outcome = tuple[bool, Figures, str]


def run_once(system: str, scenario: Scenario, url: str, rows: int, pool_size: int,
             timeout: float, progress: Optional[Progress] = None,
             options: Optional[Options] = None, python: Interpreter = THIS) -> Outcome:
    """Prepare, run ``system``, verify. Returns a Run's fields (ok, figures, error).

    The run happens in a child process (``benchmarks.child``) on ``python``,
    inside what the scenario ``arrange``s for it, unless the scenario drives it
    from here with ``launch`` (the web scenarios: a server process group on
    ``python`` and a load tool); either way a wrong result is an error, never a
    figure.
    """
    options = options or {}
    scenario.prepare(url, rows)
    if scenario.launch is not None:
        try:
            figures = scenario.launch(system, url, pool_size, options, progress, python)
        except Exception as exc:  # the server or the load tool failed: an error row
            return False, {}, _failure(exc)
    else:
        with contextlib.ExitStack() as arranged:
            try:
                child_options = arranged.enter_context(scenario.arrange(system, url, options))
            except Exception as exc:  # the run's own arrangement failed: an error row
                return False, {}, _failure(exc)
            if scenario.run_timeout is not None:
                timeout = scenario.run_timeout(options)
            ok, figures, error = _in_child(system, scenario, url, rows, pool_size, timeout,
                                           progress, child_options, python)
        if not ok:
            return ok, figures, error
    try:
        scenario.verify(url, rows, figures)
    except WrongResult as exc:
        return False, figures, f"wrong result: {exc}"
    return True, figures, ""


def _failure(exc: Exception) -> str:
    """An exception as an error row says it."""
    return f"{type(exc).__name__}: {str(exc).strip()[-300:]}"


def _in_child(system: str, scenario: Scenario, url: str, rows: int, pool_size: int,
              timeout: float, progress: Optional[Progress], options: Options,
              python: Interpreter = THIS) -> Outcome:
    request = {"system": system, "scenario": scenario.name, "url": url, "rows": rows,
               "pool_size": pool_size, "options": options}
    watcher = _Watcher(scenario.table, url, progress) if progress and scenario.table else None
    try:
        proc = subprocess.run(python.command("child", json.dumps(request)), env=python.env(),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, {}, f"timed out after {timeout} s"
    finally:
        if watcher:
            watcher.stop()
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return False, {}, lines[-1] if lines else f"exit status {proc.returncode}"
    return True, json.loads(proc.stdout.strip().splitlines()[-1]), ""


class _Watcher:
    """Polls the row count from the parent so the progress bar moves during a run."""

    def __init__(self, table: str, url: str, progress: Progress, interval: float = 0.5) -> None:
        self.progress, self.stopped = progress, threading.Event()
        self.thread = threading.Thread(target=self.poll, args=(table, url, interval),
                                       daemon=True)
        self.thread.start()

    def poll(self, table: str, url: str, interval: float) -> None:
        import adb.sync
        try:
            with adb.sync.Database(url, pool_size=1) as db:
                while not self.stopped.wait(interval):
                    (count,), = db.runQuery(f"select count(*) from {table}")
                    self.progress(count)
        except Exception:  # progress is cosmetic: never let it disturb a run
            pass

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


class Bar(Protocol):
    """One run's progress bar (``benchmarks.progress``)."""

    def update_to(self, n: int) -> None: ...

    def finish(self, ok: bool, figures: Figures, error: str) -> None: ...


class UI(Protocol):
    """What shows the runs as they go: a bar per system and round."""

    def start(self, system: str, round_: int, repeat: int, total: int) -> Bar: ...


def run_matrix(matrix: Sequence[Entry], scenario: Scenario, url: str, rows: int, repeat: int,
               timeout: float, ui: UI, options: Optional[Options] = None) -> list[Run]:
    """Every ``Entry`` of the matrix ``repeat`` times, interleaved; returns [Run]."""
    runs = []
    total = scenario.progress_total(rows, options or {})
    for round_ in range(1, repeat + 1):
        for entry in matrix:
            bar = ui.start(entry.name, round_, repeat, total)
            start = time.perf_counter()
            ok, figures, error = run_once(entry.system, scenario, url, rows, entry.pool_size,
                                          timeout, progress=bar.update_to,
                                          options={**(options or {}), **entry.options},
                                          python=entry.python)
            figures.setdefault("wall_seconds", time.perf_counter() - start)
            bar.finish(ok, figures, error)
            runs.append(Run(entry.name, round_, ok, figures, error, entry.system,
                            entry.pool_size, entry.variant, entry.python.name))
    return runs


@dataclasses.dataclass(frozen=True)
class Measured:
    """One run as a summary counts it: whose row it is, its figures, and, when it
    failed, the error as the summary lists it (then its figures are not counted)."""

    name: str
    figures: Optional[Mapping[str, Any]]
    error: Optional[str] = None


def summarise(runs: Iterable[Measured], names: Optional[Sequence[str]] = None, *,
              keys: Optional[Sequence[str]] = None, values: bool = False) -> Summary:
    """``{name: {"errors": [..], key: {"median", "min", "max"}}}`` for every numeric
    figure (only ``keys``, in their order, when given) of the runs that succeeded,
    with ``"values"`` (every one, in run order) when asked; a list figure (iibench's
    report lines) is kept from the last successful run. ``names``: the rows, in
    order, and only those (default: every run's, in order of first appearance).
    The one summary of the benchmark, of ``benchmarks.ab`` and ``benchmarks.notify``."""
    summary: Summary = {name: {"errors": []} for name in names or ()}
    numbers: dict[str, dict[str, list[float]]] = {name: {} for name in summary}
    for run in runs:
        if names is not None and run.name not in summary:
            continue
        entry = summary.setdefault(run.name, {"errors": []})
        mine = numbers.setdefault(run.name, {})
        if run.error is not None:
            entry["errors"].append(run.error)
            continue
        for key, value in (run.figures or {}).items():
            if keys is not None and key not in keys:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                mine.setdefault(key, []).append(value)
            elif isinstance(value, list):
                entry[key] = value
    for name, entry in summary.items():
        found = numbers[name]
        for key in keys if keys is not None else list(found):
            if found.get(key):
                entry[key] = spread(found[key], values)
    return summary


def spread(figures: Sequence[float], values: bool = False) -> dict[str, Any]:
    """The median, min and max of ``figures`` (and the figures themselves)."""
    return {"median": statistics.median(figures), "min": min(figures), "max": max(figures),
            **({"values": list(figures)} if values else {})}


def summary_of(runs: Sequence[Run]) -> Summary:
    """The benchmark's summary of ``run_matrix``'s runs: per entry its system, pool
    size, variant, interpreter (its name; "": this one) and number of runs, then
    ``summarise``'s errors and figures."""
    heads: Summary = {}
    for run in runs:
        head = heads.setdefault(run.system, {"system": run.base or run.system,
                                             "pool_size": run.pool_size,
                                             "variant": run.variant, "python": run.python,
                                             "runs": 0})
        head["runs"] += 1
    figures = summarise(Measured(run.system, run.figures, None if run.ok else run.error)
                        for run in runs)
    return {name: {**head, **figures[name]} for name, head in heads.items()}
