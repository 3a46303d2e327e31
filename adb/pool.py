"""The pool: ``size`` workers (``adb.worker``), their watchdog, and their life.

A pool is given its ``Dispatch`` (where shared jobs wait) and its hand-back
(where results go) ready-made: it builds only what is its own, the workers and
the watchdog. Its life is one ``PoolState``, moved forward only here:

    NEW --start()--> RUNNING --stop()--> STOPPING --last worker out--> STOPPED

``stop()`` queues one STOP per worker behind every accepted job; a pool stopped
before it started starts then, so what was queued is still settled. STOPPED is
reached once every worker thread has ended and whatever slipped into the queue
behind the STOPs has been failed; ``on_exit`` is then called and ``wait_stopped``
returns.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
import weakref
from queue import Empty
from typing import Any, Callable, Optional

from . import health
from .dispatch import STOP, WAKE, Dispatch
from .drivers.base import Connection, Driver
from .errors import ConnectionRejected, PoolClosed, ServerUnavailable
from .handback import Handback
from .watchdog import Watchdog
from .worker import PoolConfig, Worker

log = logging.getLogger("adb")

#: during a connect backoff, the least time between two probes of the server, and
#: how long one waits for its answer (``Pool._server_back``)
PROBE_EVERY = 0.1
PROBE_TIMEOUT = 0.2


#: every pool started in this process whose threads may still run: the interpreter's
#: exit gives each up (``give_up_at_exit``), its Database's engine alive or not (a
#: Database the program let go of leaves its pool running what it had accepted)
_started: weakref.WeakSet[Pool] = weakref.WeakSet()


def give_up_all_at_exit(deadline: float) -> None:
    """The interpreter exits: give up every pool still running (``give_up_at_exit``)."""
    for pool in list(_started):
        pool.give_up_at_exit(deadline)


class PoolState(enum.Enum):
    """Where a pool stands in its life; it only moves forward."""

    NEW = "new"            # built, no thread started (the adbapi drop-in starts later)
    RUNNING = "running"    # workers serve jobs
    STOPPING = "stopping"  # a STOP per worker queued behind every accepted job
    STOPPED = "stopped"    # every worker thread ended; nothing left queued


class Pool:
    """``size`` workers serving the jobs of one ``Dispatch``.

    :param config: the settings every worker reads.
    :param handback: where workers hand ``(future, ok, value)``.
    :param is_abandoned: ``is_abandoned(future)``, True once its caller gave up.
    :param on_exit: called once every worker thread has ended (watchdog thread).
    """

    def __init__(self, driver: Driver, size: int, config: PoolConfig, dispatch: Dispatch,
                 handback: Handback, is_abandoned: Callable[[Any], bool], *,
                 on_exit: Optional[Callable[[], None]] = None, cancel_grace: float = 2.0,
                 backoff: Optional[health.Backoff] = None) -> None:
        self.driver = driver
        self.config = config
        self.name = config.name
        self.dispatch = dispatch
        self.handback = handback
        self.is_abandoned = is_abandoned
        self.connections: dict[int, Connection] = {}  # worker thread id -> its connection
        self._on_exit = on_exit
        self._cancel_grace = cancel_grace
        self._backoff = backoff or health.Backoff()
        self._reconnects = 0  # connections opened by a worker that had one before
        self._opened_by: set[int] = set()  # the worker threads that opened a connection
        self._last_failure: Optional[BaseException] = None  # the last connect's error
        self._warm_up_errors: set[str] = set()
        self._probed = 0.0  # when the server was last probed during a backoff
        self._first_connect: Optional[threading.Event] = None  # set once the first ended
        self._state = PoolState.NEW
        self._state_lock = threading.Lock()
        self._alive = size
        self._workers_out = threading.Event()  # the last worker has left its loop
        self._stopped = threading.Event()      # ... its thread has ended, on_exit has run
        self._watchdog: Optional[Watchdog] = None  # from start()
        #: the interpreter exits: its workers start nothing more (``give_up_at_exit``;
        #: ``Worker.admit``), and a unit the exit cancelled is not run again call by call
        self.exiting = False
        self._pid = os.getpid()  # a forked child's copy gives up nothing of its parent's
        self.workers = [Worker(self, i) for i in range(size)]

    @property
    def state(self) -> PoolState:
        return self._state

    def stopping(self) -> bool:
        """True once ``stop()`` has been called: no new transaction begins."""
        return self._state is PoolState.STOPPING or self._state is PoolState.STOPPED

    def start(self) -> None:
        """Start the worker threads and the watchdog (once; again does nothing while
        they run); queued jobs wait for them.

        :raises PoolClosed: the pool was stopped: it never starts again (a call
            made on it would otherwise wait for workers that never come).
        """
        with self._state_lock:
            if self._state is not PoolState.NEW:
                if self.stopping():
                    raise PoolClosed.restarted(self.name)
                return
            self._state = PoolState.RUNNING
        self._start_threads()

    def _start_threads(self) -> None:
        _started.add(self)
        for worker in self.workers:
            worker.thread.start()
        self._watchdog = Watchdog(self.name, self.workers, self.driver, self.is_abandoned,
                                  self._cancel_grace, self._workers_out, self.all_exited)
        self._watchdog.start()

    def give_up_at_exit(self, deadline: float) -> None:
        """The interpreter exits with this pool's threads running (its Database not
        closed, or let go of): nothing more may start, since a statement sent now
        would outlive the process on the server and commit after it. Queued calls
        fail with PoolClosed (they never run); every running call, a unit of batched
        calls too, is cancelled on the server from the calling thread, cancels
        already on their way waited for until ``deadline``. Nothing in a forked
        child (the calls are its parent's), nor for a pool whose threads ended."""
        if os.getpid() != self._pid or self._state in (PoolState.NEW, PoolState.STOPPED) \
                or self.exiting:
            return
        self.exiting = True
        self.fail_queued(PoolClosed.at_exit(self.name))
        if self._watchdog is not None:
            self._watchdog.cancel_all("the interpreter is exiting", deadline)

    def stop(self) -> None:
        """Let every queued job run, then end each worker (non-blocking). Once."""
        with self._state_lock:
            if self.stopping():
                return
            unstarted = self._state is PoolState.NEW
            self._state = PoolState.STOPPING
        for _ in self.workers:
            self.dispatch.queue.put(STOP)
        self.dispatch.wake_idle()
        if unstarted:  # an unstarted pool still settles what was queued
            self._start_threads()

    def wait_stopped(self, timeout: Optional[float] = None) -> bool:
        """Block until STOPPED (True) or ``timeout`` seconds passed (False)."""
        return self._stopped.wait(timeout)

    def open_connection(self) -> Connection:
        """A new connection, unless the server failed recently: then fail fast.

        Raises ConnectionRejected (at once, no backoff: the credentials, the
        database or an option value are refused, and trying again will not help),
        or ServerUnavailable (the call never reached the server) while the backoff
        after a failed attempt has not run out, or when this attempt fails; either
        way with the driver's error as its cause.
        """
        first = self._first_connect_turn()
        try:
            return self._open()
        finally:
            if first is not None:
                first.set()

    def _open(self) -> Connection:
        backoff = self._backoff
        if backoff.wait_left() and not self._server_back():
            raise self._unavailable(backoff.last_error) from self._last_failure
        try:
            conn = self._connect(retry=not backoff.failures)
        except ConnectionRejected:
            raise
        except Exception as exc:
            self._last_failure = exc
            error = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
            with self._state_lock:  # workers fail together: each failure counts once
                delay = backoff.failed(error)
                failures = backoff.failures
            self._log_failure(error, failures, delay)
            raise self._unavailable(error) from exc
        with self._state_lock:
            recovered = backoff.succeeded()
        if recovered:  # the outage's second and last WARNING
            log.warning("%s: connected to %s again, after %d failed attempt(s)",
                        self.name, self.driver.target, recovered)
        self._last_failure = None
        self._count_connect(threading.get_ident())
        return conn

    def _unavailable(self, error: Optional[str]) -> ServerUnavailable:
        """The error of a call that found no connection: it did not run. The retry
        it names is the pool's own (its next connect), not this call's: a caller
        that wants the call run again makes it again, or passes ``retries=``."""
        return ServerUnavailable(
            f"{self.name!r} cannot reach {self.driver.target} ({error}): this call did not "
            f"run; the pool tries to connect again in {self._backoff.wait_left():.1f} s")

    def _log_failure(self, error: str, failures: int, delay: float) -> None:
        """Log a failed connect: a WARNING for an outage's first, DEBUG for the rest
        (a WARNING again once it connects: ``_open``). Every call meanwhile fails
        with ``ServerUnavailable``, which says so to its caller; the log is for the
        operator, who needs the outage once, not once per call or attempt."""
        if failures == 1:
            log.warning("%s: cannot connect to %s (%s); calls fail at once with "
                        "ServerUnavailable until it is back, and the pool tries again "
                        "(first in %.1f s, then less often, up to every %.0f s)", self.name,
                        self.driver.target, error, delay, self._backoff.maximum)
        else:
            log.debug("%s: cannot connect to %s (%s); %d failures in a row, next attempt "
                      "in %.1f s", self.name, self.driver.target, error, failures, delay)

    def _count_connect(self, worker: int) -> None:
        """A connect succeeded in thread ``worker``: a reconnect if that worker had
        opened one before (lost, closed by the server, recycled, dropped while idle)."""
        with self._state_lock:
            if worker in self._opened_by:
                self._reconnects += 1
            else:
                self._opened_by.add(worker)

    def _first_connect_turn(self) -> Optional[threading.Event]:
        """The pool's first connect goes alone: it gets the Event to set when it
        ends; any other connect waits for that first one to end, and gets None.

        A pool's workers all connect at start-up, and the first call is served by
        the first of them ready. Ten pure-Python connects (PyMySQL) share one GIL,
        and ten new backends share the server's CPUs: all were ready together,
        after about ten connects' time (MariaDB, pool_size=10: 300-490 ms to the
        first result against 50 ms with pool_size=1). Alone, the first connect
        takes one connect's time; if it fails, the others meet its backoff instead
        of failing at the same time (one WARNING, not one per worker)."""
        with self._state_lock:
            first = self._first_connect
            if first is None:
                self._first_connect = first = threading.Event()
                return first
        first.wait()
        return None

    def _server_back(self) -> bool:
        """While backing off: has the server come back? The driver's probe says
        (``Driver.probe``: no login, no statement), at most one per ``PROBE_EVERY``
        seconds for the whole pool, so a restarted server serves the first call
        after it is back instead of the first after the backoff (up to 10 s). A
        driver that cannot probe (``probe`` None: the generic driver) leaves the
        wait alone: pushing it back on every probe kept a pool under steady load
        from ever connecting again (pg8000: still down 15 s after the server was
        back, with a call every 10 ms)."""
        now = time.monotonic()
        with self._state_lock:
            if now - self._probed < PROBE_EVERY:
                return False
            self._probed = now
        answer = self.driver.probe(PROBE_TIMEOUT)
        if answer is True:
            return True
        if answer is False:  # None: the driver cannot tell; the backoff runs its course
            self._backoff.still_down()
        return False

    def _connect(self, retry: bool) -> Connection:
        """One connect (two with ``retry``: one failure may be a fluke); a rejection
        (``Driver.rejection``) is raised as ConnectionRejected at once."""
        while True:
            unchained: Optional[ConnectionRejected] = None
            try:
                return self.driver.connect()
            except ConnectionRejected as exc:  # on_connect raised (adb.options.OnConnect)
                raise ConnectionRejected(f"{self.name!r}: {exc} (a new connection to "
                                         f"{self.driver.target})", exc.reason) from exc.__cause__
            except UnicodeError as exc:  # its message and args hold the text: a secret, maybe
                unencodable = (f"{self.driver.name} cannot encode a connect argument (user, "
                               f"password, database...) as "
                               f"{getattr(exc, 'encoding', 'its encoding')}")
                unchained = ConnectionRejected(
                    f"{self.name!r}: {self.driver.target}: {unencodable}", unencodable)
            except Exception as exc:
                reason = self.driver.rejection(exc)
                if reason is not None:
                    rejected = ConnectionRejected(
                        f"{self.name!r}: {self.driver.target} rejected the connection: "
                        f"{reason}", reason)
                    cause = self.driver.rejection_cause(exc)
                    if cause is not None:
                        raise rejected from cause
                    unchained = rejected
                elif not retry:
                    raise
                retry = False
            # raised here, outside the except: not chained to the driver's error, nor
            # its context
            if unchained is not None:
                raise unchained

    def warm_up_failed(self, index: int, error: BaseException) -> None:
        """Worker ``index`` could not connect before its first job (its thread): log
        it, once per distinct error (every worker of a pool meets the same one). A
        server out of reach was logged by ``open_connection`` already, once per
        failed attempt, not once per worker that met its backoff."""
        if isinstance(error, ServerUnavailable):
            log.debug("%s: worker %d could not connect: %s", self.name, index, error)
            return
        message = str(error)
        with self._state_lock:
            seen = message in self._warm_up_errors
            self._warm_up_errors.add(message)
        if not seen:
            log.warning("%s: worker %d could not connect: %s", self.name, index, message)

    def connect_wait(self) -> float:
        """Seconds until the connect backoff allows the next attempt (0: now)."""
        return self._backoff.wait_left()

    def fail_queued(self, error: BaseException) -> None:
        """Fail every job still waiting in the shared queue (close timeout, and what
        is left once every worker has exited). STOP markers stay."""
        queue = self.dispatch.queue
        stops = 0
        while True:
            try:
                job = queue.get_nowait()
            except Empty:
                break
            if job is STOP:
                stops += 1
                continue
            if job is WAKE:
                continue
            future, claim = job.future, job.claim
            if claim is not None and not claim.take():
                continue  # its caller already gave up on it
            if future is not None and not self.is_abandoned(future):
                self.handback(future, False, error)
        for _ in range(stops):
            queue.put(STOP)
        if stops:  # a worker that found the queue empty meanwhile went to sleep
            self.dispatch.wake_idle()

    def worker_exited(self, worker: Worker) -> None:
        """A worker left its loop (its own thread). A job handed to it as it took
        its STOP goes back to the shared queue, for a worker still serving or, when
        none is left, for the final reap."""
        while not worker.inbox.empty():
            job = worker.inbox.get_nowait()
            if job is not WAKE and job is not STOP:
                self.dispatch.queue.put(job)
        with self._state_lock:
            self._alive -= 1
            last = self._alive == 0
        if last:
            self._workers_out.set()

    def all_exited(self) -> None:
        """Once every worker has left its loop (watchdog thread): join their threads,
        fail what nobody will run, then report. The dispatch learns first that
        nobody is left, so that a ``submit`` racing the reap either is reaped here
        or reaps itself."""
        self._join()
        self._state = PoolState.STOPPED
        self.dispatch.late = self._reap
        self._reap()
        try:
            if self._on_exit is not None:
                self._on_exit()
        finally:
            self._stopped.set()

    def _reap(self) -> None:
        self.fail_queued(PoolClosed.before_run(self.name))

    def _join(self) -> None:
        for worker in self.workers:
            if worker.thread.ident is not None and worker.thread is not threading.current_thread():
                worker.thread.join()

    def free_workers(self) -> int:
        """How many workers run no call and serve no transaction (a snapshot)."""
        return sum(not w.busy and not w.pinned for w in self.workers)

    def streams(self) -> int:
        """How many workers hold an open stream (each is pinned too)."""
        return sum(w.streaming for w in self.workers)

    def stats(self) -> dict[str, Any]:
        workers = self.workers
        busy = sum(w.busy for w in workers)
        counted = [w.counters() for w in workers]
        return {
            "pool_size": len(workers),
            "busy": busy,
            "idle": len(workers) - busy,
            "pinned": len(self.dispatch.pinned),
            "queued": self.dispatch.queued(),
            "completed": sum(c.completed for c in counted),
            "errors": sum(c.errors for c in counted),
            "connects": sum(c.connects for c in counted),
            "connected": sum(w.conn is not None for w in workers),
            "reconnects": self._reconnects,
            "recycled": sum(c.recycled for c in counted),
            "connect_failures": self._backoff.failures,
            "units": sum(c.units for c in counted),
            "batched": sum(c.batched for c in counted),
            "unit_fallbacks": sum(c.unit_fallbacks for c in counted),
            "retries": sum(c.retries for c in counted),
            "alive": self._alive,
        }


__all__ = ["Pool", "PoolState", "give_up_all_at_exit"]
