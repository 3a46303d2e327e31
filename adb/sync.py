"""The blocking front-end: every call waits and returns the value.

For scripts, tests and the REPL, or threads of your own. Any number of caller
threads may share one Database; results go straight to the waiting thread.
"""

from __future__ import annotations

import logging
from queue import Empty, SimpleQueue
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, Tuple,
                    TypeVar)

from .args import SQL, Params
from .call import cancel_given_up
from .core import URL, BaseDatabase, frontend_doc
from .options import EMBEDDED
from .frontend import BlockingFrontEnd, Outcomes
from .handback import Handback, WaiterHandback
from .listener import SyncListener
from .stream import SyncStream
from . import transaction as _transaction
from .savepoint import Savepoint
from .transaction import Transaction as _Tx, TransactionContext

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .options import Options

T = TypeVar("T")
log = logging.getLogger("adb")


#: what a Waiter receives: ``(ok, value)``, a call's result (``ok``) or its exception
Outcome = Tuple[bool, Any]

#: put in a Waiter by its caller when its wait was interrupted (Ctrl-C, any
#: BaseException in the waiting thread): the Waiter then counts as abandoned
#: (``SyncFrontEnd.abandoned``), so a queued call is skipped (``give_up``)
GAVE_UP: Outcome = (False, None)


def give_up(waiter: Waiter) -> None:
    """The wait for ``waiter`` was interrupted (Ctrl-C): mark the call given up, so
    a worker skips it if still queued, and cancel it on the server if a worker runs
    it, from this thread, before the interrupt goes on: a script that dies of its
    Ctrl-C leaves no statement behind to commit after it (``cancel_given_up``)."""
    waiter.put(GAVE_UP)
    try:
        cancel_given_up(waiter)
    except Exception:  # never in place of the interrupt: the watchdog tries again
        log.exception("adb: could not cancel an interrupted call")


class Waiter(SimpleQueue[Outcome]):
    """The blocking front-end's future: a queue that receives the call's one outcome.

    Made, filled and emptied in C (``SimpleQueue``), so a call's future costs no
    Python frame to make, settle or wait for: the waiting thread blocks in ``get``
    with the GIL released until a worker puts the outcome there.
    """

    __slots__ = ("_outcome",)

    def wait(self, timeout: Optional[float]) -> bool:
        """Block until delivered (True) or ``timeout`` seconds passed (False)."""
        try:
            self._outcome = self.get(timeout=timeout)
        except Empty:
            return False
        except BaseException:
            give_up(self)
            raise
        return True

    def result(self) -> Any:
        """The value delivered, or raise the exception delivered (after ``wait``)."""
        ok, value = self._outcome
        if ok:
            return value
        del self._outcome
        try:
            raise value
        finally:  # the error's traceback holds this frame: no cycle back to it
            value = None


class Transaction(_transaction.Transaction):
    """A transaction handle of this front-end: its methods (``adb.transaction.Transaction``)
    give a value."""

    if TYPE_CHECKING:  # what each method returns on this front-end
        def runQuery(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                     timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None) -> list[Any]: ...

        def runQueryRow(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                        timeout: Optional[float] = None,
                        statement_timeout: Optional[float] = None) -> Optional[Any]: ...

        def runQueryValue(self, sql: SQL, params: Params = None, *,
                          timeout: Optional[float] = None,
                          statement_timeout: Optional[float] = None) -> Optional[Any]: ...

        def runOperation(self, sql: SQL, params: Params = None, *,
                         timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> int: ...

        def runMany(self, sql: SQL, seq_of_params: Any, *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> int: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

        def beginSavepoint(self) -> Savepoint: ...

        def releaseSavepoint(self, savepoint: Savepoint) -> None: ...

        def rollbackSavepoint(self, savepoint: Savepoint) -> None: ...

        def commit(self) -> None: ...

        def rollback(self) -> None: ...


class SyncFrontEnd(BlockingFrontEnd[Waiter]):
    """Callers block on a ``Waiter``; results are settled in the worker thread."""

    stream_class = SyncStream
    listener_class = SyncListener
    transaction_class = Transaction
    new_future = Waiter
    # SimpleQueue's C ``get``, unbound: the engine calls it with no lookup a call
    outcomes = Outcomes(Waiter.get, give_up)
    # a Waiter's caller gives it up only when its wait is interrupted (a claim
    # decides a timed-out wait): its queue is empty, ``qsize()`` 0, until its outcome
    # or ``GAVE_UP`` is put there. The C method itself: a worker asks this before
    # every call
    abandoned = staticmethod(Waiter.qsize)  # type: ignore[assignment]

    @staticmethod
    def settle(waiter: Waiter, ok: bool, value: Any) -> None:
        waiter.put((ok, value))

    def handback(self, after: Optional[Callable[[], None]],
                 saturated: Callable[[], bool]) -> Handback:
        return WaiterHandback(self.settle, after)


class Database(BaseDatabase[Waiter]):
    """The blocking front-end's Database: every method waits for its result and returns it.

    Every keyword is an option of ``adb.core.BaseDatabase``, the same on every
    front-end.
    """
    __doc__ = frontend_doc(__doc__)

    def __init__(self, url: URL = EMBEDDED, **options: Unpack[Options]) -> None:
        super().__init__(SyncFrontEnd(), url, **options)

    if TYPE_CHECKING:  # what each method returns on this front-end (written in BaseDatabase)
        def connect(self, *, timeout: Optional[float] = None) -> None: ...

        def runQuery(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                     row_factory: Any = None, timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None,
                     replica: bool = False) -> list[Any]: ...

        def runQueryRow(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                        row_factory: Any = None, timeout: Optional[float] = None,
                        statement_timeout: Optional[float] = None,
                        replica: bool = False) -> Optional[Any]: ...

        def runQueryValue(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                          timeout: Optional[float] = None,
                          statement_timeout: Optional[float] = None,
                          replica: bool = False) -> Optional[Any]: ...

        def runOperation(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                         timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> int: ...

        def runMany(self, sql: SQL, seq_of_params: Iterable[Params], tx: Optional[_Tx] = None,
                    *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> int: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any,
                           **kwargs: Any) -> T: ...

        def beginTransaction(self, *, timeout: Optional[float] = None, replica: bool = False,
                             isolation: Optional[str] = None,
                             read_only: bool = False) -> Transaction: ...

        def transaction(self, *, timeout: Optional[float] = None, replica: bool = False,
                        isolation: Optional[str] = None,
                        read_only: bool = False) -> TransactionContext[Transaction]: ...

        def runTransaction(self, fn: Callable[..., T], *args: Any, retries: Optional[int] = None,
                           isolation: Optional[str] = None, read_only: bool = False,
                           **kwargs: Any) -> T: ...

        def commitTransaction(self, tx: _Tx) -> None: ...

        def rollbackTransaction(self, tx: _Tx) -> None: ...

        def wait_for_room(self) -> None: ...

        def stream(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                   batch: int = 1000, row_factory: Any = None, timeout: Optional[float] = None,
                   idle_timeout: Optional[float] = None, replica: bool = False) -> SyncStream: ...

        def copy_out(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                     batch: int = 1000, timeout: Optional[float] = None,
                     idle_timeout: Optional[float] = None) -> SyncStream: ...

        def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                    tx: Optional[_Tx] = None, *,
                    timeout: Optional[float] = None) -> int: ...

        def listen(self, *channels: str, max_queued: int = 10000) -> SyncListener: ...

        def notify(self, channel: str, payload: str = "",
                   tx: Optional[_Tx] = None) -> None: ...

    # -- what differs in the public API: the caller blocks ----------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection and join the threads. Idempotent.

        With ``timeout`` (seconds, one limit for the whole wait), calls still queued
        when it passes fail with PoolClosed; calls already running are waited for.

        :param timeout: seconds to wait for queued calls (default: all of them).
        :raises InterfaceError: ``timeout`` is not a number of seconds >= 0.
        """
        self._engine.close(timeout)

    def __enter__(self) -> Database:
        """Open the first connection (``connect()``); a Database that cannot is closed
        again, and the error raised."""
        try:
            self.connect()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
