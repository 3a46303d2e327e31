"""A transaction as the engine and its worker see it: its queue, state, worker, span.

The user's handle (``adb.transaction.Transaction``) holds one ``TxRecord`` and
shows only its state; the worker hooks live here, out of the handle's API.

Who writes ``state``: the caller's side moves it from BEGINNING or ACTIVE to
ENDING (``Engine.finish``) or FAILED (``Engine`` closing: ``abandon``); the
worker pinned by it writes ACTIVE, COMMITTED, ROLLED_BACK and FAILED. A
transaction's jobs go on ``queue``, put there by the engine only.
"""

from __future__ import annotations

import enum
import itertools
import weakref
from queue import SimpleQueue
from typing import Any, Optional

from .dispatch import Queued
from .errors import TransactionError
from .jobs import abandon_job
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


class TxRecord:
    """The engine's and the worker's side of one transaction (see the module doc)."""

    __slots__ = ("id", "name", "read_only", "isolation", "queue", "state", "worker", "span",
                 "why_failed", "_finalizer")

    def __init__(self, name: str, read_only: bool, isolation: Optional[str]) -> None:
        self.id = next(_ids)
        self.name = name
        self.read_only = read_only
        self.isolation = isolation
        self.queue: SimpleQueue[Queued] = SimpleQueue()
        self.state = TxState.BEGINNING
        self.worker: Optional[int] = None
        self.span: Any = None  # its OpenTelemetry span, begun by its worker if traced
        #: why it failed, when the reason is not its own (the Database closed), or None
        self.why_failed: Optional[str] = None
        self._finalizer: Optional[weakref.finalize[Any, Any]] = None

    def __repr__(self) -> str:
        return f"<adb transaction {self.id} of {self.name!r} {self.state.value}>"

    def watch(self, handle: object) -> None:
        """Roll the transaction back if ``handle`` is collected while it is open."""
        self._finalizer = weakref.finalize(handle, _roll_back_dropped, self.queue, self.id)

    def check(self) -> None:
        """Raise TransactionError unless it can take more work."""
        if self.state not in USABLE:
            if self.why_failed is not None:
                raise TransactionError(f"{self!r} was {self.why_failed}: nothing of it was "
                                       "committed; begin a new transaction")
            raise TransactionError(f"{self!r} is finished; begin a new transaction")

    # -- its life: ending() and abandon() on the caller's side, the rest in its worker ---

    def ending(self) -> None:
        """Commit or rollback has been asked for."""
        self.state = TxState.ENDING

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

    def abandon(self, reason: str) -> None:
        """Mark it failed and have its worker roll it back (its Database is closing)."""
        self.why_failed = f"rolled back {reason}"
        self.fail()
        self.queue.put(abandon_job(reason))

    def trace_span(self, span: Any) -> None:
        """Its span, begun with its BEGIN (``adb.telemetry``); its statements' parent."""
        self.span = span

    def _detach(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()

    def _end_span(self, outcome: str) -> None:
        span, self.span = self.span, None
        if span is not None:
            Telemetry.end_transaction(span, outcome)


def _roll_back_dropped(queue: SimpleQueue[Queued], tx_id: int) -> None:
    """A handle was collected while open: its worker rolls the transaction back."""
    queue.put(abandon_job(f"whose handle {tx_id} was dropped while open"))


__all__ = ["TxRecord", "TxState", "USABLE"]
