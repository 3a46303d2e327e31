"""The engine's transactions: the open ones of one Database, their begin, their
calls and their end.

``Transactions`` owns the set of open transactions (each a handle the front-end
made, with the ``TxRecord`` the engine and its worker share: ``adb.txrecord``),
the count of ``runTransaction``'s reruns, and every job put on a transaction's
queue: its calls, its end, the rollback of one abandoned by a close or dropped
by its owner. A transaction's begin goes to the shared queue through the calls
part (``Calls.shared``), as any call waiting for a free worker does.
"""

from __future__ import annotations

import threading
import weakref
from queue import SimpleQueue
from typing import Any, Generic, Optional

from ..call import Job
from ..dispatch import Queued
from ..drivers.base import Driver
from ..errors import InterfaceError, TransactionError
from ..frontend import F, FrontEnd
from ..jobs import Abandon, Begin, Finish
from ..op import Op
from ..options import check_statement_timeout
from ..telemetry import BEGIN, COMMIT, ROLLBACK, What
from ..transaction import Transaction, TxEngine, record_of
from ..txrecord import EndedBy, TxRecord
from .calls import Calls


def _roll_back_dropped(queue: SimpleQueue[Queued], tx_id: int) -> None:
    """A transaction's handle was collected while open: its worker rolls it back
    (``TxRecord.watch``; nobody waits for that)."""
    queue.put(Abandon(f"whose handle {tx_id} was dropped while open"))


class Transactions(Generic[F]):
    """The open transactions of one engine (see the module docstring).

    :param owner: the engine each handle is given (what its methods call).
    :param calls: the calls part: the refusal, the limits, the shared queue.
    :param driver: the driver (the isolation levels its server can give).
    """

    def __init__(self, owner: TxEngine, calls: Calls[F], driver: Driver) -> None:
        self._owner = owner
        self._calls = calls
        self._frontend: FrontEnd[F] = calls.frontend
        self._new_future = self._frontend.new_future
        self._returned = self._frontend.returned
        self._driver = driver
        self._open: weakref.WeakSet[Transaction] = weakref.WeakSet()
        #: how many times runTransaction ran a transaction again
        self.retries = 0
        self._retries_lock = threading.Lock()

    # -- begin --------------------------------------------------------------------------

    def begin(self, read_only: bool, timeout: Optional[float],
              isolation: Optional[str] = None) -> Any:
        """Pin a worker and open a transaction on it; what ``beginTransaction`` gives."""
        tx, record = self._new_tx(read_only, isolation)
        return self._calls.shared(Begin, (record, tx), BEGIN, timeout=timeout, tx=record)

    def begin_pending(self, read_only: bool, timeout: Optional[float],
                      isolation: Optional[str] = None) -> tuple[Transaction, F]:
        """A transaction for steps (a stream, a bulk load, a retried transaction): its
        handle, and the future of its begin (already settled on a blocking front-end,
        which waited)."""
        tx, record = self._new_tx(read_only, isolation)
        return tx, self._calls.shared(Begin, (record, tx), BEGIN, timeout=timeout, tx=record,
                                      give=self._frontend.pending)

    def _new_tx(self, read_only: bool, isolation: Optional[str]) -> tuple[Transaction, TxRecord]:
        """A handle for a transaction about to begin, counted as open, and its record;
        InterfaceError for an isolation level the server cannot give."""
        self._calls.check_open()
        if isolation is not None and isolation not in self._driver.isolation_levels:
            raise InterfaceError(f"{self._driver.name} cannot begin a transaction at isolation "
                                 f"level {isolation!r}: adb knows no way to ask its server")
        record = TxRecord(self._calls.name, read_only, isolation)
        tx: Transaction = self._frontend.transaction_class(self._owner, record)
        record.watch(tx, _roll_back_dropped)
        self._open.add(tx)
        return tx, record

    # -- its calls ------------------------------------------------------------------------

    def in_transaction(self, tx: Transaction, op: Op, args: tuple[Any, ...],
                       statement_timeout: Optional[float] = None, what: What = "") -> Any:
        """Run ``op`` inside ``tx``, on the worker it pins; what the caller gets."""
        record = self.usable(tx)
        calls = self._calls
        calls.check_open()
        if statement_timeout is None:
            statement_timeout = calls.statement_timeout
        else:
            statement_timeout = check_statement_timeout(statement_timeout)
        future = self._new_future()
        record.put(op.in_transaction(future, None, statement_timeout,
                                     calls.trace(what, record), op.fn, args))
        return self._returned(future, None, None, calls)

    def step_in(self, tx: Transaction, op: Op, args: tuple[Any, ...], what: What) -> F:
        """``in_transaction``'s job, its future without waiting (steps wait for it)."""
        record = self.usable(tx)
        self._calls.check_open()
        future = self._new_future()
        record.put(self._job(record, op.in_transaction, future, what, op.fn, args))
        return future

    def _job(self, record: TxRecord, kind: type[Job], future: Any, what: What,
             *fields: Any) -> Job:
        """A job of ``kind`` in ``record``'s transaction, with the Database's limits."""
        return kind(future, None, self._calls.statement_timeout,
                    self._calls.trace(what, record), *fields)

    # -- its end -------------------------------------------------------------------------

    def end(self, tx: Transaction, commit: bool) -> F:
        """Commit or roll back ``tx``, returning the future without waiting.

        Once its owner has the end (``forget``), its FINISH is always queued: its
        worker stays pinned until it runs, even while the Database closes, and a
        close leaves it alone. If a close took the end first, the error names it."""
        record = self.usable(tx)
        self._calls.check_open()
        if not self.forget(tx):
            record.check()  # a close rolled it back meanwhile: TransactionError
        future = self._new_future()
        record.queue.put(self._job(record, Finish, future, COMMIT if commit else ROLLBACK,
                                   record, commit))
        return future

    def finish(self, tx: Transaction, commit: bool) -> Any:
        """Commit or roll back ``tx``; what ``commitTransaction``/``rollbackTransaction`` give."""
        return self._returned(self.end(tx, commit), None, None, self._calls)

    def forget(self, tx: Transaction) -> bool:
        """``tx``'s owner ends it: it is no longer an open transaction of this
        Database. False if something else (a close) ended it first."""
        self._open.discard(tx)
        return record_of(tx).ending()

    def roll_back_unowned(self, tx: Transaction) -> None:
        """``tx`` was left open by what began it (a stream dropped open, whose own
        transaction it is): its worker rolls it back; nobody waits for that."""
        if tx.active and self.forget(tx):
            record = record_of(tx)
            record.queue.put(Finish(None, None, None, None, record, False))

    def abandon_all(self, by: EndedBy) -> None:
        """The Database closes (``by``): every open transaction is rolled back by its
        worker, unless its owner took its end first."""
        for tx in list(self._open):
            record = record_of(tx)
            if record.abandon(by):
                record.queue.put(Abandon(f"because {by.value}"))

    def check_ended(self, tx: Transaction) -> None:
        """TransactionError, naming what ended ``tx``, if something other than its
        owner did (a close): a block that did not end it itself must not exit normally."""
        record_of(tx).check_ended_by_owner()

    # -- what the other parts ask --------------------------------------------------------

    def check_tx(self, tx: Transaction) -> None:
        """TransactionError unless ``tx`` can take more work here."""
        self.usable(tx)

    def record(self, tx: Transaction) -> TxRecord:
        """``tx``'s record, whatever its state (a stream's requests go on its queue)."""
        return record_of(tx)

    def usable(self, tx: Transaction) -> TxRecord:
        """``tx``'s record; TransactionError unless it can take more work here."""
        if tx.engine is not self._owner:
            raise TransactionError(f"{tx!r} belongs to another Database, not "
                                   f"{self._calls.name!r}")
        record = record_of(tx)
        record.check()
        return record

    def count_retry(self) -> None:
        """runTransaction ran a transaction again."""
        with self._retries_lock:
            self.retries += 1

    def open_count(self) -> int:
        return len(self._open)


__all__ = ["Transactions"]
