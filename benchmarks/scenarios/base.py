"""What a scenario is: ``Scenario``, the record each scenario module declares,
with every field a scenario may set and its default; and ``WrongResult``.

The harness, the CLI and the report read these fields and nothing else of a
scenario module, so a new scenario is its module (which declares ``SCENARIO``)
and one line in the registry (``benchmarks/scenarios/__init__.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from typing import Any, Awaitable, Callable, ContextManager, Iterator, Mapping, Optional

from ..interpreters import Interpreter
from ..report import Field, Summary
from ..systems import ALL, SYSTEMS, Entrant, System
from ..systems.common import Figures, Options, RunSpec

#: a variant of a scenario: its name in the report (``serial +queries``) and the
#: options it sets (iibench's modes, mongo-tasks' calls)
Variant = tuple[str, Options]
#: ``progress(n)``: how far a run has come, for its progress bar
Progress = Callable[[int], None]


class WrongResult(Exception):
    """A run finished but left the database in the wrong state: an error, not a result."""


def one_variant(options: Options) -> list[Variant]:
    """The default: one unnamed variant, setting nothing."""
    return [("", {})]


def every_variant_runs(system: System, kind: str, options: Options) -> Optional[str]:
    """The default: no variant rules a system out."""
    return None


def one_step_per_row(rows: int, options: Options) -> int:
    """The default progress: the bar follows the row count up to ``--rows``."""
    return rows


def nothing_missing() -> Optional[str]:
    """The default: the scenario needs no tool of its own."""
    return None


@contextlib.contextmanager
def nothing_to_arrange(system: str, url: str, options: Options) -> Iterator[Options]:
    """The default: the child gets the run's options as they are."""
    yield options


def _sql_systems() -> Mapping[str, Entrant]:
    return SYSTEMS


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One experiment, written once for every system.

    A client scenario gives ``run(calls, spec)``: the experiment, in a child
    process, over the system's ``Calls`` (``MongoCalls`` for a MongoDB scenario)
    in the system's world; it returns the run's figures. A scenario that is not a
    client workload (the web scenarios load a server with a tool) gives
    ``launch(name, url, pool_size, options, progress, python)`` instead, run in
    the parent for each server of its own ``roster``, its server processes on the
    interpreter ``python``. A scenario that breaks the system
    rather than running calls over it (faults) gives ``drive(system, spec)``,
    run in the child like ``run``, with ``arrange`` around the child in the
    parent. Either way ``prepare(url, rows)`` runs
    before each run and ``verify(url, rows, figures)`` after it, raising
    ``WrongResult``, which makes the run an error, never a figure.
    """

    # -- what it is, and its run ----------------------------------------------------
    name: str
    seed: str
    description: str
    prepare: Callable[[str, int], None]
    verify: Callable[[str, int, Optional[Figures]], None]
    run: Optional[Callable[[Any, RunSpec], Awaitable[Figures]]] = None
    launch: Optional[Callable[[str, str, int, Options, Optional[Progress], Interpreter],
                              Figures]] = None
    #: instead of ``run``: the run in the child, given the system itself (faults:
    #: opens its pool with ``System.open_pool``, breaks it, checks it); its figures
    #: are all its own (no process figures are added)
    drive: Optional[Callable[[System, RunSpec], Figures]] = None
    #: in the parent, around each child run: ``arrange(system, url, options)``
    #: yields the options the child gets (faults: the run's user on the server)
    arrange: Callable[[str, str, Options], ContextManager[Options]] = nothing_to_arrange
    #: seconds a child run may take, from its options (None: ``--timeout``)
    run_timeout: Optional[Callable[[Options], float]] = None
    #: the table whose row count the progress bar follows (None: the scenario's
    #: ``progress_total`` steps, reported by ``launch``)
    table: Optional[str] = None
    #: every table ``prepare`` creates (all ``adb_bench_*``), in an order they can be
    #: dropped in: the CLI drops them at the end of a run, unless ``--keep``
    tables: tuple[str, ...] = ()
    #: connections a system opens before the run (None: all pool_size)
    min_connections: Optional[int] = None
    #: the databases it runs on (the MongoDB scenarios: ``("mongodb",)``)
    kinds: tuple[str, ...] = ALL
    #: the systems it runs: the SQL ones, or its own (web servers, MongoDB clients)
    roster: Mapping[str, Entrant] = dataclasses.field(default_factory=_sql_systems)

    # -- what a run without --rows, --pool_size or --systems does -------------------
    default_rows: Optional[int] = None  # None: 100,000 on a server, 20,000 on SQLite
    default_pool_sizes: tuple[int, ...] = (10,)
    default_systems: Optional[tuple[str, ...]] = None  # None: the whole roster
    rows_are: str = "rows"  # what --rows counts, for the run's one-line description

    # -- its options and variants ---------------------------------------------------
    add_arguments: Optional[Callable[[argparse._ArgumentGroup], None]] = None
    variants: Callable[[Options], list[Variant]] = one_variant
    #: why a system cannot run one of the variants (None: it can)
    variant_unavailable: Callable[[System, str, Options], Optional[str]] = every_variant_runs
    #: why the scenario cannot run here at all (a missing load tool), or None
    unavailable_reason: Callable[[], Optional[str]] = nothing_missing
    progress_total: Callable[[int, Options], int] = one_step_per_row

    # -- the report -----------------------------------------------------------------
    #: ``(key, label, format)`` of the figures the report shows, the first one the
    #: headline (ratios, chart, progress bar); ``fields_for`` instead, where they
    #: depend on the options (web: one per load level)
    fields: tuple[Field, ...] = ()
    fields_for: Optional[Callable[[Options], tuple[Field, ...]]] = None
    baselines: tuple[str, ...] = ("adbapi", "threads")  # the ratio columns
    #: its own chart, ``plot(path, summary, title, options)`` (None: the report's bars)
    plot: Optional[Callable[[str, Summary, str, Options], None]] = None
    #: versions of the tools it ran (the load tools), for the report's environment
    tools: Optional[Callable[[], dict[str, Any]]] = None
    uses_database: bool = True  # False: no server version, no hint about servers

    def report_fields(self, options: Options) -> tuple[Field, ...]:
        """The report's fields for a run with ``options``."""
        return self.fields_for(options) if self.fields_for is not None else self.fields
