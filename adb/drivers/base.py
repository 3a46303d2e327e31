"""The driver interface: what adb needs to know about one DB-API module.

A driver knows its module's quirks and nothing about threads or event loops.
Every method except ``__init__``/``check`` runs in a worker thread, on the
connection that worker owns.

What only some drivers can do is a capability, an object of its own that a
driver offers or not (None): ``notifications`` (LISTEN/NOTIFY,
``drivers/notify.py``), ``pipelines`` (``drivers/pipelines.py``), ``cancel``
(``drivers/cancel.py``) and ``cluster`` (the choice among a host list,
``drivers/galera.py``); ``copy`` (bulk loads, ``drivers/copy.py``) every driver
offers, by multi-row INSERTs where it knows no faster path. Whoever needs a
capability asks for it once and says which driver lacks it.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import inspect
import select
import socket
from typing import Any, Callable, Iterable, Optional, Sequence

from ..errors import InterfaceError
from ..sqltext import Path, PathCache, self_contained
from ..target import Family, Target
from .cancel import Cancel
from .copy import BulkCopy, InsertCopy
from .galera import Cluster
from .notify import Notifications
from .pipelines import Pipelines

#: a DB-API connection or cursor: adb only calls what PEP 249 promises on them
Connection = Any
Cursor = Any


class Pooler(enum.Enum):
    """What stands between adb and the server (``Database(pooler=...)``): a
    connection pooler such as pgbouncer, in one of its pool modes. Where a pooler
    is, a client connection is not one server session, so what lives in the session
    (cancel keys, prepared statements, LISTEN, ``SET``) needs a driver that knows.
    ``docs/poolers.md`` says what works in each mode and why."""

    #: one server connection per client connection, for the client's whole life
    SESSION = "session"
    #: a server connection per transaction, or per statement outside one
    TRANSACTION = "transaction"


def check_pooler(value: object) -> Optional[Pooler]:
    """``pooler=`` (or a URL's ``?pooler=``) as a Pooler; InterfaceError naming it otherwise."""
    if value is None or isinstance(value, Pooler):
        return value
    try:
        return Pooler(value)
    except (ValueError, TypeError):
        choices = ", ".join(repr(p.value) for p in Pooler)
        raise InterfaceError(f"pooler must be {choices} or None, not {value!r}") from None


@dataclasses.dataclass(frozen=True)
class ReplicaPosition:
    """What a replica says of its lag (``Driver.replica_position``): seconds behind
    (``lag``, where the server counts them), or the byte positions of its primary's
    log it has ``received`` and ``replayed`` (``adb.replicas`` times how long
    received log waits to be replayed). All None: up to date."""

    lag: Optional[float] = None
    received: Optional[int] = None
    replayed: Optional[int] = None


#: the URL query's keys that are adb's options, never a driver's connect() keyword:
#: ``?pooler=`` and ``?pipeline=`` (a program that hands the same URL's keywords to
#: the driver itself leaves these out)
URL_OPTIONS = frozenset({"pooler", "pipeline"})


@dataclasses.dataclass(frozen=True)
class DriverInfo:
    """What a driver module declares about itself; the registry is built from these.

    ``module`` is the PEP 249 module imported at ``Database()`` time (and the
    driver's name: ``driver="psycopg"``), ``dialects`` the ``+name`` forms of its
    URLs (``postgresql+psycopg://``), ``default`` whether the family's bare scheme
    means this driver, and ``extra`` the pip extra that installs the module.
    """

    module: str
    family: Family
    dialects: tuple[str, ...] = ()
    default: bool = False
    extra: str = ""


#: the SQL standard's isolation levels, weakest first (``Driver.isolation_levels``)
ISOLATION_LEVELS = ("read uncommitted", "read committed", "repeatable read", "serializable")


class Driver:
    """Defaults for a PEP 249 module; subclasses override what differs.

    The defaults suit a module whose connections start a transaction implicitly
    and need ``commit()``: adb then commits after every standalone call.
    """

    #: what a built-in driver declares about itself (``None`` for the generic one)
    info: Optional[DriverInfo] = None
    #: True when connections run each statement in its own transaction
    autocommit = False
    #: lets the pool size be forced (an in-memory SQLite database lives in one connection)
    max_pool_size: Optional[int] = None
    #: why ``max_pool_size`` is the limit, for the error a larger pool_size gets
    max_pool_size_reason = ""
    #: the poolers the driver knows how to work through (``Database(pooler=...)``)
    poolers: frozenset[Pooler] = frozenset()
    #: whether adb's cursor's last statement returned rows, told without building its
    #: ``description`` (which psycopg 3 builds at every read); None: adb reads
    #: ``description is not None``, cheap on the other drivers
    returns_rows: Optional[Callable[[Cursor], bool]] = None

    # -- capabilities: each an object the driver offers, or None -------------------------

    #: LISTEN/NOTIFY (``adb.listen``)
    notifications: Optional[Notifications] = None
    #: standalone statements sent before any result is read (``adb.pipeline``)
    pipelines: Optional[Pipelines] = None
    #: the most calls one worker sends as one pipeline; 0: none (``use_pipelines``:
    #: the engine's, from ``pipelines`` and the ``pipeline=`` option)
    pipeline_depth = 0
    #: stopping a running statement from another thread (``adb.watchdog``)
    cancel: Optional[Cancel] = None
    #: which server of a host list a connection may stay on
    cluster: Optional[Cluster] = None

    def __init__(self, dbapi: Any, target: Target,
                 on_connect: Optional[Callable[[Connection], object]] = None,
                 pooler: Optional[Pooler] = None) -> None:
        self.dbapi = dbapi
        self.name = target.driver
        self.target = target
        self.connect_args = tuple(target.args)
        kwargs = dict(target.kwargs)
        url_options = {name: kwargs.pop(name, None) for name in URL_OPTIONS}
        #: the pooler the connections go through, if any: from ``Database(pooler=)``
        #: or the URL's ``?pooler=``
        self.pooler = self.pooler_of(pooler, url_options["pooler"])
        #: the URL's ``?pipeline=``, checked by the engine
        self.url_pipeline = url_options["pipeline"]
        self.connect_kwargs = self.check(kwargs)
        self.target = dataclasses.replace(target, kwargs=self.connect_kwargs, args=self.connect_args)
        self.on_connect = on_connect
        self.batch_path = PathCache(self.path_of)
        #: bulk loads and exports (``adb.bulk``, ``copy_out``): multi-row INSERTs
        #: unless the driver offers a faster path
        self.copy: BulkCopy = InsertCopy(self)

    @property
    def paramstyle(self) -> str:
        style: str = self.dbapi.paramstyle
        return style

    def pooler_of(self, given: Optional[Pooler], in_url: object) -> Optional[Pooler]:
        """The pooler, from the keyword or the URL (the same, if both say); an
        InterfaceError for a value that is not one, or a driver that knows none."""
        pooler = given if in_url is None else check_pooler(in_url)
        if given is not None and pooler is not given:
            raise InterfaceError(f"pooler={given.value!r} but the URL says "
                                 f"pooler={pooler.value if pooler else None!r}: say it once")
        if pooler is not None and pooler not in self.poolers:
            raise InterfaceError(
                f"{self.name} cannot go through a pooler (pooler={pooler.value!r}): adb knows "
                "PostgreSQL poolers such as pgbouncer, with psycopg2 or psycopg")
        return pooler

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Validate and normalise connect keywords at construction; return them
        (``keywords`` has refused the unknown ones already)."""
        return kwargs

    @classmethod
    def keywords(cls, dbapi: Any) -> Optional[frozenset[str]]:
        """Every keyword the module's ``connect()`` takes (the driver's own checks
        aside), or None where that cannot be told: then any keyword is passed on.
        By default what ``connect``'s signature names, unless it takes ``**kwargs``."""
        try:
            params = inspect.signature(dbapi.connect).parameters.values()
        except (TypeError, ValueError):
            return None
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return None
        return frozenset(p.name for p in params
                         if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))

    def connect(self) -> Connection:
        """Open one connection (in the worker thread that will own it) and set it up."""
        conn = self.open()
        if self.on_connect is not None:
            try:
                self.on_connect(conn)
            except BaseException:
                self.close(conn)
                raise
        return conn

    def open(self) -> Connection:
        """Open and configure one DB-API connection; subclasses add their settings."""
        return self.dbapi.connect(*self.connect_args, **self.connect_kwargs)

    def is_closed(self, conn: Connection) -> bool:
        """True when ``conn`` is known to be closed (checked before every call
        outside a transaction, so it must be cheap: no system call)."""
        return False

    def peer_gone(self, conn: Connection) -> bool:
        """True when the server has dropped ``conn`` while it was idle (checked before
        a call on a connection idle a while: one non-blocking system call)."""
        return False

    #: what a worker runs on a connection after a cancel, before it serves again: a
    #: late cancel it meets fails it, and the connection is replaced
    cancel_check = "select 1"

    def close(self, conn: Connection) -> None:
        try:
            conn.close()
        except Exception:  # a broken connection may fail to close; it is gone either way
            pass

    def begin(self, conn: Connection) -> None:
        """Start an explicit transaction."""

    def commit(self, conn: Connection) -> None:
        try:
            conn.commit()
        finally:
            self.ended(conn)

    def rollback(self, conn: Connection) -> None:
        try:
            conn.rollback()
        finally:
            self.ended(conn)

    def ended(self, conn: Connection) -> None:
        """A transaction on ``conn`` ended (committed or rolled back, or the attempt
        failed): undo what ``begin_transaction`` set up on the session for it.
        Nothing by default; every ``commit``/``rollback`` calls it."""

    def failed_transaction(self, conn: Connection) -> bool:
        """True when the server has aborted the open transaction (commit would not commit)."""
        return False

    def fetchall(self, cursor: Cursor) -> list[Any]:
        rows: list[Any] = cursor.fetchall()
        return rows

    def executemany(self, cursor: Cursor, sql: str,
                    seq_of_params: Iterable[Sequence[Any]]) -> int:
        """Run ``sql`` once per parameter set, by the driver's fastest path; return rowcount."""
        cursor.executemany(sql, seq_of_params)
        count: int = cursor.rowcount
        return count

    def pooler_symptom(self, error: BaseException) -> bool:
        """True when ``error`` is the mark of a transaction pooler in front of a
        Database told nothing of it (``pooler=``), which the driver has just cured
        for every connection: the call failed without running, and a standalone
        one may run again. (psycopg 3 says so; by default nothing does.)"""
        return False

    def probe(self, timeout: float) -> Optional[bool]:
        """Whether the server answers now (True), or not (False), by the cheapest
        exchange that a server stopped, frozen or not yet listening fails: asked
        while adb backs off after failed connects, so that the first call after the
        server is back connects at once. None: this driver cannot tell."""
        return None

    def rejection(self, exc: BaseException) -> Optional[str]:
        """Why the connect that raised ``exc`` will fail again however often it is
        tried (the server refused the credentials, has no such database, or an
        option value is refused), in words; None when the server may simply not
        be reachable now (adb then backs off and tries again)."""
        return None

    def rejection_cause(self, exc: BaseException) -> Optional[BaseException]:
        """The error a rejection (``rejection``) is chained to: ``exc``, or None where
        its message may quote a secret (libpq's quotes the text of a connection
        string it cannot parse, which can be the password)."""
        return exc

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        """True when ``exc`` means ``conn`` is unusable and must be replaced."""
        return False

    # -- replicas (adb.replicas) -------------------------------------------------------

    def replica_position(self, conn: Connection) -> ReplicaPosition:
        """How far this connection's server is behind its primary, asked by the
        replica monitor on a connection of its own. Raises, saying why, when the
        server must not serve reads (replication broken, a cluster node out of
        sync). A server with no replication adb knows of is up to date."""
        return ReplicaPosition()

    # -- transient failures (adb.retry, Database(retries=N)) ------------------------------

    def is_transient(self, exc: BaseException) -> bool:
        """True when ``exc`` is the server refusing work it may accept if asked again:
        a serialization failure, a deadlock, a lock wait that timed out, a busy
        database. The statement took no effect; its transaction, if any, is lost."""
        return False

    def rolled_back(self, exc: BaseException, conn: Connection) -> bool:
        """True when ``exc``, raised inside a transaction, made the server roll the
        whole transaction back while leaving the session usable, so that later
        statements would run outside it (MySQL after a deadlock). PostgreSQL
        instead refuses every statement until the rollback (``failed_transaction``)."""
        return False

    # -- streams (adb.stream) and transactions ------------------------------------------

    #: True when a connection can run nothing else while a stream's cursor is open
    stream_exclusive = False

    def begin_read_only(self, conn: Connection) -> None:
        """Start an explicit transaction that only reads (a plain one by default)."""
        self.begin(conn)

    #: the isolation levels ``begin_transaction`` can ask the server for (lower case)
    isolation_levels: frozenset[str] = frozenset()

    def begin_transaction(self, conn: Connection, isolation: Optional[str],
                          read_only: bool) -> None:
        """Start an explicit transaction at ``isolation`` (one of ``isolation_levels``,
        checked by the caller; None: the server's default), only reading if
        ``read_only``. A driver that knows no levels begins a plain transaction."""
        (self.begin_read_only if read_only else self.begin)(conn)

    def stream_cursor(self, conn: Connection) -> Cursor:
        """A cursor that fetches its rows batch by batch, from the server where the
        module can (a server-side cursor); a plain one by default."""
        return conn.cursor()

    def open_stream(self, conn: Connection, sql: Any, params: Any) -> Cursor:
        """Execute ``sql`` on a ``stream_cursor`` (inside a transaction)."""
        cursor = self.stream_cursor(conn)
        try:
            cursor.execute(sql) if params is None else cursor.execute(sql, params)
        except BaseException:
            self.close_stream(cursor, False, True)
            raise
        return cursor

    def fetch_stream(self, cursor: Cursor, size: int) -> list[Any]:
        """Up to ``size`` more rows of a stream; fewer means its end."""
        rows: list[Any] = cursor.fetchmany(size)
        return rows

    def close_stream(self, cursor: Cursor, exhausted: bool, keep_transaction: bool) -> bool:
        """Close a stream's cursor, at its end or before it; True when the connection
        must be dropped instead (it could not be made clean cheaply). With
        ``keep_transaction`` the caller's transaction goes on, so the connection
        must not be dropped."""
        try:
            cursor.close()
        except Exception:  # a broken connection, or an aborted transaction rolled back next
            pass
        return False

    # -- autobatch (adb.sqltext, adb.worker): how a unit of standalone operations runs --

    #: a message longer than this (characters) runs as a transaction instead
    max_message = 1 << 20

    def enable_autobatch(self) -> None:
        """Called once, before any connection opens, when ``autobatch`` is on."""

    def use_pipelines(self, depth: int) -> None:
        """Send up to ``depth`` standalone calls as one pipeline (0: none). Called once,
        before any connection opens."""
        self.pipeline_depth = depth

    def path_of(self, sql: str) -> Path:
        """How the DML statement ``sql`` may run in a unit (cached by ``batch_path``).
        By default inside one transaction; a driver that can send a message of
        statements and read each one's result says which statements may go there."""
        return Path.TRANSACTION

    def run_unit(self, conn: Connection, statements: list[tuple[str, Any]],
                 path: Path) -> list[int]:
        """Run ``statements`` (``(sql, params)`` pairs) as one atomic unit and return
        each one's rowcount; on any error roll the unit back and raise it."""
        if path is Path.MESSAGE:
            counts = self.run_message(conn, statements)
            if counts is not None:
                return counts
        self.begin(conn)
        try:
            cursor = conn.cursor()
            try:
                counts = []
                for sql, params in statements:
                    cursor.execute(sql) if params is None else cursor.execute(sql, params)
                    counts.append(cursor.rowcount)
            finally:
                cursor.close()
            self.commit(conn)
        except BaseException:
            self.rollback_ignoring_errors(conn)
            raise
        return counts

    def run_message(self, conn: Connection,
                    statements: list[tuple[str, Any]]) -> Optional[list[int]]:
        """Run ``statements`` in one message, atomically, and return each one's
        rowcount; None if the message would be too long (the caller then uses a
        transaction). Only for drivers whose ``path_of`` says MESSAGE."""
        raise NotImplementedError

    def rollback_ignoring_errors(self, conn: Connection) -> None:
        """Roll back after a failed unit, ignoring a rollback that fails: the unit's
        own error is the one raised, and a broken connection is the caller's to see."""
        try:
            self.rollback(conn)
        except Exception:
            pass

    @staticmethod
    def message_safe(sql: str, line_comment: tuple[str, ...] = ("--",)) -> Path:
        """MESSAGE for a self-contained statement, else TRANSACTION."""
        return Path.MESSAGE if self_contained(sql, line_comment) else Path.TRANSACTION


def unknown_keywords(given: Iterable[str], known: frozenset[str], others: Iterable[str],
                     driver: str) -> Optional[str]:
    """Why keywords ``given`` are refused: those neither ``known`` to the driver's
    ``connect()`` nor among ``others`` (adb's own options), each with the nearest
    valid name; None when every one is known."""
    unknown = sorted(set(given) - known - set(others))
    if not unknown:
        return None
    candidates = sorted(known | set(others))
    named = []
    for name in unknown:
        near = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        named.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    return (f"{', '.join(named)}: neither an option of adb nor a keyword {driver}.connect() "
            "takes")


def answers(host: Optional[str], port: int, hello: bytes, timeout: float) -> bool:
    """True when the server at ``host`` (a name or address, or the folder of a Unix
    socket, PostgreSQL's way) and ``port`` accepts a connection and says something,
    after ``hello`` if given, within ``timeout`` seconds; False when it refuses, is
    gone or stays silent. Nothing else is sent: no login, no statement."""
    try:
        if host and host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: Any = f"{host}/.s.PGSQL.{port}"
        else:
            sock = socket.socket(socket.AF_INET6 if host and ":" in host else socket.AF_INET,
                                 socket.SOCK_STREAM)
            address = (host or "localhost", port)
    except OSError:
        return False
    try:
        sock.settimeout(timeout)
        sock.connect(address)
        if hello:
            sock.sendall(hello)
        return bool(sock.recv(1))
    except OSError:  # refused, unreachable, silent (timeout), reset
        return False
    finally:
        sock.close()


def readable(fd: int) -> bool:
    """True when an idle connection's socket has something to read: on a
    connection nobody is using, that is the server saying goodbye (or EOF)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def hung_up(fd: int) -> bool:
    """True when socket ``fd`` has failed: the peer reset it or both directions are
    shut (``POLLHUP``/``POLLERR``, reported whatever was asked for), or ``fd`` is no
    longer open. A connection the server merely sent a goodbye to is not hung up yet."""
    poller = select.poll()
    poller.register(fd, 0)
    return any(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL)
               for _, events in poller.poll(0))
