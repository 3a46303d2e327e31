"""The blocking front-end: every call waits and returns the value.

For scripts, tests and the REPL, or threads of your own. Any number of caller
threads may share one Database; results go straight to the waiting thread.
"""

import threading
import time

from .core import BaseDatabase
from .errors import PoolClosed


class _Waiter:
    """The sync front-end's future: a lock released when the result arrives."""

    __slots__ = ("_lock", "ok", "value")

    def __init__(self):
        self._lock = threading.Lock()
        self._lock.acquire()

    def deliver(self, ok, value):
        self.ok = ok
        self.value = value
        self._lock.release()

    def wait(self, claim, timeout, db):
        if claim is None or self._lock.acquire(timeout=timeout):
            if claim is None:
                self._lock.acquire()
        else:
            try:
                claim.pop()
            except IndexError:  # a worker started it meanwhile: wait for the result
                self._lock.acquire()
            else:
                raise db._pool_timeout(timeout)
        if self.ok:
            return self.value
        raise self.value


class _AfterRoom:
    """Queues a job once there is room, blocking the calling thread until then."""

    def __init__(self, db):
        self.db = db

    def put(self, job):
        self.db.wait_for_room()
        self.db._pool.submit(job)


def _deliver(waiter, ok, value):
    waiter.deliver(ok, value)


class Database(BaseDatabase):
    __doc__ = BaseDatabase.__doc__ + """
    Every method blocks until its result is there and returns it.
    """

    _blocking = True

    def __init__(self, url=None, **kwargs):
        super().__init__(url, **kwargs)
        self._pool.handback = _deliver

    _future = _Waiter

    def _overflow(self):
        return _AfterRoom(self)

    def wait_for_room(self):
        """Block until fewer than ``max_queued`` calls wait for a worker."""
        while not self._room():
            time.sleep(0.001)

    def _result(self, future, claim, timeout):
        return future.wait(claim, timeout, self)

    def close(self, timeout=None):
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection and join the threads. Idempotent.

        With ``timeout`` (seconds), calls still queued when it passes fail with
        PoolClosed; calls already running are waited for.
        """
        self._close_start()
        if timeout is not None:
            self._pool.join(timeout)
            self._pool.fail_queued(PoolClosed(
                f"the Database {self.name!r} closed before this call could run"))
        self._pool.join()
        self._close_end()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
