"""The asyncio front-end: every call returns an ``asyncio.Future``.

Tornado 6 coroutines (``async def`` and ``@gen.coroutine``) await these futures
directly. The Database binds to the event loop of its first call (or ``loop=``)
and refuses calls from any other loop.
"""

import asyncio

from .core import BaseDatabase
from .errors import InterfaceError, PoolClosed
from .handback import BatchedHandback


def _settle(future, ok, value):
    if not future.done():  # cancelled or timed out meanwhile
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


class Database(BaseDatabase):
    __doc__ = BaseDatabase.__doc__ + """
    :param loop: the event loop to deliver results on; default: the running loop
        of the first call.

    Every method returns an awaitable ``asyncio.Future``.
    """

    def __init__(self, url=None, *, loop=None, **kwargs):
        self._loop = None
        self._closed_future = None
        super().__init__(url, **kwargs)
        if loop is not None:
            self._bind(loop)

    def _bind(self, loop):
        self._loop = loop
        after = self._admit if self._max_queued is not None else None
        self._pool.handback = BatchedHandback(loop.call_soon_threadsafe, _settle, after,
                                              loop.call_later, self._pool.saturated)

    @staticmethod
    def _wake(waiter):
        _settle(waiter, True, None)

    _is_abandoned = staticmethod(asyncio.Future.done)

    def _running_loop(self):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._loop is None:
                raise InterfaceError(
                    f"{self.name!r}: call it from a coroutine on a running event loop "
                    "(or pass loop= to Database)") from None
            return self._loop
        if loop is not self._loop:
            if self._loop is not None:
                raise InterfaceError(
                    f"the Database {self.name!r} is bound to another event loop; "
                    "create one Database per loop")
            self._bind(loop)
        return loop

    def _future(self):
        return self._running_loop().create_future()

    def _result(self, future, claim, timeout):
        if claim is not None:
            self._loop.call_later(timeout, _expire, future, claim, self, timeout)
        return future

    async def close(self, timeout=None):
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection and join the threads. Idempotent.

        With ``timeout`` (seconds), calls still queued when it passes fail with
        PoolClosed; calls already running are waited for.
        """
        loop = self._running_loop()
        if self._closed_future is None:
            self._closed_future = loop.create_future()
            handback = self._pool.handback
            self._pool.on_exit = lambda: handback(self._closed_future, True, None)
            self._close_start()
        try:
            await asyncio.wait_for(asyncio.shield(self._closed_future), timeout)
        except asyncio.TimeoutError:
            self._pool.fail_queued(PoolClosed(
                f"the Database {self.name!r} closed before this call could run"))
            await asyncio.shield(self._closed_future)
        self._pool.join()
        self._close_end()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        await self.close()


def _expire(future, claim, db, timeout):
    try:
        claim.pop()
    except IndexError:
        return  # a worker started it: the caller waits for its result
    if not future.done():
        future.set_exception(db._pool_timeout(timeout))
