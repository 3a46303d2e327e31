"""The Twisted front-end: Deferreds, and a drop-in for ``twisted.enterprise.adbapi``.

``ConnectionPool`` takes adbapi's constructor and methods, so switching is one
import; ``Database`` is adb's own API (the same as every other front-end)
returning Deferreds. Results reach the reactor thread in batches: one
``reactor.callFromThread`` per batch, not per result. Works on the default
reactor and on the asyncio reactor (sharing a loop with Tornado).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, TypeVar

from twisted.enterprise import adbapi
from twisted.internet import defer
from twisted.python import failure, log

from . import errors, listener, stream
from .core import SQL, BaseDatabase, Params, PoolOptions, frontend_doc
from .drivers.base import Connection, Cursor, Driver
from .listen import Item
from .pool import Pool
from .transaction import Transaction
from .target import Target
from .url import target_for


T = TypeVar("T")


class ConnectionLost(errors.ConnectionLost, adbapi.ConnectionLost):
    """The connection broke under a call (catchable as adbapi's ConnectionLost too)."""


class Stream(stream.Stream):
    """A stream for Twisted code: ``async for row in stream`` in a coroutine run by
    ``Deferred.fromCoroutine``/``ensureDeferred``; for callback and
    ``inlineCallbacks`` code, ``fetch()`` returns a Deferred of the next batch
    ([] at the end) and ``close()`` a Deferred fired once it is closed."""

    def fetch(self) -> defer.Deferred[list[Any]]:  # type: ignore[override]
        return defer.Deferred.fromCoroutine(super().fetch())

    def close(self) -> defer.Deferred[None]:
        return defer.Deferred.fromCoroutine(self.aclose())


class Listener(listener.Listener):
    """A listener for Twisted code: ``async for item in listener`` in a coroutine run
    by ``Deferred.fromCoroutine``/``ensureDeferred``; for callback and
    ``inlineCallbacks`` code, ``ready()`` returns a Deferred fired with the listener
    once its channels are LISTENed, ``get()`` a Deferred of the next item (None once
    closed and empty), and ``close()`` a Deferred fired once it is closed.
    ``aclose()`` stays a coroutine (``async with``)."""

    def ready(self) -> defer.Deferred[Listener]:  # type: ignore[override]
        return defer.Deferred.fromCoroutine(self._ready_listener())

    async def _ready_listener(self) -> Listener:
        await self._wait_ready()
        return self

    def get(self) -> defer.Deferred[Optional[Item]]:
        """A Deferred of the next item; None once the listener is closed and empty."""
        return defer.Deferred.fromCoroutine(self._next_or_none())

    async def _next_or_none(self) -> Optional[Item]:
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            return None

    def close(self) -> defer.Deferred[None]:
        return defer.Deferred.fromCoroutine(self.aclose())


class Database(BaseDatabase["defer.Deferred[Any]"]):
    """adb's own API for Twisted: every method returns a ``Deferred``.

    Cancelling a Deferred whose call has not started removes it from the queue.

    :param reactor: the reactor to deliver results on (default: the global one).

    Every other keyword is an option of ``adb.core.BaseDatabase``, the same on
    every front-end.
    """
    __doc__ = frontend_doc(__doc__)

    _lost_error = ConnectionLost

    def __init__(self, url: Any = None, *, reactor: Any = None, **kwargs: Any) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.reactor = reactor
        self._scheduler: _ReactorScheduler = _ReactorScheduler(reactor)
        super().__init__(url, **kwargs)

    if TYPE_CHECKING:  # what each method returns on this front-end (written in BaseDatabase)
        def runQuery(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                     *, row_factory: Any = None, timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None, replica: bool = False) -> defer.Deferred[list[Any]]: ...

        def runOperation(self, sql: SQL, params: Params = None,
                         tx: Optional[Transaction] = None, *, timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> defer.Deferred[int]: ...

        def runMany(self, sql: SQL, seq_of_params: Iterable[Params],
                    tx: Optional[Transaction] = None, *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> defer.Deferred[int]: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any,
                           **kwargs: Any) -> defer.Deferred[T]: ...

        def beginTransaction(self, *, timeout: Optional[float] = None,
                             replica: bool = False) -> defer.Deferred[Transaction]: ...

        def runTransaction(self, fn: Callable[..., Any], *args: Any,
                           retries: Optional[int] = None, **kwargs: Any) -> defer.Deferred[Any]: ...

        def commitTransaction(self, tx: Transaction) -> defer.Deferred[None]: ...

        def rollbackTransaction(self, tx: Transaction) -> defer.Deferred[None]: ...

        def wait_for_room(self) -> defer.Deferred[None]: ...

        def stream(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                   *, batch: int = 1000, row_factory: Any = None,
                   timeout: Optional[float] = None,
                   idle_timeout: Optional[float] = None, replica: bool = False) -> Stream: ...

        def copy_out(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                     *, batch: int = 1000, timeout: Optional[float] = None,
                     idle_timeout: Optional[float] = None) -> Stream: ...

        def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                    tx: Optional[Transaction] = None, *,
                    timeout: Optional[float] = None) -> defer.Deferred[int]: ...

        def listen(self, *channels: str, max_queued: int = 10000) -> Listener: ...

        def notify(self, channel: str, payload: str = "",
                   tx: Optional[Transaction] = None) -> defer.Deferred[None]: ...

    # -- the front-end interface ------------------------------------------------------

    _new_future = defer.Deferred

    @staticmethod
    def _settle(deferred: defer.Deferred[Any], ok: bool, value: Any) -> None:
        if not deferred.called:  # cancelled or timed out meanwhile
            if ok:
                deferred.callback(value)
            else:
                deferred.errback(failure.Failure(  # type: ignore[no-untyped-call,unused-ignore]
                    value, type(value), value.__traceback__))

    @staticmethod
    def _abandoned(deferred: defer.Deferred[Any]) -> bool:
        return deferred.called

    @staticmethod
    def _discard(deferred: defer.Deferred[Any]) -> None:
        deferred.addErrback(lambda _: None)  # its outcome is nobody's: never "unhandled"
        deferred.cancel()

    def _sibling_options(self) -> dict[str, Any]:
        return {"reactor": self.reactor}

    def _spawn(self, coroutine: Any) -> defer.Deferred[Any]:
        return defer.Deferred.fromCoroutine(coroutine)

    _stream_class = Stream
    _listener_class = Listener

    # -- what differs in the public API: a Deferred for the close ----------------------

    def close(self, timeout: Optional[float] = None) -> defer.Deferred[None]:
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection; the Deferred fires once the threads have exited.
        Idempotent. With ``timeout``, calls still queued then fail with PoolClosed."""
        return self._close(timeout)


class _ReactorScheduler:
    """Schedules on the loop thread of one Database: its reactor."""

    __slots__ = ("reactor",)

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> Any:
        return self.reactor.callFromThread(fn)

    def call_later(self, seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
        return self.reactor.callLater(seconds, fn, *args)


class _Connection:
    """What ``runWithConnection`` passes: the DB-API connection, with ``close()``
    ignored (closing a pooled connection would strand its worker, as in adbapi)."""

    def __init__(self, conn: Any) -> None:
        self._connection = conn

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def _with_connection(cursor: Any, driver: Any, func: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    conn = cursor.connection  # PEP 249's optional extension; all three drivers have it
    cursor.close()
    return func(_Connection(conn), *args, **kwargs)


# adbapi's runQuery/runOperation take ``(*args, **kw)`` for ``cursor.execute``; the
# queued job carries them flat, ``kw`` only when given: 100,000 calls in flight then
# hold no empty dict and no extra tuple each (~110 bytes a call).

def _execute(cursor: Any, kwargs: Optional[dict[str, Any]], args: tuple[Any, ...]) -> None:
    if kwargs:
        cursor.execute(*args, **kwargs)
    else:
        cursor.execute(*args)


def _query(cursor: Any, driver: Any, kwargs: Optional[dict[str, Any]], *args: Any) -> Any:
    _execute(cursor, kwargs, args)
    return driver.fetchall(cursor)


def _operation(cursor: Any, driver: Any, kwargs: Optional[dict[str, Any]], *args: Any) -> None:
    _execute(cursor, kwargs, args)


class ConnectionPool:
    """A drop-in for ``twisted.enterprise.adbapi.ConnectionPool`` on adb's core.

    ``ConnectionPool(dbapiName, *connargs, **connkw)`` with ``cp_min``, ``cp_max``,
    ``cp_name``, ``cp_noisy``, ``cp_openfun``, ``cp_reconnect``, ``cp_good_sql``,
    ``cp_reactor``, as adbapi documents them. ``cp_max`` workers are started by
    ``start()`` (called when the reactor runs), ``cp_min`` of them connect at once.
    Plus adb's ``runMany``, ``beginTransaction``/``commitTransaction``/
    ``rollbackTransaction`` and ``stats()``.
    """

    CP_ARGS = "min max name noisy openfun reconnect good_sql autobatch".split()
    min = 3
    max = 5
    name: Optional[str] = None
    noisy = False
    openfun: Optional[Callable[[Any], None]] = None
    reconnect = False
    good_sql: Optional[str] = "select 1"
    autobatch: Optional[int] = None  # adb's own: cp_autobatch=64 (see Database(autobatch=))
    running = False
    shutdownID: Any = None
    startID: Any = None

    def __init__(self, dbapiName: str, *connargs: Any, **connkw: Any) -> None:
        reactor = connkw.pop("cp_reactor", None)
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        for arg in self.CP_ARGS:
            if f"cp_{arg}" in connkw:
                setattr(self, arg, connkw.pop(f"cp_{arg}"))
        self.min = min(self.min, self.max)  # as adbapi: cp_max wins over a larger cp_min
        self.max = max(self.min, self.max)
        self.dbapiName = dbapiName
        self.connargs = connargs
        self.connkw = connkw
        if not isinstance(dbapiName, str) or not dbapiName:
            raise errors.InterfaceError(
                f"dbapiName must be a DB-API module name such as 'psycopg2', not {dbapiName!r}")
        self._db = _PoolDatabase(self, target_for(dbapiName, connkw, connargs))
        self.dbapi = self._db.dbapi
        self.startID = reactor.callWhenRunning(self._start)

    def _on_connect(self, conn: Any) -> None:
        if self.noisy:
            log.msg(f"adbapi connecting: {self.dbapiName}")
        if self.openfun is not None:
            self.openfun(conn)

    @property
    def connections(self) -> dict[int, Connection]:
        """Worker thread id -> its DB-API connection (adbapi exposes the same)."""
        return self._db._connections

    @property
    def threadpool(self) -> Pool:
        """The workers (adb's own; adbapi has a ThreadPool here)."""
        return self._db._workers

    def _start(self) -> None:
        self.startID = None
        return self.start()

    def start(self) -> None:
        """Start the workers; the reactor calls this when it starts running."""
        if not self.running:
            self._db._start_workers()
            self.shutdownID = self._reactor.addSystemEventTrigger(
                "during", "shutdown", self.finalClose)
            self.running = True

    def runInteraction(self, interaction: Callable[..., T], *args: Any,
                       **kw: Any) -> defer.Deferred[T]:
        """``interaction(cursor, *args, **kw)`` in a worker, in one transaction:
        committed if it returns, rolled back if it raises. Returns a Deferred."""
        return self._db.runInteraction(interaction, *args, **kw)

    def runWithConnection(self, func: Callable[..., T], *args: Any,
                          **kw: Any) -> defer.Deferred[T]:
        """``func(connection, *args, **kw)`` in a worker; committed if it returns,
        rolled back if it raises. ``connection.close()`` is ignored."""
        return self._db._run_op(_with_connection, (func, args, kw), atomic=True)

    def runQuery(self, *args: Any, **kw: Any) -> defer.Deferred[list[Any]]:
        """``cursor.execute(*args, **kw)`` then ``fetchall()``; a Deferred of the rows.

        One statement is its own transaction (autocommitted by the driver), which
        is what adbapi's begin/execute/commit amounts to, minus two round trips."""
        return self._db._run_op(_query, (kw or None, *args), atomic=False)

    def runOperation(self, *args: Any, **kw: Any) -> defer.Deferred[None]:
        """``cursor.execute(*args, **kw)``, committed; a Deferred of None. With
        ``cp_autobatch`` a ``(sql[, params])`` call may join a unit (group commit)."""
        if self.autobatch and not kw and 1 <= len(args) <= 2:
            return self._db.runOperation(*args).addCallback(_none)
        return self._db._run_op(_operation, (kw or None, *args), atomic=False)

    def runMany(self, sql: SQL, seq_of_params: Iterable[Params],
                tx: Optional[Transaction] = None) -> defer.Deferred[int]:
        return self._db.runMany(sql, seq_of_params, tx)

    def beginTransaction(self, *, timeout: Optional[float] = None) -> defer.Deferred[Transaction]:
        return self._db.beginTransaction(timeout=timeout)

    def stream(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
               **kw: Any) -> Stream:
        """adb's extension: the rows of ``sql`` batch by batch (``Database.stream``)."""
        return self._db.stream(sql, params, tx, **kw)

    def copy_out(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                 **kw: Any) -> Stream:
        """adb's extension: text-format lines of ``sql``'s rows (``Database.copy_out``)."""
        return self._db.copy_out(sql, params, tx, **kw)

    def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                tx: Optional[Transaction] = None, **kw: Any) -> defer.Deferred[int]:
        """adb's extension: a bulk load in one transaction (``Database.copy_in``)."""
        return self._db.copy_in(table, rows, columns, tx, **kw)

    def commitTransaction(self, tx: Transaction) -> defer.Deferred[None]:
        return self._db.commitTransaction(tx)

    def rollbackTransaction(self, tx: Transaction) -> defer.Deferred[None]:
        return self._db.rollbackTransaction(tx)

    def stats(self) -> dict[str, Any]:
        return self._db.stats()

    def close(self) -> None:
        """Close every connection and stop the workers (blocking, as adbapi's)."""
        if self.shutdownID:
            self._reactor.removeSystemEventTrigger(self.shutdownID)
            self.shutdownID = None
        if self.startID:
            self._reactor.removeSystemEventTrigger(self.startID)
            self.startID = None
        self.finalClose()

    def finalClose(self) -> None:
        """Stop the workers after the queued calls, close their connections, join."""
        self.shutdownID = None
        self.running = False
        self._db._close_blocking()

    def connect(self) -> Any:
        """A new DB-API connection for the calling thread (blocking; adbapi's
        escape hatch for code running in threads of its own)."""
        conn = self._db._connect_direct()
        self.connections[threading.get_ident()] = conn
        return conn

    def disconnect(self, conn: Any) -> None:
        """Close a connection that ``connect()`` gave this thread."""
        if self.connections.get(threading.get_ident()) is not conn:
            raise errors.InterfaceError(
                "disconnect(): that connection was not opened by connect() in this thread")
        del self.connections[threading.get_ident()]
        if self.noisy:
            log.msg(f"adbapi closing: {self.dbapiName}")
        self._db._disconnect_direct(conn)

    def __repr__(self) -> str:
        return f"<adb.twisted.ConnectionPool {self._db!r}>"


def _none(_: Any) -> None:
    return None


class _PoolDatabase(Database):
    """The Database under a ConnectionPool: adbapi's sizes, hooks and reconnect."""

    def __init__(self, owner: ConnectionPool, target: Target) -> None:
        options: PoolOptions = {"warm": owner.min, "start": False, "fit_size": True,
                                "check_sql": owner.good_sql if owner.reconnect else None}
        super().__init__(target, reactor=owner._reactor, pool_size=owner.max,
                         name=owner.name, on_connect=owner._on_connect,
                         autobatch=owner.autobatch, _pool_options=options)
