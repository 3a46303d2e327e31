"""The asyncio front-end: every call returns an ``asyncio.Future``.

Tornado 6 coroutines (``async def`` and ``@gen.coroutine``) await these futures
directly. The Database binds to the event loop of its first call (or ``loop=``)
and refuses calls from any other loop.
"""

from __future__ import annotations

import asyncio
from asyncio import _get_running_loop
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Optional, Sequence, TypeVar

from .core import SQL, BaseDatabase, Params, frontend_doc
from .errors import InterfaceError
from .listener import Listener
from .stream import Stream
from .transaction import Transaction

T = TypeVar("T")


class Database(BaseDatabase["asyncio.Future[Any]"]):
    """The asyncio front-end's Database: every method returns an awaitable ``asyncio.Future``.

    :param loop: the event loop to deliver results on; default: the running loop
        of the first call.

    Every other keyword is an option of ``adb.core.BaseDatabase``, the same on
    every front-end.
    """
    __doc__ = frontend_doc(__doc__)

    def __init__(self, url: Any = None, *, loop: Optional[asyncio.AbstractEventLoop] = None,
                 **kwargs: Any) -> None:
        self._scheduler: _LoopScheduler = _LoopScheduler(loop)
        super().__init__(url, **kwargs)

    @property
    def _loop(self) -> Optional[asyncio.AbstractEventLoop]:
        return self._scheduler.loop

    if TYPE_CHECKING:  # what each method returns on this front-end (written in BaseDatabase)
        def runQuery(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                     *, row_factory: Any = None, timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None, replica: bool = False) -> asyncio.Future[list[Any]]: ...

        def runOperation(self, sql: SQL, params: Params = None,
                         tx: Optional[Transaction] = None, *, timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> asyncio.Future[int]: ...

        def runMany(self, sql: SQL, seq_of_params: Iterable[Params],
                    tx: Optional[Transaction] = None, *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> asyncio.Future[int]: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any,
                           **kwargs: Any) -> asyncio.Future[T]: ...

        def beginTransaction(self, *, timeout: Optional[float] = None,
                             replica: bool = False) -> asyncio.Future[Transaction]: ...

        def runTransaction(self, fn: Callable[..., Awaitable[T]], *args: Any,
                           retries: Optional[int] = None, **kwargs: Any) -> asyncio.Future[T]: ...

        def commitTransaction(self, tx: Transaction) -> asyncio.Future[None]: ...

        def rollbackTransaction(self, tx: Transaction) -> asyncio.Future[None]: ...

        def wait_for_room(self) -> asyncio.Future[None]: ...

        def stream(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                   *, batch: int = 1000, row_factory: Any = None,
                   timeout: Optional[float] = None,
                   idle_timeout: Optional[float] = None, replica: bool = False) -> Stream: ...

        def copy_out(self, sql: SQL, params: Params = None, tx: Optional[Transaction] = None,
                     *, batch: int = 1000, timeout: Optional[float] = None,
                     idle_timeout: Optional[float] = None) -> Stream: ...

        def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                    tx: Optional[Transaction] = None, *,
                    timeout: Optional[float] = None) -> asyncio.Future[int]: ...

        def listen(self, *channels: str, max_queued: int = 10000) -> Listener: ...

        def notify(self, channel: str, payload: str = "",
                   tx: Optional[Transaction] = None) -> asyncio.Future[None]: ...

    # -- the front-end interface ------------------------------------------------------

    def _new_future(self) -> asyncio.Future[Any]:
        loop = _get_running_loop()
        if loop is None or loop is not self._scheduler.loop:  # unbound, or the wrong loop
            loop = self._running_loop()
        return loop.create_future()

    @staticmethod
    def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        if not future.done():  # cancelled or timed out meanwhile
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    @staticmethod
    def _discard(future: asyncio.Future[Any]) -> None:
        if not future.cancel() and not future.cancelled():
            future.exception()  # retrieved: never reported as unhandled

    def _sibling_options(self) -> dict[str, Any]:
        return {"loop": self._scheduler.loop}

    def _spawn(self, coroutine: Any) -> asyncio.Future[Any]:
        return self._running_loop().create_task(coroutine)

    # the C method itself: a worker asks this before every call
    _abandoned = staticmethod(asyncio.Future.done)  # type: ignore[assignment]

    _fn_must_await = True

    def _running_loop(self) -> asyncio.AbstractEventLoop:
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
            self._scheduler.loop = loop
        return loop

    # -- what differs in the public API: how a caller waits -----------------------

    async def close(self, timeout: Optional[float] = None) -> None:
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection and join the threads. Idempotent.

        With ``timeout`` (seconds), calls still queued when it passes fail with
        PoolClosed; calls already running are waited for.
        """
        await asyncio.shield(self._close(timeout))

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


class _LoopScheduler:
    """Schedules on the loop thread of one Database: its event loop, bound at the first call."""

    __slots__ = ("loop",)

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop]) -> None:
        self.loop = loop

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> asyncio.Handle:
        loop = self.loop  # the hand-back's wake-up: no call more than needed
        if loop is None:
            raise RuntimeError("no event loop bound yet")
        return loop.call_soon_threadsafe(fn)

    def call_later(self, seconds: float, fn: Callable[..., None],
                   *args: Any) -> asyncio.TimerHandle:
        return self._bound().call_later(seconds, fn, *args)

    def _bound(self) -> asyncio.AbstractEventLoop:
        """The loop; a call that got its future made it on that loop, so it is bound."""
        loop = self.loop
        if loop is None:
            raise RuntimeError("no event loop bound yet")
        return loop
