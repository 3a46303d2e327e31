"""The asyncio front-end: every call returns an ``asyncio.Future``.

Tornado 6 coroutines (``async def`` and ``@gen.coroutine``) await these futures
directly. The Database binds to the event loop of its first call (or ``loop=``)
and refuses calls from any other loop.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from asyncio import _get_running_loop
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Optional, Sequence, TypeVar

from .args import SQL, Params
from .core import URL, BaseDatabase, frontend_doc
from .options import EMBEDDED
from .errors import InterfaceError
from .frontend import LoopFrontEnd, Waiting
from .handback import FutureHandback, Handback
from .listener import Listener
from .stream import Stream
from . import transaction as _transaction
from .savepoint import Savepoint
from .transaction import Transaction as _Tx, TransactionContext

if TYPE_CHECKING:
    from typing_extensions import Self, Unpack

    from .options import Options

T = TypeVar("T")


class Transaction(_transaction.Transaction):
    """A transaction handle of this front-end: its methods (``adb.transaction.Transaction``)
    give an asyncio Future."""

    if TYPE_CHECKING:  # what each method returns on this front-end
        def runQuery(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                     timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None) -> asyncio.Future[list[Any]]: ...

        def runQueryRow(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                        timeout: Optional[float] = None,
                        statement_timeout: Optional[float] = None) -> asyncio.Future[Optional[Any]]: ...

        def runQueryValue(self, sql: SQL, params: Params = None, *,
                          timeout: Optional[float] = None,
                          statement_timeout: Optional[float] = None) -> asyncio.Future[Optional[Any]]: ...

        def runOperation(self, sql: SQL, params: Params = None, *,
                         timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> asyncio.Future[int]: ...

        def runMany(self, sql: SQL, seq_of_params: Any, *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> asyncio.Future[int]: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]: ...

        def beginSavepoint(self) -> asyncio.Future[Savepoint]: ...

        def releaseSavepoint(self, savepoint: Savepoint) -> asyncio.Future[None]: ...

        def rollbackSavepoint(self, savepoint: Savepoint) -> asyncio.Future[None]: ...

        def commit(self) -> asyncio.Future[None]: ...

        def rollback(self) -> asyncio.Future[None]: ...


class AsyncioFrontEnd(LoopFrontEnd["asyncio.Future[Any]"]):
    """Futures of one event loop: ``loop=``, or the running loop of the first call."""

    waiting = Waiting.AWAITS
    stream_class = Stream
    listener_class = Listener
    transaction_class = Transaction

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop]) -> None:
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._moved: list[weakref.WeakMethod[Callable[[], None]]] = []
        self._bound: object = _UNBOUND  # the loop whose futures ``_create`` makes
        self._create: Callable[[], asyncio.Future[Any]] = _unbound
        if loop is not None:
            self._bind(loop)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make futures on ``loop`` from now on: its own ``create_future``, or, where
        that is asyncio's (which makes ``asyncio.Future(loop=loop)`` in a Python
        frame), the same future made in C."""
        self.loop = self._bound = loop
        native = getattr(type(loop), "create_future", None) is _BASE_CREATE_FUTURE
        self._create = functools.partial(asyncio.Future, loop=loop) if native \
            else loop.create_future

    def new_future(self) -> asyncio.Future[Any]:
        if _get_running_loop() is self._bound:  # the bound loop runs this call
            return self._create()
        return self.running_loop().create_future()  # binds it, or refuses this loop

    def handback(self, after: Optional[Callable[[], None]],
                 saturated: Callable[[], bool]) -> Handback:
        return FutureHandback(self.call_soon_threadsafe, self.settle, after, self.call_later,
                              saturated, self.call_soon)

    @staticmethod
    def settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        if not future.done():  # cancelled or timed out meanwhile
            try:
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
            except RuntimeError:  # its loop is closed: nobody is left to read it
                pass

    # the C method itself: a worker asks this before every call
    abandoned = staticmethod(asyncio.Future.done)  # type: ignore[assignment]

    @staticmethod
    def discard(future: asyncio.Future[Any]) -> None:
        if not future.cancel() and not future.cancelled():
            future.exception()  # retrieved: never reported as unhandled

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> asyncio.Handle:
        loop = self.loop  # the hand-back's wake-up: no call more than needed
        if loop is None:
            raise RuntimeError("no event loop bound yet")
        return loop.call_soon_threadsafe(fn)

    def call_soon(self, fn: Callable[[], None]) -> asyncio.Handle:
        loop = self.loop  # loop thread only: the hand-back's next turn
        if loop is None:
            raise RuntimeError("no event loop bound yet")
        return loop.call_soon(fn)

    def call_later(self, seconds: float, fn: Callable[..., None],
                   *args: Any) -> asyncio.TimerHandle:
        loop = self.loop  # a call that got its future made it on that loop, so it is bound
        if loop is None:
            raise RuntimeError("no event loop bound yet")
        return loop.call_later(seconds, fn, *args)

    def spawn(self, coroutine: Any) -> asyncio.Future[Any]:
        return self.running_loop().create_task(coroutine)

    def running_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, bound as the Database's on first use; a clear error
        from outside any loop, or from a loop other than the one bound."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self.loop is None:
                raise InterfaceError(
                    f"{self.label}: call it from a coroutine on a running event loop "
                    "(or pass loop= to Database)") from None
            if self.loop.is_running():  # in another thread: this one runs no loop
                raise InterfaceError(
                    f"{self.label} was called from a thread other than its event loop's: "
                    "its futures belong to that loop, and are not safe to use here; from "
                    "another thread use asyncio.run_coroutine_threadsafe(coro, loop), or "
                    "adb.sync.Database for blocking code") from None
            return self.loop
        if loop is not self.loop:
            if self.loop is not None and not self.loop.is_closed():
                raise InterfaceError(
                    f"{self.label} is bound to another event loop; create one Database per loop")
            moved = self.loop is not None
            self._bind(loop)
            if moved:  # its loop closed (asyncio.run ended): this one takes over
                for method in self._moved:
                    fn = method()
                    if fn is not None:
                        fn()
        return loop

    def on_new_loop(self, fn: Callable[[], None]) -> None:
        self._moved.append(weakref.WeakMethod(fn))


def _unbound() -> asyncio.Future[Any]:
    raise AssertionError("no loop is bound: new_future() binds one first")


#: what ``_bound`` is while no loop is: never the running loop (nor None)
_UNBOUND = object()
_BASE_CREATE_FUTURE = asyncio.BaseEventLoop.create_future


class FutureDatabase(BaseDatabase["asyncio.Future[Any]"]):
    """What the asyncio and Tornado front-ends' Databases share: each method returns
    an awaitable ``asyncio.Future``, and ``close()`` is awaited. Each front-end's
    class hands it the ``FrontEnd`` it builds from its own keyword (``loop=``,
    ``ioloop=``)."""

    if TYPE_CHECKING:  # what each method returns on this front-end (written in BaseDatabase)
        def connect(self, *, timeout: Optional[float] = None) -> asyncio.Future[None]: ...

        def runQuery(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                     row_factory: Any = None, timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None,
                     replica: bool = False) -> asyncio.Future[list[Any]]: ...

        def runQueryRow(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                        row_factory: Any = None, timeout: Optional[float] = None,
                        statement_timeout: Optional[float] = None,
                        replica: bool = False) -> asyncio.Future[Optional[Any]]: ...

        def runQueryValue(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                          timeout: Optional[float] = None,
                          statement_timeout: Optional[float] = None,
                          replica: bool = False) -> asyncio.Future[Optional[Any]]: ...

        def runOperation(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                         timeout: Optional[float] = None,
                         statement_timeout: Optional[float] = None) -> asyncio.Future[int]: ...

        def runMany(self, sql: SQL, seq_of_params: Iterable[Params], tx: Optional[_Tx] = None,
                    *, timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> asyncio.Future[int]: ...

        def runInteraction(self, fn: Callable[..., T], *args: Any,
                           **kwargs: Any) -> asyncio.Future[T]: ...

        def beginTransaction(self, *, timeout: Optional[float] = None, replica: bool = False,
                             isolation: Optional[str] = None,
                             read_only: bool = False) -> asyncio.Future[Transaction]: ...

        def transaction(self, *, timeout: Optional[float] = None, replica: bool = False,
                        isolation: Optional[str] = None,
                        read_only: bool = False) -> TransactionContext[Transaction]: ...

        def runTransaction(self, fn: Callable[..., Awaitable[T]], *args: Any, retries: Optional[int] = None,
                           isolation: Optional[str] = None, read_only: bool = False,
                           **kwargs: Any) -> asyncio.Future[T]: ...

        def commitTransaction(self, tx: _Tx) -> asyncio.Future[None]: ...

        def rollbackTransaction(self, tx: _Tx) -> asyncio.Future[None]: ...

        def wait_for_room(self) -> asyncio.Future[None]: ...

        def stream(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                   batch: int = 1000, row_factory: Any = None, timeout: Optional[float] = None,
                   idle_timeout: Optional[float] = None, replica: bool = False) -> Stream: ...

        def copy_out(self, sql: SQL, params: Params = None, tx: Optional[_Tx] = None, *,
                     batch: int = 1000, timeout: Optional[float] = None,
                     idle_timeout: Optional[float] = None) -> Stream: ...

        def copy_in(self, table: str, rows: Any, columns: Optional[Sequence[str]] = None,
                    tx: Optional[_Tx] = None, *,
                    timeout: Optional[float] = None) -> asyncio.Future[int]: ...

        def listen(self, *channels: str, max_queued: int = 10000) -> Listener: ...

        def notify(self, channel: str, payload: str = "",
                   tx: Optional[_Tx] = None) -> asyncio.Future[None]: ...

    # -- what differs in the public API: how a caller waits -----------------------

    async def close(self, timeout: Optional[float] = None) -> None:
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection and join the threads. Idempotent.

        With ``timeout`` (seconds), calls still queued when it passes fail with
        PoolClosed; calls already running are waited for.

        :param timeout: seconds to wait for queued calls (default: all of them).
        :raises InterfaceError: ``timeout`` is not a number of seconds >= 0.
        """
        closing = self._engine.close(timeout)
        if closing is not None:  # None: a forked child's close, done at once
            await asyncio.shield(closing)

    async def __aenter__(self) -> Self:
        """Open the first connection (``connect()``); a Database that cannot is closed
        again, and the error raised."""
        try:
            await self.connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


class Database(FutureDatabase):
    """The asyncio front-end's Database: every method returns an awaitable ``asyncio.Future``.

    Every other keyword is an option of ``adb.core.BaseDatabase``, the same on
    every front-end.

    :param loop: the event loop to deliver results on; default: the running loop
        of the first call.
    """
    __doc__ = frontend_doc(__doc__)

    _frontend: AsyncioFrontEnd

    def __init__(self, url: URL = EMBEDDED, *, loop: Optional[asyncio.AbstractEventLoop] = None,
                 **options: Unpack[Options]) -> None:
        super().__init__(AsyncioFrontEnd(loop), url, **options)
