"""One worker: a thread that owns one DB-API connection for its life and runs jobs.

A worker takes shared jobs from its pool's ``Dispatch``; one that begins a
transaction is *pinned*: until the transaction ends it reads only that
transaction's private queue, so its statements run in order on one connection.
Nothing here knows about event loops: results go to the pool's hand-back.

Before each call outside a transaction a worker checks its connection (closed,
a readable idle socket, past ``max_lifetime``, idle past ``check_idle`` and
failing a ping) and replaces it, so a connection the server dropped while idle
costs the caller nothing. A call whose connection breaks under it is never
re-run: the caller gets ``ConnectionLost`` (the statement may have run).

Group commit (``Database(autobatch=N)``): a worker that takes a standalone
``runOperation`` while more wait in the shared queue takes up to N of them and
runs them as one *unit*: one round trip and one commit instead of N. Which
statements may join is ``adb.sqltext``'s policy, decided per statement by the
driver. The contract, which every path keeps exactly:

- Each caller gets what it would have got alone: its own rowcount (read from
  its own statement's result, or fixed by the statement's form and checked, see
  ``drivers.psycopg2``), and on success a committed statement.
- A unit is atomic. If any statement of it fails (or its commit does), the unit
  is rolled back and its calls run again one by one, so the failing one gets its
  own error with the driver's own type and the others succeed. A unit that
  rolled back left no effect, so nothing runs twice.
- If the connection breaks during a unit, every call of that unit (and only
  those) gets ``ConnectionLost(may_have_run=True)``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Protocol

from . import health, ops
from .call import ARGS, CLAIM, FN, FUTURE, RUN_TIMEOUT, TRACE, CallState, Job, RunningCall
from .dispatch import STOP, WAKE, Dispatch, Queued
from .errors import (ConnectionLost, Error, InterfaceError, PoolClosed, ServerUnavailable,
                     StatementTimeout, StreamTimeout, TransactionError, name_attempts)
from .handback import Handback
from .rows import RowFactory
from .sqltext import Path
from .telemetry import Span, Telemetry, Trace

if TYPE_CHECKING:
    from typing import Concatenate

    from .drivers.base import Connection, Cursor, Driver

log = logging.getLogger("adb")

#: seconds of idleness after which a connection's socket is checked before use
LIVENESS_AFTER = 0.05
#: seconds a worker waits, after a cancelled call, for the cancel itself to return
#: before it checks the connection; past it the connection is replaced instead
CANCEL_SETTLE = 2.0

#: where a batchable job keeps its statement: ``(op, sql, params)`` follow ARGS
JOB_SQL, JOB_PARAMS = ARGS + 1, ARGS + 2


@dataclasses.dataclass(frozen=True)
class PoolConfig:
    """The settings every worker of one pool reads (see ``BaseDatabase`` for each).

    ``lost_error`` is the ConnectionLost class callers get; ``check_sql`` a
    statement run after an error to test the connection (None: no test);
    ``warm`` how many workers connect before their first job; ``autobatch`` the
    most calls one unit may hold (1: no units); ``retries`` how many times a
    standalone call that failed transiently, having taken no effect, runs again.
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
    #: spans, metrics and the slow-call log (``adb.telemetry``); None: none of them
    telemetry: Optional[Telemetry] = None


class Crew(Protocol):
    """What a worker needs from its pool (``adb.pool.Pool`` provides it)."""

    config: PoolConfig
    driver: Driver
    dispatch: Dispatch
    handback: Handback
    #: worker thread id -> its DB-API connection (adbapi exposes the same)
    connections: dict[int, Connection]

    def is_abandoned(self, future: Any) -> bool: ...
    def open_connection(self) -> Connection: ...
    def connect_wait(self) -> float: ...
    def stopping(self) -> bool: ...
    def worker_exited(self, worker: Worker) -> None: ...


class Tx(Protocol):
    """A transaction as the worker pinned by it sees it (``adb.transaction.Transaction``)."""

    queue: SimpleQueue[Queued]
    #: its span while telemetry traces it (``adb.telemetry``), else None
    span: Any

    def activate(self, worker_index: int) -> None: ...
    def ended(self, committed: bool) -> None: ...
    def fail(self) -> None: ...


class Counters(NamedTuple):
    """What one worker has done, for ``stats()``."""

    completed: int
    errors: int
    connects: int
    recycled: int
    units: int
    batched: int
    unit_fallbacks: int
    retries: int


class Batch(NamedTuple):
    """One batch of a stream: its rows (shaped by the row factory), and whether
    they are the last (the cursor is then closed)."""

    rows: list[Any]
    done: bool


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
    """The stream open on a worker's connection: its cursor, its gate, and whether
    its transaction is its own (ended with it) or the caller's (which goes on)."""

    cursor: Cursor
    gate: StreamGate
    own: bool


class Unit:
    """The calls one worker runs as one (group commit), and the path they take
    together: a message if every statement may go in one, else one transaction."""

    __slots__ = ("jobs", "path")

    def __init__(self, first: Job, path: Path) -> None:
        self.jobs = [first]
        self.path = path

    def add(self, job: Job, path: Path) -> None:
        self.jobs.append(job)
        if path is Path.TRANSACTION:
            self.path = path

    def deadline(self) -> Optional[float]:
        """When the unit's earliest ``statement_timeout`` runs out, or None."""
        timeouts = [job[RUN_TIMEOUT] for job in self.jobs if job[RUN_TIMEOUT] is not None]
        return time.monotonic() + min(timeouts) if timeouts else None


class Worker:
    """One thread and its connection. All methods run in that thread, except that
    the watchdog reads ``conn`` and ``current`` and may cancel the running statement.
    Others only read what the properties and ``counters()`` show."""

    def __init__(self, crew: Crew, index: int) -> None:
        self.crew = crew
        self.index = index
        config = crew.config
        self._driver = crew.driver
        self._handback = crew.handback
        self._is_abandoned = crew.is_abandoned
        self._queue = crew.dispatch.queue
        self._idle = crew.dispatch.idle
        self._config = config
        self._telemetry = config.telemetry
        self._tx_span: Any = None  # the span of the transaction pinning it, if traced
        self._conn: Connection = None
        self._born = self._last_used = 0.0
        self._lifetime: Optional[float] = None
        self._txq: Optional[SimpleQueue[Queued]] = None  # the queue of the transaction pinning it
        self._tx_lost = False  # that transaction's connection broke: it can only end
        self._tx_aborted: Optional[str] = None  # why the server rolled it back, if it did
        self._stream: Optional[OpenStream] = None  # a stream open in that transaction
        self._busy = False
        self._current: Optional[RunningCall] = None  # the running call, for the watchdog
        self._completed = self._errors = self._connects = self._recycled = 0
        self._units = self._batched = self._unit_fallbacks = self._retries = 0
        self._spare: Optional[tuple[Connection, Cursor]] = None  # see on_spare_cursor
        self.inbox: SimpleQueue[Queued] = SimpleQueue()  # jobs handed to this worker while idle
        self._later: deque[Queued] = deque()  # jobs taken while gathering a unit, served next
        self.thread = threading.Thread(
            target=self.run, name=f"{config.name}-worker-{index}", daemon=True)

    # -- what others read ------------------------------------------------------------

    @property
    def conn(self) -> Connection:
        """The connection, or None (read by the watchdog to cancel or cut a call)."""
        return self._conn

    @property
    def current(self) -> Optional[RunningCall]:
        """The call running now, or None (read by the watchdog)."""
        return self._current

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def pinned(self) -> bool:
        """True while a transaction pins this worker."""
        return self._txq is not None

    @property
    def streaming(self) -> bool:
        """True while a stream is open on this worker's connection."""
        return self._stream is not None

    def counters(self) -> Counters:
        return Counters(self._completed, self._errors, self._connects, self._recycled,
                        self._units, self._batched, self._unit_fallbacks, self._retries)

    # -- the loop --------------------------------------------------------------------

    def run(self) -> None:
        job: Optional[Queued] = None
        try:
            self.warm_up()
            while True:
                job = self.pinned_job() if self._txq is not None else self.next_job()
                if job is WAKE:
                    continue
                if job is STOP:
                    break
                try:
                    if job[FN] is Worker.batchable and self._config.autobatch > 1:
                        self.serve_batchable(job)
                    else:
                        self.serve(job)
                except Exception:  # a bug of adb's own: keep the worker alive
                    log.exception("%s: worker %d failed on a job", self._config.name, self.index)
                job = None  # hold no reference to a finished job while blocked
        finally:
            self.disconnect()
            self.crew.worker_exited(self)

    def next_job(self) -> Queued:
        """The next shared job: one handed to this worker, else one from the shared
        queue, else register as idle and sleep until a caller hands one over.

        Idle workers form a stack, so the most recently busy (hot) thread gets the
        next call instead of whichever thread the kernel would wake. A worker
        re-checks the shared queue after registering, so a job queued while it was
        registering is never stranded."""
        if self._later:
            return self._later.popleft()
        for source in (self.inbox, self._queue):
            if not source.empty():  # a burst leaves the inbox empty: no Empty raised per job
                try:
                    return source.get_nowait()
                except Empty:  # another worker took it first
                    pass
        self._idle.append(self)
        job: Queued
        try:
            job = self._queue.get_nowait()
        except Empty:
            max_idle = self._config.max_idle
            try:
                if max_idle is None or self._conn is None:
                    return self.inbox.get()
                return self.inbox.get(timeout=max_idle)
            except Empty:
                self.disconnect("idle for max_idle")
                job = WAKE
        try:
            self._idle.remove(self)
        except ValueError:
            pass  # a caller took this worker meanwhile: its job waits in the inbox
        return job

    def pinned_job(self) -> Queued:
        """The next job of the transaction pinning this worker. While a stream with
        an ``idle_timeout`` is open, a wait that long for its consumer closes it."""
        queue, stream = self._txq, self._stream
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

    def warm_up(self) -> None:
        """Connect before the first job so it pays no connect; failures wait for a job."""
        if self.index >= self._config.warm or self.crew.stopping():
            return
        try:
            self.connection()
        except Exception as exc:
            log.warning("%s: worker %d could not connect: %s", self._config.name, self.index, exc)

    def serve(self, job: Job) -> None:
        if self.admit(job):
            self.execute(job)

    def admit(self, job: Job) -> bool:
        """Claim ``job`` for running; False (and skip it) if its caller gave up."""
        future, claim = job[FUTURE], job[CLAIM]
        if (claim is not None and not claim.take()) \
                or (future is not None and self._is_abandoned(future)):
            self._handback.nudge()  # given up before it started: it may make room
            return False
        return True

    def execute(self, job: Job) -> None:
        """Run an admitted job and hand its outcome back."""
        future, fn, claim, run_timeout, trace = job[:ARGS]
        span = None if trace is None else self.trace_start(trace, fn, job[ARGS:])
        self._busy = True
        deadline = None if run_timeout is None else time.monotonic() + run_timeout
        self._current = running = RunningCall(future, deadline)
        value: Any
        try:
            value, ok = fn(self, *job[ARGS:]), True
        except BaseException as exc:  # everything goes back to the caller
            value, ok = self.after_error(exc, running), False
            if self._config.retries and fn in _RETRIED and job[ARGS] is not ops.interaction:
                value, ok = self.retry(job, value, running)
        self._current = None
        if running.state is not CallState.RUNNING:
            value, ok = self.after_cancel(value, ok, running, run_timeout)
        self._busy = False
        self._completed += 1
        if not ok:
            self._errors += 1
        if span is not None:
            self.trace_end(trace, span, ok, value)
        if future is not None:
            self._handback(future, ok, value)

    def trace_start(self, trace: Trace, fn: JobFn, args: tuple[Any, ...]) -> Optional[Span]:
        """Open the span of the call about to run (``adb.telemetry``): what it is,
        its statement, and its parent (the caller's span, or its transaction's)."""
        telemetry = self._telemetry
        if telemetry is None:  # a job queued by another Database's code: not traced
            return None
        parent, extra = None, {}
        if fn in _OPS:
            op = args[0]
            parent = self._tx_span if fn is Worker.in_transaction else None
            if op is ops.query or op is ops.operation:
                return telemetry.start(trace, "", args[1], parent)
            if op is ops.many:
                return telemetry.start(trace, "", args[1], parent,
                                       **{"adb.batch.size": len(args[2])})
            if op is ops.savepoint:
                return telemetry.start(trace, "", "; ".join(args[1]), parent)
            if op is ops.copy_rows or op is ops.copy_text:
                extra["db.collection.name"] = args[1]
                return telemetry.start(trace, "COPY", None, parent, **extra)
            name = "runInteraction" if op is ops.interaction else getattr(op, "__name__", "call")
            if name.endswith("_op"):  # notify_op: NOTIFY
                name = name[:-3].upper()
            return telemetry.start(trace, name, None, parent)
        if fn is Worker.begin:
            tx = args[0]
            tx.span = telemetry.begin_transaction(trace, bool(args[1:2] and args[1]))
            return telemetry.start(trace, "BEGIN", None, tx.span)
        parent = self._tx_span
        if fn is Worker.finish:
            return telemetry.start(trace, "COMMIT" if args[1] else "ROLLBACK", None, parent)
        if fn is Worker.open_stream:
            return telemetry.start(trace, "", args[3], parent, **{"adb.stream": True})
        if fn is Worker.fetch_stream:
            return telemetry.start(trace, "FETCH", None, parent, **{"adb.stream": True})
        return telemetry.start(trace, getattr(fn, "__name__", "call"), None, parent)

    def trace_end(self, trace: Trace, span: Span, ok: bool, value: Any) -> None:
        """The call ran: end its span, record its metrics, log it if slow."""
        assert self._telemetry is not None
        self._telemetry.end(trace, span, ok, value)

    # -- retries of standalone calls (Database(retries=N)) ------------------------------

    def retry(self, job: Job, error: BaseException, running: RunningCall) -> tuple[Any, bool]:
        """Run a standalone call again while it fails transiently having taken no
        effect, up to ``retries`` more times, waiting ``health.retry_delay`` (or the
        pool's connect backoff) in between; return its outcome. The last error, when
        they run out, names the attempts. A caller who gave up, a watchdog that acted
        or a closing pool ends the retries."""
        fn, args, attempts = job[FN], job[ARGS:], 1
        while attempts <= self._config.retries and self.may_retry(error, running):
            self._retries += 1
            time.sleep(retry_wait(attempts, error, self.crew.connect_wait))
            attempts += 1
            try:
                return fn(self, *args), True
            except BaseException as exc:
                error = self.after_error(exc, running)
        if attempts > 1:
            name_attempts(error, attempts, "the call", self._config.retries)
        return error, False

    def may_retry(self, error: BaseException, running: RunningCall) -> bool:
        """True when ``error`` left nothing behind and may not recur: the server
        refused the statement transiently, or no connection could be opened."""
        if running.state is not CallState.RUNNING or self.crew.stopping() \
                or (running.future is not None and self._is_abandoned(running.future)):
            return False
        if isinstance(error, ConnectionLost):
            return not error.may_have_run
        return not isinstance(error, Error) and self._driver.is_transient(error)

    # -- group commit: a unit of standalone operations ----------------------------------

    def serve_batchable(self, job: Job) -> None:
        """A standalone operation: alone, or at the head of a unit of the operations
        queued behind it."""
        if self._queue.empty():
            return self.serve(job)
        path = self._driver.batch_path(job[JOB_SQL])
        if path is Path.ALONE:
            return self.serve(job)
        if not self.admit(job):
            return None
        unit = self.gather(job, path)
        if len(unit.jobs) == 1:
            return self.execute(job)
        return self.run_unit(unit)

    def gather(self, first: Job, path: Path) -> Unit:
        """The unit ``first`` (admitted, its statement on ``path``) heads: it and up to
        ``autobatch - 1`` more standalone operations taken from the shared queue,
        in queue order.

        A queued call that may not join (a non-batchable job, a STOP) ends the
        gathering and waits in ``_later``, served next; a batchable call whose
        statement must run alone waits there too, and gathering goes on. Calls whose
        callers gave up are skipped as a worker skips them anyway.
        """
        queue, later, path_of = self._queue, self._later, self._driver.batch_path
        known, batchable, limit = path_of.paths, Worker.batchable, self._config.autobatch
        unit = Unit(first, path)
        jobs = unit.jobs
        while len(jobs) < limit and not queue.empty():
            try:
                job = queue.get_nowait()
            except Empty:
                break
            if not isinstance(job, tuple) or job[FN] is not batchable:  # STOP, WAKE, other work
                later.append(job)
                break
            path = known.get(job[JOB_SQL]) or path_of(job[JOB_SQL])
            if path is Path.ALONE:
                later.append(job)
            elif self.admit(job):
                unit.add(job, path)
        return unit

    def run_unit(self, unit: Unit) -> None:
        """Run ``unit`` as one and hand each call its own outcome (see the module doc)."""
        driver, jobs = self._driver, unit.jobs
        started = time.perf_counter()
        self._busy = True
        self._current = running = RunningCall(None, unit.deadline())
        conn = error = None
        counts: list[int] = []
        try:
            conn = self.connection()
            statements = [(job[JOB_SQL], job[JOB_PARAMS]) for job in jobs]
            counts = driver.run_unit(conn, statements, unit.path)
        except BaseException as exc:  # everything goes back to the callers
            error = exc
        self._current = None
        self._busy = False
        self._units += 1
        if error is not None and conn is not None \
                and (running.state is CallState.CUT or driver.is_disconnect(error, conn)):
            self.trace_unit(jobs, started, False, error)
            return self.unit_lost(jobs, error)
        self.check_after_cancel(running)
        if error is None:
            self.trace_unit(jobs, started, True, None)
            self._batched += len(jobs)
            self._completed += len(jobs)
            self._handback.many([(job[FUTURE], True, count) for job, count in zip(jobs, counts)])
        else:
            self.one_by_one(jobs)

    def trace_unit(self, jobs: list[Job], started: float, ok: bool, error: Any) -> None:
        """Spans for the calls of a unit that ran as one (``adb.telemetry``)."""
        if self._telemetry is not None:
            self._telemetry.unit([job[TRACE] for job in jobs], [job[JOB_SQL] for job in jobs],
                                 ok, error, started)

    def unit_lost(self, jobs: list[Job], error: BaseException) -> None:
        """The connection broke under a unit: any of its statements may have run."""
        self.disconnect(f"{type(error).__name__} during a unit of {len(jobs)} calls")
        self._completed += len(jobs)
        self._errors += len(jobs)
        name = self._config.name
        for job in jobs:
            lost = self._config.lost_error(
                f"the connection of {name!r} to {self._driver.target} broke while it ran "
                f"this call in a unit of {len(jobs)} batched calls (autobatch) "
                f"({type(error).__name__}: {str(error).strip()[:200]}); the statement may have run",
                may_have_run=True)
            lost.__cause__ = error
            self._handback(job[FUTURE], False, lost)

    def one_by_one(self, jobs: list[Job]) -> None:
        """The unit failed and was rolled back: run each call alone, so each caller
        gets its own outcome (the failing one its own error)."""
        self._unit_fallbacks += 1
        for job in jobs:
            self.execute(job)

    # -- the connection ---------------------------------------------------------------

    def connection(self) -> Connection:
        """This worker's connection, replaced first if it is no longer fit to use."""
        conn = self._conn
        now = time.monotonic()
        if conn is not None:
            reason = self.unfit(conn, now)
            if reason is None:
                self._last_used = now
                return conn
            self.disconnect(reason)
            if reason == "max_lifetime":
                self._recycled += 1
        if self._telemetry is None:
            self._conn = conn = self.crew.open_connection()
        else:
            began = self._telemetry.connecting()
            self._conn = conn = self.crew.open_connection()
            self._telemetry.connected(began, conn)
        self._connects += 1
        self._born = self._last_used = now
        self._lifetime = health.lifetime(self._config.max_lifetime)
        self.crew.connections[threading.get_ident()] = conn
        return conn

    def unfit(self, conn: Connection, now: float) -> Optional[str]:
        """Why ``conn`` must be replaced before the next call, or None."""
        if self._lifetime is not None and now - self._born > self._lifetime:
            return "max_lifetime"
        if self._driver.is_closed(conn):
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

    def disconnect(self, reason: Optional[str] = None) -> None:
        self._spare = None
        stream, self._stream = self._stream, None
        if stream is not None:  # its cursor dies with the connection
            self.close_stream_cursor(stream, exhausted=False, keep_transaction=False)
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self.crew.connections.pop(threading.get_ident(), None)
            if reason:
                log.info("%s: worker %d dropped its connection: %s",
                         self._config.name, self.index, reason)
            self._driver.close(conn)

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
        if not broken and check_sql and self._txq is None:
            broken = not self.responds(conn, check_sql)
        if not broken:
            return exc
        self.disconnect(f"{type(exc).__name__} during a call")
        if self._txq is not None:
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
        if ok or running.deadline is None or time.monotonic() < running.deadline:
            return value, ok
        cut = cut or isinstance(value, ConnectionLost)
        timeout = StatementTimeout(
            f"the call on {self._config.name!r} ran longer than {run_timeout} s and was "
            + ("cut off with its connection; it may have run" if cut
               else "cancelled on the server; it took no effect"), may_have_run=cut)
        timeout.__cause__ = value
        return timeout, False

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

    # -- job functions: fn(worker, *args), named in each job -----------------------------

    def standalone(self, op: ops.Op, *args: Any) -> Any:
        """One query or operation outside any transaction: autocommitted by the driver
        or by us."""
        conn = self.connection()
        if not self._driver.autocommit:
            return self.atomic(op, *args)
        return self.on_spare_cursor(conn, op, args)

    def batchable(self, op: ops.Op, *args: Any) -> Any:
        """A standalone ``runOperation`` that may join a unit (``autobatch``); run
        alone, it is any standalone call."""
        return self.standalone(op, *args)

    def on_spare_cursor(self, conn: Connection, op: ops.Op, args: tuple[Any, ...]) -> Any:
        """Run adb's own ``op`` on the cursor the previous call left, or a new one.

        A cursor costs an allocation and a few microseconds of GIL per call; under a
        burst that is ~5% of throughput. One is kept only while it holds no result
        set (rows stay in a cursor until its next execute) and its call succeeded;
        a caller's own function (``runInteraction``) always gets a fresh cursor.
        """
        spare, self._spare = self._spare, None
        cursor = spare[1] if spare is not None and spare[0] is conn else conn.cursor()
        try:
            value = op(cursor, self._driver, *args)
        except BaseException:
            self.close_cursor(cursor)
            raise
        if cursor.description is None:
            self._spare = (conn, cursor)
        else:
            self.close_cursor(cursor)
        return value

    @staticmethod
    def close_cursor(cursor: Cursor) -> None:
        try:
            cursor.close()
        except Exception:  # its connection broke: the caller hears of that from the call
            pass

    def atomic(self, op: ops.Op, *args: Any) -> Any:
        """One call in its own transaction: all of it commits, or none of it."""
        conn = self.connection()
        driver = self._driver
        driver.begin(conn)
        try:
            cursor = conn.cursor()
            try:
                value = op(cursor, driver, *args)
            finally:
                cursor.close()
        except BaseException:
            self.rollback_quietly()
            raise
        driver.commit(conn)
        return value

    def in_transaction(self, op: ops.Op, *args: Any) -> Any:
        """One call inside the transaction pinning this worker. An error after which
        the server rolled the whole transaction back marks it, so nothing more runs
        in it and it cannot commit (on MySQL later statements would run outside it)."""
        try:
            self.check_transaction()
            if self._stream is not None and self._driver.stream_exclusive:
                raise InterfaceError(
                    f"a stream is open in this transaction and {self._driver.name} can run "
                    "nothing else on its connection until it ends: close the stream first")
            if op is not ops.interaction:
                return self.on_spare_cursor(self._conn, op, args)
            cursor = self._conn.cursor()
            try:
                return op(cursor, self._driver, *args)
            finally:
                cursor.close()
        except BaseException as exc:
            if self._conn is not None and self._driver.rolled_back(exc, self._conn):
                self._tx_aborted = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
            raise

    def begin(self, tx: Tx, read_only: bool = False) -> Tx:
        """Pin this worker to ``tx`` and open the transaction (``read_only``: one
        that only reads, where the server knows such a thing)."""
        try:
            if self.crew.stopping():
                raise PoolClosed.closing(self._config.name)
            conn = self.connection()
            (self._driver.begin_read_only if read_only else self._driver.begin)(conn)
        except BaseException:
            tx.fail()
            raise
        self._pin(tx.queue)
        self._tx_span = getattr(tx, "span", None)
        tx.activate(self.index)
        return tx

    def finish(self, tx: Tx, commit: bool) -> None:
        """Commit or roll back the pinned transaction and unpin."""
        self.end_stream(exhausted=False)
        self._unpin()
        lost, self._tx_lost = self._tx_lost, False
        aborted, self._tx_aborted = self._tx_aborted, None
        conn = self._conn
        if lost or conn is None:
            tx.fail()
            if commit:
                raise TransactionError(f"{tx!r} lost its connection; nothing was committed")
            return None
        if commit and (aborted or self._driver.failed_transaction(conn)):
            self.rollback_quietly()
            tx.ended(False)
            raise TransactionError(
                f"{tx!r} was aborted by an earlier error"
                + (f" ({aborted}), which made the server roll it back" if aborted else "")
                + "; it was rolled back, not committed")
        try:
            (self._driver.commit if commit else self._driver.rollback)(conn)
        except BaseException as exc:
            tx.ended(False)
            if commit and self._driver.is_disconnect(exc, conn):
                raise self.commit_lost(tx, exc) from exc
            self.rollback_quietly()
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
        self._unpin()
        self._tx_lost = False
        self._tx_aborted = None
        self.rollback_quietly()

    # -- streams: a cursor open across jobs, in the pinned transaction -------------------

    def open_stream(self, gate: StreamGate, own: bool, export: bool, sql: Any, params: Any,
                    size: int, factory: RowFactory) -> Batch:
        """Run the stream's statement on a cursor that stays open (``export``: as
        text-format lines) and return its first batch."""
        self.check_transaction()
        if self._stream is not None:
            raise InterfaceError("this transaction already has an open stream: close it first")
        opener = self._driver.open_export if export else self._driver.open_stream
        self._stream = OpenStream(opener(self._conn, sql, params), gate, own)
        return self.fetch_stream(size, factory)

    def fetch_stream(self, size: int, factory: RowFactory) -> Batch:
        """The next batch of the open stream; the last one closes its cursor."""
        stream = self._stream
        if stream is None:
            raise InterfaceError("the stream is closed")
        rows = self._driver.fetch_stream(stream.cursor, size)
        done = len(rows) < size
        shaped = factory(stream.cursor.description, rows) if rows else []
        if done:
            self.end_stream(exhausted=True)
        return Batch(shaped, done)

    def close_stream(self) -> None:
        """Close the open stream before its end (its consumer stopped early)."""
        self.end_stream(exhausted=False)

    def end_stream(self, exhausted: bool) -> None:
        """Close the stream's cursor; drop the connection where that is what
        leaves it clean (the driver says, see ``Driver.close_stream``)."""
        stream, self._stream = self._stream, None
        if stream is None or self._conn is None:
            return
        if self.close_stream_cursor(stream, exhausted, keep_transaction=not stream.own):
            self.disconnect("a stream closed before its end")
            if self._txq is not None:
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

    def _pin(self, queue: SimpleQueue[Queued]) -> None:
        self._txq = queue
        self.crew.dispatch.pinned.add(self.index)

    def _unpin(self) -> None:
        self._txq = None
        self._tx_span = None
        self.crew.dispatch.pinned.discard(self.index)

    def rollback_quietly(self) -> None:
        if self._conn is None:
            return
        try:
            self._driver.rollback(self._conn)
        except Exception:  # the connection is broken: replace it
            self.disconnect("rollback failed")


def retry_wait(attempts: int, error: BaseException, connect_wait: Callable[[], float]) -> float:
    """Seconds to wait before running again what failed transiently ``attempts``
    times (a call, or runTransaction's function): the retry backoff, or the pool's
    connect backoff (``connect_wait()``) when no connection could be opened."""
    wait = health.retry_delay(attempts)
    if isinstance(error, ServerUnavailable):
        wait = max(wait, connect_wait())
    return wait


#: the job functions of standalone calls, which ``Database(retries=N)`` runs again
_RETRIED = (Worker.standalone, Worker.batchable, Worker.atomic)
#: the job functions whose first argument is an ``ops.Op``
_OPS = (*_RETRIED, Worker.in_transaction)

if TYPE_CHECKING:
    #: a job function: ``fn(worker, *args)``, run by the worker that takes the job
    JobFn = Callable[Concatenate[Worker, ...], Any]


def abandon_job(reason: str) -> Job:
    """The job that rolls back the transaction pinning a worker whose caller is gone
    (the Database closing, a handle dropped while open); nobody waits for it."""
    return (None, Worker.abandon, None, None, None, reason)


__all__ = ["Batch", "Counters", "Crew", "OpenStream", "PoolConfig", "StreamGate", "Tx", "Unit",
           "retry_wait",
           "Worker", "abandon_job", "JOB_SQL", "JOB_PARAMS"]
