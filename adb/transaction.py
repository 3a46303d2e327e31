"""Transaction handles: the seed's ``txId``, pinned to one worker until it ends."""

from __future__ import annotations

import enum
import itertools
import weakref
from queue import SimpleQueue
from typing import Any, Optional

from .errors import TransactionError

_ids = itertools.count(1)


class TxState(enum.Enum):
    BEGINNING = "beginning"
    ACTIVE = "active"
    ENDING = "ending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
    FAILED = "failed"


_USABLE = (TxState.BEGINNING, TxState.ACTIVE)


class Transaction:
    """An open transaction on one worker's connection.

    Get one from ``beginTransaction()`` or ``async with db.transaction()``; pass it
    as ``tx`` (the third positional argument) to ``runQuery``/``runOperation``/
    ``runMany``, or call the same methods on the handle itself. A handle dropped
    while still open is rolled back (with a warning) when it is garbage-collected.
    """

    def __init__(self, db: Any) -> None:
        self.db = db
        self.id = next(_ids)
        self.queue: SimpleQueue[Any] = SimpleQueue()
        self.state = TxState.BEGINNING
        self.worker = None
        self._finalizer = weakref.finalize(self, _abandoned, self.queue, self.id)

    def __repr__(self):
        return f"<adb transaction {self.id} of {self.db.name!r} {self.state.value}>"

    @property
    def active(self):
        """True until commit or rollback has been asked for."""
        return self.state in _USABLE

    def check(self, db):
        """Raise TransactionError unless this handle can take more work on ``db``."""
        if self.db is not db:
            raise TransactionError(f"{self!r} belongs to another Database, not {db.name!r}")
        if self.state not in _USABLE:
            raise TransactionError(f"{self!r} is finished; begin a new transaction")

    # called in the worker thread
    def activate(self, worker_index):
        self.worker = worker_index
        self.state = TxState.ACTIVE

    def ended(self, committed):
        if self.state is TxState.ENDING or self.state in _USABLE:
            self.state = TxState.COMMITTED if committed else TxState.ROLLED_BACK
        self._finalizer.detach()

    def fail(self):
        self.state = TxState.FAILED
        self._finalizer.detach()

    # the public API on the handle
    def runQuery(self, sql, params=None, **kw):
        return self.db.runQuery(sql, params, self, **kw)

    def runOperation(self, sql, params=None, **kw):
        return self.db.runOperation(sql, params, self, **kw)

    def runMany(self, sql, seq_of_params, **kw):
        return self.db.runMany(sql, seq_of_params, self, **kw)

    def runInteraction(self, fn, *args, **kwargs):
        """Run ``fn(cursor, *args, **kwargs)`` inside this transaction (no commit of its own)."""
        return self.db._interact_in(self, fn, args, kwargs)

    def commit(self):
        return self.db.commitTransaction(self)

    def rollback(self):
        return self.db.rollbackTransaction(self)


def _abandoned(queue, tx_id):
    from .call import job
    from .pool import Worker
    queue.put(job(None, Worker.abandon, None, None, (f"whose handle {tx_id} was dropped while open",)))


class TransactionContext:
    """``async with db.transaction() as tx`` (or ``with`` on adb.sync).

    Commits when the block ends normally, rolls back when it raises; does
    nothing if the block already committed or rolled back itself.
    """

    def __init__(self, db: Any, timeout: Optional[float] = None) -> None:
        self.db = db
        self.timeout = timeout
        self.tx: Any = None

    async def __aenter__(self) -> Transaction:
        self.tx = await self.db.beginTransaction(timeout=self.timeout)
        return self.tx

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.tx.active:
            if exc_type is None:
                await self.db.commitTransaction(self.tx)
            else:
                await self.db.rollbackTransaction(self.tx)

    def __enter__(self) -> Transaction:
        self.tx = self.db.beginTransaction(timeout=self.timeout)
        return self.tx

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.tx.active:
            if exc_type is None:
                self.db.commitTransaction(self.tx)
            else:
                self.db.rollbackTransaction(self.tx)
