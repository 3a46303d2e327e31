"""A transaction as the engine and its worker see it: its queue, state, worker, span.

The user's handle (``adb.transaction.Transaction``) holds one ``TxRecord`` and
shows only its state; the worker hooks live here, out of the handle's API.

Who writes ``state``: the caller's side moves it from BEGINNING or ACTIVE to
ENDING (the engine's ``Transactions.forget``) or FAILED (``abandon``, as the
engine closes); the worker pinned by it writes ACTIVE, COMMITTED, ROLLED_BACK and
FAILED. A transaction's jobs go on ``queue``, put there by the engine only.

Who *ended* it is decided once: its owner asking for commit or rollback
(``ending``) and a close rolling it back (``abandon``) each take its end
claim, and only the first gets it; ``ended_by`` names the winner, so a
transaction block can tell a transaction it ended itself from one something
else ended under it (``check_ended_by_owner``).
"""

from __future__ import annotations

import enum
import itertools
import threading
from queue import SimpleQueue
from typing import Any, Callable, Optional

from .call import Claim
from .dispatch import Queued
from .dropwatch import Watch, watch
from .errors import TransactionError
from .telemetry import Telemetry

_ids = itertools.count(1)


class TxState(enum.Enum):
    BEGINNING = "beginning"
    ACTIVE = "active"
    ENDING = "ending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
    FAILED = "failed"


USABLE = (TxState.BEGINNING, TxState.ACTIVE)


class EndedBy(enum.Enum):
    """Who ended a transaction (``TxRecord.ended_by``): its owner, through its handle
    or its block, or something else, whose value says what, in the error a block's
    exit or a later call raises."""

    #: its owner asked for commit or rollback (``commit()``, ``rollback()``, a block's exit)
    OWNER = "its owner"
    #: ``close()`` rolled it back
    CLOSE = "the Database was closed"
    #: the interpreter exited with it open (``adb.engine``'s exit handler rolled it back)
    EXIT = "the interpreter exited"


class TxRecord:
    """The engine's and the worker's side of one transaction (see the module doc)."""

    __slots__ = ("id", "name", "read_only", "isolation", "queue", "state", "worker", "span",
                 "ended_by", "_end", "_watch", "_queueing")

    def __init__(self, name: str, read_only: bool, isolation: Optional[str]) -> None:
        self.id = next(_ids)
        self.name = name
        self.read_only = read_only
        self.isolation = isolation
        self.queue: SimpleQueue[Queued] = SimpleQueue()
        self.state = TxState.BEGINNING
        self.worker: Optional[int] = None
        self.span: Any = None  # its OpenTelemetry span, begun by its worker if traced
        #: who ended it (its owner, or what rolled it back under it), None while open
        self.ended_by: Optional[EndedBy] = None
        self._end = Claim()  # taken by whoever ends it first: its owner, or a close
        #: a call's check and its put on ``queue`` are one step against its end (``put``)
        self._queueing = threading.Lock()
        self._watch: Optional[Watch] = None

    def __repr__(self) -> str:
        return f"<adb transaction {self.id} of {self.name!r} {self.state.value}>"

    def watch(self, handle: object, on_drop: Callable[[SimpleQueue[Queued], int], None]) -> None:
        """``on_drop(queue, id)`` (the engine's: it queues the rollback) if ``handle`` is
        collected while the transaction is open."""
        self._watch = watch(handle, on_drop, self.queue, self.id)

    def check(self) -> None:
        """Raise TransactionError unless it can take more work."""
        if self.state not in USABLE:
            if self.ended_by is not None and self.ended_by is not EndedBy.OWNER:
                raise self.ended_under_owner()
            raise TransactionError(f"{self!r} is finished; begin a new transaction")

    def check_ended_by_owner(self) -> None:
        """Raise TransactionError, naming what ended it, unless its owner did (or it
        is still open): a block that did not end it itself must not exit normally."""
        if self.ended_by is not None and self.ended_by is not EndedBy.OWNER:
            raise self.ended_under_owner()

    def ended_under_owner(self) -> TransactionError:
        """The error for a transaction something else than its owner ended."""
        assert self.ended_by is not None
        return TransactionError(f"{self!r} was rolled back because {self.ended_by.value}: "
                                "nothing of it was committed; begin a new transaction")

    # -- its life: ending() and abandon() on the caller's side, the rest in its worker ---

    def put(self, job: Queued) -> None:
        """Queue a call of its owner's: TransactionError unless it can take more work.
        The check and the put are one step against its end (``ending``, ``abandon``,
        in another thread): a call checked before its end is queued ahead of it, so
        its worker runs it; one put behind it would wait on a queue no worker reads
        any more, never answered."""
        with self._queueing:
            self.check()
            self.queue.put(job)

    def ending(self) -> bool:
        """Its owner asks for commit or rollback: True, unless something else ended
        it first (then False, and its state stays what that made it)."""
        with self._queueing:
            if not self._end.take():
                return False
            self.ended_by = EndedBy.OWNER
            self.state = TxState.ENDING
        return True

    def activate(self, worker_index: int) -> None:
        self.worker = worker_index
        self.state = TxState.ACTIVE

    def ended(self, committed: bool) -> None:
        if self.state is TxState.ENDING or self.state in USABLE:
            self.state = TxState.COMMITTED if committed else TxState.ROLLED_BACK
        self._detach()
        self._end_span("commit" if committed else "rollback")

    def fail(self) -> None:
        self.state = TxState.FAILED
        self._detach()
        self._end_span("failed")

    def abandon(self, by: EndedBy) -> bool:
        """Mark it failed (its Database is closing, the interpreter exiting): True, and
        the engine has its worker roll it back, unless its owner ended it first (False:
        its commit or rollback is queued, and runs)."""
        with self._queueing:
            if not self._end.take():
                return False
            self.ended_by = by
            self.fail()
        return True

    def trace_span(self, span: Any) -> None:
        """Its span, begun with its BEGIN (``adb.telemetry``); its statements' parent."""
        self.span = span

    def _detach(self) -> None:
        if self._watch is not None:
            self._watch.detach()

    def _end_span(self, outcome: str) -> None:
        span, self.span = self.span, None
        if span is not None:
            Telemetry.end_transaction(span, outcome)


__all__ = ["EndedBy", "TxRecord", "TxState", "USABLE"]
