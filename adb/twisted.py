"""The Twisted front-end: Deferreds, and a drop-in for ``twisted.enterprise.adbapi``.

``ConnectionPool`` takes adbapi's constructor and methods, so switching is one
import; ``Database`` is adb's own API (the same as every other front-end)
returning Deferreds. Results reach the reactor thread in batches: one
``reactor.callFromThread`` per batch, not per result. Works on the default
reactor and on the asyncio reactor (sharing a loop with Tornado).
"""

from __future__ import annotations

import importlib
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, TypeVar

try:
    from twisted.enterprise import adbapi
    from twisted.internet import defer, threads
    from twisted.python import failure, log
except ModuleNotFoundError as exc:  # pragma: no cover - exercised where Twisted is absent
    raise ModuleNotFoundError(
        "adb.twisted needs Twisted: pip install 'adb-async[twisted]'", name=exc.name) from exc

from . import drivers, errors, listener, stream
from .args import SQL, Params
from .core import URL, BaseDatabase, frontend_doc
from .drivers.base import Connection
from .dropin import ThreadPoolView, as_driver_error, check_sizes
from .frontend import LoopFrontEnd, Waiting, WorkerSession
from .listen import Item
from .options import EMBEDDED, PoolOptions
from .pool import Pool
from .target import Target
from .telemetry import Operation
from . import transaction as _transaction
from .savepoint import Savepoint
from .transaction import Transaction as _Tx, TransactionContext
from .url import target_for

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .options import Options


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


class Transaction(_transaction.Transaction):
    """A transaction handle of this front-end: its methods (``adb.transaction.Transaction``)
    give a Deferred."""

    if TYPE_CHECKING:  # what each method returns on this front-end
        def runQuery(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                     timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None) -> defer.Deferred[list[Any]]: ...

        def runQueryRow(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                        timeout: Optional[float] = None,
                        statement_timeout: Optional[float] = None) -> defer.Deferred[Optional[Any]]: ...

        def runQueryValue(self, sql: SQL, params: Params = None, *,
                          timeout: Optional[float] = None,
                          statement_timeout: Optional[float] = None) -> defer.Deferred[Optional[Any]]: ...

        def runOperation(self, sql: SQL, params: Params = None, *,
                         timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> defer.Deferred[int]: ...

        def runMany(self, sql: SQL, seq_of_params: Any, *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> defer.Deferred[int]: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]: ...

        def beginSavepoint(self) -> defer.Deferred[Savepoint]: ...

        def releaseSavepoint(self, savepoint: Savepoint) -> defer.Deferred[None]: ...

        def rollbackSavepoint(self, savepoint: Savepoint) -> defer.Deferred[None]: ...

        def commit(self) -> defer.Deferred[None]: ...

        def rollback(self) -> defer.Deferred[None]: ...


class TwistedFrontEnd(LoopFrontEnd["defer.Deferred[Any]"]):
    """Deferreds, fired on the reactor thread: one ``callFromThread`` per batch of results."""

    waiting = Waiting.DEFERS
    lost_error = ConnectionLost
    stream_class = Stream
    listener_class = Listener
    transaction_class = Transaction
    new_future = defer.Deferred

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    @staticmethod
    def settle(deferred: defer.Deferred[Any], ok: bool, value: Any) -> None:
        if not deferred.called:  # cancelled or timed out meanwhile
            if ok:
                deferred.callback(value)
            else:
                deferred.errback(failure.Failure(  # type: ignore[no-untyped-call,unused-ignore]
                    value, type(value), value.__traceback__))

    @staticmethod
    def abandoned(deferred: defer.Deferred[Any]) -> bool:
        return deferred.called

    @staticmethod
    def discard(deferred: defer.Deferred[Any]) -> None:
        deferred.addErrback(lambda _: None)  # its outcome is nobody's: never "unhandled"
        deferred.cancel()

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> Any:
        return self.reactor.callFromThread(fn)

    def call_later(self, seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
        return self.reactor.callLater(seconds, fn, *args)

    def spawn(self, coroutine: Any) -> defer.Deferred[Any]:
        return defer.Deferred.fromCoroutine(coroutine)


class Database(BaseDatabase["defer.Deferred[Any]"]):
    """adb's own API for Twisted: every method returns a ``Deferred``.

    Cancelling a Deferred whose call has not started removes it from the queue.

    Every other keyword is an option of ``adb.core.BaseDatabase``, the same on
    every front-end.

    :param reactor: the reactor to deliver results on (default: the global one).
    """
    __doc__ = frontend_doc(__doc__)

    _frontend: TwistedFrontEnd
    _frontend_class = TwistedFrontEnd

    def __init__(self, url: URL = EMBEDDED, *, reactor: Any = None,
                 **options: Unpack[Options]) -> None:
        if reactor is None:
            from twisted.internet import reactor
        super().__init__(self._frontend_class(reactor), url, **options)

    @property
    def reactor(self) -> Any:
        """The reactor results are delivered on."""
        return self._frontend.reactor

    if TYPE_CHECKING:  # what each method returns on this front-end (written in BaseDatabase)
        def connect(self, *, timeout: Optional[float] = None) -> defer.Deferred[None]: ...

        def runQuery(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                     row_factory: Any = None, timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None,
                     replica: bool = False) -> defer.Deferred[list[Any]]: ...

        def runQueryRow(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                        row_factory: Any = None, timeout: Optional[float] = None,
                        statement_timeout: Optional[float] = None,
                        replica: bool = False) -> defer.Deferred[Optional[Any]]: ...

        def runQueryValue(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                          timeout: Optional[float] = None,
                          statement_timeout: Optional[float] = None,
                          replica: bool = False) -> defer.Deferred[Optional[Any]]: ...

        def runOperation(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                         timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> defer.Deferred[int]: ...

        def runMany(self, sql: SQL, seq_of_params: Iterable[Params], tx: Optional[_Tx] = None,
                    *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> defer.Deferred[int]: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any,
                           **kwargs: Any) -> defer.Deferred[T]: ...

        def beginTransaction(self, *, timeout: Optional[float] = None, replica: bool = False,
                             isolation: Optional[str] = None,
                             read_only: bool = False) -> defer.Deferred[Transaction]: ...

        def transaction(self, *, timeout: Optional[float] = None, replica: bool = False,
                        isolation: Optional[str] = None,
                        read_only: bool = False) -> TransactionContext[Transaction]: ...

        def runTransaction(self, fn: Callable[..., Any], *args: Any, retries: Optional[int] = None,
                           isolation: Optional[str] = None, read_only: bool = False,
                           **kwargs: Any) -> defer.Deferred[Any]: ...

        def commitTransaction(self, tx: _Tx) -> defer.Deferred[None]: ...

        def rollbackTransaction(self, tx: _Tx) -> defer.Deferred[None]: ...

        def wait_for_room(self) -> defer.Deferred[None]: ...

        def stream(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                   batch: int = 1000, row_factory: Any = None, timeout: Optional[float] = None,
                   idle_timeout: Optional[float] = None, replica: bool = False) -> Stream: ...

        def copy_out(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                     batch: int = 1000, timeout: Optional[float] = None,
                     idle_timeout: Optional[float] = None) -> Stream: ...

        def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                    tx: Optional[_Tx] = None, *,
                    timeout: Optional[float] = None) -> defer.Deferred[int]: ...

        def listen(self, *channels: str, max_queued: int = 10000) -> Listener: ...

        def notify(self, channel: str, payload: str = "",
                   tx: Optional[_Tx] = None) -> defer.Deferred[None]: ...

    # -- what differs in the public API: a Deferred for the close ----------------------

    def close(self, timeout: Optional[float] = None) -> defer.Deferred[None]:
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection; the Deferred fires once the threads have exited.
        Idempotent. With ``timeout``, calls still queued then fail with PoolClosed.

        :param timeout: seconds to wait for queued calls (default: all of them).
        :raises InterfaceError: ``timeout`` is not a number of seconds >= 0.
        """
        result: Optional[defer.Deferred[None]] = self._engine.close(timeout)
        return defer.succeed(None) if result is None else result  # None: a forked child


# -- the adbapi drop-in ------------------------------------------------------------------
#
# ``ConnectionPool`` is adbapi's own class with adb's workers under it. What an
# application runs (``runInteraction``, ``runWithConnection``, and ``runQuery`` and
# ``runOperation`` through them) goes through adbapi's own ``_runInteraction`` and kin,
# ``Connection`` and ``Transaction`` (or a subclass's overrides), on a connection made
# as the DB-API module makes it (native sessions, ``adb.drivers._native``). adb
# supplies where that runs: a worker of its pool, whose ``connect()`` is the worker's
# own connection (``_hosted``), with results back in batches. ``threadpool`` answers
# as Twisted's ThreadPool does (``ThreadPoolView``).

_local = threading.local()  # .call: the drop-in call running in this thread (a _Hosted)


class _Hosted:
    """A drop-in call running in a worker: its pool, the worker's session, and
    whether ``connect()`` has handed it the worker's connection yet."""

    __slots__ = ("pool", "session", "handed")

    def __init__(self, pool: ConnectionPool, session: WorkerSession) -> None:
        self.pool = pool
        self.session = session
        self.handed = False


def _hosted(session: WorkerSession, pool: ConnectionPool, fn: Callable[..., Any],
            args: tuple[Any, ...], kw: Optional[dict[str, Any]]) -> Any:
    """The job of one drop-in call: ``fn(*args, **kw)`` in a worker (adbapi's
    ``_runInteraction`` or ``_runWithConnection``, or work given to ``threadpool``),
    where ``pool.connect()`` is this worker's connection. A driver error that lost
    the connection it was handed is raised as an error that is adb's ConnectionLost
    too (``_PoolDatabase.lost``). (``kw`` is None when empty: 100,000 calls in flight
    then hold no empty dict each.)"""
    call = _local.call = _Hosted(pool, session)
    try:
        return fn(*args, **kw) if kw else fn(*args)
    except Exception as exc:
        if call.handed:
            lost = pool._adb.lost(exc, session)
            if lost is not None:
                raise lost from exc
        raise
    finally:
        _local.call = None


class ConnectionPool(adbapi.ConnectionPool):
    """A drop-in for ``twisted.enterprise.adbapi.ConnectionPool`` on adb's workers.

    ``ConnectionPool(dbapiName, *connargs, **connkw)`` with ``cp_min``, ``cp_max``,
    ``cp_name``, ``cp_noisy``, ``cp_openfun``, ``cp_reconnect``, ``cp_good_sql``,
    ``cp_reactor``, as adbapi documents them. It is adbapi's class: calls go through
    its ``_runInteraction``, ``_runWithConnection``, ``_runQuery``, ``_runOperation``
    (a subclass's overrides included), ``connectionFactory`` and
    ``transactionFactory``, on connections made exactly as
    ``dbapi.connect(*connargs, **connkw)`` makes them, committed or rolled back as
    adbapi does. adb supplies the workers: ``cp_max`` threads started by ``start()``
    (called when the reactor runs), each with its own connection for life (``cp_min``
    of them connect at once), results handed back to the reactor in batches;
    ``threadpool`` answers what Twisted's ``ThreadPool`` answers. Plus adb's
    ``runMany``, ``beginTransaction``/``commitTransaction``/``rollbackTransaction``,
    ``stats()``, ``stream``, ``copy_in`` and ``copy_out``.
    """

    CP_ARGS = [*adbapi.ConnectionPool.CP_ARGS, "autobatch"]
    #: adb's own: ``cp_autobatch=64`` lets queued ``runOperation(sql[, params])`` calls
    #: run as one unit (group commit, see ``Database(autobatch=)``)
    autobatch: Optional[int] = None
    threadID = staticmethod(threading.get_ident)
    startID: Any = None

    def __init__(self, dbapiName: str, *connargs: Any, **connkw: Any) -> None:
        reactor = connkw.pop("cp_reactor", None)
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        for arg in self.CP_ARGS:
            if f"cp_{arg}" in connkw:
                setattr(self, arg, connkw.pop(f"cp_{arg}"))
        check_sizes(self.min, self.max)
        self.min = min(self.min, self.max)  # as adbapi: cp_max wins over a larger cp_min
        self.max = max(self.min, self.max)
        self.dbapiName = dbapiName
        self.connargs = connargs
        self.connkw = connkw
        if not isinstance(dbapiName, str) or not dbapiName:
            raise errors.InterfaceError(
                f"dbapiName must be a DB-API module name such as 'psycopg2', not {dbapiName!r}")
        importlib.import_module(drivers.canonical(dbapiName))  # ImportError here, as adbapi's
        self._adb = _PoolDatabase(self, target_for(dbapiName, connkw, connargs))
        self.dbapi = self._adb.dbapi
        if getattr(self.dbapi, "apilevel", None) != "2.0" \
                or getattr(self.dbapi, "threadsafety", 0) < 1:
            log.msg(f"{dbapiName} does not declare itself a thread-safe DB-API 2.0 module")
        #: thread id -> its DB-API connection: every worker's, and what ``connect()``
        #: gave threads of the application's own
        self.connections: dict[int, Connection] = self._adb.workers.connections
        self.threadpool: Any = ThreadPoolView(self._adb, self, self.min, self.max)
        self.startID = reactor.callWhenRunning(self._start)

    def _on_connect(self, conn: Any) -> None:
        if self.noisy:
            log.msg(f"adbapi connecting: {self.dbapiName}")
        if self.openfun is not None:
            self.openfun(conn)

    # -- where calls run: adb's workers, or the thread pool put in their place -----------

    def runInteraction(self, interaction: Callable[..., T], *args: Any,
                       **kw: Any) -> defer.Deferred[T]:
        """``interaction(transaction, *args, **kw)`` in a worker thread, through
        ``_runInteraction``: committed if it returns, rolled back if it raises.

        :param interaction: called with a ``transactionFactory`` wrapper of a cursor
            (adbapi's ``Transaction``), then ``*args`` and ``**kw``.
        :returns: a Deferred of what it returns; it fails with what it raised, a lost
            connection with an error that is the driver's (``OperationalError``...) and
            adb's ``ConnectionLost``, a connection that cannot be made with the
            driver's and adb's ``ServerUnavailable`` (``ConnectionRejected`` when
            the server refused it: a password, a database it does not have). Once
            the pool is closed it fails at once with PoolClosed (adbapi's would
            never fire).
        """
        return self._run_in_pool(self._runInteraction, interaction, *args, **kw)

    def runWithConnection(self, func: Callable[..., T], *args: Any,
                          **kw: Any) -> defer.Deferred[T]:
        """``func(connection, *args, **kw)`` in a worker thread, through
        ``_runWithConnection``: committed if it returns, rolled back if it raises.

        :param func: called with a ``connectionFactory`` wrapper of the worker's
            DB-API connection (adbapi's ``Connection``: its ``close()`` is ignored,
            ``reconnect()`` replaces it), then ``*args`` and ``**kw``.
        :returns: a Deferred of what it returns, failing as ``runInteraction``'s.
        """
        return self._run_in_pool(self._runWithConnection, func, *args, **kw)

    def runQuery(self, *args: Any, **kw: Any) -> defer.Deferred[Sequence[Any]]:
        """``cursor.execute(*args, **kw)`` then ``fetchall()``, in a transaction of its
        own, through ``runInteraction`` and ``_runQuery``; a Deferred of the rows as
        the driver's ``fetchall()`` gives them (a tuple on PyMySQL)."""
        result: defer.Deferred[Sequence[Any]] = super().runQuery(  # type: ignore[no-untyped-call,unused-ignore]
            *args, **kw)
        return result

    def runOperation(self, *args: Any, **kw: Any) -> defer.Deferred[None]:
        """``cursor.execute(*args, **kw)`` in its own transaction, through
        ``_runOperation``; a Deferred of None. With ``cp_autobatch``, a
        ``(sql[, params])`` call may run in a unit with others queued (group commit)."""
        if self.autobatch and not kw and 1 <= len(args) <= 2 \
                and isinstance(self.threadpool, ThreadPoolView):
            return defer.maybeDeferred(self._adb.runOperation, *args).addCallback(_none)
        result: defer.Deferred[None] = super().runOperation(  # type: ignore[no-untyped-call,unused-ignore]
            *args, **kw)
        return result

    def _run_in_pool(self, fn: Callable[..., Any], *args: Any,
                     **kw: Any) -> defer.Deferred[Any]:
        """``fn(*args, **kw)`` in adb's workers, or in the thread pool an application
        (or a test) put in place of ``threadpool``, as adbapi runs it there."""
        threadpool = self.threadpool
        if isinstance(threadpool, ThreadPoolView):
            return self._adb.hosted(self, fn, args, kw or None)
        result: defer.Deferred[Any] = threads.deferToThreadPool(
            self._reactor, threadpool, fn, *args, **kw)
        return result

    def finalClose(self) -> None:
        """Stop the thread pool (adb's workers: after the queued calls, closing their
        connections), then close what ``connect()`` gave other threads, as adbapi's
        does; blocking. With a thread pool put in place of adb's, adb's own closes too.
        In a forked child it returns at once and closes nothing: the connections are
        the parent's (``Engine.close_in_child``, ``adb.engine``)."""
        own = getattr(self, "_adb", None)
        if own is not None and own.forked:
            self.shutdownID = None
            self.running = False
            own.close_blocking()
            return
        super().finalClose()  # type: ignore[no-untyped-call,unused-ignore]
        if own is not None and not isinstance(self.threadpool, ThreadPoolView):
            own.close_blocking()

    # -- connections: a worker's own, or one per thread of the application's ----------

    def connect(self) -> Any:
        """The calling thread's DB-API connection: in a worker running a call, that
        worker's (opened again if dropped); in any other thread, one opened for it
        on first use and kept in ``connections`` (blocking)."""
        call: Optional[_Hosted] = getattr(_local, "call", None)
        if call is not None and call.pool is self:
            session = call.session
            if call.handed and session.conn is not None:
                return session.conn
            try:
                conn = session.connection()
            except (errors.ServerUnavailable, errors.ConnectionRejected) as exc:
                raise as_driver_error(exc, self.dbapi, exc.__cause__) from exc.__cause__
            call.handed = True
            return conn
        tid = self.threadID()
        conn = self.connections.get(tid)
        if conn is None:
            conn = self.connections[tid] = self._adb.open_direct()
        return conn

    def disconnect(self, conn: Any) -> None:
        """Close the calling thread's connection (``conn``, as ``connect()`` gave it;
        None does nothing); a worker opens a new one on its next ``connect()``.

        :raises InterfaceError: ``conn`` is not the calling thread's connection.
        """
        tid = self.threadID()
        if conn is not self.connections.get(tid):
            raise errors.InterfaceError(
                "disconnect(): that is not the connection connect() gave this thread")
        if conn is None:
            return
        call: Optional[_Hosted] = getattr(_local, "call", None)
        if call is not None and call.pool is self and call.session.conn is conn:
            if self.noisy:
                log.msg(f"adbapi closing: {self.dbapiName}")
            call.session.disconnect("disconnect() by the application")
        else:
            del self.connections[tid]
            self._close(conn)  # type: ignore[no-untyped-call,unused-ignore]

    # -- adb's own, beyond adbapi ---------------------------------------------------------

    def runMany(self, sql: SQL, seq_of_params: Iterable[Params],
                tx: Optional[Transaction] = None) -> defer.Deferred[int]:
        """adb's extension: ``sql`` once per parameter set, by the driver's bulk path,
        in one transaction (or in ``tx``).

        :param sql: the statement, in the driver's paramstyle.
        :param seq_of_params: its parameter sets, one per run.
        :param tx: a handle from ``beginTransaction``: run it there.
        :returns: a Deferred of the total rowcount.
        :raises PoolClosed: (through the Deferred) the pool is closed.
        :raises TransactionError: (through the Deferred) ``tx`` is finished.
        :raises Exception: (through the Deferred) the driver's own errors.
        """
        return defer.maybeDeferred(self._adb.runMany, sql, seq_of_params, tx)

    def beginTransaction(self, *, timeout: Optional[float] = None) -> defer.Deferred[Transaction]:
        """adb's extension: a transaction that spans calls, pinned to one worker;
        pass its handle as ``tx`` to ``runMany``, ``stream``, ``copy_in``, ``copy_out``
        and end it with ``commitTransaction`` or ``rollbackTransaction``.

        :param timeout: seconds it may wait for a free worker (default: no limit).
        :returns: a Deferred of the transaction's handle.
        :raises PoolClosed: (through the Deferred) the pool is closed.
        :raises PoolTimeout: (through the Deferred) no worker became free in time.
        :raises ServerUnavailable: (through the Deferred) no connection could be opened.
        """
        return defer.maybeDeferred(self._adb.beginTransaction, timeout=timeout)

    def commitTransaction(self, tx: Transaction) -> defer.Deferred[None]:
        """adb's extension: commit ``tx`` and free its worker.

        :param tx: the handle ``beginTransaction`` gave.
        :returns: a Deferred fired once it is committed.
        :raises TransactionError: (through the Deferred) ``tx`` is finished or failed
            (it was rolled back).
        :raises ConnectionLost: (through the Deferred) the connection broke during
            the COMMIT: it may or may not have committed.
        """
        return defer.maybeDeferred(self._adb.commitTransaction, tx)

    def rollbackTransaction(self, tx: Transaction) -> defer.Deferred[None]:
        """adb's extension: roll ``tx`` back and free its worker.

        :param tx: the handle ``beginTransaction`` gave.
        :returns: a Deferred fired once it is rolled back.
        :raises TransactionError: (through the Deferred) ``tx`` is finished.
        """
        return defer.maybeDeferred(self._adb.rollbackTransaction, tx)

    def stream(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
               **kw: Any) -> Stream:
        """adb's extension: the rows of ``sql`` batch by batch, from a server-side
        cursor where the driver has one (``Database.stream``).

        :param sql: the statement, in the driver's paramstyle.
        :param params: its parameters.
        :param tx: a handle from ``beginTransaction``: read there.
        :param kw: ``batch``, ``row_factory``, ``timeout``, ``idle_timeout``.
        :returns: a ``Stream``: ``fetch()`` gives a Deferred of the next batch.
        :raises PoolClosed: the pool is closed.
        :raises TypeError: an argument of the wrong type (nothing ran).
        """
        return self._adb.stream(sql, params, tx, **kw)

    def copy_out(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                 **kw: Any) -> Stream:
        """adb's extension: ``sql``'s rows as text-format lines, batch by batch
        (``Database.copy_out``).

        :param sql: the statement, in the driver's paramstyle.
        :param params: its parameters.
        :param tx: a handle from ``beginTransaction``: read there.
        :param kw: ``batch``, ``timeout``, ``idle_timeout``.
        :returns: a ``Stream`` of lines.
        :raises PoolClosed: the pool is closed.
        :raises TypeError: an argument of the wrong type (nothing ran).
        """
        return self._adb.copy_out(sql, params, tx, **kw)

    def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                tx: Optional[Transaction] = None, **kw: Any) -> defer.Deferred[int]:
        """adb's extension: a bulk load into ``table``, all of it or none
        (``Database.copy_in``).

        :param table: the table's name.
        :param rows: an iterable of rows, or a file of text-format lines.
        :param columns: the columns the rows fill (default: every column, in order).
        :param tx: a handle from ``beginTransaction``: load there.
        :param kw: ``timeout``.
        :returns: a Deferred of the number of rows loaded.
        :raises PoolClosed: (through the Deferred) the pool is closed.
        :raises InterfaceError: (through the Deferred) a bad table or column name.
        :raises Exception: (through the Deferred) the driver's own errors.
        """
        return defer.maybeDeferred(self._adb.copy_in, table, rows, columns, tx, **kw)

    def stats(self) -> dict[str, Any]:
        """adb's extension: the pool's counts (``Database.stats``): workers busy and
        idle, calls queued and completed, errors, connects, reconnects."""
        return self._adb.stats()

    def __repr__(self) -> str:
        return f"<adb.twisted.ConnectionPool {self._adb!r}>"


def _none(_: Any) -> None:
    return None


#: what the drop-in's calls are, for telemetry
_ADBAPI = Operation("adbapi")


class _AdbapiFrontEnd(TwistedFrontEnd):
    """Deferreds as adbapi's thread pool gives them: cancelling one does not stop its
    call (queued, it still runs; running, it is not cancelled on the server); its
    result is dropped.

    The reactor is held weakly: the worker threads reach this object (they hand
    results back through it), and a reactor they held would keep every pool it
    holds alive (``addSystemEventTrigger``) with its threads. The ConnectionPool
    holds its reactor; once a program lets go of both, the pool is collected and
    its threads end, as adbapi's pool and thread pool are."""

    def __init__(self, reactor: Any) -> None:  # pylint: disable=super-init-not-called
        self._reactor = weakref.ref(reactor)

    @property
    def reactor(self) -> Any:
        reactor = self._reactor()
        if reactor is None:  # what a closed loop gives a worker handing a result back
            raise RuntimeError("the reactor of this ConnectionPool is gone")
        return reactor

    @staticmethod
    def abandoned(deferred: defer.Deferred[Any]) -> bool:
        return False


def _weak_on_connect(owner: ConnectionPool) -> Callable[[Any], None]:
    """The pool's ``_on_connect`` (``cp_openfun``), holding the pool weakly: the worker
    threads reach it (a connect runs it), and must not keep the pool alive."""
    pool = weakref.ref(owner)

    def on_connect(conn: Any) -> None:
        owner = pool()
        if owner is not None:
            owner._on_connect(conn)
    return on_connect


class _PoolDatabase(Database):
    """The Database under a ConnectionPool: adbapi's sizes and hooks, native
    sessions, and the entry points the pool uses."""

    _frontend_class = _AdbapiFrontEnd

    def __init__(self, owner: ConnectionPool, target: Target) -> None:
        self._options: PoolOptions = {
            "warm": owner.min, "start": False, "fit_size": True, "native": True}
        super().__init__(target, reactor=owner._reactor, pool_size=owner.max,
                         name=owner.name, on_connect=_weak_on_connect(owner),
                         autobatch=owner.autobatch)

    def _pool_options(self) -> PoolOptions:
        return self._options

    @property
    def workers(self) -> Pool:
        """The pool of workers (what ``threadpool`` shows)."""
        return self._engine.pool

    def hosted(self, pool: ConnectionPool, fn: Callable[..., Any], args: tuple[Any, ...],
               kw: Optional[dict[str, Any]]) -> defer.Deferred[Any]:
        """Queue ``fn(*args, **kw)`` for a worker, where ``pool.connect()`` is that
        worker's connection (``_hosted``); a Deferred of what it returns. Once the
        pool is closed (or in a forked child) the Deferred fails at once with the
        reason, PoolClosed (ForkError): a call is never left unsettled, where
        adbapi's stopped thread pool leaves its Deferred unfired for ever."""
        try:
            result: defer.Deferred[Any] = self._engine.hosted(_hosted, (pool, fn, args, kw),
                                                              _ADBAPI)
        except errors.Error as exc:
            return defer.fail(exc)
        return result

    def lost(self, exc: Exception, session: WorkerSession) -> Optional[BaseException]:
        """What a drop-in call that raised ``exc`` fails with when ``exc`` is the
        driver's error about a lost connection (the one it was handed broke, or was
        dropped by ``disconnect()`` during the call): adb's ConnectionLost that is
        the driver's error too; None for any other error (raised as it is)."""
        driver = self._engine.driver
        if isinstance(exc, errors.Error) or not isinstance(exc, getattr(self.dbapi, "Error", ())):
            return None
        conn = session.conn
        if conn is not None:
            if not driver.is_disconnect(exc, conn):
                return None
            session.disconnect(f"{type(exc).__name__} during a call")
        lost = ConnectionLost(
            f"the connection of {self.name!r} to {driver.target} broke during the call "
            f"({type(exc).__name__}: {str(exc).strip()[:200]}); the statement may have run")
        return as_driver_error(lost, self.dbapi, exc)

    def open_direct(self) -> Connection:
        """A new connection for a thread of the application's own (blocking)."""
        return self._engine.driver.connect()

    def close_blocking(self) -> None:
        """Close on the calling thread (adbapi's ``close()`` blocks)."""
        self._engine.close_blocking()

    @property
    def forked(self) -> bool:
        """True in a child forked from the process that made the pool."""
        return self._engine.forked
