"""Worker threads, each owning one DB-API connection for its life.

Shared work flows through one ``queue.SimpleQueue``. A worker that begins a
transaction is *pinned*: until the transaction ends it reads only that
transaction's private queue, so its statements run in order on one connection.
Nothing here knows about event loops: results go to ``pool.handback(future,
ok, value)``, which the core builds for its front-end. A caller hands a job
to the most recently idle worker through that worker's inbox (LIFO, so a hot
thread serves sequential calls) or, with none idle, to the shared queue.

Before each call outside a transaction a worker checks its connection (closed,
a readable idle socket, past ``max_lifetime``, idle past ``check_idle`` and
failing a ping) and replaces it, so a connection the server dropped while idle
costs the caller nothing. A call whose connection breaks under it is never
re-run: the caller gets ``ConnectionLost`` (the statement may have run).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from queue import Empty, SimpleQueue
from typing import Any, Callable, Optional

from . import autobatch, health, ops
from .call import ARGS, CLAIM, FN, FUTURE, CallState, Job, RunningCall
from .errors import ConnectionLost, PoolClosed, ServerUnavailable, StatementTimeout, TransactionError

log = logging.getLogger("adb")

#: shared-queue sentinel: the worker that takes it exits
STOP = None
#: inbox sentinel: look at the shared queue again
WAKE = object()

#: seconds of idleness after which a connection's socket is checked before use
LIVENESS_AFTER = 0.05


class Worker:
    """One thread and its connection. All methods run in that thread, except that
    the watchdog reads ``current`` and may cancel the running statement."""

    def __init__(self, pool: Pool, index: int) -> None:
        self.pool = pool
        self.driver = pool.driver
        self.index = index
        self.conn: Any = None
        self.born = self.last_used = 0.0
        self.lifetime: Optional[float] = None
        self.txq: Optional[SimpleQueue[Job]] = None  # the queue of the transaction pinning it
        self.tx_lost = False  # that transaction's connection broke: it can only end
        self.busy = False
        self.current: Optional[RunningCall] = None  # the running call, for the watchdog
        self.completed = self.errors = self.connects = self.recycled = 0
        self.units = self.batched = self.unit_fallbacks = 0  # autobatch: see adb.autobatch
        self.spare: Optional[tuple[Any, Any]] = None  # (connection, cursor), see on_spare_cursor
        self.inbox: SimpleQueue[Any] = SimpleQueue()  # jobs handed to this worker while idle
        self.later: deque[Any] = deque()  # jobs taken while gathering a unit, served next
        self.thread = threading.Thread(
            target=self.run, name=f"{pool.name}-worker-{index}", daemon=True)

    def run(self):
        job = None
        try:
            self.warm_up()
            while True:
                job = self.txq.get() if self.txq is not None else self.next_job()
                if job is WAKE:
                    continue
                if job is STOP:
                    break
                try:
                    if job[FN] is Worker.batchable and self.pool.autobatch > 1:
                        self.serve_batchable(job)
                    else:
                        self.serve(job)
                except Exception:  # a bug of adb's own: keep the worker alive
                    log.exception("%s: worker %d failed on a job", self.pool.name, self.index)
                job = None  # hold no reference to a finished job while blocked
        finally:
            self.disconnect()
            self.pool.worker_exited(self)

    def next_job(self):
        """The next shared job: one handed to this worker, else one from the shared
        queue, else register as idle and sleep until a caller hands one over.

        Idle workers form a stack, so the most recently busy (hot) thread gets the
        next call instead of whichever thread the kernel would wake. A worker
        re-checks the shared queue after registering, so a job queued while it was
        registering is never stranded."""
        if self.later:
            return self.later.popleft()
        pool = self.pool
        for source in (self.inbox, pool.queue):
            if not source.empty():  # a burst leaves the inbox empty: no Empty raised per job
                try:
                    return source.get_nowait()
                except Empty:  # another worker took it first
                    pass
        pool.idle.append(self)
        try:
            job = pool.queue.get_nowait()
        except Empty:
            try:
                if pool.max_idle is None or self.conn is None:
                    return self.inbox.get()
                return self.inbox.get(timeout=pool.max_idle)
            except Empty:
                self.disconnect("idle for max_idle")
                job = WAKE
        try:
            pool.idle.remove(self)
        except ValueError:
            pass  # a caller took this worker meanwhile: its job waits in the inbox
        return job

    def warm_up(self):
        """Connect before the first job so it pays no connect; failures wait for a job."""
        if self.index >= self.pool.warm or self.pool.closing:
            return
        try:
            self.connection()
        except Exception as exc:
            log.warning("%s: worker %d could not connect: %s", self.pool.name, self.index, exc)

    def serve(self, job: Job) -> None:
        if self.admit(job):
            self.execute(job)

    def admit(self, job: Job) -> bool:
        """Claim ``job`` for running; False (and skip it) if its caller gave up."""
        future, claim = job[FUTURE], job[CLAIM]
        if (claim is not None and not claim.take()) \
                or (future is not None and self.pool.is_abandoned(future)):
            self.pool.handback.nudge()  # given up before it started: it may make room
            return False
        return True

    def serve_batchable(self, job: Job) -> None:
        """A standalone operation: alone, or at the head of a unit of the operations
        queued behind it (``Database(autobatch=N)``, see ``adb.autobatch``)."""
        if self.pool.queue.empty():
            return self.serve(job)
        path = self.driver.batch_path(job[autobatch.SQL])
        if path is autobatch.Path.ALONE:
            return self.serve(job)
        if not self.admit(job):
            return None
        unit = autobatch.gather(self, job, path)
        if len(unit.jobs) == 1:
            return self.execute(job)
        return autobatch.run(self, unit)

    def execute(self, job: Job) -> None:
        """Run an admitted job and hand its outcome back."""
        future, fn, claim, run_timeout = job[:ARGS]
        self.busy = True
        deadline = None if run_timeout is None else time.monotonic() + run_timeout
        self.current = running = RunningCall(future, deadline)
        try:
            value, ok = fn(self, *job[ARGS:]), True
        except BaseException as exc:  # everything goes back to the caller
            value, ok = self.after_error(exc, running), False
        self.current = None
        if running.state is not CallState.RUNNING:
            value, ok = self.after_cancel(value, ok, running, run_timeout)
        self.busy = False
        self.completed += 1
        if not ok:
            self.errors += 1
        if future is not None:
            self.pool.handback(future, ok, value)

    # -- the connection ---------------------------------------------------------------

    def connection(self):
        """This worker's connection, replaced first if it is no longer fit to use."""
        conn = self.conn
        now = time.monotonic()
        if conn is not None:
            reason = self.unfit(conn, now)
            if reason is None:
                self.last_used = now
                return conn
            self.disconnect(reason)
            if reason == "max_lifetime":
                self.recycled += 1
        self.conn = conn = self.pool.open_connection()
        self.connects += 1
        self.born = self.last_used = now
        self.lifetime = health.lifetime(self.pool.max_lifetime)
        self.pool.connections[threading.get_ident()] = conn
        return conn

    def unfit(self, conn, now):
        """Why ``conn`` must be replaced before the next call, or None."""
        if self.lifetime is not None and now - self.born > self.lifetime:
            return "max_lifetime"
        if self.driver.is_closed(conn):
            return "closed"
        # the socket check releases the GIL (a thread switch under load), so it is
        # only worth it once a connection has sat idle long enough to be dropped unseen
        if now - self.last_used > LIVENESS_AFTER and self.driver.peer_gone(conn):
            return "closed by the server or the network"
        check_idle = self.pool.check_idle
        if check_idle is not None and now - self.last_used > check_idle \
                and not self.responds(conn, self.pool.check_sql or "select 1"):
            return "failed its check after being idle"
        return None

    def disconnect(self, reason=None):
        self.spare = None
        if self.conn is not None:
            conn, self.conn = self.conn, None
            self.pool.connections.pop(threading.get_ident(), None)
            if reason:
                log.info("%s: worker %d dropped its connection: %s",
                         self.pool.name, self.index, reason)
            self.driver.close(conn)

    def after_error(self, exc: BaseException, running: RunningCall) -> BaseException:
        """Replace a connection that ``exc`` broke; return what the caller should get.

        A broken connection means the statement may have run: the caller gets
        ``pool.lost_error`` (a ConnectionLost), never a silent retry. Inside a
        transaction the transaction is lost with it. With ``pool.check_sql``
        (Twisted's ``cp_reconnect``), a connection that fails that statement after
        an error counts as broken too.
        """
        conn = self.conn
        if conn is None or isinstance(exc, ConnectionLost):
            return exc
        broken = self.driver.is_disconnect(exc, conn) or running.state is CallState.CUT
        if not broken and self.pool.check_sql and self.txq is None:
            broken = not self.responds(conn, self.pool.check_sql)
        if not broken:
            return exc
        self.disconnect(f"{type(exc).__name__} during a call")
        if self.txq is not None:
            self.tx_lost = True
        lost = self.pool.lost_error(
            f"the connection of {self.pool.name!r} to {self.driver.target} broke during the "
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
            f"the call on {self.pool.name!r} ran longer than {run_timeout} s and was "
            + ("cut off with its connection; it may have run" if cut
               else "cancelled on the server; it took no effect"), may_have_run=cut)
        timeout.__cause__ = value
        return timeout, False

    def check_after_cancel(self, running: RunningCall) -> None:
        """Once the watchdog acted on ``running`` (a call or a unit): replace a
        connection it cut, and one it sent a cancel to unless it answers, so a
        cancel that arrived late hits nothing."""
        if self.conn is None or running.state is CallState.RUNNING:
            return
        if running.state is CallState.CUT:
            self.disconnect("cut after its call overran")
        elif not self.responds(self.conn, "select 1"):
            self.disconnect("failed its check after a cancel")

    def responds(self, conn, sql):
        """True when ``conn`` runs ``sql`` (after clearing an aborted transaction)."""
        try:
            if not self.driver.autocommit or self.driver.failed_transaction(conn):
                self.driver.rollback(conn)
            cursor = conn.cursor()
            try:
                cursor.execute(sql)
                cursor.fetchall()
            finally:
                cursor.close()
            return True
        except Exception:
            return False

    # -- job functions: fn(worker, *args) -----------------------------------------

    def standalone(self, op, *args):
        """One query or operation outside any transaction: autocommitted by the driver
        or by us."""
        conn = self.connection()
        if not self.driver.autocommit:
            return self.atomic(op, *args)
        return self.on_spare_cursor(conn, op, args)

    def batchable(self, op, *args):
        """A standalone ``runOperation`` that may join a unit (``autobatch``); run
        alone, it is any standalone call."""
        return self.standalone(op, *args)

    def on_spare_cursor(self, conn, op, args):
        """Run adb's own ``op`` on the cursor the previous call left, or a new one.

        A cursor costs an allocation and a few microseconds of GIL per call; under a
        burst that is ~5% of throughput. One is kept only while it holds no result
        set (rows stay in a cursor until its next execute) and its call succeeded;
        a caller's own function (``runInteraction``) always gets a fresh cursor.
        """
        spare, self.spare = self.spare, None
        cursor = spare[1] if spare is not None and spare[0] is conn else conn.cursor()
        try:
            value = op(cursor, self.driver, *args)
        except BaseException:
            self.close_cursor(cursor)
            raise
        if cursor.description is None:
            self.spare = (conn, cursor)
        else:
            self.close_cursor(cursor)
        return value

    @staticmethod
    def close_cursor(cursor):
        try:
            cursor.close()
        except Exception:  # its connection broke: the caller hears of that from the call
            pass

    def atomic(self, op, *args):
        """One call in its own transaction: all of it commits, or none of it."""
        conn = self.connection()
        driver = self.driver
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

    def in_transaction(self, op, *args):
        """One call inside the transaction pinning this worker."""
        if self.tx_lost:
            raise TransactionError(
                "this transaction lost its connection; nothing of it was committed: "
                "roll it back and start again")
        if op is not ops.interaction:
            return self.on_spare_cursor(self.conn, op, args)
        cursor = self.conn.cursor()
        try:
            return op(cursor, self.driver, *args)
        finally:
            cursor.close()

    def begin(self, tx):
        """Pin this worker to ``tx`` and open the transaction."""
        try:
            if self.pool.closing:
                raise PoolClosed(f"the Database {self.pool.name!r} is closing")
            self.driver.begin(self.connection())
        except BaseException:
            tx.fail()
            raise
        self.txq = tx.queue
        tx.activate(self.index)
        return tx

    def finish(self, tx, commit):
        """Commit or roll back the pinned transaction and unpin."""
        self.txq = None
        lost, self.tx_lost = self.tx_lost, False
        conn = self.conn
        if lost or conn is None:
            tx.fail()
            if commit:
                raise TransactionError(f"{tx!r} lost its connection; nothing was committed")
            return None
        if commit and self.driver.failed_transaction(conn):
            self.rollback_quietly()
            tx.ended(False)
            raise TransactionError(
                f"{tx!r} was aborted by an earlier error; it was rolled back, not committed")
        try:
            (self.driver.commit if commit else self.driver.rollback)(conn)
        except BaseException:
            tx.ended(False)
            self.rollback_quietly()
            raise
        tx.ended(commit)

    def abandon(self, reason):
        """Roll back a transaction whose owner is gone (closed pool, lost handle)."""
        self.txq = None
        self.tx_lost = False
        log.warning("%s: rolling back a transaction %s", self.pool.name, reason)
        self.rollback_quietly()

    def rollback_quietly(self):
        if self.conn is None:
            return
        try:
            self.driver.rollback(self.conn)
        except Exception:  # the connection is broken: replace it
            self.disconnect("rollback failed")


class Pool:
    """``size`` workers sharing one job queue (jobs: ``adb.call.Job``).

    Everything it reports goes through what it is given at construction:
    ``handback(future, ok, value)`` (and ``handback.nudge()``) for results,
    ``is_abandoned(future)`` to skip calls their callers gave up, ``lost_error`` the
    ConnectionLost class a caller gets, ``check_sql`` a statement run after an
    error to test the connection (None: no test), ``on_exit()`` called once every
    worker thread has ended (from the watchdog thread).
    """

    def __init__(self, driver: Any, size: int, name: str, *, handback: Any,
                 is_abandoned: Callable[[Any], bool],
                 on_exit: Optional[Callable[[], None]] = None,
                 lost_error: type = ConnectionLost, check_sql: Optional[str] = None,
                 warm: Optional[int] = None, start: bool = True,
                 max_lifetime: Optional[float] = None, max_idle: Optional[float] = None,
                 check_idle: Optional[float] = None, cancel_grace: float = 2.0,
                 backoff: Optional[health.Backoff] = None, autobatch: int = 1) -> None:
        self.driver = driver
        self.name = name
        self.queue: SimpleQueue[Any] = SimpleQueue()
        self.handback = handback
        self.is_abandoned = is_abandoned
        self.on_exit = on_exit
        self.lost_error = lost_error
        self.check_sql = check_sql
        self.closing = False
        self.started = False
        self.finished = False  # every worker has exited; set just before the last reap
        self.connections: dict[int, Any] = {}  # worker thread id -> its DB-API connection
        self.idle: list[Worker] = []  # workers waiting for a job, most recently idle last
        self.max_lifetime, self.max_idle, self.check_idle = max_lifetime, max_idle, check_idle
        self.cancel_grace = cancel_grace
        self.backoff = backoff or health.Backoff()
        self.reconnects = 0
        self.autobatch = autobatch  # most calls one unit may hold (1: no units)
        self._alive = size
        self._alive_lock = threading.Lock()
        self.last_out = threading.Event()  # the last worker has left its loop
        self.done = threading.Event()      # ... its thread has ended, on_exit has run
        self.workers = [Worker(self, i) for i in range(size)]
        self.warm = size if warm is None else warm
        if start:
            self.start()

    def start(self) -> None:
        """Start the worker threads and the watchdog (once); queued jobs wait for them."""
        if not self.started:
            self.started = True
            for worker in self.workers:
                worker.thread.start()
            from .watchdog import Watchdog
            Watchdog(self).start()

    def open_connection(self) -> Any:
        """A new connection, unless the server failed recently: then fail fast.

        Raises ServerUnavailable (the call never reached the server) while the
        backoff after a failed attempt has not run out, or when this attempt fails.
        """
        backoff = self.backoff
        wait = backoff.wait_left()
        if wait:
            raise ServerUnavailable(
                f"{self.name!r} cannot reach {self.driver.target} ({backoff.last_error}); "
                f"next attempt in {wait:.1f} s")
        try:
            try:
                conn = self.driver.connect()
            except Exception:
                if backoff.failures:
                    raise
                conn = self.driver.connect()  # one failure may be a fluke: retry at once
        except Exception as exc:
            error = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
            delay = backoff.failed(error)
            if backoff.failures in (1, 5) or backoff.failures % 20 == 0:
                log.warning("%s: cannot connect to %s (%s); %d failure(s), next attempt in "
                            "%.1f s", self.name, self.driver.target, error, backoff.failures, delay)
            raise ServerUnavailable(
                f"{self.name!r} cannot connect to {self.driver.target}: {error}") from exc
        if backoff.succeeded():
            log.warning("%s: connected to %s again", self.name, self.driver.target)
            self.reconnects += 1
        return conn

    def submit(self, job: Job) -> None:
        """Hand ``job`` to the most recently idle worker, or queue it for the next free one.

        Under a burst no worker is idle: the length test spares that case an
        IndexError per call (0.3-0.4 us of the loop's 2.5 us per submitted call)."""
        if self.idle:
            try:
                worker = self.idle.pop()
            except IndexError:  # the last idle worker took a job meanwhile
                pass
            else:
                worker.inbox.put(job)
                return
        self.queue.put(job)
        if self.finished:  # a call that raced close from another thread: nobody will run it
            self.fail_queued(self.closed_error())

    def saturated(self) -> bool:
        """True while every worker is busy with calls that need nothing back from the
        caller before the next one, and calls wait for a worker. A worker pinned by a
        transaction waits for its caller's next statement: it needs its results at once."""
        return not self.idle and self.queue.qsize() > 0 \
            and not any(worker.txq is not None for worker in self.workers)

    def stop(self) -> None:
        """Let every queued job run, then end each worker (non-blocking). Once."""
        if self.closing:
            return
        self.closing = True
        for _ in self.workers:
            self.queue.put(STOP)
        self._wake_idle()
        self.start()  # an unstarted pool still settles what was queued

    def _wake_idle(self) -> None:
        """Send every sleeping worker to look at the shared queue (for its STOP)."""
        while self.idle:
            try:
                self.idle.pop().inbox.put(WAKE)
            except IndexError:
                break

    def closed_error(self) -> PoolClosed:
        return PoolClosed(f"the Database {self.name!r} closed before this call could run")

    def fail_queued(self, error: BaseException) -> None:
        """Fail every job still waiting in the shared queue (close timeout, and what
        is left once every worker has exited). STOP markers stay."""
        stops = 0
        while True:
            try:
                job = self.queue.get_nowait()
            except Empty:
                break
            if job is STOP:
                stops += 1
                continue
            if job is WAKE:
                continue
            future, claim = job[FUTURE], job[CLAIM]
            if claim is not None and not claim.take():
                continue  # its caller already gave up on it
            if future is not None and not self.is_abandoned(future):
                self.handback(future, False, error)
        for _ in range(stops):
            self.queue.put(STOP)
        if stops:  # a worker that found the queue empty meanwhile went to sleep
            self._wake_idle()

    def worker_exited(self, worker: Worker) -> None:
        """A worker left its loop (its own thread). A job handed to it as it took
        its STOP goes back to the shared queue, for a worker still serving or, when
        none is left, for the final reap."""
        while not worker.inbox.empty():
            job = worker.inbox.get_nowait()
            if job is not WAKE and job is not STOP:
                self.queue.put(job)
        with self._alive_lock:
            self._alive -= 1
            last = self._alive == 0
        if last:
            self.last_out.set()

    def all_exited(self) -> None:
        """Once every worker thread has ended (watchdog thread): fail what nobody
        will run, then report. ``finished`` is set before the reap so that a
        ``submit`` racing it either is reaped here or reaps itself."""
        self.join()
        self.finished = True
        self.fail_queued(self.closed_error())
        if self.on_exit is not None:
            try:
                self.on_exit()
            finally:
                self.done.set()
        else:
            self.done.set()

    def join(self, timeout: Optional[float] = None) -> None:
        for worker in self.workers:
            if worker.thread.ident is not None and worker.thread is not threading.current_thread():
                worker.thread.join(timeout)

    def stats(self) -> dict[str, Any]:
        workers = self.workers
        busy = sum(w.busy for w in workers)
        return {
            "pool_size": len(workers),
            "busy": busy,
            "idle": len(workers) - busy,
            "pinned": sum(w.txq is not None for w in workers),
            "queued": self.queue.qsize(),
            "completed": sum(w.completed for w in workers),
            "errors": sum(w.errors for w in workers),
            "connects": sum(w.connects for w in workers),
            "connected": sum(w.conn is not None for w in workers),
            "reconnects": self.reconnects,
            "recycled": sum(w.recycled for w in workers),
            "connect_failures": self.backoff.failures,
            "units": sum(w.units for w in workers),
            "batched": sum(w.batched for w in workers),
            "unit_fallbacks": sum(w.unit_fallbacks for w in workers),
            "alive": self._alive,
        }
