"""The watchdog: cancels calls that overran their timeout or whose caller gave up.

One thread per pool wakes every ``TICK`` seconds and looks at each worker's
running call. A call past its deadline, or whose future its caller cancelled,
is cancelled on the server (psycopg2 ``cancel()``, MySQL ``KILL QUERY`` from a
side connection, sqlite3 ``interrupt()``), from a short-lived thread so a slow
cancel never stalls the watchdog. If the call is still running ``cancel_grace``
seconds later (a frozen server, a black-holed network), its connection is cut;
the worker then gets an error, replaces the connection and serves on.
"""

import logging
import threading
import time

log = logging.getLogger("adb")

TICK = 0.05


class Watchdog(threading.Thread):
    def __init__(self, pool):
        super().__init__(name=f"{pool.name}-watchdog", daemon=True)
        self.pool = pool

    def run(self):
        pool = self.pool
        while not pool.stopped:
            time.sleep(TICK)
            now = time.monotonic()
            for worker in pool.workers:
                current = worker.current
                if current is not None:
                    self.check(worker, current, now)

    def check(self, worker, current, now):
        future, deadline, seq = current
        late = deadline is not None and now >= deadline
        gone = future is not None and self.pool.is_abandoned(future)
        if not (late or gone):
            return
        if worker.cancelled_seq != seq:
            worker.cancelled_seq = seq
            worker.cancelled_at = now
            self.side(worker, seq, self.pool.driver.cancel, "cancel")
        elif worker.aborted_seq != seq and now - worker.cancelled_at > self.pool.cancel_grace:
            worker.aborted_seq = seq
            self.side(worker, seq, self.pool.driver.abort, "cut the connection of")

    @staticmethod
    def side(worker, seq, action, what):
        conn = worker.conn

        def act():
            current = worker.current
            if conn is None or current is None or current[2] != seq:
                return  # that call ended meanwhile
            log.warning("%s: %s the call running on worker %d", worker.pool.name, what, worker.index)
            try:
                action(conn)
            except Exception as exc:  # reported; the grace period is the fallback
                log.warning("%s: could not %s worker %d's call: %s",
                            worker.pool.name, what, worker.index, exc)
        threading.Thread(target=act, name=f"{worker.pool.name}-{what.split()[0]}",
                         daemon=True).start()
