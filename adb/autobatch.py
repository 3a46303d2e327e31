"""Group commit (``Database(autobatch=N)``): a worker that takes a standalone
``runOperation`` while more wait in the shared queue takes up to N of them and
runs them as one *unit*: one round trip and one commit instead of N.

The contract, which every path below keeps exactly:

- Each caller gets what it would have got alone: its own rowcount (read from
  its own statement's result, or fixed by the statement's form and checked, see
  ``drivers.psycopg2``), and on success a committed statement.
- A unit is atomic. If any statement of it fails (or its commit does), the unit
  is rolled back and its calls run again one by one, so the failing one gets its
  own error with the driver's own type and the others succeed. A unit that
  rolled back left no effect, so nothing runs twice.
- If the connection breaks during a unit, every call of that unit (and only
  those) gets ``ConnectionLost(may_have_run=True)``.

Which statements qualify (``Path`` per statement, decided by the driver and
cached per SQL text): single DML statements (INSERT, UPDATE, DELETE, REPLACE)
given as text, never ``runQuery``, never inside a transaction. A statement
whose text is *self-contained* (every quote closed, no ``;`` inside, no
comment, no backslash, no dollar quote) may be rendered by the driver's own
parameter escaping and joined with others into one message (``Path.MESSAGE``)
where the driver can read each statement's result; any other DML runs inside one
transaction (``Path.TRANSACTION``); anything else runs alone (``Path.ALONE``).
"""

from __future__ import annotations

import enum
import re
import time
from queue import Empty
from typing import TYPE_CHECKING, Any, Optional

from .call import ARGS, FN, FUTURE, RUN_TIMEOUT, CallState, Job, RunningCall

if TYPE_CHECKING:
    from .pool import Worker

#: where a batched job keeps its statement: ``(op, sql, params)`` follow ARGS
SQL, PARAMS = ARGS + 1, ARGS + 2

_DML = re.compile(r"\s*(insert|update|delete|replace)\s", re.IGNORECASE)
#: characters that change how quotes are read (escapes, dollar quotes): never self-contained
_UNSAFE = "\\$"
_TRAILING = frozenset("; \t\r\n")


class Path(enum.Enum):
    """How a statement may run when a worker batches it."""

    ALONE = "alone"              # never batched
    TRANSACTION = "transaction"  # with others, inside one transaction, one execute each
    MESSAGE = "message"          # with others, in one multi-statement message


def is_dml(sql: Any) -> bool:
    """True for one INSERT/UPDATE/DELETE/REPLACE given as text."""
    return isinstance(sql, str) and _DML.match(sql) is not None


def self_contained(sql: str, line_comment: tuple[str, ...] = ("--",)) -> bool:
    """True when ``sql`` is one statement whose text ends where it ends: every
    quote it opens is closed, and outside quotes it has no ``;`` (one trailing
    one aside), no comment and nothing that changes how quotes are read (a
    backslash, a dollar quote). Joined to another such statement with ``;`` it
    cannot swallow or alter its neighbour."""
    text = without_terminator(sql)
    if any(mark in text for mark in _UNSAFE):
        return False
    quote = None
    for i, ch in enumerate(text):
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == ";" or text.startswith("/*", i) \
                or any(text.startswith(mark, i) for mark in line_comment):
            return False
    return quote is None


def without_terminator(sql: str) -> str:
    """``sql`` without its one trailing ``;`` (a message joins statements with it)."""
    if sql[-1:] not in _TRAILING:  # the common case, without a copy
        return sql
    text = sql.rstrip()
    return text[:-1] if text.endswith(";") else text


class PathCache:
    """Each SQL text's ``Path``, decided once (templates repeat; the decision is a scan)."""

    LIMIT = 1024

    def __init__(self, decide: Any) -> None:
        self.decide = decide
        self.paths: dict[str, Path] = {}

    def __call__(self, sql: Any) -> Path:
        path = self.paths.get(sql)
        if path is None:
            path = self.decide(sql) if is_dml(sql) else Path.ALONE
            if len(self.paths) >= self.LIMIT:
                self.paths.clear()
            self.paths[sql] = path
        return path

    def demote(self, sql: str) -> None:
        """Never send ``sql`` in a message again (the driver found it cannot prove
        its rowcount there); it still batches inside a transaction."""
        self.paths[sql] = Path.TRANSACTION


class Unit:
    """The calls one worker runs as one, and the path they take together: a
    message if every statement may go in one, else one transaction."""

    __slots__ = ("jobs", "path")

    def __init__(self, first: Job, path: Path) -> None:
        self.jobs = [first]
        self.path = path

    def add(self, job: Job, path: Path) -> None:
        self.jobs.append(job)
        if path is Path.TRANSACTION:
            self.path = path


def gather(worker: Worker, first: Job, path: Path) -> Unit:
    """The unit ``first`` (admitted, its statement on ``path``) heads: it and up to
    ``autobatch - 1`` more
    standalone operations taken from the shared queue, in queue order.

    A queued call that may not join (a non-batchable job, a STOP) ends the
    gathering and waits in ``worker.later``, served next; a batchable call whose
    statement must run alone waits there too, and gathering goes on. Calls whose
    callers gave up are skipped as a worker skips them anyway.
    """
    pool = worker.pool
    queue, later, path_of = pool.queue, worker.later, worker.driver.batch_path
    known, batchable, limit = path_of.paths, type(worker).batchable, pool.autobatch
    unit = Unit(first, path)
    jobs = unit.jobs
    while len(jobs) < limit and not queue.empty():
        try:
            job = queue.get_nowait()
        except Empty:
            break
        if not isinstance(job, tuple) or job[FN] is not batchable:  # STOP, WAKE, other work
            later.append(job)
            break
        path = known.get(job[SQL]) or path_of(job[SQL])
        if path is Path.ALONE:
            later.append(job)
        elif worker.admit(job):
            unit.add(job, path)
    return unit


def run(worker: Worker, unit: Unit) -> None:
    """Run ``unit`` as one and hand each call its own outcome (see the module doc)."""
    driver, jobs = worker.driver, unit.jobs
    worker.busy = True
    worker.current = running = RunningCall(None, _deadline(jobs))
    conn = error = None
    try:
        conn = worker.connection()
        counts = driver.run_unit(conn, [(job[SQL], job[PARAMS]) for job in jobs], unit.path)
    except BaseException as exc:  # everything goes back to the callers
        error = exc
    worker.current = None
    worker.busy = False
    worker.units += 1
    if error is not None and conn is not None \
            and (running.state is CallState.CUT or driver.is_disconnect(error, conn)):
        return _lost(worker, jobs, error)
    worker.check_after_cancel(running)
    if error is None:
        worker.batched += len(jobs)
        worker.completed += len(jobs)
        worker.pool.handback.many([(job[FUTURE], True, count) for job, count in zip(jobs, counts)])
    else:
        _one_by_one(worker, jobs)


def _deadline(unit: list[Job]) -> Optional[float]:
    timeouts = [job[RUN_TIMEOUT] for job in unit if job[RUN_TIMEOUT] is not None]
    return time.monotonic() + min(timeouts) if timeouts else None


def _lost(worker: Worker, unit: list[Job], error: BaseException) -> None:
    """The connection broke under the unit: any of its statements may have run."""
    pool = worker.pool
    worker.disconnect(f"{type(error).__name__} during a unit of {len(unit)} calls")
    worker.completed += len(unit)
    worker.errors += len(unit)
    for job in unit:
        lost = pool.lost_error(
            f"the connection of {pool.name!r} to {worker.driver.target} broke while it ran "
            f"this call in a unit of {len(unit)} batched calls (autobatch) "
            f"({type(error).__name__}: {str(error).strip()[:200]}); the statement may have run",
            may_have_run=True)
        lost.__cause__ = error
        pool.handback(job[FUTURE], False, lost)


def _one_by_one(worker: Worker, unit: list[Job]) -> None:
    """The unit failed and was rolled back: run each call alone, so each caller
    gets its own outcome (the failing one its own error)."""
    worker.unit_fallbacks += 1
    for job in unit:
        worker.execute(job)


__all__ = ["Path", "PathCache", "Unit", "is_dml", "self_contained", "without_terminator", "gather", "run"]
