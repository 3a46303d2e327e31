"""Transaction handles: the seed's ``txId``, pinned to one worker until it ends."""

from __future__ import annotations

import enum
import itertools
import weakref
from queue import SimpleQueue
from typing import Any, Callable, Generic, Optional, Protocol, TypeVar

from . import ops, rows
from .args import SQL, Params, check_callable, check_interaction, many, statement
from .dispatch import Queued
from .errors import TransactionError
from .savepoint import Savepoint, SavepointContext, Savepoints
from .session import abandon_job
from .steps import Steps, run_async, run_blocking
from .telemetry import INTERACTION, Telemetry, many_what

_ids = itertools.count(1)


class TxState(enum.Enum):
    BEGINNING = "beginning"
    ACTIVE = "active"
    ENDING = "ending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
    FAILED = "failed"


_USABLE = (TxState.BEGINNING, TxState.ACTIVE)


class TxEngine(Protocol):
    """What a handle uses of the engine its transaction runs on (``adb.engine.Engine``).
    What ``call_in`` and ``finish`` return is the front-end's: a future, a Deferred
    or the value; ``submit_in`` and ``end`` give a future to wait for."""

    name: str
    row_factory: rows.RowFactory

    def call_in(self, tx: Transaction, args: tuple[Any, ...],
                statement_timeout: Optional[float], what: Any) -> Any: ...
    def submit_in(self, tx: Transaction, args: tuple[Any, ...], what: Any) -> Any: ...
    def finish(self, tx: Transaction, commit: bool) -> Any: ...
    def end(self, tx: Transaction, commit: bool) -> Any: ...


class Transaction:
    """An open transaction on one worker's connection.

    Get one from ``beginTransaction()`` or ``async with db.transaction()``; pass it
    as ``tx`` (the third positional argument) to ``runQuery``/``runOperation``/
    ``runMany``, or call the same methods on the handle itself. ``savepoint()``
    nests an all-or-nothing step (``adb.savepoint``). A handle dropped while still
    open is rolled back (with a warning) when it is garbage-collected.
    """

    def __init__(self, engine: TxEngine, read_only: bool = False,
                 isolation: Optional[str] = None) -> None:
        self.engine = engine
        self.read_only = read_only
        self.isolation = isolation
        self.id = next(_ids)
        self.queue: SimpleQueue[Queued] = SimpleQueue()
        self.state = TxState.BEGINNING
        self.worker: Optional[int] = None
        self.savepoints = Savepoints(self.id)
        self.span: Any = None  # its OpenTelemetry span, begun by its worker if traced
        self.abandoned: Optional[str] = None  # why adb rolled it back, if it did
        self._finalizer = weakref.finalize(self, _roll_back_dropped, self.queue, self.id)

    def __repr__(self) -> str:
        return f"<adb transaction {self.id} of {self.engine.name!r} {self.state.value}>"

    @property
    def active(self) -> bool:
        """True until commit or rollback has been asked for."""
        return self.state in _USABLE

    def check(self, engine: object) -> None:
        """Raise TransactionError unless this handle can take more work on ``engine``."""
        if self.engine is not engine:
            raise TransactionError(f"{self!r} belongs to another Database, not "
                                   f"{getattr(engine, 'name', engine)!r}")
        if self.state not in _USABLE:
            if self.abandoned is not None:
                raise TransactionError(f"{self!r} was rolled back {self.abandoned}: nothing "
                                       "of it was committed; begin a new transaction")
            raise TransactionError(f"{self!r} is finished; begin a new transaction")

    # -- its life: ending() on the caller's side, the rest in its worker's thread --------

    def ending(self) -> None:
        """Commit or rollback has been asked for."""
        self.state = TxState.ENDING

    def activate(self, worker_index: int) -> None:
        self.worker = worker_index
        self.state = TxState.ACTIVE

    def ended(self, committed: bool) -> None:
        if self.state is TxState.ENDING or self.state in _USABLE:
            self.state = TxState.COMMITTED if committed else TxState.ROLLED_BACK
        self._finalizer.detach()
        self._end_span("commit" if committed else "rollback")

    def fail(self) -> None:
        self.state = TxState.FAILED
        self._finalizer.detach()
        self._end_span("failed")

    def trace_span(self, span: Any) -> None:
        """Its span, begun with its BEGIN (``adb.telemetry``); its statements' parent."""
        self.span = span

    def _end_span(self, outcome: str) -> None:
        span, self.span = self.span, None
        if span is not None:
            Telemetry.end_transaction(span, outcome)

    def abandon(self, reason: str) -> None:
        """Mark it failed and have its worker roll it back (its Database is closing);
        ``reason`` (``"because ..."``) is what its handle's next use is told."""
        self.abandoned = reason
        self.fail()
        self.queue.put(abandon_job(reason))

    # -- the public API on the handle ----------------------------------------------------

    def runQuery(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                 timeout: Optional[float] = None,
                 statement_timeout: Optional[float] = None) -> Any:
        """Run a query in this transaction and return its rows. ``timeout`` does not
        apply: the transaction's worker is already its own."""
        sql, params = statement(sql, params)
        factory = self.engine.row_factory if row_factory is None else rows.resolve(row_factory)
        return self.engine.call_in(self, (ops.query, sql, params, factory), statement_timeout,
                                   sql)

    def runQueryRow(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                    timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> Any:
        """Run a query in this transaction; its first row, or None."""
        sql, params = statement(sql, params)
        factory = self.engine.row_factory if row_factory is None else rows.resolve(row_factory)
        return self.engine.call_in(self, (ops.query_row, sql, params, factory),
                                   statement_timeout, sql)

    def runQueryValue(self, sql: SQL, params: Params = None, *, timeout: Optional[float] = None,
                      statement_timeout: Optional[float] = None) -> Any:
        """Run a query in this transaction; the first column of its first row, or None."""
        sql, params = statement(sql, params)
        return self.engine.call_in(self, (ops.query_value, sql, params), statement_timeout, sql)

    def runOperation(self, sql: SQL, params: Params = None, *, timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None) -> Any:
        """Run one statement in this transaction; return its rowcount."""
        sql, params = statement(sql, params)
        return self.engine.call_in(self, (ops.operation, sql, params), statement_timeout, sql)

    def runMany(self, sql: SQL, seq_of_params: Any, *, timeout: Optional[float] = None,
                statement_timeout: Optional[float] = None) -> Any:
        """Run ``sql`` once per parameter set in this transaction; the total rowcount."""
        sql, seq = many(sql, seq_of_params)
        return self.engine.call_in(self, (ops.many, sql, seq), statement_timeout,
                                   many_what(sql, len(seq)))

    def runInteraction(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(cursor, *args, **kwargs)`` inside this transaction (no commit of its own)."""
        check_interaction(fn)
        return self.engine.call_in(self, (ops.interaction, fn, args, kwargs), None, INTERACTION)

    def savepoint(self) -> SavepointContext:
        """``async with tx.savepoint():`` (``with`` on adb.sync): the block is one
        all-or-nothing step; if it raises, it is undone and the transaction goes on."""
        self.check(self.engine)
        return SavepointContext(self)

    def beginSavepoint(self) -> Any:
        """Begin a savepoint; gives its ``Savepoint`` (a future, a Deferred, the value)."""
        self.check(self.engine)
        savepoint, statement_ = self.savepoints.begin(self)
        return self._run_savepoint((statement_,), savepoint)

    def releaseSavepoint(self, savepoint: Savepoint) -> Any:
        """Keep what was done since ``savepoint`` began, and end it."""
        self.check(self.engine)
        return self._run_savepoint(self.savepoints.end(savepoint, keep=True), None)

    def rollbackSavepoint(self, savepoint: Savepoint) -> Any:
        """Undo what was done since ``savepoint`` began, and end it; the transaction goes on."""
        self.check(self.engine)
        return self._run_savepoint(self.savepoints.end(savepoint, keep=False), None)

    def _run_savepoint(self, statements: tuple[str, ...], result: Any) -> Any:
        return self.engine.call_in(self, (ops.savepoint, statements, result), None,
                                   "; ".join(statements))

    def savepoint_step(self, statements: tuple[str, ...], result: Any) -> object:
        """A savepoint's statements queued in this transaction: their future
        (``SavepointContext`` waits for it as a step), settled with ``result``."""
        return self.engine.submit_in(self, (ops.savepoint, statements, result),
                                     "; ".join(statements))

    def commit(self) -> Any:
        return self.engine.finish(self, True)

    def rollback(self) -> Any:
        return self.engine.finish(self, False)


def _roll_back_dropped(queue: SimpleQueue[Queued], tx_id: int) -> None:
    """A handle was collected while open: its worker rolls the transaction back."""
    queue.put(abandon_job(f"whose handle {tx_id} was dropped while open"))


#: the handle type a front-end's transaction context gives (its own Transaction subclass)
TX = TypeVar("TX", bound=Transaction, covariant=True)


class TransactionContext(Generic[TX]):
    """``async with db.transaction() as tx`` (or ``with`` on adb.sync).

    Commits when the block ends normally, rolls back when it raises; does
    nothing if the block already committed or rolled back itself. Both forms run
    the same steps (``adb.steps``).

    :param begin: begins the transaction: its handle, and the future of its begin.
    """

    def __init__(self, begin: Callable[[], tuple[TX, Any]]) -> None:
        self._begin = begin
        self.tx: Any = None  # the handle, once the block has begun

    def _enter(self) -> Steps:
        tx, begun = self._begin()
        yield begun
        self.tx = tx
        return tx

    def _exit(self, exc_type: Any) -> Steps:
        tx = self.tx
        if tx.active:
            yield tx.engine.end(tx, exc_type is None)

    async def __aenter__(self) -> TX:
        tx: TX = await run_async(self._enter())
        return tx

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await run_async(self._exit(exc_type))

    def __enter__(self) -> TX:
        tx: TX = run_blocking(self._enter())
        return tx

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        run_blocking(self._exit(exc_type))


__all__ = ["Transaction", "TransactionContext", "TxEngine", "TxState"]
