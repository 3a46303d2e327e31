"""BaseDatabase: the public API and all the plumbing, written once for every front-end.

A front-end is one small module that subclasses ``BaseDatabase`` and supplies the
primitives listed in its docstring ("The front-end interface"); the hand-back,
admission under ``max_queued``, timeouts and the close sequence are built here
from those primitives. ``docs/architecture.md`` shows the layers and the life of
one call.
"""

from __future__ import annotations

import enum
import itertools
import logging
import os
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import (TYPE_CHECKING, Any, Callable, Generic, Optional, Protocol, TypedDict, TypeVar,
                    Union, cast)

from . import bulk, drivers, listen as _listen, ops, replicas as _replicas, retry, rows
from .admission import Admission
from .call import Claim, Job
from .dispatch import Dispatch
from .drivers.base import Connection, Driver
from .errors import ConnectionLost, ForkError, InterfaceError, PoolClosed, PoolTimeout
from .handback import BatchedHandback, DirectHandback, Handback
from .listen import Hub, Router
from .listener import Listener, ListenerCore, SyncListener
from .pool import Pool
from .replicas import ReplicaSet
from .steps import run_async, run_blocking
from .stream import Stream, StreamCore, SyncStream
from .telemetry import Telemetry, check_slow_call
from .transaction import Transaction, TransactionContext, TxState
from .url import make_target, target_for
from .worker import PoolConfig, Worker

if TYPE_CHECKING:
    from .worker import JobFn

log = logging.getLogger("adb")

#: a statement: SQL text, or the 2011 form ``(sql, params)`` as one argument
SQL = Union[str, bytes, "tuple[Union[str, bytes], Params]"]
#: statement parameters in the driver's paramstyle: a sequence, a mapping, or None
Params = Union[Sequence[Any], Mapping[str, Any], None]

#: the future type of a front-end: an asyncio Future, a Deferred, a blocking Waiter
F = TypeVar("F")

DEFAULT_POOL_SIZE = 10
_names = itertools.count(1)
_live: "weakref.WeakSet[BaseDatabase[Any]]" = weakref.WeakSet()


class Cancellable(Protocol):
    """A timer handle: ``loop.call_later``'s TimerHandle, Twisted's DelayedCall."""

    def cancel(self) -> object: ...


class Scheduler(Protocol):
    """What schedules work on a front-end's loop thread (an event loop, a reactor);
    see ``BaseDatabase``, "The front-end interface"."""

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> object:
        """Run ``fn()`` on the loop thread soon (any thread)."""

    def call_later(self, seconds: float, fn: Callable[..., None], *args: Any) -> Cancellable:
        """Run ``fn(*args)`` on the loop thread after ``seconds`` (loop thread)."""


class Waitable(Protocol):
    """The future of a blocking front-end (``adb.sync.Waiter``)."""

    def wait(self, timeout: Optional[float]) -> bool: ...
    def result(self) -> Any: ...


class PoolOptions(TypedDict, total=False):
    """The protected pool options, for adb's own adbapi drop-in
    (``adb.twisted.ConnectionPool``), tests and ``benchmarks.ab``; not public API.

    ``start``: start the workers at construction (default True; False queues calls
    until ``_start_workers()``); ``warm``: how many workers connect at once
    (default all); ``fit_size``: cap a ``pool_size`` above the driver's limit
    instead of refusing it; ``check_sql``: test the connection with it after an
    error (``cp_reconnect``); ``cancel_grace``: seconds from a cancel to the cut.
    """

    start: bool
    warm: int
    fit_size: bool
    check_sql: Optional[str]
    cancel_grace: float


def _after_fork_in_child() -> None:
    for db in list(_live):
        db._refusal = ForkError(
            f"the Database {db.name!r} was created in process {db._pid} and cannot be used "
            f"in child process {os.getpid()}: create the Database after forking "
            "(e.g. after tornado's server.start(n))")


os.register_at_fork(after_in_child=_after_fork_in_child)


class CloseState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # refusing calls; the workers finish what was accepted
    CLOSED = "closed"    # every worker thread has ended; every accepted call is settled


class BaseDatabase(Generic[F]):
    """A pool of worker threads, each with one DB-API connection.

    :param url: ``postgresql://user:pw@host:port/db``, ``mysql://...``,
        ``sqlite:///path`` or ``sqlite://`` (memory); None with no ``driver``
        means a private SQLite file, removed on close (the embedded default).
    :param driver: a driver name (``"psycopg2"``, ``"psycopg"``, ``"pymysql"``,
        ``"sqlite3"``, or any importable PEP 249 module) for the keyword form; the
        remaining keywords go to the driver's ``connect()``.
    :param pool_size: number of worker threads and connections (default 10).
    :param row_factory: ``"tuple"`` (default), ``"dict"``, ``"namedtuple"`` or a
        callable ``(description, rows) -> list``.
    :param timeout: default seconds a call may wait for a free worker before it
        fails with ``PoolTimeout`` (it then never runs); None waits forever.
    :param name: a name for reprs, thread names and errors.
    :param on_connect: called with every new DB-API connection, in its worker
        thread, before it serves (session setup such as ``SET TIME ZONE``); it is
        called again after each reconnect.
    :param statement_timeout: default seconds a call may run; past it the call is
        cancelled on the server and fails with ``StatementTimeout``. None: no limit.
    :param max_queued: most calls that may wait for a worker; None: no limit.
    :param on_full: what a call does when ``max_queued`` calls already wait:
        ``"wait"`` (default: it is accepted and queued as room frees up; see
        ``wait_for_room``) or ``"raise"`` (``QueueFull``).
    :param max_lifetime: seconds after which a connection is replaced (between
        calls, never inside a transaction), less up to 5% jitter.
    :param max_idle: seconds a worker keeps an unused connection open.
    :param check_idle: run ``select 1`` before using a connection idle this long.
    :param autobatch: group commit: a worker that takes a standalone ``runOperation``
        while more wait runs up to this many of them as one unit (one round trip,
        one commit), each caller still getting its own rowcount or error; None
        (default): off. What it changes is in ``docs/usage.md`` ("Group commit")
        and ``adb.worker`` (its contract) and ``adb.sqltext`` (which statements qualify).
    :param retries: run a standalone ``runQuery``/``runOperation``/``runMany``
        again, up to this many times with backoff, when it failed transiently
        having taken no effect (a deadlock victim, a serialization failure, a
        busy SQLite file, no connection to be had); also ``runTransaction``'s
        default. Default: 0 for calls, ``adb.retry.DEFAULT_RETRIES`` for
        ``runTransaction``.
    :param replicas: URLs of read replicas (hot standbys, replicas, cluster nodes):
        ``runQuery``, ``stream`` and ``transaction``/``beginTransaction`` with
        ``replica=True`` go to one of them that is up and within
        ``max_replica_lag``, everything else to the primary (``url``). Each is a
        Database of this front-end with the same options (its own pool); connect
        keywords given here apply to each. See ``adb.replicas``.
    :param max_replica_lag: seconds a replica may be behind its primary and still
        serve reads; None (default): no bound, only its health counts.
    :param replica_fallback: where a ``replica=True`` read goes when no replica can
        serve it: ``"primary"`` (default) or ``"raise"`` (``ReplicaUnavailable``).
    :param pooler: ``"transaction"`` or ``"session"`` when the URL is a pooler's
        such as pgbouncer (also ``?pooler=`` in the URL); None (default): the
        server itself. The driver then works the way that pooler mode allows: the
        cancel request of ``statement_timeout`` goes through the pooler, psycopg 3
        never prepares statements (transaction mode), and ``listen()`` refuses
        (transaction mode) instead of missing notifications. ``docs/poolers.md``.
    :param telemetry: True: an OpenTelemetry span per call and the database
        client metrics (needs the ``otel`` extra; an SDK records them, else
        they cost little and record nothing). See ``adb.telemetry``.
    :param slow_call: seconds: log a WARNING (logger ``adb``) for every call that
        takes longer, from queued to done, with its statement (never its
        parameters), its wait for a worker and its run time. None (default): off.
    :param tracer_provider: the OpenTelemetry TracerProvider to use instead of
        the global one (implies ``telemetry=True``).
    :param meter_provider: the MeterProvider to use instead of the global one
        (implies ``telemetry=True``).

    The front-end interface. A front-end subclass provides these primitives and
    nothing else; everything else is built here from them:

    - ``_new_future()``: a new future (type ``F``) for one call (caller's thread).
    - ``_settle(future, ok, value)``: give it its result (``ok``) or exception
      (loop thread; for a blocking front-end, any thread). It must do nothing to a
      future already settled or abandoned.
    - ``_abandoned(future)``: True once its caller gave up on it, e.g. cancelled it
      (any thread; a worker skips such a call, the watchdog cancels it if running).
    - ``_scheduler``: what runs code on the loop thread, a ``Scheduler``:
      ``call_soon_threadsafe(fn)`` (run ``fn()`` on the loop thread soon; any
      thread) and ``call_later(seconds, fn, *args)`` (run ``fn(*args)`` there later,
      returning a handle with ``cancel()``; loop thread). None for a blocking
      front-end: results are then settled in the worker thread. It must not hold
      the Database: worker threads reach it, and a Database dropped unclosed must
      still be collected (and warn).
    - ``_discard(future)``: the caller will not wait for it after all: cancel it
      and keep its outcome from being reported as unhandled (optional).
    - ``_spawn(coroutine)``: run a coroutine of adb's own that awaits this
      front-end's futures, and return its future (not for a blocking front-end).
    - ``_lost_error``: the ConnectionLost class callers get (optional).
    - ``_fn_must_await``: True where ``runTransaction``'s function must be a
      coroutine function (asyncio); on Twisted it may return a Deferred or a value.
    - ``_sibling_options()``: what another Database of this front-end on the same
      loop needs (a replica's; optional).
    - ``_blocking``: True for a blocking front-end, whose future is then a
      ``Waitable`` (``wait(timeout) -> bool``, ``result()``: the value, or raises),
      and whose public methods return values instead of futures.

    The public methods are written once here; a front-end's ``close`` only says
    how its caller waits for ``_close`` (a future) or calls ``_close_blocking``.
    """

    _blocking = False
    #: True where ``runTransaction``'s function must return an awaitable (asyncio)
    _fn_must_await = False
    _lost_error: type[ConnectionLost] = ConnectionLost
    _scheduler: Optional[Scheduler] = None

    def __init__(self, url: Any = None, *, driver: Optional[str] = None,
                 pool_size: Optional[int] = None, row_factory: Any = None,
                 timeout: Optional[float] = None, name: Optional[str] = None,
                 on_connect: Optional[Callable[[Connection], None]] = None,
                 statement_timeout: Optional[float] = None, max_queued: Optional[int] = None,
                 on_full: str = "wait", max_lifetime: Optional[float] = None,
                 max_idle: Optional[float] = None, check_idle: Optional[float] = None,
                 autobatch: Optional[int] = None, retries: Optional[int] = None,
                 replicas: Optional[Sequence[Any]] = None, max_replica_lag: Optional[float] = None,
                 replica_fallback: str = "primary",
                 pooler: Optional[str] = None, telemetry: bool = False,
                 slow_call: Optional[float] = None, tracer_provider: Any = None,
                 meter_provider: Any = None,
                 _pool_options: Optional[PoolOptions] = None, **connect_kwargs: Any) -> None:
        target = make_target(url, driver, connect_kwargs)
        replica_targets = [make_target(u, driver, connect_kwargs)
                           for u in _replicas.check_urls(replicas)]
        _check_timeout(max_replica_lag, "max_replica_lag")
        _replicas.check_fallback(replica_fallback)
        if on_connect is not None and not callable(on_connect):
            raise InterfaceError(f"on_connect must be callable, not {on_connect!r}")
        self._tempfile: Optional[str] = None
        self._close_state = CloseState.OPEN
        if target is None:
            fd, self._tempfile = tempfile.mkstemp(prefix="adb-", suffix=".db")
            os.close(fd)
            target = target_for("sqlite3", {"database": self._tempfile})
        options: PoolOptions = _pool_options or {}
        try:
            self._driver = driver_obj = drivers.load(target, on_connect, pooler)
            size = _check_pool_size(pool_size, driver_obj, options.get("fit_size", False))
            autobatch = _check_count(autobatch, "autobatch") or 1
            if autobatch > 1:
                driver_obj.enable_autobatch()
        except BaseException:
            self._remove_tempfile()
            raise
        self._row_factory = rows.resolve(row_factory)
        self._timeout = _check_timeout(timeout)
        self._statement_timeout = _check_timeout(statement_timeout, "statement_timeout")
        max_queued = _check_count(max_queued, "max_queued")
        self._retries = None if retries is None else retry.check_retries(retries)
        self._tx_retries = 0
        self._tx_retries_lock = threading.Lock()
        if on_full not in ("wait", "raise"):
            raise InterfaceError(f"on_full must be 'wait' or 'raise', not {on_full!r}")
        name = name if name is not None else f"adb-{next(_names)}"
        config = PoolConfig(
            name,
            self._lost_error, options.get("check_sql"), options.get("warm", size),
            _check_timeout(max_lifetime, "max_lifetime"), _check_timeout(max_idle, "max_idle"),
            _check_timeout(check_idle, "check_idle"), autobatch, self._retries or 0,
            telemetry=self._make_telemetry(name, target, telemetry, slow_call,
                                           tracer_provider, meter_provider))
        self._telemetry = config.telemetry
        self.name = config.name
        self._pid = os.getpid()
        self._refusal: Optional[BaseException] = None  # raised by every call once closing or forked
        self._open_tx: weakref.WeakSet[Transaction] = weakref.WeakSet()
        self._close_futures: list[F] = []
        self._close_timer: Optional[Cancellable] = None
        self._close_lock = threading.Lock()
        self._hub: Optional[Hub] = None  # the listening connection, from the first listen()
        self._build_pool(driver_obj, size, config, max_queued, on_full, options)
        self._replicas: Optional[ReplicaSet] = None
        if replica_targets:
            shared = dict(pool_size=pool_size, row_factory=row_factory, timeout=timeout,
                          on_connect=on_connect, statement_timeout=statement_timeout,
                          max_queued=max_queued, on_full=on_full, max_lifetime=max_lifetime,
                          max_idle=max_idle, check_idle=check_idle, retries=retries,
                          telemetry=telemetry, slow_call=slow_call,
                          tracer_provider=tracer_provider, meter_provider=meter_provider)
            self._open_replicas(replica_targets, shared, max_replica_lag, replica_fallback)
        _live.add(self)
        log.debug("%r created", self)

    @staticmethod
    def _make_telemetry(name: str, target: Any, telemetry: bool,
                        slow_call: Optional[float], tracer_provider: Any,
                        meter_provider: Any) -> Optional[Telemetry]:
        """The Database's Telemetry, or None when it has neither telemetry nor slow_call."""
        slow = check_slow_call(slow_call)
        if not isinstance(telemetry, bool):
            raise InterfaceError(f"telemetry must be True or False, not {telemetry!r}")
        traced = telemetry or tracer_provider is not None or meter_provider is not None
        if not traced and slow is None:
            return None
        return Telemetry(name, target, traced=traced, slow_call=slow,
                         tracer_provider=tracer_provider, meter_provider=meter_provider)

    def _open_replicas(self, targets: list[Any], options: dict[str, Any],
                       max_lag: Optional[float], fallback: str) -> None:
        """One Database of this front-end per replica, and the monitor that checks them."""
        dbs: list[Any] = []
        try:
            for number, target in enumerate(targets, 1):
                dbs.append(type(self)(target, name=f"{self.name}/replica{number}",
                                      **options, **self._sibling_options()))
        except BaseException:
            for db in dbs:
                db._stop_accepting()
            self._stop_accepting()
            raise
        self._replicas = ReplicaSet(self.name, dbs, max_lag, fallback)

    def _sibling_options(self) -> dict[str, Any]:
        return {}

    def _build_pool(self, driver: Driver, size: int, config: PoolConfig,
                    max_queued: Optional[int], on_full: str, options: PoolOptions) -> None:
        """Wire the plumbing in one direction: the dispatch (where calls wait), then
        admission (which feeds it), then the hand-back (which reads both), then the
        pool (which runs the dispatch's jobs and hands results back). Nothing the
        pool holds refers to the Database (see ``_scheduler``), except weakly."""
        dispatch = Dispatch()
        self._admission = None if max_queued is None else \
            Admission(self.name, max_queued, on_full, dispatch, self._settle)
        self._handback = self._make_handback(dispatch.saturated)
        self._pool = Pool(driver, size, config, dispatch, self._handback, self._abandoned,
                          on_exit=_weak_method(self._workers_exited),
                          cancel_grace=options.get("cancel_grace", 2.0))
        self._operation: JobFn = Worker.batchable if config.autobatch > 1 else Worker.standalone
        self._put_shared: Callable[[Job], None] = \
            dispatch.submit if self._admission is None else self._admission.put
        if config.telemetry is not None:
            config.telemetry.observe(self._pool, self._admission)
        if options.get("start", True):
            self._pool.start()

    # -- the front-end interface (see the class docstring) ----------------------------

    def _new_future(self) -> F:
        raise NotImplementedError

    @staticmethod
    def _settle(future: F, ok: bool, value: Any) -> None:
        raise NotImplementedError

    @staticmethod
    def _abandoned(future: F) -> bool:
        return False

    @staticmethod
    def _discard(future: F) -> None:
        pass

    def _spawn(self, coroutine: Any) -> F:
        raise NotImplementedError

    # -- the public API --------------------------------------------------------------

    @property
    def paramstyle(self) -> str:
        """The driver's PEP 249 paramstyle: ``'pyformat'`` (``%s``) or ``'qmark'`` (``?``)."""
        return self._driver.paramstyle

    @property
    def dbapi(self) -> Any:  # a PEP 249 module: untyped by nature
        """The driver module, for catching its exceptions (``db.dbapi.IntegrityError``)."""
        return self._driver.dbapi

    @property
    def closed(self) -> bool:
        """True from the moment ``close()`` begins: the Database takes no more calls."""
        return self._close_state is not CloseState.OPEN

    def runQuery(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
                 row_factory: Any = None, timeout: Optional[float] = None,
                 statement_timeout: Optional[float] = None, replica: bool = False) -> Any:
        """Run a query and return its rows as a list (rows shaped by the row factory).

        ``replica=True``: on a read replica that can serve it (``replicas``)."""
        if replica and (served_by := self._replica_for(tx)) is not self:
            return served_by.runQuery(sql, params, row_factory=row_factory, timeout=timeout,
                                      statement_timeout=statement_timeout)
        sql, params = _statement(sql, params)
        factory = self._row_factory if row_factory is None else rows.resolve(row_factory)
        return self._dispatch(tx, Worker.standalone, (ops.query, sql, params, factory), timeout,
                              statement_timeout)

    def runOperation(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
                     timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None) -> Any:
        """Run one statement, autocommitted unless ``tx`` is given; return its rowcount.

        ``runOperation((sql, params))`` (one tuple) also works, as in the 2011 adb.
        """
        sql, params = _statement(sql, params)
        if tx is None:  # the hot path of a burst, one call shorter
            return self._call(self._operation, (ops.operation, sql, params), None, timeout,
                              statement_timeout)
        return self._dispatch(tx, self._operation, (ops.operation, sql, params), timeout,
                              statement_timeout)

    def runMany(self, sql: SQL, seq_of_params: Iterable[Params],
                tx: Optional[Transaction] = None, *,
                timeout: Optional[float] = None, statement_timeout: Optional[float] = None) -> Any:
        """Run ``sql`` once per parameter set by the driver's bulk path, atomically.

        Returns the total rowcount. Outside ``tx`` all sets commit together or not at all.
        """
        sql, _ = _statement(sql, None)
        if isinstance(seq_of_params, (str, bytes)) or not hasattr(seq_of_params, "__iter__"):
            raise TypeError(
                f"runMany needs a sequence of parameter sets, not {type(seq_of_params).__name__}")
        seq = list(seq_of_params)
        for params in seq[:1]:
            _check_params(params)
        return self._dispatch(tx, Worker.atomic, (ops.many, sql, seq), timeout, statement_timeout)

    def runInteraction(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(cursor, *args, **kwargs)`` in a worker, inside one transaction.

        Commits if ``fn`` returns, rolls back and re-raises if it raises; returns
        what ``fn`` returns. ``fn`` runs in a worker thread: it must not touch the loop.
        """
        if not callable(fn):
            raise TypeError(f"runInteraction needs a callable, not {type(fn).__name__}")
        return self._call(Worker.atomic, (ops.interaction, fn, args, kwargs), None, None)

    def beginTransaction(self, *, timeout: Optional[float] = None, replica: bool = False) -> Any:
        """Pin a worker and open a transaction on it; return its handle.

        ``replica=True``: a read-only transaction on a read replica (``replicas``);
        pass its handle to this Database's methods or use its own."""
        if replica:
            db = self._replica_for(None)
            return db._call(Worker.begin, (db._new_tx(), True), None, timeout)
        return self._call(Worker.begin, (self._new_tx(),), None, timeout)

    def commitTransaction(self, tx: Transaction) -> Any:
        """Commit ``tx`` and free its worker. A failed (aborted) transaction is
        rolled back instead and the call fails with TransactionError."""
        return self._finish(tx, True)

    def rollbackTransaction(self, tx: Transaction) -> Any:
        """Roll ``tx`` back and free its worker."""
        return self._finish(tx, False)

    def transaction(self, *, timeout: Optional[float] = None,
                    replica: bool = False) -> TransactionContext:
        """``async with db.transaction() as tx``: commit on success, roll back on error.
        ``replica=True``: read-only, on a read replica (see ``beginTransaction``)."""
        return TransactionContext(self, timeout, replica)

    def runTransaction(self, fn: Callable[..., Any], *args: Any, retries: Optional[int] = None,
                       **kwargs: Any) -> Any:
        """Run ``fn(tx, *args, **kwargs)`` in a transaction and commit; run it again
        from the start, after a short random backoff, when it failed transiently
        (serialization failure, deadlock, lock wait timeout, Galera conflict, a
        connection lost before the commit). ``retries``: how many times at most
        (default: the Database's ``retries``, else ``adb.retry.DEFAULT_RETRIES``).

        ``fn`` is a coroutine function on asyncio/Tornado, may return a Deferred or
        a value on Twisted, and is a plain function on adb.sync. Returns what ``fn``
        returns. A commit whose outcome is unknown is never run again. See
        ``adb.retry``.
        """
        if not callable(fn):
            raise TypeError(f"runTransaction needs a callable, not {type(fn).__name__}")
        if retries is None:
            limit = retry.DEFAULT_RETRIES if self._retries is None else self._retries
        else:
            limit = retry.check_retries(retries)
        if self._refusal is not None:
            raise self._refusal
        work = retry.transaction(self, fn, args, kwargs, limit)
        if self._blocking:
            return run_blocking(work)
        return self._spawn(run_async(work))

    def stream(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
               batch: int = 1000, row_factory: Any = None, timeout: Optional[float] = None,
               idle_timeout: Optional[float] = None, replica: bool = False) -> Any:
        """The rows of ``sql``, ``batch`` at a time, however many there are.

        ``async for row in db.stream(sql)`` (``for`` on adb.sync), or as a
        context manager; ``fetch()`` gives a batch at a time. It holds a worker
        until it ends, in a read-only transaction of its own (``timeout``: the
        wait for that worker) or in ``tx``. At most two batches are held; a
        server-side cursor fetches them where the driver has one. With
        ``idle_timeout``, a consumer that asks for nothing that long finds the
        stream closed (StreamTimeout). ``replica=True``: on a read replica
        (``replicas``). See ``adb.stream``.
        """
        if replica and (served_by := self._replica_for(tx)) is not self:
            return served_by.stream(sql, params, batch=batch, row_factory=row_factory,
                                    timeout=timeout, idle_timeout=idle_timeout)
        sql, params = _statement(sql, params)
        factory = self._row_factory if row_factory is None else rows.resolve(row_factory)
        return self._open_stream(sql, params, tx, batch, factory, timeout, idle_timeout, False)

    def copy_out(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
                 batch: int = 1000, timeout: Optional[float] = None,
                 idle_timeout: Optional[float] = None) -> Any:
        """A stream of ``sql``'s rows as text-format lines (``adb.copytext``): what
        ``copy_in`` loads. ``COPY ... TO STDOUT`` on psycopg 3; elsewhere a stream
        whose rows adb renders. Otherwise as ``stream``."""
        sql, params = _statement(sql, params)
        return self._open_stream(sql, params, tx, batch, rows.tuple_row, timeout,
                                 idle_timeout, True)

    def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                tx: Optional[Transaction] = None, *, timeout: Optional[float] = None) -> Any:
        """Load ``rows`` into ``table`` in one transaction and return the row count.

        ``rows``: an iterable of tuples (read in the worker thread), an async
        iterable of tuples (read on the loop, a chunk at a time), or a file-like
        object of text-format lines (``adb.copytext``). ``COPY ... FROM STDIN`` on
        PostgreSQL; ``LOAD DATA LOCAL INFILE`` on MariaDB/MySQL when the Database
        was opened with ``local_infile=1``, else multi-row INSERTs; ``executemany``
        on SQLite. Atomic: if it fails, no row of it remains (outside ``tx``).
        """
        table, names = bulk.check_target(table, columns)
        bulk.check_source(rows, self._blocking)
        _check_timeout(timeout)
        steps = bulk.load(self, table, names, rows, tx, timeout)
        if self._blocking:
            return run_blocking(steps)
        return self._spawn(run_async(steps))

    def _open_stream(self, sql: Any, params: Params, tx: Optional[Transaction], batch: int,
                     factory: Any, timeout: Optional[float], idle_timeout: Optional[float],
                     export: bool) -> StreamCore:
        if batch is None:
            raise InterfaceError("batch must be a positive integer, not None")
        _check_count(batch, "batch")
        _check_timeout(idle_timeout, "idle_timeout")
        owner = self._replica_of(tx)
        if owner is not None:
            stream: StreamCore = owner._open_stream(sql, params, tx, batch, factory, timeout,
                                                    idle_timeout, export)
            return stream
        if tx is not None:
            self._tx_put(tx)
        kind = SyncStream if self._blocking else self._stream_class
        return kind(self, sql, params, tx, batch, factory, _check_timeout(timeout),
                    idle_timeout, export)

    #: the stream a front-end with futures hands out (Twisted's adds Deferreds)
    _stream_class: type[Stream] = Stream

    def wait_for_room(self) -> Any:
        """Wait until fewer than ``max_queued`` calls wait for a worker (at once without
        ``max_queued``); fails with PoolClosed if the Database closes meanwhile.

        A producer that fires calls faster than the pool runs them waits for this
        before each call, so memory stays bounded however many calls it makes::

            for params in huge_iterable:
                await db.wait_for_room()
                pending.add(db.runOperation(sql, params))  # and discard finished ones
        """
        if self._refusal is not None:
            raise self._refusal
        waiter = self._new_future()
        if self._admission is None:
            self._settle(waiter, True, None)
        else:
            self._admission.wait(waiter)
        return self._returned(waiter, None, None)

    def listen(self, *channels: str, max_queued: int = _listen.DEFAULT_MAX_QUEUED) -> Any:
        """Notifications on ``channels`` (PostgreSQL LISTEN), as a listener.

        ``async for item in db.listen("a", "b")`` (``for`` on adb.sync; Twisted adds
        Deferreds): each item is a ``Notification(channel, payload, pid)`` or a
        ``NotificationGap(reason, missed)``. Every listener of a Database shares one
        listening connection outside the pool; a channel is LISTENed while some
        listener wants it. At most ``max_queued`` items wait per listener: beyond
        that new notifications are dropped, counted, and reported by a gap. A lost
        connection is reopened and reported by a gap. On adb.sync this returns once
        the channels are LISTENed; elsewhere ``await listener.ready()`` for that.
        See ``adb.listen``.
        """
        names = _listen.check_channels(channels)
        limit = _listen.check_max_queued(max_queued)
        hub = self._listen_hub()
        if self._blocking:
            listener = SyncListener(self, hub, names, limit)
            try:
                return listener.ready()
            except BaseException:
                listener.close()
                raise
        self._new_future()  # binds the loop the notifications are delivered on
        return self._listener_class(self, hub, names, limit)

    #: the listener a front-end with futures hands out (Twisted's adds Deferreds)
    _listener_class: type[Listener] = Listener

    def notify(self, channel: str, payload: str = "", tx: Optional[Transaction] = None) -> Any:
        """Send ``payload`` to ``channel``'s listeners (``pg_notify``, run by a worker).
        In ``tx`` it is delivered when ``tx`` commits, and never if it rolls back."""
        _listen.check_channel(channel)
        _listen.check_payload(payload)
        _listen.check_supported(self._driver)
        return self._dispatch(tx, Worker.standalone, (_listen.notify_op, channel, payload), None)

    def _listen_hub(self) -> Hub:
        """The Database's listening hub, started by the first listener."""
        if self._refusal is not None:
            raise self._refusal
        _listen.check_listen(self._driver)
        with self._close_lock:
            if self._hub is None:
                router = Router()
                sink = router.deliver if self._scheduler is None else \
                    _listen.BatchedSink(self._scheduler.call_soon_threadsafe, router)
                self._hub = Hub(self.name, self._driver, router, sink)
            return self._hub

    def _listening_channels(self) -> Any:
        """What the server says the listening connection LISTENs on (for tests:
        ``pg_listening_channels()`` run by the listening thread)."""
        hub = self._listen_hub()
        future = self._new_future()
        settle = self._settle
        hub.router.ask(_listen.Ask(_listen.listening_channels,
                                   lambda ok, value: settle(future, ok, value), False))
        hub.wake()
        return self._returned(future, None, None)

    def stats(self) -> dict[str, Any]:
        """A snapshot of the pool: workers busy/idle/pinned, open streams, queued,
        parked and waiting for room, completed, errors, connects, hand-back wake-ups
        (signalled, and timed while saturated), results settled and the largest batch
        settled at once;
        with ``autobatch``, the units run, the calls they carried, and the units that
        failed and ran one by one; under ``listen``, the listening connection's
        (``adb.listen``: listeners, channels, backend_pid, reconnects, delivered,
        dropped, state)."""
        stats = self._pool.stats()
        stats["name"] = self.name
        stats["closed"] = self.closed
        stats["open_transactions"] = len(self._open_tx)
        stats["streams"] = self._pool.streams()
        stats["transaction_retries"] = self._tx_retries
        admission = self._admission
        stats["parked"] = admission.parked if admission else 0
        stats["waiting_for_room"] = admission.waiting if admission else 0
        for key in ("wakeups", "polls", "settled", "largest_batch"):
            stats[key] = getattr(self._handback, key, None)
        stats["listen"] = _listen.idle_stats() if self._hub is None else self._hub.stats()
        if self._replicas is not None:
            stats.update(self._replicas.stats())
        return stats

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (f"<{type(self).__module__}.{type(self).__name__} {self.name!r} "
                f"{self._driver.target} pool_size={len(self._pool.workers)} {state}>")

    def __del__(self) -> None:
        pool: Optional[Pool] = getattr(self, "_pool", None)
        if pool is not None and not pool.stopping():
            warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self)
            if self._admission is not None:
                self._admission.close()  # parked calls run; their callers may still wait
            pool.stop()
            if self._hub is not None:
                self._hub.stop()
            replicas: Optional[ReplicaSet] = getattr(self, "_replicas", None)
            if replicas is not None:
                replicas.stop()  # its thread ends, and the replicas' Databases warn in turn

    # -- one call ----------------------------------------------------------------------

    def _make_handback(self, saturated: Callable[[], bool]) -> Handback:
        after = None if self._admission is None else self._admission.after
        loop = self._scheduler
        if loop is None:
            return DirectHandback(self._settle, after)
        return BatchedHandback(loop.call_soon_threadsafe, self._settle, after,
                               loop.call_later, saturated)

    def _dispatch(self, tx: Optional[Transaction], fn: JobFn, args: tuple[Any, ...],
                  timeout: Optional[float], statement_timeout: Optional[float] = None) -> Any:
        if tx is None:
            return self._call(fn, args, None, timeout, statement_timeout)
        owner = self._replica_of(tx)
        if owner is not None:
            return owner._dispatch(tx, fn, args, timeout, statement_timeout)
        return self._call(Worker.in_transaction, args, self._tx_put(tx), None, statement_timeout)

    # -- read replicas (adb.replicas) --------------------------------------------------

    @property
    def replicas(self) -> tuple[Any, ...]:
        """The replicas' own Databases (each with its ``stats()``), in the order given."""
        return () if self._replicas is None else tuple(self._replicas.dbs)

    def _replica_for(self, tx: Optional[Transaction]) -> Any:
        """The Database a ``replica=True`` call goes to (see ``ReplicaSet.choose``);
        this one when it has no replicas."""
        if tx is not None:
            raise InterfaceError("replica=True with tx=: a transaction's statements run where "
                                 "it began (begin it with replica=True)")
        if self._refusal is not None:
            raise self._refusal
        return self if self._replicas is None else self._replicas.choose(self)

    def _replica_of(self, tx: object) -> Any:
        """The replica Database of this one that ``tx`` belongs to (it was begun with
        ``replica=True``), which then takes the call; None for any other handle."""
        if self._replicas is None or not isinstance(tx, Transaction) or tx.db is self:
            return None
        return next((db for db in self._replicas.dbs if tx.db is db), None)

    def _savepoint(self, tx: Transaction, statements: tuple[str, ...], result: Any) -> Any:
        """Run a savepoint's statements in ``tx``; the caller gets ``result``."""
        return self._call(Worker.in_transaction, (ops.savepoint, statements, result),
                          self._tx_put(tx), None)

    def _delay(self, seconds: float) -> F:
        """A future settled after ``seconds`` (a blocking front-end sleeps first)."""
        future = self._new_future()
        if self._blocking:
            time.sleep(seconds)
            self._settle(future, True, None)
        else:
            self._require_loop().call_later(seconds, self._settle, future, True, None)
        return future

    def _count_retry(self) -> None:
        with self._tx_retries_lock:
            self._tx_retries += 1

    def _connect_wait(self) -> float:
        """Seconds until the pool may try to connect again after failing to."""
        return self._pool.connect_wait()

    def _interact_in(self, tx: Transaction, fn: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
        return self._call(Worker.in_transaction, (ops.interaction, fn, args, kwargs),
                          self._tx_put(tx), None)

    def _tx_put(self, tx: Transaction) -> Callable[[Job], None]:
        if not isinstance(tx, Transaction):
            raise TypeError(
                f"tx must be a transaction handle from beginTransaction(), not {type(tx).__name__}")
        tx.check(self)
        return tx.queue.put

    def _begin(self, read_only: bool, timeout: Optional[float]) -> tuple[Transaction, Any]:
        """A transaction for a stream or a bulk load: its handle, and the future of
        its begin (settled already on a blocking front-end, which waited)."""
        tx = self._new_tx()
        begun = self._call(Worker.begin, (tx, read_only), None, timeout)
        if self._blocking:
            settled = self._new_future()
            self._settle(settled, True, begun)
            return tx, settled
        return tx, begun

    def _new_tx(self) -> Transaction:
        """A handle for a transaction about to begin, counted as open."""
        if self._refusal is not None:
            raise self._refusal
        tx = Transaction(self)
        self._open_tx.add(tx)
        return tx

    def _submit(self, fn: JobFn, args: tuple[Any, ...], put: Callable[[Job], None]) -> F:
        """Queue one job with ``put`` and return its future, without waiting on any
        front-end (a stream's requests: it waits when its consumer needs them)."""
        if self._refusal is not None:
            raise self._refusal
        future = self._new_future()
        trace = None if self._telemetry is None else self._telemetry.trace()
        put((future, fn, None, self._statement_timeout, trace) + args)
        return future

    def _end_tx(self, tx: Transaction, commit: bool) -> F:
        """Commit or roll back ``tx``, returning the future without waiting."""
        put = self._tx_put(tx)
        self._forget_tx(tx)
        return self._submit(Worker.finish, (tx, commit), put)

    def _forget_tx(self, tx: Transaction) -> None:
        """``tx`` is ending: it is no longer an open transaction of this Database."""
        tx.state = TxState.ENDING
        self._open_tx.discard(tx)

    def _finish(self, tx: Transaction, commit: bool) -> Any:
        owner = self._replica_of(tx)
        if owner is not None:
            return owner._finish(tx, commit)
        put = self._tx_put(tx)
        tx.state = TxState.ENDING
        self._open_tx.discard(tx)
        return self._call(Worker.finish, (tx, commit), put, None)

    def _call(self, fn: JobFn, args: tuple[Any, ...],
              put: Optional[Callable[[Job], None]], timeout: Optional[float],
              statement_timeout: Optional[float] = None) -> Any:
        """Queue one job (``put`` None: shared work) and return what the caller gets."""
        if self._refusal is not None:
            raise self._refusal
        if statement_timeout is None:
            statement_timeout = self._statement_timeout
        else:
            _check_timeout(statement_timeout, "statement_timeout")
        claim = None
        if put is None:
            put = self._put_shared
            if timeout is None:
                timeout = self._timeout
            if timeout is not None:
                claim = Claim()
        future = self._new_future()
        put((future, fn, claim, statement_timeout,  # call.job(), inlined (see Job)
             None if self._telemetry is None else self._telemetry.trace()) + args)
        return self._returned(future, claim, timeout)

    def _returned(self, future: F, claim: Optional[Claim], timeout: Optional[float]) -> Any:
        """What a public method returns: the future (its claim expires after ``timeout``),
        or, on a blocking front-end, its value once settled."""
        if self._blocking:
            waiter = cast(Waitable, future)
            if claim is not None and not waiter.wait(timeout):
                if claim.take():
                    raise self._pool_timeout(timeout)
                waiter.wait(None)  # a worker started it meanwhile: wait for the result
            elif claim is None:
                waiter.wait(None)
            return waiter.result()
        if claim is not None and timeout is not None:  # a claim comes with a timeout
            self._require_loop().call_later(timeout, self._expire, future, claim, timeout)
        return future

    def _require_loop(self) -> Scheduler:
        """The scheduler of the loop thread (a front-end with futures has one)."""
        if self._scheduler is None:
            raise TypeError(f"{type(self).__name__} is blocking: it has no loop thread")
        return self._scheduler

    def _expire(self, future: F, claim: Claim, timeout: float) -> None:
        """A call's wait for a worker ran out (loop thread): unless a worker took it
        first, it never runs and fails with PoolTimeout."""
        if claim.take():
            self._settle(future, False, self._pool_timeout(timeout))

    def _pool_timeout(self, timeout: Optional[float]) -> PoolTimeout:
        """The PoolTimeout for a call that waited ``timeout`` s for a worker in vain."""
        stats = self._pool.stats()
        pinned = (f" ({stats['pinned']} of {stats['pool_size']} workers are pinned by "
                  "transactions)" if stats["pinned"] else "")
        return PoolTimeout(f"no worker of the Database {self.name!r} became free within "
                           f"{timeout} s{pinned}; the call did not run")

    # -- the entry points of the adbapi drop-in (adb.twisted.ConnectionPool) -----------

    def _run_op(self, op: ops.Op, args: tuple[Any, ...], *, atomic: bool) -> F:
        """Queue the drop-in's own ``op(cursor, driver, *args)`` (adbapi's call forms):
        in a transaction of its own (``atomic``), or as one standalone statement."""
        fn: JobFn = Worker.atomic if atomic else Worker.standalone
        return cast(F, self._call(fn, (op, *args), None, None))

    def _start_workers(self) -> None:
        """Start the workers of a Database built with ``_pool_options={"start": False}``."""
        self._pool.start()

    @property
    def _workers(self) -> Pool:
        """The pool of workers (adbapi's ``threadpool``; read-only use)."""
        return self._pool

    @property
    def _connections(self) -> dict[int, Connection]:
        """Worker thread id -> its DB-API connection (adbapi's ``connections``)."""
        return self._pool.connections

    def _connect_direct(self) -> Connection:
        """A new connection outside the pool, for the calling thread (blocking)."""
        return self._driver.connect()

    def _disconnect_direct(self, conn: Connection) -> None:
        """Close a connection ``_connect_direct`` opened."""
        self._driver.close(conn)

    # -- the close sequence, for every front-end -------------------------------------

    def _close(self, timeout: Optional[float] = None) -> F:
        """Close; return a future settled on the loop thread once every worker thread
        has ended and every call the Database accepted has been settled.

        1. New calls and ``wait_for_room`` fail with PoolClosed.
        2. Open transactions roll back (their workers are told to abandon them).
        3. Parked calls (``max_queued``) join the queue; room waiters get PoolClosed.
        4. The workers run every queued call, then exit (a STOP per worker, queued last).
        5. With ``timeout`` (seconds), calls still queued then fail with PoolClosed;
           calls already running are waited for.
        6. The watchdog joins the worker threads, fails anything that slipped in
           behind the STOPs, and ``_closed`` runs on the loop thread.
        Idempotent: every call returns a future settled at the same moment.
        """
        if self._replicas is not None and not self._blocking:
            return self._spawn(self._close_with_replicas(timeout))
        return self._close_own(timeout)

    async def _close_with_replicas(self, timeout: Optional[float]) -> None:
        """Close the replicas' Databases and this one together; done when all are."""
        closing = [db._close(timeout) for db in self.replicas]
        own = self._close_own(timeout)
        for future in closing:
            await future
        await cast(Any, own)

    def _close_own(self, timeout: Optional[float] = None) -> F:
        done = self._new_future()
        if self._close_state is CloseState.CLOSED:
            self._settle(done, True, None)
            return done
        self._close_futures.append(done)
        limit = _check_timeout(timeout)
        if self._stop_accepting() and limit is not None:
            self._close_timer = self._require_loop().call_later(limit, self._close_timed_out)
        return done

    def _close_blocking(self, timeout: Optional[float] = None) -> None:
        """The close sequence of ``_close``, blocking the calling thread until it is done.
        ``timeout`` is one overall limit on the wait for queued calls."""
        for replica in self.replicas:
            replica._close_blocking(timeout)
        self._stop_accepting()
        if not self._pool.wait_stopped(_check_timeout(timeout)):
            self._fail_queued()
            self._pool.wait_stopped()
        self._closed()

    def _stop_accepting(self) -> bool:
        """Steps 1-4 of the close sequence; False if an earlier close already took them."""
        with self._close_lock:
            if self._close_state is not CloseState.OPEN:
                return False
            self._close_state = CloseState.CLOSING
        self._refusal = PoolClosed.refused(self.name)
        for tx in list(self._open_tx):
            tx.abandon("because the Database is closing")
        if self._admission is not None:
            self._admission.close()
        self._pool.stop()
        if self._hub is not None:
            self._hub.stop()
        if self._replicas is not None:
            self._replicas.stop()
        return True

    def _close_timed_out(self) -> None:
        self._close_timer = None  # fired: a Twisted DelayedCall may not be cancelled now
        self._fail_queued()

    def _fail_queued(self) -> None:
        self._pool.fail_queued(PoolClosed.before_run(self.name))

    def _workers_exited(self) -> None:
        """Every worker thread has ended (watchdog thread): finish on the loop thread,
        if a ``_close`` future waits (``_close_blocking`` finishes by itself)."""
        if self._scheduler is not None and self._close_futures:
            try:
                self._scheduler.call_soon_threadsafe(self._closed)
            except RuntimeError:  # the loop is closed: nobody waits for the close
                pass

    def _closed(self) -> None:
        """The last step (loop thread, or the closing thread): stop hand-back polling,
        drop the embedded default's file, settle every close future. Once."""
        with self._close_lock:
            if self._close_state is CloseState.CLOSED:
                return
            self._close_state = CloseState.CLOSED
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        self._handback.stop()
        self._end_listeners()
        _live.discard(self)
        self._remove_tempfile()
        futures, self._close_futures = self._close_futures, []
        for future in futures:
            self._settle(future, True, None)

    def _end_listeners(self) -> None:
        """Close step: wait for the listening thread (it closes its connection), hand
        over what it read, and end every listener after what it has queued."""
        hub = self._hub
        if hub is None:
            return
        hub.stop()
        hub.join()
        if isinstance(hub.sink, _listen.BatchedSink):
            hub.sink.drain()
        hub.router.end_all()

    def _remove_tempfile(self) -> None:
        if self._tempfile:
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.remove(self._tempfile + suffix)
                except FileNotFoundError:
                    pass
            self._tempfile = None


def frontend_doc(doc: Optional[str]) -> str:
    """A front-end Database's docstring with every front-end's options appended.

    The class keeps a short docstring of its own (what the API reference renders,
    next to ``BaseDatabase``'s page); ``help()`` shows this longer form, so the
    options are one keystroke away in a REPL too.
    """
    common = (BaseDatabase.__doc__ or "").split("\n\n    The front-end interface.")[0]
    options = common.split("\n\n", 1)[1].lstrip()  # without its summary line
    heading = "Options of every front-end (``adb.core.BaseDatabase``):"
    return f"{(doc or '').rstrip()}\n\n    {heading}\n\n    {options}"


def _weak_method(method: Callable[[], None]) -> Callable[[], None]:
    """``method()`` while its object lives; nothing once it has been collected."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()
    return call


_PLAIN_PARAMS = frozenset({tuple, list, dict})


def _statement(sql: object, params: Any) -> tuple[Union[str, bytes], Params]:
    """The statement and its parameters, checked (caller's thread: TypeError now)."""
    if params is None and isinstance(sql, tuple) and len(sql) == 2:
        sql, params = sql  # the 2011 form: runOperation((sql, params))
    if not isinstance(sql, (str, bytes)):
        raise TypeError(f"SQL must be a str, not {type(sql).__name__}")
    if params is not None:
        _check_params(params)
    return sql, params


def _check_params(params: object) -> None:
    if type(params) in _PLAIN_PARAMS:  # the common case, without ABC checks
        return
    if isinstance(params, (str, bytes)):
        raise TypeError(
            f"parameters must be a tuple, list or dict, not {type(params).__name__} "
            f"(for one value write ({params!r},))")
    if not isinstance(params, (Sequence, Mapping)):
        raise TypeError(f"parameters must be a tuple, list or dict, not {type(params).__name__}")


def _check_pool_size(pool_size: Optional[int], driver: Driver, fit: bool = False) -> int:
    """The pool size to use; ``fit`` caps a larger one at the driver's limit instead
    of refusing it (adbapi users open ``":memory:"`` with ``cp_max=5``)."""
    limit = driver.max_pool_size
    if pool_size is None:
        return limit or DEFAULT_POOL_SIZE
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise InterfaceError(f"pool_size must be a positive integer, not {pool_size!r}")
    if limit is not None and pool_size > limit:
        if fit:
            return limit
        raise InterfaceError(f"pool_size={pool_size} is impossible for {driver.target}: "
                             f"{driver.max_pool_size_reason}")
    return pool_size


def _check_timeout(timeout: object, name: str = "timeout") -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InterfaceError(f"{name} must be a number of seconds >= 0, not {timeout!r}")
    return timeout


def _check_count(count: object, name: str) -> Optional[int]:
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InterfaceError(f"{name} must be a positive integer, not {count!r}")
    return count


__all__ = ["BaseDatabase", "frontend_doc"]
