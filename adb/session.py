"""A worker's session: its DB-API connection and everything tied to that connection.

A ``Session`` belongs to one worker (``adb.worker``) and lives in its thread. It
owns the connection and what lasts only as long as the connection does: when it
was opened and last used (recycling, liveness checks), the cursor the last call
left (the spare cursor), the transaction pinning the worker (its queue, whether
its connection broke, whether the server aborted it) and the stream open in that
transaction. The worker's thread loop decides *which* job runs; the session's
job functions (``fn(session, *args)``, named in each job) say *what* it does on
the connection.

Before each call outside a transaction the session checks its connection (closed,
a readable idle socket, past ``max_lifetime``, idle past ``check_idle`` and failing
a ping) and replaces it, so a connection the server dropped while idle costs the
caller nothing. A call whose connection breaks under it is never re-run: the
caller gets ``ConnectionLost`` (the statement may have run).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from queue import Empty, SimpleQueue
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Protocol

from . import health, ops
from .call import CallState, Job, RunningCall
from .dispatch import WAKE, Dispatch, Queued
from .errors import (ConnectionLost, InterfaceError, PoolClosed, StatementTimeout,
                     StreamTimeout, TransactionError)
from .handback import Handback
from .rows import Batch, RowFactory
from .target import Family
from .telemetry import Telemetry

if TYPE_CHECKING:
    from .drivers.base import Connection, Cursor, Driver

log = logging.getLogger("adb")

#: seconds of idleness after which a connection's socket is checked before use
LIVENESS_AFTER = 0.05
#: seconds a worker waits, after a cancelled call, for the cancel itself to return
#: before it checks the connection; past it the connection is replaced instead
CANCEL_SETTLE = 2.0


@dataclasses.dataclass(frozen=True)
class PoolConfig:
    """The settings every worker of one pool reads (see ``BaseDatabase`` for each).

    ``lost_error`` is the ConnectionLost class callers get; ``check_sql`` a
    statement run after an error to test the connection (None: no test);
    ``warm`` how many workers connect before their first job; ``autobatch`` the
    most calls one unit may hold (1: no units); ``retries`` how many times a
    standalone call that failed transiently, having taken no effect, runs again;
    ``pipeline`` the most standalone calls one worker sends as one pipeline (0:
    one at a time, ``adb.pipeline``).
    """

    name: str
    lost_error: type[ConnectionLost] = ConnectionLost
    check_sql: Optional[str] = None
    warm: int = 0
    max_lifetime: Optional[float] = None
    max_idle: Optional[float] = None
    check_idle: Optional[float] = None
    autobatch: int = 1
    retries: int = 0
    pipeline: int = 0
    #: spans, metrics and the slow-call log (``adb.telemetry``); None: none of them
    telemetry: Optional[Telemetry] = None


class Crew(Protocol):
    """What a worker and its session need from their pool (``adb.pool.Pool``)."""

    config: PoolConfig
    driver: Driver
    dispatch: Dispatch
    handback: Handback
    #: worker thread id -> its DB-API connection (adbapi exposes the same)
    connections: dict[int, Connection]

    #: truthy once its caller gave up (``object``: a front-end may hand over a C method
    #: that answers with a number, ``adb.sync``'s ``Waiter.qsize``)
    def is_abandoned(self, future: Any) -> object: ...
    def open_connection(self) -> Connection: ...
    def connect_wait(self) -> float: ...
    #: True once the interpreter exits with the pool running (``Pool.give_up_at_exit``)
    exiting: bool

    def stopping(self) -> bool: ...
    def worker_exited(self, worker: Any) -> None: ...
    def warm_up_failed(self, index: int, error: BaseException) -> None: ...


class Tx(Protocol):
    """A transaction as the session pinned by it sees it (``adb.txrecord.TxRecord``)."""

    queue: SimpleQueue[Queued]
    #: its isolation level (None: the server's default) and whether it only reads
    isolation: Optional[str]
    read_only: bool

    def activate(self, worker_index: int) -> None: ...
    def ended(self, committed: bool) -> None: ...
    def fail(self) -> None: ...


class StreamGate:
    """Where a stream's consumer puts its requests for the worker serving it.

    With ``idle_timeout``, a worker that waits that long for the next request
    *shuts* the gate (only if no request is in the queue) and closes the stream;
    a request put after that raises StreamTimeout instead of waiting forever in
    a queue nobody reads. The lock makes shut-or-put one decision.
    """

    __slots__ = ("queue", "idle_timeout", "shut", "_lock")

    def __init__(self, queue: SimpleQueue[Queued], idle_timeout: Optional[float]) -> None:
        self.queue = queue
        self.idle_timeout = idle_timeout
        self.shut = False
        self._lock = threading.Lock()

    def put(self, job: Job) -> None:
        """Queue a request for the worker (any thread); StreamTimeout once shut."""
        with self._lock:
            if self.shut:
                raise StreamTimeout(
                    f"the stream was idle for more than {self.idle_timeout} s and was closed")
            self.queue.put(job)

    def shut_if_idle(self) -> bool:
        """Shut the gate unless a request is waiting (the worker's thread)."""
        with self._lock:
            if self.queue.empty():
                self.shut = True
            return self.shut


class OpenStream(NamedTuple):
    """The stream open on a session's connection: its cursor, its gate, and whether
    its transaction is its own (ended with it) or the caller's (which goes on)."""

    cursor: Cursor
    gate: StreamGate
    own: bool


class Session:
    """One worker's connection and its state. Every method runs in the worker's
    thread, except that the watchdog reads ``conn`` (to cancel or cut a call)."""

    def __init__(self, crew: Crew, index: int) -> None:
        self.index = index
        self._crew = crew
        self._config = config = crew.config
        self._driver = crew.driver
        self._telemetry = config.telemetry
        self._conn: Connection = None
        self._born = self._last_used = 0.0
        self._lifetime: Optional[float] = None
        self._spare: Optional[tuple[Connection, Cursor]] = None  # see on_spare_cursor
        #: the last job was a caller's statement that succeeded (``statement``): the
        #: connection is open (only adb, an error or a caller's own code given it
        #: closes one), so the next job's ``connection()`` skips the driver's
        #: ``is_closed``, an interpreted call on every call otherwise
        self._vouched = False
        #: the queue of the transaction pinning the worker, or None (written only here)
        self.tx_queue: Optional[SimpleQueue[Queued]] = None
        self._tx_lost = False  # that transaction's connection broke: it can only end
        self._tx_aborted: Optional[str] = None  # why the server rolled it back, if it did
        self._stream: Optional[OpenStream] = None  # a stream open in that transaction
        self.connects = self.recycled = 0

    @property
    def conn(self) -> Connection:
        """The connection, or None."""
        return self._conn

    @property
    def stream(self) -> Optional[OpenStream]:
        """The stream open in the pinned transaction, or None."""
        return self._stream

    # -- the connection ---------------------------------------------------------------

    def connection(self) -> Connection:
        """The connection, replaced first if it is no longer fit to use."""
        conn = self._conn
        now = monotonic()
        if conn is not None:
            reason = self.unfit(conn, now)
            self._vouched = False  # this job may hand the connection to a caller's code
            if reason is None:
                self._last_used = now
                return conn
            self.disconnect(reason)
            if reason == "max_lifetime":
                self.recycled += 1
        if self._telemetry is None:
            self._conn = conn = self._crew.open_connection()
        else:
            began = self._telemetry.connecting()
            self._conn = conn = self._crew.open_connection()
            self._telemetry.connected(began, conn)
        self.connects += 1
        self._born = self._last_used = now
        self._lifetime = health.lifetime(self._config.max_lifetime)
        self._crew.connections[threading.get_ident()] = conn
        return conn

    def unfit(self, conn: Connection, now: float) -> Optional[str]:
        """Why ``conn`` must be replaced before the next call, or None."""
        if self._lifetime is not None and now - self._born > self._lifetime:
            return "max_lifetime"
        if not self._vouched and self._driver.is_closed(conn):
            return "closed"
        # the socket check releases the GIL (a thread switch under load), so it is
        # only worth it once a connection has sat idle long enough to be dropped unseen
        if now - self._last_used > LIVENESS_AFTER and self._driver.peer_gone(conn):
            return "closed by the server or the network"
        check_idle = self._config.check_idle
        if check_idle is not None and now - self._last_used > check_idle \
                and not self.responds(conn, self._config.check_sql or "select 1"):
            return "failed its check after being idle"
        return None

    def connect(self) -> None:
        """Open the connection now, or check the one open (``db.connect()``): the
        real error if it cannot be."""
        self.connection()

    def disconnect(self, reason: Optional[str] = None) -> None:
        self._spare = None
        self._vouched = False
        stream, self._stream = self._stream, None
        if stream is not None:  # its cursor dies with the connection
            self.close_stream_cursor(stream, exhausted=False, keep_transaction=False)
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self._crew.connections.pop(threading.get_ident(), None)
            if reason:
                log.info("%s: worker %d dropped its connection: %s",
                         self._config.name, self.index, reason)
            self._driver.close(conn)

    def responds(self, conn: Connection, sql: str) -> bool:
        """True when ``conn`` runs ``sql`` (after clearing an aborted transaction)."""
        try:
            if not self._driver.autocommit or self._driver.failed_transaction(conn):
                self._driver.rollback(conn)
            cursor = conn.cursor()
            try:
                cursor.execute(sql)
                cursor.fetchall()
            finally:
                cursor.close()
            return True
        except Exception:
            return False

    def rollback_or_drop(self) -> None:
        """Roll back the open transaction; if that fails, drop the connection."""
        if self._conn is None:
            return
        try:
            self._driver.rollback(self._conn)
        except Exception:  # the connection is broken: replace it
            self.disconnect("rollback failed")

    # -- after a call failed or was cancelled --------------------------------------------

    def after_error(self, exc: BaseException, running: RunningCall) -> BaseException:
        """Replace a connection that ``exc`` broke; return what the caller should get.

        A broken connection means the statement may have run: the caller gets
        ``config.lost_error`` (a ConnectionLost), never a silent retry. Inside a
        transaction the transaction is lost with it. With ``config.check_sql``
        (Twisted's ``cp_reconnect``), a connection that fails that statement after
        an error counts as broken too.
        """
        conn = self._conn
        if conn is None or isinstance(exc, ConnectionLost):
            return exc
        check_sql = self._config.check_sql
        broken = self._driver.is_disconnect(exc, conn) or running.state is CallState.CUT
        if not broken and check_sql and self.tx_queue is None:
            broken = not self.responds(conn, check_sql)
        if not broken:
            return exc
        self.disconnect(f"{type(exc).__name__} during a call")
        if self.tx_queue is not None:
            self._tx_lost = True
        lost = self._config.lost_error(
            f"the connection of {self._config.name!r} to {self._driver.target} broke during the "
            f"call ({type(exc).__name__}: {str(exc).strip()[:200]}); the statement may have run",
            may_have_run=True)
        lost.__cause__ = exc
        return lost

    def after_cancel(self, value: Any, ok: bool, running: RunningCall,
                     run_timeout: Optional[float]) -> tuple[Any, bool]:
        """After the watchdog cancelled this call: name a timeout, check the connection."""
        cut = running.state is CallState.CUT
        self.check_after_cancel(running)
        if ok or running.deadline is None or monotonic() < running.deadline:
            return value, ok
        cut = cut or isinstance(value, ConnectionLost)
        timeout = StatementTimeout(
            f"the call on {self._config.name!r} ran longer than {run_timeout} s and was "
            + ("cut off with its connection; it may have run" if cut
               else f"{self.cancelled()}; it took no effect"), may_have_run=cut)
        timeout.__cause__ = value
        return timeout, False

    def cancelled(self) -> str:
        """What cancelling a statement did: a server cancels it; an embedded
        database (SQLite), which has none, is interrupted."""
        if self._driver.target.family in (Family.POSTGRESQL, Family.MYSQL):
            return "cancelled on the server"
        return "interrupted"

    def check_after_cancel(self, running: RunningCall) -> None:
        """Once the watchdog acted on ``running`` (a call or a unit): replace a
        connection it cut, and one it sent a cancel to unless it answers, so a
        cancel that arrived late hits nothing. The check waits for the cancel to
        have returned first: the call may end on the cancel's first effect while
        the server is still delivering it (PostgreSQL signals the backend twice,
        and a second signal handled after the error cancels the next statement),
        and it runs the driver's ``cancel_check``, which meets a pending cancel."""
        if self._conn is None or running.state is CallState.RUNNING:
            return
        self.end_stream(exhausted=False)  # a cancelled fetch ends its stream
        if self._conn is None:
            return
        if running.state is CallState.CUT:
            self.disconnect("cut after its call overran")
        elif not running.cancel_done.wait(CANCEL_SETTLE):
            self.disconnect(f"its cancel had not returned within {CANCEL_SETTLE} s")
        elif not self.responds(self._conn, self._driver.cancel_check):
            self.disconnect("failed its check after a cancel")

    # -- the work of each job kind: its ``run`` calls one of these (``adb.jobs``) ---------

    def standalone(self, op: ops.OnCursor, *args: Any) -> Any:
        """One query or operation outside any transaction: autocommitted by the driver
        or by us."""
        conn = self.connection()
        if not self._driver.autocommit:
            return self.atomic(op, *args)
        return self.on_spare_cursor(conn, op, args)

    def statement(self, op: ops.StatementOp, sql: Any, params: Any,
                  row_factory: Optional[RowFactory]) -> Any:
        """A caller's statement outside any transaction (a ``Statement`` job):
        ``standalone`` with the op's arguments passed as they are. Gathered into a
        tuple and spread again, as ``standalone`` must for any op, they cost the
        common call about a twentieth of adb's own instructions on a compiled build
        (docs/performance.md, "The caller's side compiled")."""
        conn = self.connection()
        if not self._driver.autocommit:
            value = self.atomic(op, sql, params, row_factory)
            self._vouched = True
            return value
        cursor = self._take_spare(conn)
        try:
            value = op(cursor, self._driver, sql, params, row_factory)
        except BaseException:
            _close_cursor(cursor)
            raise
        self._keep_spare(conn, cursor)
        self._vouched = True
        return value

    def on_spare_cursor(self, conn: Connection, op: ops.OnCursor, args: tuple[Any, ...]) -> Any:
        """Run adb's own ``op`` on the cursor the previous call left, or a new one.

        A cursor costs an allocation and a few microseconds of GIL per call; under a
        burst that is ~5% of throughput. One is kept only while it holds no result
        set (rows stay in a cursor until its next execute) and its call succeeded;
        a caller's own function (``runInteraction``) always gets a fresh cursor.
        """
        cursor = self._take_spare(conn)
        try:
            value = op(cursor, self._driver, *args)
        except BaseException:
            _close_cursor(cursor)
            raise
        self._keep_spare(conn, cursor)
        return value

    def _take_spare(self, conn: Connection) -> Cursor:
        """The cursor the previous call left on ``conn``, or a new one."""
        spare, self._spare = self._spare, None
        return spare[1] if spare is not None and spare[0] is conn else conn.cursor()

    def _keep_spare(self, conn: Connection, cursor: Cursor) -> None:
        """Keep ``cursor`` for the next call if it holds no result set, else close it."""
        if not ops.returns_rows(cursor, self._driver):
            self._spare = (conn, cursor)
        else:
            _close_cursor(cursor)

    def atomic(self, op: ops.OnCursor, *args: Any) -> Any:
        """One call in its own transaction: all of it commits, or none of it. A
        transaction the server aborted under it (a runInteraction function that
        went on past an error, on PostgreSQL, whose COMMIT would then roll back
        without a word) fails the call: it succeeds only if it committed."""
        conn = self.connection()
        driver = self._driver
        driver.begin(conn)
        try:
            cursor = conn.cursor()
            try:
                value = op(cursor, driver, *args)
            finally:
                cursor.close()
        except BaseException as exc:
            # a broken connection is left to ``after_error``, which replaces it and
            # tells the caller it may have run; a ROLLBACK tried on it first would
            # drop it and hand the driver's bare error back instead
            if not driver.is_disconnect(exc, conn):
                self.rollback_or_drop()
            raise
        if driver.failed_transaction(conn):
            self.rollback_or_drop()
            raise TransactionError(
                "the server aborted this call's transaction after an error in it, which "
                "the call went on past (a runInteraction function that caught it): it was "
                "rolled back, not committed")
        driver.commit(conn)
        return value

    def in_transaction(self, op: ops.OnCursor, *args: Any) -> Any:
        """One of adb's own ops inside the transaction pinning this worker, on the
        spare cursor."""
        return self._in_transaction(self.on_spare_cursor, op, args)

    def interact(self, op: ops.OnCursor, *args: Any) -> Any:
        """The caller's own function (``runInteraction``) inside the transaction
        pinning this worker, on a cursor of its own."""
        return self._in_transaction(self.on_own_cursor, op, args)

    def _in_transaction(self,
                        on_cursor: Callable[[Connection, ops.OnCursor, tuple[Any, ...]], Any],
                        op: ops.OnCursor, args: tuple[Any, ...]) -> Any:
        """Run ``op`` in the pinned transaction. An error after which the server
        rolled the whole transaction back marks it, so nothing more runs in it and
        it cannot commit (on MySQL later statements would run outside it)."""
        try:
            self.check_transaction()
            if self._stream is not None and self._driver.stream_exclusive:
                raise InterfaceError(
                    f"a stream is open in this transaction and {self._driver.name} can run "
                    "nothing else on its connection until it ends: close the stream first")
            return on_cursor(self._conn, op, args)
        except BaseException as exc:
            if self._conn is not None and self._driver.rolled_back(exc, self._conn):
                self._tx_aborted = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
            raise

    def on_own_cursor(self, conn: Connection, op: ops.OnCursor, args: tuple[Any, ...]) -> Any:
        """Run ``op`` on a cursor of its own, closed after it."""
        cursor = conn.cursor()
        try:
            return op(cursor, self._driver, *args)
        finally:
            cursor.close()

    def host(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(session, *args)``: a call that works with this worker's connection
        itself (the adbapi drop-in's ``runWithConnection`` and ``runInteraction``)."""
        return fn(self, *args)

    def begin(self, tx: Tx, handle: Any) -> Any:
        """Pin the worker to ``tx`` and open the transaction, at its isolation level
        and read-only if it only reads (where the server knows such things); the
        caller gets its ``handle``."""
        try:
            if self._crew.stopping():
                raise PoolClosed.closing(self._config.name)
            conn = self.connection()
            self._driver.begin_transaction(conn, tx.isolation, tx.read_only)
        except BaseException:
            tx.fail()
            raise
        self.tx_queue = tx.queue
        self._crew.dispatch.pin(self.index)
        tx.activate(self.index)
        return handle

    def finish(self, tx: Tx, commit: bool) -> None:
        """Commit or roll back the pinned transaction and unpin."""
        self.end_stream(exhausted=False)
        self.unpin()
        lost, self._tx_lost = self._tx_lost, False
        aborted, self._tx_aborted = self._tx_aborted, None
        conn = self._conn
        if lost or conn is None:
            tx.fail()
            if commit:
                raise TransactionError(f"{tx!r} lost its connection; nothing was committed")
            return None
        if commit and (aborted or self._driver.failed_transaction(conn)):
            self.rollback_or_drop()
            tx.ended(False)
            raise TransactionError(
                f"{tx!r} was aborted by an earlier error"
                + (f" ({aborted}), which made the server roll it back" if aborted else "")
                + "; it was rolled back, not committed")
        try:
            (self._driver.commit if commit else self._driver.rollback)(conn)
        except BaseException as exc:
            tx.ended(False)
            if self._driver.is_disconnect(exc, conn):
                if commit:
                    raise self.commit_lost(tx, exc) from exc
                # a rollback whose connection broke did what it was asked: a
                # transaction dies with its connection, nothing of it committed
                self.disconnect(f"{type(exc).__name__} during a rollback")
                return None
            self.rollback_or_drop()
            raise
        tx.ended(commit)

    def commit_lost(self, tx: Tx, exc: BaseException) -> ConnectionLost:
        """The connection broke during COMMIT: the server may have committed or not,
        and nobody can tell from here (``may_have_run=True``)."""
        self.disconnect(f"{type(exc).__name__} during a commit")
        return self._config.lost_error(
            f"the connection of {self._config.name!r} to {self._driver.target} broke during "
            f"the COMMIT of {tx!r} ({type(exc).__name__}: {str(exc).strip()[:200]}): it may "
            "or may not have committed; check whether its effects are there before running "
            "it again", may_have_run=True)

    def abandon(self, reason: str) -> None:
        """Roll back a transaction whose owner is gone (closed pool, lost handle)."""
        self.end_stream(exhausted=False)
        log.warning("%s: rolling back a transaction %s", self._config.name, reason)
        self.release()

    def release(self) -> None:
        """Unpin, and roll back what the transaction left (nobody waits for it)."""
        self.unpin()
        self._tx_lost = False
        self._tx_aborted = None
        self.rollback_or_drop()

    def unpin(self) -> None:
        self.tx_queue = None
        self._crew.dispatch.unpin(self.index)

    def check_transaction(self) -> None:
        if self._tx_lost or self._conn is None:
            raise TransactionError(
                "this transaction lost its connection; nothing of it was committed: "
                "roll it back and start again")
        if self._tx_aborted is not None:
            raise TransactionError(
                f"the server rolled this transaction back after an error ({self._tx_aborted});"
                " nothing of it was committed: roll it back and start again "
                "(db.runTransaction does that by itself)")

    # -- streams: a cursor open across jobs, in the pinned transaction -------------------

    def open_stream(self, gate: StreamGate, own: bool, export: bool, sql: Any, params: Any,
                    size: int, factory: RowFactory) -> Batch:
        """Run the stream's statement on a cursor that stays open (``export``: as
        text-format lines) and return its first batch."""
        self.check_transaction()
        if self._stream is not None:
            raise InterfaceError("this transaction already has an open stream: close it first")
        opener = self._driver.copy.open_export if export else self._driver.open_stream
        self._stream = OpenStream(opener(self._conn, sql, params), gate, own)
        return self.fetch_stream(size, factory)

    def fetch_stream(self, size: int, factory: RowFactory) -> Batch:
        """The next batch of the open stream; the last one closes its cursor."""
        stream = self._stream
        if stream is None:
            raise InterfaceError("the stream is closed")
        rows = self._driver.fetch_stream(stream.cursor, size)
        done = len(rows) < size
        shaped = ops.shaped(factory, stream.cursor, rows) if rows else []
        if done:
            self.end_stream(exhausted=True)
        return Batch(shaped, done)

    def close_stream(self) -> None:
        """Close the open stream before its end (its consumer stopped early)."""
        self.end_stream(exhausted=False)

    def pinned_job(self) -> Queued:
        """The next job of the transaction pinning the worker. While a stream with an
        ``idle_timeout`` is open, a wait that long for its consumer closes it (and
        its own transaction): WAKE then, and the worker looks again."""
        queue, stream = self.tx_queue, self._stream
        assert queue is not None
        if stream is None or stream.gate.idle_timeout is None:
            return queue.get()
        try:
            return queue.get(timeout=stream.gate.idle_timeout)
        except Empty:
            if not stream.gate.shut_if_idle():
                return queue.get()
        log.info("%s: worker %d closed a stream idle for %s s", self._config.name, self.index,
                 stream.gate.idle_timeout)
        self.end_stream(exhausted=False)
        if stream.own:
            self.release()
        return WAKE

    def end_stream(self, exhausted: bool) -> None:
        """Close the stream's cursor; drop the connection where that is what
        leaves it clean (the driver says, see ``Driver.close_stream``)."""
        stream, self._stream = self._stream, None
        if stream is None or self._conn is None:
            return
        if self.close_stream_cursor(stream, exhausted, keep_transaction=not stream.own):
            self.disconnect("a stream closed before its end")
            if self.tx_queue is not None:
                self._tx_lost = True

    def close_stream_cursor(self, stream: OpenStream, exhausted: bool,
                            keep_transaction: bool) -> bool:
        """``Driver.close_stream``: True when the connection must be dropped, as it
        must when closing failed (a bug of adb's own must not leave it pinned)."""
        try:
            return self._driver.close_stream(stream.cursor, exhausted, keep_transaction)
        except Exception:
            log.exception("%s: worker %d could not close a stream", self._config.name,
                          self.index)
            return True


def _close_cursor(cursor: Cursor) -> None:
    try:
        cursor.close()
    except Exception:  # its connection broke: the caller hears of that from the call
        pass


__all__ = ["CANCEL_SETTLE", "Crew", "LIVENESS_AFTER", "OpenStream", "PoolConfig",
           "Session", "StreamGate", "Tx"]
