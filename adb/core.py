"""BaseDatabase: the public API, written once for every front-end.

Each public method checks its arguments (a wrong type fails now, in the caller's
thread) and makes one call into the engine (``adb.engine``), which does the
plumbing, or into a feature (``adb.stream``, ``adb.bulk``, ``adb.retry``,
``adb.listener``), which takes the engine. A front-end is one small module: a
subclass that hands ``__init__`` its ``FrontEnd`` (``adb.frontend``: how its callers
wait) and says, for the type checker, what each method returns there.
``docs/architecture.md`` shows the layers and the life of one call.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, Union

from . import bulk, listen, retry, rows
from .args import (NOT_PARAMS, PLAIN, SQL, Params, check_callable, check_interaction, check_tx,
                   many, statement)
from .engine import Engine
from .errors import InterfaceError
from .frontend import F, FrontEnd
from .op import Op
from .options import (EMBEDDED, Embedded, PoolOptions, check_flag, check_isolation, check_positive,
                      check_retries, check_timeout, parse)
from .stream import StreamCore
from .target import Target
from .telemetry import INTERACTION, NOTIFY, many_what
from .transaction import Transaction, TransactionContext

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .options import Options

log = logging.getLogger("adb")

#: what a Database connects to: a URL, a Target, or EMBEDDED (no URL given)
URL = Union[str, Target, Embedded]
#: the ops of the two commonest calls, read as globals on their hot path
_QUERY, _OPERATION = Op.QUERY, Op.OPERATION


class BaseDatabase(Generic[F]):
    """A pool of worker threads, each with one DB-API connection.

    Options (keywords, the same on every front-end; each typed in ``adb.options.Options``):

    - ``driver``: a driver name (``"psycopg2"``, ``"psycopg"``, ``"pymysql"``,
      ``"sqlite3"``, or any importable PEP 249 module) for the keyword form; the
      remaining keywords go to the driver's ``connect()``.
    - ``pool_size``: number of worker threads and connections (default 10).
    - ``row_factory``: ``"tuple"`` (default), ``"dict"``, ``"namedtuple"``,
      ``"attrdict"`` (dicts whose keys are also attributes, as torndb's rows) or a
      callable ``(description, rows) -> list``.
    - ``timeout``: default seconds a call may wait for a free worker before it
      fails with ``PoolTimeout`` (it then never runs); None waits forever.
    - ``name``: a name for reprs, thread names and errors.
    - ``on_connect``: called with every new DB-API connection, in its worker
      thread, before it serves (session setup such as ``SET TIME ZONE``); it is
      called again after each reconnect.
    - ``statement_timeout``: default seconds a call may run; past it the call is
      cancelled on the server and fails with ``StatementTimeout``. None: no limit.
    - ``max_queued``: most calls that may wait for a worker; None: no limit.
    - ``on_full``: what a call does when ``max_queued`` calls already wait:
      ``"wait"`` (default: it is accepted and queued as room frees up; see
      ``wait_for_room``) or ``"raise"`` (``QueueFull``).
    - ``max_lifetime``: seconds after which a connection is replaced (between
      calls, never inside a transaction), less up to 5% jitter.
    - ``max_idle``: seconds a worker keeps an unused connection open.
    - ``check_idle``: run ``select 1`` before using a connection idle this long.
    - ``autobatch``: group commit: a worker that takes a standalone ``runOperation``
      while more wait runs up to this many of them as one unit (one round trip,
      one commit), each caller still getting its own rowcount or error; None
      (default): off. What it changes is in ``docs/usage.md`` ("Group commit")
      and ``adb.worker`` (its contract) and ``adb.sqltext`` (which statements qualify).
    - ``pipeline``: a worker that takes a standalone ``runQuery``/``runOperation``
      (or a row/value helper) while more wait sends up to 64 of them before reading
      any result, each still its own statement, transaction, result and error
      (``adb.pipeline``). PyMySQL: on by default; psycopg 3: off by default (measured
      slower); False/True (or the URL's ``?pipeline=off``/``on``) says otherwise.
      ``docs/usage.md`` ("Pipelines").
    - ``retries``: run a standalone ``runQuery``/``runOperation``/``runMany``
      again, up to this many times with backoff, when it failed transiently
      having taken no effect (a deadlock victim, a serialization failure, a
      busy SQLite file, no connection to be had); also ``runTransaction``'s
      default. Default: 0 for calls, ``adb.retry.DEFAULT_RETRIES`` for
      ``runTransaction``.
    - ``replicas``: URLs of read replicas (hot standbys, replicas, cluster nodes):
      ``runQuery``, ``stream`` and ``transaction``/``beginTransaction`` with
      ``replica=True`` go to one of them that is up and within
      ``max_replica_lag``, everything else to the primary (``url``). Each is a
      Database of this front-end with the same options (its own pool); connect
      keywords given here apply to each. See ``adb.replicas``.
    - ``max_replica_lag``: seconds a replica may be behind its primary and still
      serve reads; None (default): no bound, only its health counts.
    - ``replica_fallback``: where a ``replica=True`` read goes when no replica can
      serve it: ``"primary"`` (default) or ``"raise"`` (``ReplicaUnavailable``).
    - ``pooler``: ``"transaction"`` or ``"session"`` when the URL is a pooler's
      such as pgbouncer (also ``?pooler=`` in the URL); None (default): the
      server itself. The driver then works the way that pooler mode allows: the
      cancel request of ``statement_timeout`` goes through the pooler, psycopg 3
      never prepares statements (transaction mode), and ``listen()`` refuses
      (transaction mode) instead of missing notifications. ``docs/poolers.md``.
    - ``telemetry``: True: an OpenTelemetry span per call and the database
      client metrics (needs the ``otel`` extra; an SDK records them, else
      they cost little and record nothing). See ``adb.telemetry``.
    - ``slow_call``: seconds: log a WARNING (logger ``adb``) for every call that
      takes longer, from queued to done, with its statement (never its
      parameters), its wait for a worker and its run time. None (default): off.
    - ``tracer_provider``: the OpenTelemetry TracerProvider to use instead of
      the global one (implies ``telemetry=True``).
    - ``meter_provider``: the MeterProvider to use instead of the global one
      (implies ``telemetry=True``).

    :param url: ``postgresql://user:pw@host:port/db``, ``mysql://...``,
        ``sqlite:///path`` or ``sqlite://`` (memory); None with no ``driver``
        means a private SQLite file, removed on close (the embedded default).
    :param options: the options above.

    A front-end's subclass passes its ``FrontEnd`` first (positional only: no
    option can take its place).
    """

    _frontend: FrontEnd[F]

    def __init__(self, frontend: FrontEnd[F], url: URL = EMBEDDED, /,
                 **options: Unpack[Options]) -> None:
        self._frontend = frontend
        if url is None:
            raise InterfaceError(
                "the database URL is None (an environment variable not set?): give a URL "
                "such as 'postgresql://user@host/db', or no URL at all, Database(), for the "
                "embedded default (a private SQLite file, removed on close)")
        self._adopt(Engine(None if url is EMBEDDED else url, parse(options), self._frontend,
                           self._pool_options()))
        self._frontend.label = f"the Database {self.name!r}"
        log.debug("%r created", self)

    def _adopt(self, engine: Engine[F]) -> None:
        """Serve the public API on ``engine``; each of its replicas gets a Database
        of this front-end too (``replicas``)."""
        self._engine = engine
        self.name = engine.name
        self._standalone = engine.standalone
        self._replicas = tuple(self._sibling(replica) for replica in
                               (engine.replicas.engines if engine.replicas else ()))

    def _sibling(self, engine: Engine[F]) -> BaseDatabase[F]:
        """A Database of this front-end on ``engine`` (a replica's), sharing the front-end."""
        sibling = type(self).__new__(type(self))
        sibling._frontend = self._frontend
        sibling._adopt(engine)
        return sibling

    def _pool_options(self) -> PoolOptions:
        """The protected pool options (``adb.options.PoolOptions``); a subclass for
        adb's own use (the adbapi drop-in, tests) overrides it."""
        return {}

    # -- properties ----------------------------------------------------------------------

    @property
    def paramstyle(self) -> str:
        """The driver's PEP 249 paramstyle: ``'pyformat'`` (``%s``) or ``'qmark'`` (``?``)."""
        return self._engine.driver.paramstyle

    @property
    def dbapi(self) -> Any:  # a PEP 249 module: untyped by nature
        """The driver module, for catching its exceptions (``db.dbapi.IntegrityError``)."""
        return self._engine.driver.dbapi

    @property
    def closed(self) -> bool:
        """True from the moment ``close()`` begins: the Database takes no more calls."""
        return self._engine.closed

    @property
    def replicas(self) -> tuple[Any, ...]:
        """The replicas' own Databases (each with its ``stats()``), in the order given."""
        return self._replicas

    def connect(self, *, timeout: Optional[float] = None) -> Any:
        """Open the pool's first connection now (a worker connects, or checks the
        connection it has), so that a wrong URL, password or database fails here, at
        start-up, with the real error, not at the first request. ``async with
        Database(...)`` (``with`` on adb.sync) does it on entry.

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires).

        :param timeout: seconds it may wait for a free worker (default: the
            Database's ``timeout``).
        :raises ConnectionRejected: the server rejected the connection: credentials,
            database or an option value it refuses (never retried).
        :raises ServerUnavailable: the server cannot be reached now.
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``.
        """
        return self._engine.connect(timeout)

    # -- the 2011 calls ------------------------------------------------------------------

    def runQuery(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
                 row_factory: Any = None, timeout: Optional[float] = None,
                 statement_timeout: Optional[float] = None, replica: bool = False) -> Any:
        """Run a query and return its rows as a list (rows shaped by the row factory).

        ``replica=True``: on a read replica that can serve it (``replicas``).

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param sql: the statement, in the driver's paramstyle (``db.paramstyle``), or
            the 2011 form ``(sql, params)`` as one argument.
        :param params: its parameters (a tuple, list or dict), sent apart from the
            text: never formatted into it.
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :param row_factory: how to shape these rows: ``"tuple"``, ``"dict"``,
            ``"namedtuple"``, ``"attrdict"`` or a callable (default: the Database's).
        :param timeout: seconds it may wait for a free worker (default: the
            Database's ``timeout``); past it, it fails and never runs.
        :param statement_timeout: seconds it may run (default: the Database's);
            past it, it is cancelled on the server.
        :param replica: run it on a read replica that can serve it (``replicas``).
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises StatementTimeout: it ran past ``statement_timeout`` and was cancelled.
        :raises ConnectionLost: the connection broke under it; ``may_have_run`` says
            whether it may have taken effect (``ServerUnavailable``: it never did).
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises ReplicaUnavailable: ``replica=True``, no replica can serve, and
            ``replica_fallback="raise"``.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        engine = self._engine.reader(tx) if replica else self._engine
        if tx is not None:
            return self._in(tx, "runQuery", params).runQuery(
                sql, params, row_factory=row_factory, timeout=timeout,
                statement_timeout=statement_timeout)
        if type(sql) is not str or type(params) not in PLAIN:  # else statement() passes them
            sql, params = statement(sql, params)
        factory = engine.row_factory if row_factory is None else rows.resolve(row_factory)
        return engine.standalone(_QUERY, (sql, params, factory), timeout, statement_timeout,
                                 sql)

    def runQueryRow(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
                    row_factory: Any = None, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None, replica: bool = False) -> Any:
        """Run a query and return its first row (shaped by the row factory), or None
        when it has none: ``row = await db.runQueryRow("select ... where id = %s", (1,))``.
        The rest of its rows, if any, are not fetched. Otherwise as ``runQuery``.

        :param sql: the statement, in the driver's paramstyle (``db.paramstyle``), or
            the 2011 form ``(sql, params)`` as one argument.
        :param params: its parameters (a tuple, list or dict), sent apart from the
            text: never formatted into it.
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :param row_factory: how to shape the row (default: the Database's).
        :param timeout: seconds it may wait for a free worker (default: the
            Database's ``timeout``); past it, it fails and never runs.
        :param statement_timeout: seconds it may run (default: the Database's);
            past it, it is cancelled on the server.
        :param replica: run it on a read replica that can serve it (``replicas``).
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises StatementTimeout: it ran past ``statement_timeout`` and was cancelled.
        :raises ConnectionLost: the connection broke under it (``may_have_run``).
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error``).
        """
        engine = self._engine.reader(tx) if replica else self._engine
        if tx is not None:
            return self._in(tx, "runQueryRow", params).runQueryRow(
                sql, params, row_factory=row_factory, timeout=timeout,
                statement_timeout=statement_timeout)
        if type(sql) is not str or type(params) not in PLAIN:  # else statement() passes them
            sql, params = statement(sql, params)
        factory = engine.row_factory if row_factory is None else rows.resolve(row_factory)
        return engine.standalone(Op.QUERY_ROW, (sql, params, factory), timeout,
                                 statement_timeout, sql)

    def runQueryValue(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
                      timeout: Optional[float] = None, statement_timeout: Optional[float] = None,
                      replica: bool = False) -> Any:
        """Run a query and return the first column of its first row, or None when it
        has no row: ``n = await db.runQueryValue("select count(*) from t")``.
        Otherwise as ``runQuery``.

        :param sql: the statement, in the driver's paramstyle (``db.paramstyle``), or
            the 2011 form ``(sql, params)`` as one argument.
        :param params: its parameters (a tuple, list or dict), sent apart from the
            text: never formatted into it.
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :param timeout: seconds it may wait for a free worker (default: the
            Database's ``timeout``); past it, it fails and never runs.
        :param statement_timeout: seconds it may run (default: the Database's);
            past it, it is cancelled on the server.
        :param replica: run it on a read replica that can serve it (``replicas``).
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises StatementTimeout: it ran past ``statement_timeout`` and was cancelled.
        :raises ConnectionLost: the connection broke under it (``may_have_run``).
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error``).
        """
        engine = self._engine.reader(tx) if replica else self._engine
        if tx is not None:
            return self._in(tx, "runQueryValue", params).runQueryValue(
                sql, params, timeout=timeout,
                statement_timeout=statement_timeout)
        if type(sql) is not str or type(params) not in PLAIN:  # else statement() passes them
            sql, params = statement(sql, params)
        return engine.standalone(Op.QUERY_VALUE, (sql, params), timeout, statement_timeout,
                                 sql)

    def runOperation(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
                     timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None) -> Any:
        """Run one statement, autocommitted unless ``tx`` is given; return its rowcount.

        ``runOperation((sql, params))`` (one tuple) also works, as in the 2011 adb.

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param sql: the statement, in the driver's paramstyle (``db.paramstyle``), or
            the 2011 form ``(sql, params)`` as one argument.
        :param params: its parameters (a tuple, list or dict), sent apart from the
            text: never formatted into it.
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :param timeout: seconds it may wait for a free worker (default: the
            Database's ``timeout``); past it, it fails and never runs.
        :param statement_timeout: seconds it may run (default: the Database's);
            past it, it is cancelled on the server.
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises StatementTimeout: it ran past ``statement_timeout`` and was cancelled.
        :raises ConnectionLost: the connection broke under it; ``may_have_run`` says
            whether it may have taken effect (``ServerUnavailable``: it never did).
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        if tx is not None:
            return self._in(tx, "runOperation", params).runOperation(
                sql, params, timeout=timeout,
                statement_timeout=statement_timeout)
        if type(sql) is not str or type(params) not in PLAIN:  # else statement() passes them
            sql, params = statement(sql, params)
        return self._standalone(_OPERATION, (sql, params), timeout, statement_timeout, sql)

    def runMany(self, sql: SQL, seq_of_params: Iterable[Params],
                tx: Optional[Transaction] = None, *,
                timeout: Optional[float] = None, statement_timeout: Optional[float] = None) -> Any:
        """Run ``sql`` once per parameter set by the driver's bulk path, atomically.

        Returns the total rowcount. Outside ``tx`` all sets commit together or not at all.

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param sql: the statement, in the driver's paramstyle (``db.paramstyle``).
        :param seq_of_params: its parameter sets, one per run.
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :param timeout: seconds it may wait for a free worker (default: the
            Database's ``timeout``); past it, it fails and never runs.
        :param statement_timeout: seconds it may run (default: the Database's);
            past it, it is cancelled on the server.
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises StatementTimeout: it ran past ``statement_timeout`` and was cancelled.
        :raises ConnectionLost: the connection broke under it; ``may_have_run`` says
            whether it may have taken effect (``ServerUnavailable``: it never did).
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        if tx is not None:
            return self._in(tx, "runMany").runMany(sql, seq_of_params, timeout=timeout,
                                                   statement_timeout=statement_timeout)
        sql, seq = many(sql, seq_of_params)
        return self._standalone(Op.MANY, (sql, seq), timeout, statement_timeout,
                                many_what(sql, len(seq)))

    def runInteraction(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(cursor, *args, **kwargs)`` in a worker, inside one transaction.

        Commits if ``fn`` returns, rolls back and re-raises if it raises; returns
        what ``fn`` returns. ``fn`` runs in a worker thread: it must not touch the loop.

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param fn: ``fn(cursor, *args, **kwargs)``, run in a worker thread.
        :param args: passed to ``fn`` after the cursor.
        :param kwargs: passed to ``fn``.
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises ConnectionLost: the connection broke under it (``may_have_run``).
        :raises TransactionError: ``fn`` returned after an error that made the
            server abort its transaction (PostgreSQL): rolled back, not committed.
        :raises Exception: what ``fn`` raised (the transaction was rolled back), or
            the driver's own errors.
        """
        check_interaction(fn)
        return self._standalone(Op.INTERACTION, (fn, args, kwargs), what=INTERACTION)

    def beginTransaction(self, *, timeout: Optional[float] = None, replica: bool = False,
                         isolation: Optional[str] = None, read_only: bool = False) -> Any:
        """Pin a worker and open a transaction on it; return its handle.

        ``replica=True``: a read-only transaction on a read replica (``replicas``);
        pass its handle to this Database's methods or use its own.

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param timeout: seconds it may wait for a free worker (default: the
            Database's ``timeout``).
        :param replica: a read-only transaction on a read replica.
        :param isolation: its isolation level: ``"read committed"``, ``"repeatable
            read"``, ``"serializable"`` or ``"read uncommitted"`` (default None: the
            server's own). SQLite runs every transaction serializable.
        :param read_only: a transaction that only reads: a write in it fails.
        :raises InterfaceError: an isolation level unknown, or not one the server has.
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises ServerUnavailable: no connection could be opened.
        :raises ReplicaUnavailable: ``replica=True``, no replica can serve, and
            ``replica_fallback="raise"``.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        level = check_isolation(isolation)
        only_reads = check_flag(read_only, "read_only") or replica
        return self._engine_for(replica).begin(only_reads, timeout, level)

    def commitTransaction(self, tx: Transaction) -> Any:
        """Commit ``tx`` and free its worker. A failed (aborted) transaction is
        rolled back instead and the call fails with TransactionError.

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param tx: the handle ``beginTransaction`` gave.
        :raises TransactionError: ``tx`` is finished, belongs to another Database, was
            aborted by an earlier error (it was rolled back) or lost its connection.
        :raises ConnectionLost: the connection broke during the COMMIT: it may or may
            not have committed (``may_have_run=True``).
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        return self._engine.route(tx).finish(tx, True)

    def rollbackTransaction(self, tx: Transaction) -> Any:
        """Roll ``tx`` back and free its worker.

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param tx: the handle ``beginTransaction`` gave.
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        return self._engine.route(tx).finish(tx, False)

    def transaction(self, *, timeout: Optional[float] = None, replica: bool = False,
                    isolation: Optional[str] = None,
                    read_only: bool = False) -> TransactionContext[Transaction]:
        """``async with db.transaction() as tx``: commit on success, roll back on error.
        ``replica=True``: read-only, on a read replica (see ``beginTransaction``).

        :param timeout: seconds the block's begin may wait for a free worker.
        :param replica: a read-only transaction on a read replica.
        :param isolation: its isolation level: ``"read committed"``, ``"repeatable
            read"``, ``"serializable"`` or ``"read uncommitted"`` (default None: the
            server's own). SQLite runs every transaction serializable.
        :param read_only: a transaction that only reads: a write in it fails.
        :raises InterfaceError: an isolation level unknown, or not one the server has.
        :raises PoolTimeout: on entering the block: no worker became free within ``timeout``.
        :raises TransactionError: on leaving it: the commit failed (see ``commitTransaction``).
        :raises PoolClosed: the Database is closed or closing.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        level = check_isolation(isolation)
        only_reads = check_flag(read_only, "read_only") or replica
        return TransactionContext(functools.partial(self._begin_pending, replica, timeout,
                                                    level, only_reads))

    def _begin_pending(self, replica: bool, timeout: Optional[float], isolation: Optional[str],
                       read_only: bool) -> tuple[Transaction, Any]:
        return self._engine_for(replica).begin_pending(read_only, timeout, isolation)

    def _engine_for(self, replica: bool) -> Engine[F]:
        """This Database's engine, or for ``replica=True`` a replica's that can serve."""
        return self._engine.reader() if replica else self._engine

    def _in(self, tx: object, method: str, params: object = NOT_PARAMS) -> Transaction:
        """``tx``, checked to be a transaction of this Database (or of its replicas);
        what ``method`` got as ``tx`` when it is not a handle at all is named
        (``check_tx``: most often the second of parameters passed one by one)."""
        if not isinstance(tx, Transaction):
            check_tx(method, params, tx)
        self._engine.route(tx)
        return tx  # type: ignore[return-value]

    # -- beyond 2011 ---------------------------------------------------------------------

    def runTransaction(self, fn: Callable[..., Any], *args: Any, retries: Optional[int] = None,
                       isolation: Optional[str] = None, read_only: bool = False,
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

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param fn: ``fn(tx, *args, **kwargs)``: a coroutine function on
            asyncio/Tornado, a function returning a Deferred or a value on Twisted,
            a plain function on adb.sync.
        :param args: passed to ``fn`` after the handle.
        :param retries: how many times at most it runs ``fn`` again.
        :param isolation: its isolation level: ``"read committed"``, ``"repeatable
            read"``, ``"serializable"`` or ``"read uncommitted"`` (default None: the
            server's own). SQLite runs every transaction serializable.
        :param read_only: a transaction that only reads: a write in it fails.
        :param kwargs: passed to ``fn``.
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises ConnectionLost: the connection broke during the commit (``may_have_run``):
            it is not run again.
        :raises Exception: ``fn``'s own error, or the last transient error once
            ``retries`` ran out (its ``adb_attempts`` says how many runs).
        """
        check_callable(fn, "runTransaction")
        limit = check_retries(retries)
        if limit is None:
            limit = retry.DEFAULT_RETRIES if self._engine.retries is None else self._engine.retries
        mode = retry.Mode(check_isolation(isolation), check_flag(read_only, "read_only"))
        self._engine.check_open()
        return self._frontend.run_steps(
            retry.transaction(self._engine, fn, args, kwargs, limit, mode))

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

        :param sql: the statement, in the driver's paramstyle (``db.paramstyle``), or
            the 2011 form ``(sql, params)`` as one argument.
        :param params: its parameters (a tuple, list or dict), sent apart from the
            text: never formatted into it.
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :param batch: rows per batch (the most held at once is two batches).
        :param row_factory: how to shape these rows: ``"tuple"``, ``"dict"``,
            ``"namedtuple"``, ``"attrdict"`` or a callable (default: the Database's).
        :param timeout: seconds it may wait for a free worker.
        :param idle_timeout: seconds the consumer may ask for nothing before the
            stream is closed.
        :param replica: run it on a read replica that can serve it (``replicas``).
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises InterfaceError: ``batch`` or ``idle_timeout`` is not a valid value.
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises StreamTimeout: the consumer was idle past ``idle_timeout``.
        :raises ConnectionLost: the connection broke; ``delivered`` says how many rows
            had reached the consumer.
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises ReplicaUnavailable: ``replica=True``, no replica can serve, and
            ``replica_fallback="raise"``.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        engine = self._engine.reader(tx) if replica else self._engine
        sql, params = statement(sql, params)
        factory = engine.row_factory if row_factory is None else rows.resolve(row_factory)
        return self._open_stream(engine, sql, params, tx, batch, factory, timeout, idle_timeout,
                                 False)

    def copy_out(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None, *,
                 batch: int = 1000, timeout: Optional[float] = None,
                 idle_timeout: Optional[float] = None) -> Any:
        """A stream of ``sql``'s rows as text-format lines (``adb.copytext``): what
        ``copy_in`` loads. ``COPY ... TO STDOUT`` on psycopg 3; elsewhere a stream
        whose rows adb renders. Otherwise as ``stream``.

        :param sql: the statement, in the driver's paramstyle (``db.paramstyle``), or
            the 2011 form ``(sql, params)`` as one argument.
        :param params: its parameters (a tuple, list or dict), sent apart from the
            text: never formatted into it.
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :param batch: lines per batch.
        :param timeout: seconds it may wait for a free worker.
        :param idle_timeout: seconds the consumer may ask for nothing before it is closed.
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises StreamTimeout: the consumer was idle past ``idle_timeout``.
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        sql, params = statement(sql, params)
        return self._open_stream(self._engine, sql, params, tx, batch, rows.tuple_row, timeout,
                                 idle_timeout, True)

    def _open_stream(self, engine: Engine[F], sql: Any, params: Params,
                     tx: Optional[Transaction], batch: int, factory: Any,
                     timeout: Optional[float], idle_timeout: Optional[float],
                     export: bool) -> StreamCore:
        check_positive(batch, "batch")
        check_timeout(idle_timeout, "idle_timeout")
        if tx is not None:
            engine = self._engine.route(tx)
            engine.check_tx(tx)  # TransactionError now if it is finished
        stream: StreamCore = self._frontend.stream_class(
            engine, sql, params, tx, batch, factory, check_timeout(timeout), idle_timeout, export)
        return stream

    def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                tx: Optional[Transaction] = None, *, timeout: Optional[float] = None) -> Any:
        """Load ``rows`` into ``table`` in one transaction and return the row count.

        ``rows``: an iterable of tuples (read in the worker thread), an async
        iterable of tuples (read on the loop, a chunk at a time), or a file-like
        object of text-format lines (``adb.copytext``). ``COPY ... FROM STDIN`` on
        PostgreSQL (binary on psycopg 3 where the columns' types allow);
        ``LOAD DATA LOCAL INFILE`` through a pipe on MariaDB/MySQL when the
        Database was opened with ``local_infile=1``, else multi-row INSERTs;
        ``executemany`` on SQLite. Atomic: if it fails, no row of it remains
        (outside ``tx``).

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param table: the table, an identifier (schema-qualified or quoted if need be).
        :param rows: the rows: an iterable, an async iterable, or a file of text lines.
        :param columns: the columns the rows' values go to (default: all, in order).
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :param timeout: seconds it may wait for a free worker.
        :raises InterfaceError: ``table`` or ``columns`` are not identifiers.
        :raises TypeError: an argument of the wrong type (at once: nothing ran).
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises ConnectionLost: the connection broke; no row of the load remains.
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        table, names = bulk.check_target(table, columns)
        bulk.check_source(rows, self._frontend.waiting)
        check_timeout(timeout)
        engine = self._engine if tx is None else self._engine.route(tx)
        return self._frontend.run_steps(bulk.load(engine, table, names, rows, tx, timeout))

    def wait_for_room(self) -> Any:
        """Wait until fewer than ``max_queued`` calls wait for a worker, and fewer than
        ``max_queued`` results wait to be delivered to the loop (at once without
        ``max_queued``); fails with PoolClosed if the Database closes meanwhile.

        A producer that fires calls faster than the pool runs them waits for this
        before each call, so memory stays bounded however many calls it makes::

            for params in huge_iterable:
                await db.wait_for_room()
                pending.add(db.runOperation(sql, params))  # and discard finished ones

        :raises PoolClosed: the Database is closed or closing.
        """
        return self._engine.wait_for_room()

    def listen(self, *channels: str, max_queued: int = 10000) -> Any:
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

        :param channels: the channel names (at most 63 bytes each).
        :param max_queued: the most items that wait in this listener.
        :raises InterfaceError: no channel, a bad name, a server without LISTEN, or a
            transaction pooler (``pooler="transaction"``).
        :raises TypeError: a channel name that is not a str.
        :raises PoolClosed: the Database is closed or closing.
        :raises ServerUnavailable: (adb.sync) the listening connection cannot be opened.
        """
        names = listen.check_channels(channels)
        limit = check_positive(max_queued, "max_queued")
        return self._frontend.listener_class.open(self._frontend, self.name, self._engine.hub(),
                                                  names, limit)

    def notify(self, channel: str, payload: str = "", tx: Optional[Transaction] = None) -> Any:
        """Send ``payload`` to ``channel``'s listeners (``pg_notify``, run by a worker).
        In ``tx`` it is delivered when ``tx`` commits, and never if it rolls back.

        On a front-end with futures the errors come when the call is awaited (or
        its Deferred fires), except TypeError and InterfaceError, raised at once.

        :param channel: the channel name.
        :param payload: the text its listeners get.
        :param tx: a transaction handle: run it there, on that transaction's worker.
        :raises InterfaceError: a bad channel name, or a server without NOTIFY.
        :raises TypeError: a name or payload that is not a str.
        :raises PoolClosed: the Database is closed or closing.
        :raises PoolTimeout: no worker became free within ``timeout``; it never ran.
        :raises QueueFull: ``max_queued`` calls already wait and ``on_full="raise"``.
        :raises StatementTimeout: it ran past ``statement_timeout`` and was cancelled.
        :raises ConnectionLost: the connection broke under it; ``may_have_run`` says
            whether it may have taken effect (``ServerUnavailable``: it never did).
        :raises TransactionError: ``tx`` is finished or belongs to another Database.
        :raises Exception: the driver's own errors, unchanged (``db.dbapi.Error`` and
            its subclasses, such as ``db.dbapi.IntegrityError``).
        """
        listen.check_channel(channel)
        listen.check_payload(payload)
        listen.check_supported(self._engine.driver)
        if tx is not None:
            return self._engine.route(tx).in_transaction(tx, Op.NOTIFY, (channel, payload),
                                                         what=NOTIFY)
        return self._standalone(Op.NOTIFY, (channel, payload), what=NOTIFY)

    def stats(self) -> dict[str, Any]:
        """A snapshot of the Database, each key read at its own moment (no lock).

        Workers: ``pool_size``; ``busy`` (running a call) and ``idle`` (the
        rest); ``pinned`` (serving a transaction, busy or not); ``streams`` (open
        streams, each also pinned); ``alive`` (worker threads not yet ended:
        ``pool_size`` until ``close()``, 0 after).
        Calls: ``queued`` (waiting for a worker); ``completed`` and ``errors``
        (calls finished, and how many of them failed); ``retries`` (standalone
        calls run again, ``retries=``); ``transaction_retries`` (``runTransaction``
        functions run again); ``open_transactions``; ``parked`` and
        ``waiting_for_room`` (``max_queued``: calls queued inside adb, callers
        waiting for room).
        Connections: ``connects`` (opened, every one counted); ``connected``
        (open now); ``reconnects`` (opened by a worker that had one before, to
        replace it: lost, closed by the server, recycled, dropped by
        ``max_idle``); ``recycled`` (closed because ``max_lifetime`` ran out);
        ``connect_failures`` (failed connects in a row now, 0 once one succeeds).
        Group commit (``autobatch``): ``units`` run, the calls they ``batched``,
        and ``unit_fallbacks`` (units that failed and ran one by one).
        Hand-back: ``wakeups`` (times a worker woke the loop), ``polls`` (timed
        drains while every worker was busy), ``settled`` (results delivered;
        approximate on a blocking front-end, whose worker threads count it without a
        lock), ``largest_batch`` (None on a blocking front-end).
        Also ``name``, ``closed``, ``listen`` (the listening connection,
        ``adb.listen``: state, listeners, channels, backend_pid, reconnects,
        delivered, dropped) and, with ``replicas=``, ``fallbacks`` and
        ``replicas`` (each one's name, target, state, lag, error, served, pool).
        """
        return self._engine.stats()

    def __repr__(self) -> str:
        engine = getattr(self, "_engine", None)  # None: its constructor failed
        return f"<{type(self).__module__}.{type(self).__name__} {engine or 'not opened'!r}>"

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        engine: Optional[Engine[F]] = getattr(self, "_engine", None)
        if engine is not None and engine.drop():
            _warn(f"unclosed {self!r}", ResourceWarning, source=self)


def frontend_doc(doc: Optional[str]) -> str:
    """A front-end Database's docstring with every front-end's options appended.

    The class keeps a short docstring of its own (what the API reference renders,
    next to ``BaseDatabase``'s page); ``help()`` shows this longer form, so the
    options are one keystroke away in a REPL too.
    """
    common = (BaseDatabase.__doc__ or "").split("\n\n    :param url:")[0]
    options = common.split("\n\n", 1)[1].lstrip()  # without its summary line
    return f"{(doc or '').rstrip()}\n\n    {options}"


__all__ = ["BaseDatabase", "URL", "frontend_doc"]
