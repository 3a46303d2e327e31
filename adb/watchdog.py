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

Once the last worker has left its loop the watchdog joins every worker thread
and calls ``Pool.all_exited``, so whoever waits for the close learns of it only
when no worker thread is left.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from .call import CallState, RunningCall

if TYPE_CHECKING:
    from .pool import Pool, Worker

log = logging.getLogger("adb")

TICK = 0.05


class Watchdog(threading.Thread):
    def __init__(self, pool: Pool) -> None:
        super().__init__(name=f"{pool.name}-watchdog", daemon=True)
        self.pool = pool

    def run(self) -> None:
        pool = self.pool
        while not pool.last_out.wait(TICK):
            now = time.monotonic()
            for worker in pool.workers:
                running = worker.current
                if running is not None:
                    self.check(worker, running, now)
        pool.all_exited()

    def check(self, worker: Worker, running: RunningCall, now: float) -> None:
        if running.state is CallState.RUNNING:
            late = running.deadline is not None and now >= running.deadline
            gone = running.future is not None and self.pool.is_abandoned(running.future)
            if late or gone:
                running.state = CallState.CANCEL_SENT
                running.cancelled_at = now
                self.side(worker, running, self.pool.driver.cancel, "cancel")
        elif running.state is CallState.CANCEL_SENT \
                and now - running.cancelled_at > self.pool.cancel_grace:
            running.state = CallState.CUT
            self.side(worker, running, self.pool.driver.abort, "cut the connection of")

    @staticmethod
    def side(worker: Worker, running: RunningCall, action: Callable[[Any], None],
             what: str) -> None:
        conn = worker.conn

        def act() -> None:
            if conn is None or worker.current is not running:
                return  # that call ended meanwhile
            log.warning("%s: %s the call running on worker %d", worker.pool.name, what, worker.index)
            try:
                action(conn)
            except Exception as exc:  # reported; the grace period is the fallback
                log.warning("%s: could not %s worker %d's call: %s",
                            worker.pool.name, what, worker.index, exc)
        threading.Thread(target=act, name=f"{worker.pool.name}-{what.split()[0]}",
                         daemon=True).start()
