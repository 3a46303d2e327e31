"""The watchdog: cancels calls that overran their timeout or whose caller gave up,
and reports when the pool's workers have all exited.

One thread per pool wakes every ``TICK`` seconds and looks at each worker's
running call (``adb.call.RunningCall``). A call past its deadline, or whose future
its caller cancelled, is cancelled on the server by its driver (psycopg2:
``pg_cancel_backend`` from a side connection; psycopg: PostgreSQL's cancel
protocol; MySQL: ``KILL QUERY`` from a side connection; sqlite3: ``interrupt()``),
from a short-lived thread so a slow cancel never stalls the watchdog. If the call
is still running ``cancel_grace`` seconds later (a frozen server, a black-holed
network), its connection is cut; the worker then gets an error, replaces the
connection and serves on.

Once the last worker has left its loop the watchdog calls its ``on_exit`` (the
pool's ``all_exited``, which joins every worker thread), so whoever waits for the
close learns of it only when no worker thread is left. It knows no Pool: it is
given the workers, the driver and those hooks at construction.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional, Protocol, Sequence

from .call import CallState, RunningCall
from .drivers.cancel import Cancel
from .jobs import ends_transaction

log = logging.getLogger("adb")

TICK = 0.05


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
                and not (running.job is not None and ends_transaction(running.job))
            if late or gone:
                running.cancel_done = threading.Event()  # before the state the worker reads
                running.state = CallState.CANCEL_SENT
                running.cancelled_at = now
                why = "its statement_timeout passed" if late else "its caller gave up on it"
                self.side(worker, running, self.cancel, "cancel", why, logging.INFO)
        elif running.state is CallState.CANCEL_SENT \
                and now - running.cancelled_at > self.cancel_grace:
            running.state = CallState.CUT
            self.side(worker, running, self.abort, "cut the connection of",
                      f"its cancel had no effect in {self.cancel_grace} s", logging.WARNING)

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
             what: str, why: str, level: int) -> None:
        """Run ``action`` on the worker's connection from a short-lived thread, if
        the worker still runs ``running`` by then; log it at ``level``, naming the
        statement (never its parameters): a cancel that was asked for is no alarm."""
        conn, name = worker.conn, self.pool_name

        def act() -> None:
            try:
                if conn is None or worker.current is not running:
                    return  # that call ended meanwhile
                log.log(level, "%s: %s the call running on worker %d (%s): %s", name, what,
                        worker.index, why, running.statement())
                try:
                    action(conn)
                except Exception as exc:  # reported; the grace period is the fallback
                    log.warning("%s: could not %s worker %d's call: %s", name, what,
                                worker.index, exc)
            finally:
                running.cancel_done.set()  # the worker waits for it (Session.check_after_cancel)
        threading.Thread(target=act, name=f"{name}-{what.split()[0]}", daemon=True).start()


__all__ = ["Canceller", "Watched", "Watchdog"]
