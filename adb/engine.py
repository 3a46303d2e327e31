"""The engine: the plumbing under one Database's public API.

``Engine`` turns a checked call into a queued job and gives the caller what its
front-end hands back, and owns everything that takes: the driver, the pool of
workers with their dispatch, admission under ``max_queued`` and hand-back, the
telemetry, the open transactions, the listening hub, the read replicas (each an
engine of its own, which a transaction begun there is routed back to) and the
close sequence. It knows its front-end only as a ``FrontEnd`` object
(``adb.frontend``) and never calls back into the Database: the facade
(``adb.core``) and the features (streams, bulk loads, retried transactions,
listeners, savepoints) call it.

The plumbing is built in one direction: the ``Dispatch`` first, then
``Admission`` (which feeds it), the hand-back (which asks it whether every worker
is busy), and last the ``Pool``, which is handed all three. Nothing the pool
holds refers to the engine, except weakly, so a Database dropped unclosed is
still collected (and warns).
"""

from __future__ import annotations

import atexit
import enum
import os
import tempfile
import threading
import time
import weakref
from queue import SimpleQueue
from typing import Any, Callable, Generic, Optional

from . import drivers, listen
from .admission import Admission
from .call import Claim, Job
from .dispatch import Dispatch, Queued
from .drivers.base import Driver
from .errors import (ForkError, InterfaceError, PoolClosed, PoolTimeout, StreamTimeout,
                     TransactionError)
from .frontend import Cancellable, F, FrontEnd
from .jobs import Abandon, Begin, CloseStream, Connect, FetchStream, Finish, Hosted, OpenStream
from .listen import Hub, Router
from .op import Op
from .options import (OPTION_NAMES, PoolOptions, Settings, check_positive,
                      check_statement_timeout, check_timeout, pipeline_depth)
from .pool import Pool, PoolState, give_up_all_at_exit
from .replicas import ReplicaSet
from .session import PoolConfig, StreamGate
from .steps import Steps
from .telemetry import BEGIN, COMMIT, CONNECT, ROLLBACK, Telemetry, What
from .transaction import Transaction
from .txrecord import EndedBy, TxRecord
from .url import make_target, target_for

DEFAULT_POOL_SIZE = 10
_live: weakref.WeakSet[Engine[Any]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """Every Database of the parent refuses calls in a forked child, and the child lets
    go of the parent's connections without a word on them (``_let_go``)."""
    for engine in list(_live):
        _let_go(engine.pool.connections.values())
        if engine._hub is not None and engine._hub.conn is not None:
            _let_go([engine._hub.conn])
        engine.refusal = ForkError(
            f"the Database {engine.name!r} was created in process {engine.pid} and cannot be "
            f"used in child process {os.getpid()}: create the Database after forking "
            "(e.g. after tornado's server.start(n))")


def _let_go(connections: Any) -> None:
    """In a forked child: point each of the parent's connection sockets at /dev/null in
    this process, so that nothing the child does with the connection objects (a
    collection, the interpreter's exit: psycopg2 sends its goodbye to the server when a
    connection is deallocated) reaches the server or breaks the parent's session. The
    parent's sockets are untouched; the child's copies are closed."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for conn in connections:
            fd = _socket_fd(conn)
            if fd is not None:
                try:
                    os.dup2(devnull, fd)
                except OSError:
                    pass
    finally:
        os.close(devnull)


def _socket_fd(conn: Any) -> Optional[int]:
    """The file descriptor of a DB-API connection's socket, or None (sqlite3, or a
    connection already closed)."""
    for owner in (conn, getattr(conn, "_sock", None)):  # psycopg2, psycopg; PyMySQL
        fileno = getattr(owner, "fileno", None)
        if fileno is not None:
            try:
                fd = fileno()
            except Exception:
                return None
            return fd if isinstance(fd, int) and fd >= 0 else None
    return None


os.register_at_fork(after_in_child=_after_fork_in_child)

#: seconds the exit handler waits, in all, for cancels already on their way
EXIT_CANCEL_WAIT = 5.0


def _at_exit() -> None:
    """The interpreter exits with Databases of this process open (no ``close()``):
    each is closed without waiting (``Engine.close_at_exit``), so that no statement
    it still runs outlives the process and commits after it; a forked child's
    Databases are its parent's, and left alone."""
    deadline = time.monotonic() + EXIT_CANCEL_WAIT
    for engine in list(_live):
        if not engine.forked:
            engine.close_at_exit(deadline)
    # and the pools of Databases let go of unclosed, which still run what they took
    give_up_all_at_exit(deadline)


atexit.register(_at_exit)


def _roll_back_dropped(queue: SimpleQueue[Queued], tx_id: int) -> None:
    """A transaction's handle was collected while open: its worker rolls it back
    (``TxRecord.watch``; nobody waits for that)."""
    queue.put(Abandon(f"whose handle {tx_id} was dropped while open"))


class CloseState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # refusing calls; the workers finish what was accepted
    CLOSED = "closed"    # every worker thread has ended; every accepted call is settled


class Engine(Generic[F]):
    """The plumbing of one Database (and of each of its replicas).

    :param url: a URL, a ``Target``, or None for the embedded default (a private
        SQLite file, removed on close).
    :param settings: the Database's checked options (``adb.options.parse``).
    :param frontend: how the Database's callers wait.
    :param protected: the protected pool options (``adb.options.PoolOptions``).
    """

    def __init__(self, url: Any, settings: Settings, frontend: FrontEnd[F],
                 protected: PoolOptions) -> None:
        self.name = settings.name
        self.frontend = frontend
        self.pid = os.getpid()
        #: raised by every call once closing, or in a forked child
        self.refusal: Optional[BaseException] = None
        self._state = CloseState.OPEN
        replica_targets = [make_target(u, settings.driver, dict(settings.connect))
                           for u in settings.replicas.urls]
        self.driver, size, self._embedded, self.telemetry = _load(url, settings, protected)
        self.row_factory = settings.row_factory
        self.timeout = settings.timeouts.wait
        self.statement_timeout = settings.timeouts.statement
        self.retries = settings.retries
        self.tx_retries = 0
        self._tx_retries_lock = threading.Lock()
        self._open_tx: weakref.WeakSet[Transaction] = weakref.WeakSet()
        self._close_futures: list[F] = []
        self._close_timer: Optional[Cancellable] = None
        self._close_lock = threading.Lock()
        self._hub: Optional[Hub] = None  # the listening connection, from the first listen()
        self._dropped = False  # its Database was collected unclosed (``drop``)
        self._new_future = frontend.new_future
        self._returned = frontend.returned
        self._outcome = frontend.outcome
        #: the common call (shared work, the Database's own limits) needs no claim and no trace
        self._plain = self.timeout is None and self.telemetry is None
        self._build_pool(settings, size, protected)
        frontend.on_new_loop(self._loop_moved)
        self.replicas = _open_replicas(self, replica_targets, settings)
        _live.add(self)

    def _build_pool(self, settings: Settings, size: int, protected: PoolOptions) -> None:
        """Wire the plumbing in one direction (see the module docstring)."""
        pool = settings.pool
        config = PoolConfig(
            self.name, self.frontend.lost_error, protected.get("check_sql"),
            protected.get("warm", size), pool.max_lifetime, pool.max_idle, pool.check_idle,
            pool.autobatch, self.retries or 0, self.driver.pipeline_depth, self.telemetry)
        self._dispatch = dispatch = Dispatch()
        self.admission = None if pool.max_queued is None else \
            Admission(self.name, pool.max_queued, pool.on_full, dispatch, self.frontend.settle)
        self.handback = self.frontend.handback(
            None if self.admission is None else self.admission.after, dispatch.saturated)
        if self.admission is not None:
            self.admission.watch_deliveries(self.handback.undelivered)
        self.pool = Pool(self.driver, size, config, dispatch, self.handback,
                         self.frontend.abandoned,
                         on_exit=_weak_method(self._workers_exited, self._remove_embedded_later()),
                         cancel_grace=protected.get("cancel_grace", 2.0))
        if self._embedded is not None:
            self._embedded.remove_with(self.pool)
        self._put_shared: Callable[[Job], None] = \
            dispatch.submit if self.admission is None else self.admission.put
        if self.telemetry is not None:
            self.telemetry.observe(self.pool, self.admission)
        if protected.get("start", True):
            self.pool.start()

    # -- the entry points: the only builder of jobs (``adb.jobs``) ---------------------------

    def standalone(self, op: Op, args: tuple[Any, ...], timeout: Optional[float] = None,
                   statement_timeout: Optional[float] = None, what: What = "") -> Any:
        """Run ``op`` on a free worker outside any transaction; what the caller gets.
        ``what`` the call is, for its telemetry."""
        if self.refusal is not None:
            raise self.refusal
        kind = op.standalone
        assert kind is not None, f"{op} runs only inside a transaction"
        if timeout is None and statement_timeout is None and self._plain:
            # the common call, on the shortest path: no claim, no trace
            future = self._new_future()
            self._put_shared(kind(future, None, self.statement_timeout, None, op.fn, args))
            return future if self._outcome is None else self._outcome(future)
        return self._shared(kind, (op.fn, args), what, timeout=timeout,
                            statement_timeout=statement_timeout)

    def hosted(self, fn: Callable[..., Any], args: tuple[Any, ...], what: What) -> Any:
        """Run ``fn(session, *args)`` on a free worker, ``session`` its ``WorkerSession``
        (``adb.frontend``); what the caller gets (the adbapi drop-in's calls)."""
        if self.refusal is not None:
            raise self.refusal
        return self._shared(Hosted, (fn, args), what)

    def _shared(self, kind: type[Job], fields: tuple[Any, ...], what: What, *,
                timeout: Optional[float] = None, statement_timeout: Optional[float] = None,
                tx: Optional[TxRecord] = None, give: Optional[Callable[..., Any]] = None) -> Any:
        """Queue a job of ``kind`` (its own ``fields`` after the four every job has) for a
        free worker, with the Database's limits or
        the call's own (``timeout``, ``statement_timeout``; ``tx``: the transaction it
        begins, for its telemetry), and return what ``give`` (by default the
        front-end's ``returned``) makes of its future."""
        if statement_timeout is None:
            statement_timeout = self.statement_timeout
        else:  # 0: no limit, whatever the Database's
            statement_timeout = check_statement_timeout(statement_timeout)
        put, claim = self._put_shared, None
        timeout = self.timeout if timeout is None else check_timeout(timeout)
        if timeout is not None:
            if timeout:
                claim = Claim()
            else:  # 0: an idle worker takes it now, or it fails now; nothing expires
                put, timeout = self._put_idle, None
        future = self._new_future()
        put(kind(future, claim, statement_timeout, self._trace(what, tx), *fields))
        return (give or self._returned)(future, claim, timeout, self)

    def _trace(self, what: What, tx: Optional[TxRecord]) -> Any:
        return None if self.telemetry is None else self.telemetry.trace(what, tx)

    def _put_idle(self, job: Job) -> None:
        """``timeout=0``: hand the job to an idle worker (one waiting for work, or one
        free but for its connect, as a new pool's are), or fail it at once with
        PoolTimeout (it never runs): a call that will not wait for a busy pool."""
        if self._dispatch.submit_idle(job):
            return
        if self.pool.free_workers() > self._dispatch.queued():
            self._put_shared(job)
        else:
            self.frontend.settle(job.future, False, self.pool_timeout(0))

    def in_transaction(self, tx: Transaction, op: Op, args: tuple[Any, ...],
                       statement_timeout: Optional[float] = None, what: What = "") -> Any:
        """Run ``op`` inside ``tx``, on the worker it pins; what the caller gets."""
        record = self.usable(tx)
        self.check_open()
        if statement_timeout is None:
            statement_timeout = self.statement_timeout
        else:
            statement_timeout = check_statement_timeout(statement_timeout)
        future = self._new_future()
        record.put(op.in_transaction(future, None, statement_timeout,
                                     self._trace(what, record), op.fn, args))
        return self._returned(future, None, None, self)

    def step_in(self, tx: Transaction, op: Op, args: tuple[Any, ...], what: What) -> F:
        """``in_transaction``'s job, its future without waiting (steps wait for it)."""
        record = self.usable(tx)
        self.check_open()
        return self._queue(record, op.in_transaction, (op.fn, args), what, call=True)

    def _queue(self, record: TxRecord, kind: type[Job], fields: tuple[Any, ...], what: What,
               call: bool = False) -> F:
        """Queue a job of ``kind`` (``fields`` its own) in ``record``'s transaction; its
        future. ``call``:
        one of its owner's calls, checked again as it is queued (``TxRecord.put``);
        else its end, queued once its owner took it."""
        future = self._new_future()
        job = kind(future, None, self.statement_timeout, self._trace(what, record), *fields)
        if call:
            record.put(job)
        else:
            record.queue.put(job)
        return future

    def expire(self, future: F, claim: Claim, timeout: float) -> None:
        """A call's wait for a worker ran out (loop thread): unless a worker took it
        first, it never runs and fails with PoolTimeout."""
        if claim.take():
            self.frontend.settle(future, False, self.pool_timeout(timeout))

    def pool_timeout(self, timeout: Optional[float]) -> PoolTimeout:
        """The PoolTimeout for a call that waited ``timeout`` s for a worker in vain."""
        stats = self.pool.stats()
        pinned = (f" ({stats['pinned']} of {stats['pool_size']} workers are pinned by "
                  "transactions)" if stats["pinned"] else "")
        return PoolTimeout(f"no worker of the Database {self.name!r} became free within "
                           f"{timeout} s{pinned}; the call did not run")

    def connect(self, timeout: Optional[float]) -> Any:
        """A worker opens its connection now (or checks the one it has); what
        ``connect()`` gives: None, or the real error (rejected, unreachable)."""
        if self.refusal is not None:
            raise self.refusal
        return self._shared(Connect, (), CONNECT, timeout=timeout)

    def check_open(self) -> None:
        """Raise what every call gets once the Database is closing (or forked)."""
        if self.refusal is not None:
            raise self.refusal

    # -- transactions --------------------------------------------------------------------

    def begin(self, read_only: bool, timeout: Optional[float],
              isolation: Optional[str] = None) -> Any:
        """Pin a worker and open a transaction on it; what ``beginTransaction`` gives."""
        tx = self._new_tx(read_only, isolation)
        return self._shared(Begin, (tx._record, tx), BEGIN, timeout=timeout,
                            tx=tx._record)

    def begin_pending(self, read_only: bool, timeout: Optional[float],
                      isolation: Optional[str] = None) -> tuple[Transaction, F]:
        """A transaction for steps (a stream, a bulk load, a retried transaction): its
        handle, and the future of its begin (already settled on a blocking front-end,
        which waited)."""
        tx = self._new_tx(read_only, isolation)
        return tx, self._shared(Begin, (tx._record, tx), BEGIN, timeout=timeout,
                                tx=tx._record, give=self.frontend.pending)

    def _new_tx(self, read_only: bool, isolation: Optional[str]) -> Transaction:
        """A handle for a transaction about to begin, counted as open; InterfaceError
        for an isolation level the server cannot give."""
        if self.refusal is not None:
            raise self.refusal
        if isolation is not None and isolation not in self.driver.isolation_levels:
            raise InterfaceError(f"{self.driver.name} cannot begin a transaction at isolation "
                                 f"level {isolation!r}: adb knows no way to ask its server")
        record = TxRecord(self.name, read_only, isolation)
        tx: Transaction = self.frontend.transaction_class(self, record)
        record.watch(tx, _roll_back_dropped)
        self._open_tx.add(tx)
        return tx

    def end(self, tx: Transaction, commit: bool) -> F:
        """Commit or roll back ``tx``, returning the future without waiting.

        Once its owner has the end (``forget``), its FINISH is always queued: its
        worker stays pinned until it runs, even while the Database closes, and a
        close leaves it alone. If a close took the end first, the error names it."""
        record = self.usable(tx)
        self.check_open()
        if not self.forget(tx):
            record.check()  # a close rolled it back meanwhile: TransactionError
        return self._queue(record, Finish, (record, commit), COMMIT if commit else ROLLBACK)

    def finish(self, tx: Transaction, commit: bool) -> Any:
        """Commit or roll back ``tx``; what ``commitTransaction``/``rollbackTransaction`` give."""
        return self._returned(self.end(tx, commit), None, None, self)

    def forget(self, tx: Transaction) -> bool:
        """``tx``'s owner ends it: it is no longer an open transaction of this
        Database. False if something else (a close) ended it first."""
        self._open_tx.discard(tx)
        return tx._record.ending()

    def check_tx(self, tx: Transaction) -> None:
        """TransactionError unless ``tx`` can take more work here."""
        self.usable(tx)

    def usable(self, tx: Transaction) -> TxRecord:
        """``tx``'s record; TransactionError unless it can take more work here."""
        if tx.engine is not self:
            raise TransactionError(f"{tx!r} belongs to another Database, not {self.name!r}")
        record = tx._record
        record.check()
        return record

    # -- streams: requests to the worker a stream holds (``adb.stream``) -------------------

    def open_stream(self, tx: Transaction, own: bool, export: bool, sql: Any, params: Any,
                    size: int, factory: Any, idle_timeout: Optional[float],
                    what: What) -> tuple[StreamGate, F]:
        """Open a stream in ``tx`` (``own``: a transaction of its own, ended with it):
        its gate, which carries its later requests, and the future of its first batch."""
        self.check_open()
        record = tx._record
        gate = StreamGate(record.queue, idle_timeout)
        future = self._new_future()
        gate.put(OpenStream(future, None, self.statement_timeout, self._trace(what, record),
                            gate, own, export, sql, params, size, factory))
        return gate, future

    def fetch(self, tx: Transaction, gate: StreamGate, size: int, factory: Any,
              what: What) -> F:
        """Ask for a stream's next batch; its future."""
        self.check_open()
        record = self.usable(tx)
        future = self._new_future()
        gate.put(FetchStream(future, None, self.statement_timeout, self._trace(what, record),
                             size, factory))
        return future

    def close_stream(self, tx: Transaction, gate: StreamGate, what: What) -> F:
        """Close a stream in a transaction that goes on; the future of that."""
        self.check_open()
        future = self._new_future()
        gate.put(CloseStream(future, None, self.statement_timeout,
                             self._trace(what, tx._record)))
        return future

    def drop_stream(self, tx: Transaction, gate: StreamGate, own: bool) -> None:
        """A stream was dropped open: its worker closes it (and rolls back its own
        transaction); nobody waits for that."""
        if own:
            if tx.active and self.forget(tx):
                tx._record.queue.put(Finish(None, None, None, None, tx._record, False))
            return
        try:
            gate.put(CloseStream(None, None, None, None))
        except StreamTimeout:
            pass

    def route(self, tx: object) -> Engine[F]:
        """The engine ``tx`` belongs to: this one, or one of its replicas' (a
        transaction begun with ``replica=True`` runs where it began)."""
        if not isinstance(tx, Transaction):
            raise TypeError(
                f"tx must be a transaction handle from beginTransaction(), not {type(tx).__name__}")
        if tx.engine is self or self.replicas is not None and tx.engine in self.replicas.engines:
            return tx.engine  # type: ignore[return-value]
        raise TransactionError(f"{tx!r} belongs to another Database, not {self.name!r}")

    def reader(self, tx: Optional[Transaction] = None) -> Engine[F]:
        """The engine a ``replica=True`` read goes to (``ReplicaSet.choose``): this one
        when it has no replicas."""
        if tx is not None:
            raise InterfaceError("replica=True with tx=: a transaction's statements run where "
                                 "it began (begin it with replica=True)")
        self.check_open()
        return self if self.replicas is None else self.replicas.choose(self)

    # -- what the features ask of it ------------------------------------------------------

    def delay(self, seconds: float) -> F:
        """A future settled after ``seconds`` (a blocking front-end sleeps first)."""
        return self.frontend.delay(seconds)

    def count_retry(self) -> None:
        """runTransaction ran a transaction again."""
        with self._tx_retries_lock:
            self.tx_retries += 1

    def connect_wait(self) -> float:
        """Seconds until the pool may try to connect again after failing to."""
        return self.pool.connect_wait()

    def wait_for_room(self) -> Any:
        """What ``wait_for_room`` gives: settled once fewer than ``max_queued`` calls wait
        for a worker and fewer than ``max_queued`` results for the loop (``Admission``)."""
        self.check_open()
        waiter = self._new_future()
        if self.admission is None:
            self.frontend.settle(waiter, True, None)
        else:
            self.admission.wait(waiter)
        return self._returned(waiter, None, None, self)

    def hub(self) -> Hub:
        """The listening hub, started by the first listener."""
        self.check_open()
        listen.check_listen(self.driver)
        with self._close_lock:
            if self._hub is None:
                router = Router()
                self._hub = Hub(self.name, self.driver, router, self.frontend.sink(router.deliver))
            return self._hub

    def _loop_moved(self) -> None:
        """The front-end moved to another loop, its old one closed (loop thread): what
        was scheduled there never runs, so the hand-back and the listening hub's sink
        start again on the new one."""
        self.handback.restart()
        if self._hub is not None:
            self._hub.sink.restart()

    # -- the close sequence --------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True from the moment the close begins."""
        return self._state is not CloseState.OPEN

    @property
    def forked(self) -> bool:
        """True in a child forked from the process that made this engine."""
        return self.pid != os.getpid()

    def close_in_child(self) -> None:
        """``close()`` in a forked child, at once: the child owns no worker (threads do
        not survive a fork) and must not touch the parent's connections (let go of at
        the fork, ``_let_go``) nor its embedded file; it only stops counting this
        engine and its replicas' as open."""
        for engine in [*([] if self.replicas is None else self.replicas.engines), self]:
            with engine._close_lock:
                engine._state = CloseState.CLOSED
                engine._close_futures = []
            engine.refusal = PoolClosed.refused(engine.name)
            _live.discard(engine)

    def close(self, timeout: Optional[float] = None) -> Any:
        """Close this engine and its replicas'; what ``close()`` gives its caller (None
        in a forked child, where the close is done at once: ``close_in_child``)."""
        if self.forked:
            check_timeout(timeout)
            self.close_in_child()
            return None
        engines = [] if self.replicas is None else self.replicas.engines
        closing = [engine.closing(timeout) for engine in [*engines, self]]
        if len(closing) == 1:
            return self._returned(closing[0], None, None, self)
        return self.frontend.run_steps(_each(closing))

    def closing(self, timeout: Optional[float] = None) -> F:
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
        done = self._new_future()
        with self._close_lock:
            closed = self._state is CloseState.CLOSED
            if not closed:
                self._close_futures.append(done)
        if closed:
            self.frontend.settle(done, True, None)
            return done
        limit = check_timeout(timeout)
        if self._stop_accepting() and limit is not None:
            self._close_timer = self.frontend.call_later(limit, self._close_timed_out)
        return done

    def close_blocking(self) -> None:
        """The close sequence on the calling thread, without the front-end's loop
        (the adbapi drop-in: adbapi's ``close()`` blocks, and runs while the reactor
        shuts down). At once in a forked child (``close_in_child``)."""
        if self.forked:
            self.close_in_child()
            return
        for engine in [] if self.replicas is None else self.replicas.engines:
            engine.close_blocking()
        self._stop_accepting()
        self.pool.wait_stopped()
        self._closed()

    def close_at_exit(self, deadline: float) -> None:
        """The interpreter exits with this engine open: the close sequence without
        its wait. New calls fail, open transactions roll back (``EndedBy.EXIT``),
        queued calls fail with PoolClosed (they never run), and every running
        statement is cancelled on the server from this thread; cancels already on
        their way are waited for until ``deadline``. The workers end as the
        process does. A pool never started has nothing to stop."""
        if self._state is CloseState.CLOSED or self.pool.state is PoolState.NEW:
            return
        self._stop_accepting(EndedBy.EXIT)
        self.pool.give_up_at_exit(deadline)

    def _stop_accepting(self, by: EndedBy = EndedBy.CLOSE) -> bool:
        """Steps 1-4 of the close sequence; False if an earlier close already took them.
        ``by``: what closes it (``close()``, or the interpreter's exit)."""
        with self._close_lock:
            if self._state is not CloseState.OPEN:
                return False
            self._state = CloseState.CLOSING
        self.refusal = PoolClosed.at_exit(self.name) if by is EndedBy.EXIT \
            else PoolClosed.refused(self.name)
        for tx in list(self._open_tx):
            if tx._record.abandon(by):
                tx._record.queue.put(Abandon(f"because {by.value}"))
        if self.admission is not None:
            self.admission.close()
        self.pool.stop()
        if self._hub is not None:
            self._hub.stop()
        if self.replicas is not None:
            self.replicas.stop()
        return True

    def _close_timed_out(self) -> None:
        self._close_timer = None  # fired: a Twisted DelayedCall may not be cancelled now
        self.pool.fail_queued(PoolClosed.before_run(self.name))

    def _workers_exited(self) -> None:
        """Every worker thread has ended (watchdog thread): finish on the loop thread,
        if a close waits."""
        if self._dropped:  # nobody closes it: its file goes with its workers
            self._remove_embedded()
        if self._close_futures:
            try:
                self.frontend.call_soon_threadsafe(self._closed)
            except RuntimeError:  # the loop is closed: nobody waits for the close
                pass

    def _closed(self) -> None:
        """The last step (loop thread, or the watchdog's on a blocking front-end):
        stop hand-back polling, end the listeners, drop the embedded default's file,
        settle every close future. Once."""
        with self._close_lock:
            if self._state is CloseState.CLOSED:
                return
            self._state = CloseState.CLOSED
            futures, self._close_futures = self._close_futures, []
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        self.handback.stop()
        if self._hub is not None:
            self._hub.close()
        _live.discard(self)
        self._remove_embedded()
        for future in futures:
            self.frontend.settle(future, True, None)

    def drop(self, _open: CloseState = CloseState.OPEN,
             _getpid: Callable[[], int] = os.getpid) -> bool:
        """Its Database was collected unclosed: stop everything without waiting.
        True if it was still running (the Database then warns). In a forked child
        nothing runs: the parent's Database is its own to close. (The defaults are
        bound at import: a Database collected at interpreter exit may run this
        after the module's globals were cleared.)"""
        if self._state is not _open or self.pid != _getpid():
            return False
        try:
            if self.pool.stopping():
                return False
        except AttributeError:  # at exit, adb's modules already cleared: nothing to stop
            return False
        self._dropped = True
        if self.admission is not None:
            self.admission.close()  # parked calls run; their callers may still wait
        self.pool.stop()
        if self._hub is not None:
            self._hub.stop()
        if self.replicas is not None:
            self.replicas.stop()
            for engine in self.replicas.engines:
                engine.drop()
        return True

    def _remove_embedded_later(self) -> Optional[Callable[[], None]]:
        """What removes the embedded file once the workers of an engine already
        collected have exited (a Database dropped unclosed): None without one."""
        return None if self._embedded is None else self._embedded.remove

    def _remove_embedded(self) -> None:
        if self._embedded is not None:
            self._embedded.remove()

    # -- what stats() shows ----------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """See ``BaseDatabase.stats``."""
        stats = self.pool.stats()
        stats["name"] = self.name
        stats["closed"] = self.closed
        stats["open_transactions"] = len(self._open_tx)
        stats["streams"] = self.pool.streams()
        stats["transaction_retries"] = self.tx_retries
        admission = self.admission
        stats["parked"] = admission.parked if admission else 0
        stats["waiting_for_room"] = admission.waiting if admission else 0
        for key in ("wakeups", "polls", "settled", "largest_batch"):
            stats[key] = getattr(self.handback, key, None)
        stats["listen"] = listen.idle_stats() if self._hub is None else self._hub.stats()
        if self.replicas is not None:
            stats.update(self.replicas.stats())
        return stats

    def __repr__(self) -> str:
        return (f"{self.name!r} {self.driver.target} pool_size={len(self.pool.workers)} "
                f"{'closed' if self.closed else 'open'}")


def _load(url: Any, settings: Settings, protected: PoolOptions
          ) -> tuple[Driver, int, Optional[EmbeddedFile], Optional[Telemetry]]:
    """The driver of ``url`` (None: the embedded default, whose file is made here),
    the pool size it allows, and the telemetry; a failure leaves no file behind."""
    embedded = None
    target = make_target(url, settings.driver, dict(settings.connect))
    if target is None:
        embedded = EmbeddedFile()
        target = target_for("sqlite3", {"database": embedded.path})
    try:
        driver = drivers.load(target, settings.pool.on_connect, settings.pooler, OPTION_NAMES,
                              protected.get("native", False))
        size = _check_pool_size(settings.pool.size, driver, protected.get("fit_size", False))
        if settings.pool.autobatch > 1:
            driver.enable_autobatch()
        pipes = driver.pipelines
        driver.pipeline_depth = pipeline_depth(  # a pipeline's statements autocommit
            settings.pool.pipeline, driver.url_pipeline, pipes is not None and driver.autocommit,
            pipes is not None and pipes.default)
        return driver, size, embedded, _make_telemetry(settings, driver.target)
    except BaseException:
        if embedded is not None:
            embedded.remove()
        raise


def _open_replicas(primary: Engine[F], targets: list[Any],
                   settings: Settings) -> Optional[ReplicaSet]:
    """An engine of the primary's front-end per replica, and the monitor that checks them."""
    if not targets:
        return None
    engines: list[Engine[F]] = []
    try:
        for number, target in enumerate(targets, 1):
            engines.append(Engine(target, settings.for_replica(number), primary.frontend, {}))
    except BaseException:
        for engine in [*engines, primary]:
            engine._stop_accepting()
        raise
    return ReplicaSet(primary.name, engines, settings.replicas.max_lag,
                      settings.replicas.fallback)


def _make_telemetry(settings: Settings, target: Any) -> Optional[Telemetry]:
    """The Database's Telemetry, or None when it has neither telemetry nor slow_call."""
    wanted = settings.telemetry
    if not wanted.wanted:
        return None
    return Telemetry(settings.name, target, traced=wanted.traced, slow_call=wanted.slow_call,
                     tracer_provider=wanted.tracer_provider,
                     meter_provider=wanted.meter_provider)


def _check_pool_size(pool_size: Optional[int], driver: Driver, fit: bool = False) -> int:
    """The pool size to use; ``fit`` caps a larger one at the driver's limit instead
    of refusing it (adbapi users open ``":memory:"`` with ``cp_max=5``)."""
    limit = driver.max_pool_size
    if pool_size is None:
        return limit or DEFAULT_POOL_SIZE
    check_positive(pool_size, "pool_size")
    if limit is not None and pool_size > limit:
        if fit:
            return limit
        raise InterfaceError(f"pool_size={pool_size} is impossible for {driver.target}: "
                             f"{driver.max_pool_size_reason}")
    return pool_size


class EmbeddedFile:
    """The embedded default's database: a private SQLite file, made here and removed
    with its journal files when the Database closes or its constructor fails, or
    else once its pool is gone (every worker ended) or the process exits: a Database
    never closed leaves no file behind either."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="adb-", suffix=".db")
        os.close(fd)
        self.pid = os.getpid()

    def remove_with(self, pool: Pool) -> None:
        weakref.finalize(pool, _remove_files, self.path, self.pid)

    def remove(self) -> None:
        _remove_files(self.path, self.pid)


def _remove_files(path: str, pid: int) -> None:
    """Remove the embedded file and its journal files, in the process that made them
    only: a forked child that exits (a gunicorn worker) leaves its parent's file."""
    if os.getpid() != pid:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def _each(futures: list[F]) -> Steps:
    """Steps that wait for each of ``futures`` in turn."""
    for future in futures:
        yield future


def _weak_method(method: Callable[[], None],
                 otherwise: Optional[Callable[[], None]] = None) -> Callable[[], None]:
    """``method()`` while its object lives; ``otherwise()`` (if given) once it has
    been collected."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()
        elif otherwise is not None:
            otherwise()
    return call


__all__ = ["CloseState", "DEFAULT_POOL_SIZE", "Engine"]
