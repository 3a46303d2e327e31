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
import threading
from queue import Empty
from typing import Any, Callable, Optional

from . import health
from .call import CLAIM, FUTURE
from .dispatch import STOP, WAKE, Dispatch
from .drivers.base import Connection, Driver
from .errors import PoolClosed, ServerUnavailable
from .handback import Handback
from .watchdog import Watchdog
from .worker import PoolConfig, Worker

log = logging.getLogger("adb")


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
        self._reconnects = 0
        self._state = PoolState.NEW
        self._state_lock = threading.Lock()
        self._alive = size
        self._workers_out = threading.Event()  # the last worker has left its loop
        self._stopped = threading.Event()      # ... its thread has ended, on_exit has run
        self.workers = [Worker(self, i) for i in range(size)]

    @property
    def state(self) -> PoolState:
        return self._state

    def stopping(self) -> bool:
        """True once ``stop()`` has been called: no new transaction begins."""
        return self._state is PoolState.STOPPING or self._state is PoolState.STOPPED

    def start(self) -> None:
        """Start the worker threads and the watchdog (once); queued jobs wait for them."""
        with self._state_lock:
            if self._state is not PoolState.NEW:
                return
            self._state = PoolState.RUNNING
        self._start_threads()

    def _start_threads(self) -> None:
        for worker in self.workers:
            worker.thread.start()
        Watchdog(self.name, self.workers, self.driver, self.is_abandoned, self._cancel_grace,
                 self._workers_out, self.all_exited).start()

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

        Raises ServerUnavailable (the call never reached the server) while the
        backoff after a failed attempt has not run out, or when this attempt fails.
        """
        backoff = self._backoff
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
            self._reconnects += 1
        return conn

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
            future, claim = job[FUTURE], job[CLAIM]
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


__all__ = ["Pool", "PoolState"]
