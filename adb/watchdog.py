"""The watchdog: cancels calls that overran their timeout or whose caller gave up,
and reports when the pool's workers have all exited.

One thread per pool wakes every ``TICK`` seconds and looks at each worker's
running call (``adb.call.RunningCall``). A call past its deadline, or whose future
its caller cancelled, is cancelled on the server by its driver (psycopg2:
``pg_cancel_backend`` from a side connection; psycopg: PostgreSQL's cancel
protocol; MySQL: ``KILL QUERY`` from a side connection; sqlite3: ``interrupt()``),
from a short-lived thread so a slow cancel never stalls the watchdog, and sent
again (``CANCEL_TRIES``) while its side connection fails and the call runs. If the call
is still running ``cancel_grace`` seconds later (a frozen server, a black-holed
network), its connection is cut; the worker then gets an error, replaces the
connection and serves on.

Two cancels come from other threads than its own, and without waiting for a
tick, because the process may be gone by the next one:

- ``Watchdog.cancel_given_up(future)`` (reached through ``adb.call``): a
  blocking caller whose wait was interrupted (Ctrl-C, any exception raised in
  the waiting thread) cancels its running call on the server itself, before the
  exception goes on (as psycopg 3 does), so nothing it ran commits after the
  caller saw the interrupt;
- ``Watchdog.cancel_all``: at interpreter exit (``adb.engine``'s exit handler),
  every call still running is cancelled.

Each call is cancelled once, whoever gets there first (``take``).

Once the last worker has left its loop the watchdog calls its ``on_exit`` (the
pool's ``all_exited``, which joins every worker thread), so whoever waits for the
close learns of it only when no worker thread is left. It knows no Pool: it is
given the workers, the driver and those hooks at construction.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Optional, Protocol, Sequence

from .call import CallState, RunningCall, add_canceller
from .drivers.cancel import Cancel

log = logging.getLogger("adb")

TICK = 0.05
#: seconds an interrupted caller waits for a cancel its watchdog is sending already
CANCEL_WAIT = 5.0
#: how often a cancel is sent while its side connection fails (refused, reset, the
#: server's connection limit), CANCEL_PAUSE seconds apart, as long as the call runs:
#: the statement of a caller who is gone would run on, and commit, after one failure
CANCEL_TRIES = 3
CANCEL_PAUSE = 0.1


class Watched(Protocol):
    """A worker as the watchdog sees it (``adb.worker.Worker``)."""

    @property
    def index(self) -> int: ...

    @property
    def conn(self) -> Any:
        """Its DB-API connection, or None."""

    @property
    def current(self) -> Optional[RunningCall]:
        """The call it runs now, or None."""


class Canceller(Protocol):
    """The driver as the watchdog sees it (``adb.drivers.base.Driver``): its name and
    its way to stop a running statement (``Driver.cancel``), if it has one."""

    @property
    def name(self) -> str: ...

    @property
    def cancel(self) -> Optional[Cancel]: ...


class Watchdog(threading.Thread):
    """The watchdog of one pool.

    :param name: the pool's name, for the thread and log lines.
    :param workers: the workers to watch.
    :param driver: its ``cancel`` cancels a call on the server, or cuts its connection.
    :param is_abandoned: ``is_abandoned(future)``, True once its caller gave up.
    :param cancel_grace: seconds between the cancel and the cut.
    :param workers_out: set once the last worker has left its loop.
    :param on_exit: called (in this thread) once every worker thread has ended.
    """

    def __init__(self, name: str, workers: Sequence[Watched], driver: Canceller,
                 is_abandoned: Callable[[Any], bool], cancel_grace: float,
                 workers_out: threading.Event, on_exit: Callable[[], None]) -> None:
        super().__init__(name=f"{name}-watchdog", daemon=True)
        self.pool_name = name
        self.workers = workers
        self.driver_name = driver.name
        self.stopper = driver.cancel  # None: a call runs to its end, whatever its timeout
        self.is_abandoned = is_abandoned
        self.cancel_grace = cancel_grace
        self.workers_out = workers_out
        self.on_exit = on_exit
        self._taking = threading.Lock()  # one cancel per call, whichever thread sends it
        self._pid = os.getpid()  # a forked child's copy cancels nothing of its parent's
        add_canceller(self)

    def run(self) -> None:
        while not self.workers_out.wait(TICK):
            now = time.monotonic()
            for worker in self.workers:
                running = worker.current
                if running is not None:
                    self.check(worker, running, now)
        self.on_exit()

    def check(self, worker: Watched, running: RunningCall, now: float) -> None:
        if running.state is CallState.RUNNING:
            late = running.deadline is not None and now >= running.deadline
            gone = running.future is not None and self.is_abandoned(running.future) \
                and not (running.job is not None and running.job.ends_transaction)
            if (late or gone) and self.take(running, now):
                why = "its statement_timeout passed" if late else "its caller gave up on it"
                self.side(worker, running, self.cancel, "cancel", why, logging.INFO,
                          CANCEL_TRIES)
        elif running.state is CallState.CANCEL_SENT \
                and now - running.cancelled_at > self.cancel_grace:
            running.state = CallState.CUT
            self.side(worker, running, self.abort, "cut the connection of",
                      f"its cancel had no effect in {self.cancel_grace} s", logging.WARNING)

    def take(self, running: RunningCall, now: float) -> bool:
        """Mark ``running`` as cancelled (RUNNING -> CANCEL_SENT): True for the one
        thread that does, which then sends the cancel; False if it no longer runs
        or another thread (this watchdog's, an interrupted caller's) took it."""
        with self._taking:
            if running.state is not CallState.RUNNING:
                return False
            running.cancel_done = threading.Event()  # before the state the worker reads
            running.state = CallState.CANCEL_SENT
            running.cancelled_at = now
            return True

    def cancel_now(self, worker: Watched, running: RunningCall, why: str) -> bool:
        """Cancel ``running`` on the server from the calling thread, and return once
        the cancel was sent (True), or at once if it was taken already (False)."""
        if not self.take(running, time.monotonic()):
            return False
        self.act(worker, worker.conn, running, self.cancel, "cancel", why, logging.INFO,
                 CANCEL_TRIES)
        return True

    def cancel_given_up(self, future: object) -> bool:
        """The caller blocked on ``future`` was interrupted (``adb.call.cancel_given_up``;
        it marked the call given up first): if a worker of this pool runs the call,
        cancel it on the server from the caller's thread now, or, if this watchdog
        took it first, wait (``CANCEL_WAIT`` at most) until that cancel was sent, so
        the cancel has gone out when the interrupt goes on (True). False if no
        worker of this pool runs it, or in a forked child: its copy of the pool's
        calls are the parent's, on the parent's sessions (a child interrupted while
        it waited on one sent the cancel with the parent's key)."""
        if os.getpid() != self._pid:
            return False
        for worker in self.workers:
            running = worker.current
            if running is None or future is None or not running.runs(future):
                continue  # (a unit that took it is cancelled whole: Worker.one_by_one)
            if not self.cancel_now(worker, running, "its caller was interrupted") \
                    and running.state is not CallState.RUNNING:
                running.cancel_done.wait(CANCEL_WAIT)
            return True
        return False

    def cancel_all(self, why: str, deadline: float) -> None:
        """Cancel every call this pool's workers run, from the calling thread (the
        interpreter is exiting: ``adb.engine``); wait, until ``deadline``
        (``time.monotonic()``), for cancels already on their way from a side thread.
        Nothing in a forked child: the calls are its parent's."""
        if os.getpid() != self._pid:
            return
        for worker in self.workers:
            running = worker.current
            if running is None or self.cancel_now(worker, running, why):
                continue
            if running.state is CallState.CANCEL_SENT:
                running.cancel_done.wait(max(0.0, deadline - time.monotonic()))

    def cancel(self, conn: Any) -> None:
        """Ask the server to cancel what ``conn`` runs (from a side thread)."""
        if self.stopper is None:
            raise NotImplementedError(f"{self.driver_name} cannot cancel a running statement")
        self.stopper.cancel(conn)

    def abort(self, conn: Any) -> None:
        """Cut ``conn`` so the call blocked on it fails now; a driver that cannot
        cancel cannot cut either, and the call runs on."""
        if self.stopper is not None:
            self.stopper.abort(conn)

    def side(self, worker: Watched, running: RunningCall, action: Callable[[Any], None],
             what: str, why: str, level: int, tries: int = 1) -> None:
        """``act`` from a short-lived thread, so a slow cancel never stalls the
        watchdog."""
        threading.Thread(target=self.act, args=(worker, worker.conn, running, action, what,
                                                why, level, tries),
                         name=f"{self.pool_name}-{what.split()[0]}", daemon=True).start()

    def act(self, worker: Watched, conn: Any, running: RunningCall,
            action: Callable[[Any], None], what: str, why: str, level: int,
            tries: int = 1) -> None:
        """Run ``action`` on the worker's connection ``conn``, if the worker still
        runs ``running``; log it at ``level``, naming the statement (never its
        parameters): a cancel that was asked for is no alarm. A failing ``action``
        is run again, up to ``tries`` times in all, ``CANCEL_PAUSE`` apart, within
        ``CANCEL_WAIT`` and only while the worker runs that call (the worker waits
        for ``cancel_done`` before its next call, so no try can meet another)."""
        name = self.pool_name
        try:
            if conn is None or worker.current is not running:
                return  # that call ended meanwhile
            log.log(level, "%s: %s the call running on worker %d (%s): %s", name, what,
                    worker.index, why, running.statement())
            # tries again only within CANCEL_WAIT: after a fast failure (a refused or
            # reset connection), not after one that took its connect timeout
            until = time.monotonic() + CANCEL_WAIT
            for attempt in range(1, tries + 1):
                try:
                    action(conn)
                    return
                except Exception as exc:  # reported; the grace period is the fallback
                    final = attempt == tries or time.monotonic() + CANCEL_PAUSE > until
                    log.log(logging.WARNING if final else logging.INFO,
                            "%s: could not %s worker %d's call (try %d of %d): %s", name,
                            what, worker.index, attempt, tries, exc)
                if final:
                    return
                time.sleep(CANCEL_PAUSE)
                if worker.current is not running:
                    return  # it ended meanwhile: nothing to try again
        finally:
            running.cancel_done.set()  # the worker waits for it (Session.check_after_cancel)


__all__ = ["CANCEL_PAUSE", "CANCEL_TRIES", "CANCEL_WAIT", "Canceller", "Watched", "Watchdog"]
