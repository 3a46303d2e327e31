"""The blocking front-end: every call waits and returns the value.

For scripts, tests and the REPL, or threads of your own. Any number of caller
threads may share one Database; results go straight to the waiting thread.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, TypeVar

from .core import SQL, BaseDatabase, Params, frontend_doc
from .listener import SyncListener
from .stream import SyncStream
from .transaction import Transaction

T = TypeVar("T")


class Waiter:
    """The blocking front-end's future: a lock released when the result arrives."""

    __slots__ = ("_lock", "ok", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.ok = False
        self.value: Any = None

    def deliver(self, ok: bool, value: Any) -> None:
        """Set the outcome and wake the waiting thread (any thread, once)."""
        self.ok = ok
        self.value = value
        self._lock.release()

    def wait(self, timeout: Optional[float]) -> bool:
        """Block until delivered (True) or ``timeout`` seconds passed (False)."""
        if timeout is None:
            return self._lock.acquire()
        return self._lock.acquire(timeout=timeout)

    def result(self) -> Any:
        """The value delivered, or raise the exception delivered."""
        if self.ok:
            return self.value
        raise self.value


class Database(BaseDatabase[Waiter]):
    """The blocking front-end's Database: every method waits for its result and returns it.

    Every keyword is an option of ``adb.core.BaseDatabase``, the same on every
    front-end.
    """
    __doc__ = frontend_doc(__doc__)

    _blocking = True

    if TYPE_CHECKING:  # what each method returns on this front-end (written in BaseDatabase)
        def runQuery(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                     *, row_factory: Any = None, timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None, replica: bool = False) -> list[Any]: ...

        def runOperation(self, sql: SQL, params: Params = None,
                         tx: Optional[Transaction] = None, *, timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> int: ...

        def runMany(self, sql: SQL, seq_of_params: Iterable[Params],
                    tx: Optional[Transaction] = None, *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> int: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any,
                           **kwargs: Any) -> T: ...

        def beginTransaction(self, *, timeout: Optional[float] = None,
                             replica: bool = False) -> Transaction: ...

        def runTransaction(self, fn: Callable[..., T], *args: Any,
                           retries: Optional[int] = None, **kwargs: Any) -> T: ...

        def commitTransaction(self, tx: Transaction) -> None: ...

        def rollbackTransaction(self, tx: Transaction) -> None: ...

        def wait_for_room(self) -> None: ...

        def stream(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                   *, batch: int = 1000, row_factory: Any = None,
                   timeout: Optional[float] = None,
                   idle_timeout: Optional[float] = None, replica: bool = False) -> SyncStream: ...

        def copy_out(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                     *, batch: int = 1000, timeout: Optional[float] = None,
                     idle_timeout: Optional[float] = None) -> SyncStream: ...

        def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                    tx: Optional[Transaction] = None, *,
                    timeout: Optional[float] = None) -> int: ...

        def listen(self, *channels: str, max_queued: int = 10000) -> SyncListener: ...

        def notify(self, channel: str, payload: str = "",
                   tx: Optional[Transaction] = None) -> None: ...

    # -- the front-end interface: no loop thread, so no _scheduler ---------------

    _new_future = Waiter

    @staticmethod
    def _settle(waiter: Waiter, ok: bool, value: Any) -> None:
        waiter.deliver(ok, value)

    # -- what differs in the public API: the caller blocks ----------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection and join the threads. Idempotent.

        With ``timeout`` (seconds, one limit for the whole wait), calls still queued
        when it passes fail with PoolClosed; calls already running are waited for.
        """
        self._close_blocking(timeout)

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
