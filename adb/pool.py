"""Worker threads, each owning one DB-API connection for its life.

Shared work flows through one ``queue.SimpleQueue``. A worker that begins a
transaction is *pinned*: until the transaction ends it reads only that
transaction's private queue, so its statements run in order on one connection.
Nothing here knows about event loops: results go to ``pool.handback(future,
ok, value)``, which the front-end provides.
"""

import logging
import threading
from queue import SimpleQueue

from .errors import PoolClosed, TransactionError

log = logging.getLogger("adb")

#: shared-queue sentinel: the worker that takes it exits
STOP = None


class Worker:
    """One thread and its connection. All methods run in that thread."""

    def __init__(self, pool, index):
        self.pool = pool
        self.driver = pool.driver
        self.index = index
        self.conn = None
        self.txq = None  # the private queue of the transaction pinning this worker
        self.busy = False
        self.completed = 0
        self.errors = 0
        self.connects = 0
        self.thread = threading.Thread(
            target=self.run, name=f"{pool.name}-worker-{index}", daemon=True)

    def run(self):
        get = self.pool.queue.get
        job = None
        try:
            self.warm_up()
            while True:
                job = get() if self.txq is None else self.txq.get()
                if job is STOP:
                    break
                try:
                    self.serve(job)
                except Exception:  # a bug of adb's own: keep the worker alive
                    log.exception("%s: worker %d failed on a job", self.pool.name, self.index)
                job = None  # hold no reference to a finished job while blocked
        finally:
            self.disconnect()
            self.pool.worker_exited()

    def warm_up(self):
        """Connect before the first job so it pays no connect; failures wait for a job."""
        if self.index >= self.pool.warm or self.pool.closing:
            return
        try:
            self.connection()
        except Exception as exc:
            log.warning("%s: worker %d could not connect to %s: %s",
                        self.pool.name, self.index, self.driver.target, exc)

    def serve(self, job):
        future, fn, args, claim = job
        if claim is not None:
            try:
                claim.pop()
            except IndexError:
                return  # timed out or cancelled before it started
        elif future is not None and self.pool.is_abandoned(future):
            return
        self.busy = True
        try:
            value, ok = fn(self, *args), True
        except BaseException as exc:  # everything goes back to the caller
            value, ok = exc, False
            self.errors += 1
            value = self.after_error(exc)
        self.busy = False
        self.completed += 1
        if future is not None:
            self.pool.handback(future, ok, value)

    def connection(self):
        """This worker's connection, (re)opened if it is missing or known closed."""
        conn = self.conn
        if conn is not None and not self.driver.is_closed(conn):
            return conn
        if conn is not None:
            self.disconnect()
        self.conn = conn = self.driver.connect()
        self.connects += 1
        self.pool.connections[threading.get_ident()] = conn
        log.debug("%s: worker %d connected to %s", self.pool.name, self.index, self.driver.target)
        return conn

    def disconnect(self):
        if self.conn is not None:
            conn, self.conn = self.conn, None
            self.pool.connections.pop(threading.get_ident(), None)
            self.driver.close(conn)

    def after_error(self, exc):
        """Replace a connection that ``exc`` broke; return what the caller should get.

        With ``pool.check_sql`` set (Twisted's ``cp_reconnect``), a connection that
        fails that statement after an error counts as broken too, and the caller
        gets ``pool.lost_error`` (a ConnectionLost) instead of the driver's error.
        """
        conn = self.conn
        if conn is None:
            return exc
        broken = self.driver.is_disconnect(exc, conn)
        if not broken and self.pool.check_sql and self.txq is None:
            broken = not self.responds(conn, self.pool.check_sql)
        if not broken:
            return exc
        self.disconnect()
        if self.pool.lost_error is None:
            return exc
        lost = self.pool.lost_error(
            f"the connection of {self.pool.name!r} to {self.driver.target} was lost "
            f"({type(exc).__name__}); the statement may have run")
        lost.__cause__ = exc
        return lost

    def responds(self, conn, sql):
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
        """One call outside any transaction: autocommitted by the driver or by us."""
        conn = self.connection()
        if not self.driver.autocommit:
            return self.atomic(op, *args)
        cursor = conn.cursor()
        try:
            return op(cursor, self.driver, *args)
        finally:
            cursor.close()

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
        conn = self.conn
        if conn is None:
            tx.ended(False)
            raise TransactionError(f"{tx!r} lost its connection; nothing was committed")
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
        log.warning("%s: rolling back a transaction %s", self.pool.name, reason)
        self.rollback_quietly()

    def rollback_quietly(self):
        if self.conn is None:
            return
        try:
            self.driver.rollback(self.conn)
        except Exception:  # the connection is broken: replace it
            self.disconnect()


class Pool:
    """``size`` workers sharing one job queue.

    A job is ``(future, fn, args, claim)``: the worker runs ``fn(worker, *args)``
    and hands ``(future, ok, value)`` back. ``claim`` is None or a one-item list
    that the worker pops before it starts; whoever pops it first (the worker, or
    a timeout on the caller's side) decides whether the call runs.
    """

    #: a statement that must succeed on a healthy connection, run after errors; or None
    check_sql = None
    #: the exception class a caller gets when its connection broke under it; or None
    lost_error = None

    def __init__(self, driver, size, name, is_abandoned, warm=None, start=True):
        self.driver = driver
        self.name = name
        self.queue = SimpleQueue()
        self.is_abandoned = is_abandoned
        self.handback = None  # set by the front-end before the first job
        self.closing = False
        self.started = False
        self.on_exit = None
        self.connections = {}  # worker thread id -> its DB-API connection
        self._alive = size
        self._alive_lock = threading.Lock()
        self.workers = [Worker(self, i) for i in range(size)]
        self.warm = size if warm is None else warm
        if start:
            self.start()

    def start(self):
        """Start the worker threads (once); jobs queued before this wait for them."""
        if not self.started:
            self.started = True
            for worker in self.workers:
                worker.thread.start()

    def submit(self, job):
        self.queue.put(job)

    def stop(self):
        """Let every queued job run, then end each worker (non-blocking)."""
        self.closing = True
        for _ in self.workers:
            self.queue.put(STOP)
        self.start()  # an unstarted pool still settles what was queued

    def fail_queued(self, error):
        """Fail every job still waiting in the shared queue (close timeout)."""
        stops = 0
        while True:
            try:
                job = self.queue.get_nowait()
            except Exception:
                break
            if job is STOP:
                stops += 1
                continue
            future, _, _, claim = job
            if claim is not None:
                try:
                    claim.pop()
                except IndexError:
                    continue
            if future is not None and not self.is_abandoned(future):
                self.handback(future, False, error)
        for _ in range(stops):
            self.queue.put(STOP)

    def worker_exited(self):
        with self._alive_lock:
            self._alive -= 1
            last = self._alive == 0
        if last and self.on_exit is not None:
            self.on_exit()

    def join(self, timeout=None):
        for worker in self.workers:
            if worker.thread.ident is not None and worker.thread is not threading.current_thread():
                worker.thread.join(timeout)

    def stats(self):
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
            "alive": self._alive,
        }
