"""Transaction handles: the seed's ``txId``, pinned to one worker until it ends."""

from __future__ import annotations

import enum
import itertools
import weakref
from queue import SimpleQueue
from typing import Any, Callable, Optional, Protocol

from .dispatch import Queued
from .errors import TransactionError
from .savepoint import Savepoint, SavepointContext, Savepoints
from .telemetry import Telemetry
from .worker import abandon_job

_ids = itertools.count(1)


class TxState(enum.Enum):
    BEGINNING = "beginning"
    ACTIVE = "active"
    ENDING = "ending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
    FAILED = "failed"


_USABLE = (TxState.BEGINNING, TxState.ACTIVE)


class Owner(Protocol):
    """The Database a transaction belongs to (``adb.core.BaseDatabase``), as the
    handle's own methods use it. What they return is the front-end's: a future,
    a Deferred or the value."""

    name: str

    def runQuery(self, sql: Any, params: Any = None, tx: Optional[Transaction] = None, *,
                 row_factory: Any = None, timeout: Optional[float] = None,
                 statement_timeout: Optional[float] = None) -> Any: ...
    def runOperation(self, sql: Any, params: Any = None, tx: Optional[Transaction] = None, *,
                     timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None) -> Any: ...
    def runMany(self, sql: Any, seq_of_params: Any, tx: Optional[Transaction] = None, *,
                timeout: Optional[float] = None,
                statement_timeout: Optional[float] = None) -> Any: ...
    def commitTransaction(self, tx: Transaction) -> Any: ...
    def rollbackTransaction(self, tx: Transaction) -> Any: ...
    def beginTransaction(self, *, timeout: Optional[float] = None,
                         replica: bool = False) -> Any: ...
    def _interact_in(self, tx: Transaction, fn: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any: ...
    def _savepoint(self, tx: Transaction, statements: tuple[str, ...], result: Any) -> Any: ...


class Transaction:
    """An open transaction on one worker's connection.

    Get one from ``beginTransaction()`` or ``async with db.transaction()``; pass it
    as ``tx`` (the third positional argument) to ``runQuery``/``runOperation``/
    ``runMany``, or call the same methods on the handle itself. ``savepoint()``
    nests an all-or-nothing step (``adb.savepoint``). A handle dropped while still
    open is rolled back (with a warning) when it is garbage-collected.
    """

    def __init__(self, db: Owner) -> None:
        self.db = db
        self.id = next(_ids)
        self.queue: SimpleQueue[Queued] = SimpleQueue()
        self.state = TxState.BEGINNING
        self.worker: Optional[int] = None
        self.savepoints = Savepoints(self.id)
        self.span: Any = None  # its OpenTelemetry span, begun by its worker if traced
        self._finalizer = weakref.finalize(self, _roll_back_dropped, self.queue, self.id)

    def __repr__(self) -> str:
        return f"<adb transaction {self.id} of {self.db.name!r} {self.state.value}>"

    @property
    def active(self) -> bool:
        """True until commit or rollback has been asked for."""
        return self.state in _USABLE

    def check(self, db: Owner) -> None:
        """Raise TransactionError unless this handle can take more work on ``db``."""
        if self.db is not db:
            raise TransactionError(f"{self!r} belongs to another Database, not {db.name!r}")
        if self.state not in _USABLE:
            raise TransactionError(f"{self!r} is finished; begin a new transaction")

    # called in the worker thread
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

    def _end_span(self, outcome: str) -> None:
        span, self.span = self.span, None
        if span is not None:
            Telemetry.end_transaction(span, outcome)

    def abandon(self, reason: str) -> None:
        """Mark it failed and have its worker roll it back (its Database is closing)."""
        self.fail()
        self.queue.put(abandon_job(reason))

    # the public API on the handle
    def runQuery(self, sql: Any, params: Any = None, **kw: Any) -> Any:
        return self.db.runQuery(sql, params, self, **kw)

    def runOperation(self, sql: Any, params: Any = None, **kw: Any) -> Any:
        return self.db.runOperation(sql, params, self, **kw)

    def runMany(self, sql: Any, seq_of_params: Any, **kw: Any) -> Any:
        return self.db.runMany(sql, seq_of_params, self, **kw)

    def runInteraction(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(cursor, *args, **kwargs)`` inside this transaction (no commit of its own)."""
        return self.db._interact_in(self, fn, args, kwargs)

    def savepoint(self) -> SavepointContext:
        """``async with tx.savepoint():`` (``with`` on adb.sync): the block is one
        all-or-nothing step; if it raises, it is undone and the transaction goes on."""
        self.check(self.db)
        return SavepointContext(self, self.savepoints)

    def beginSavepoint(self) -> Any:
        """Begin a savepoint; gives its ``Savepoint`` (a future, a Deferred, the value)."""
        self.check(self.db)
        savepoint, statement = self.savepoints.begin(self)
        return self.db._savepoint(self, (statement,), savepoint)

    def releaseSavepoint(self, savepoint: Savepoint) -> Any:
        """Keep what was done since ``savepoint`` began, and end it."""
        self.check(self.db)
        return self.db._savepoint(self, self.savepoints.end(savepoint, keep=True), None)

    def rollbackSavepoint(self, savepoint: Savepoint) -> Any:
        """Undo what was done since ``savepoint`` began, and end it; the transaction goes on."""
        self.check(self.db)
        return self.db._savepoint(self, self.savepoints.end(savepoint, keep=False), None)

    def commit(self) -> Any:
        return self.db.commitTransaction(self)

    def rollback(self) -> Any:
        return self.db.rollbackTransaction(self)


def _roll_back_dropped(queue: SimpleQueue[Queued], tx_id: int) -> None:
    """A handle was collected while open: its worker rolls the transaction back."""
    queue.put(abandon_job(f"whose handle {tx_id} was dropped while open"))


class TransactionContext:
    """``async with db.transaction() as tx`` (or ``with`` on adb.sync).

    Commits when the block ends normally, rolls back when it raises; does
    nothing if the block already committed or rolled back itself.
    """

    def __init__(self, db: Owner, timeout: Optional[float] = None,
                 replica: bool = False) -> None:
        self.db = db
        self.timeout = timeout
        self.replica = replica
        self.tx: Any = None  # the handle, once the block has begun

    async def __aenter__(self) -> Transaction:
        tx: Transaction = await self.db.beginTransaction(timeout=self.timeout,
                                                         replica=self.replica)
        self.tx = tx
        return tx

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.tx.active:
            if exc_type is None:
                await self.db.commitTransaction(self.tx)
            else:
                await self.db.rollbackTransaction(self.tx)

    def __enter__(self) -> Transaction:
        tx: Transaction = self.db.beginTransaction(timeout=self.timeout, replica=self.replica)
        self.tx = tx
        return tx

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.tx.active:
            if exc_type is None:
                self.db.commitTransaction(self.tx)
            else:
                self.db.rollbackTransaction(self.tx)
