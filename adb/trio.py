"""The trio front-end: every call returns a ``TrioFuture`` that a trio task awaits.

trio has no futures and no ``call_later``: tasks live only in nurseries. This
module supplies what the front-end seam (``adb.frontend.LoopFrontEnd``) asks of a
loop in trio's own terms, and nothing else of adb knows trio is there:

- results come back through the run's ``TrioToken.run_sync_soon``, trio's
  thread-to-loop primitive, one wake-up per batch (``adb.handback``);
- a timer is a system task sleeping in a cancel scope of its own;
- adb's own multi-step work (``runTransaction``, ``copy_in``) runs in a system
  task, whose scope is cancelled when its caller gives it up.

Cancellation is trio's: a task cancelled while it awaits a call gives the call
up. A queued call then never runs, and a running statement is cancelled on the
server within one watchdog tick, as on asyncio.

The Database binds to the trio run of its first call and refuses calls from
another run while that one lives; once it has ended, the next run's first call
takes the Database over (test suites, where each test is a run).
"""

from __future__ import annotations

import collections.abc
import enum
import weakref
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Generator, Optional

try:
    import trio
except ModuleNotFoundError as exc:  # pragma: no cover - exercised where trio is absent
    raise ModuleNotFoundError(
        "adb.trio needs trio: pip install 'adb-async[trio]'", name=exc.name) from exc

from .core import URL, BaseDatabase, frontend_doc
from .errors import InterfaceError
from .frontend import LoopFrontEnd, Waiting
from .listener import Listener
from .options import EMBEDDED
from .stream import Stream

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .options import Options


class FutureState(enum.Enum):
    """Where one call's ``TrioFuture`` stands; only the run's thread writes it."""

    PENDING = "pending"
    SETTLED = "settled"
    #: its caller gave it up (cancelled, interrupted): a worker skips it, the
    #: watchdog cancels it if it runs, and its outcome is dropped
    GIVEN_UP = "given up"


class TrioFuture:
    """One call's outcome on a trio run. Settled on the run's thread; awaited by
    any number of its tasks; given up when a task awaiting it is cancelled.

    The call is queued when it is made, as on every front-end; and the future is
    a coroutine too, so ``nursery.start_soon(db.runOperation, sql)`` runs the call
    in a task of its own, as trio's idiom has it."""

    __slots__ = ("_event", "state", "_ok", "_value", "_scope", "_driven", "__weakref__")

    def __init__(self, scope: Optional[trio.CancelScope] = None) -> None:
        self._event = trio.Event()
        self.state = FutureState.PENDING
        self._ok = False
        self._value: Any = None
        #: the cancel scope of the system task that settles it (``spawn``), if any
        self._scope = scope
        #: the wait that ``send``/``throw`` drive, when it is run as a coroutine
        self._driven: Optional[Coroutine[Any, Any, Any]] = None

    def done(self) -> bool:
        """True once settled or given up (any thread: the worker asks before a call)."""
        return self.state is not FutureState.PENDING

    def settle(self, ok: bool, value: Any) -> None:
        """Its result (``ok``) or exception; nothing if already done (run's thread)."""
        if self.state is FutureState.PENDING:
            self._ok, self._value = ok, value
            self.state = FutureState.SETTLED
            self._event.set()

    def give_up(self) -> None:
        """Its caller will not wait for it (run's thread): cancel the work settling it."""
        if self.state is FutureState.PENDING:
            self.state = FutureState.GIVEN_UP
            self._event.set()
            if self._scope is not None:
                self._scope.cancel()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._wait().__await__()

    # -- the coroutine protocol (a task's body: trio drives it through ``send``) ------

    def _coroutine(self) -> Coroutine[Any, Any, Any]:
        if self._driven is None:
            self._driven = self._wait()
        return self._driven

    def send(self, value: Any) -> Any:
        return self._coroutine().send(value)

    def throw(self, *exc_info: Any) -> Any:
        return self._coroutine().throw(*exc_info)

    def close(self) -> None:
        if self._driven is not None:
            self._driven.close()

    async def _wait(self) -> Any:
        if not trio.lowlevel.in_trio_task():
            raise InterfaceError("adb.trio's calls are awaited in a trio task (inside "
                                 "trio.run): this await is not in one")
        try:
            await self._event.wait()
        except BaseException:  # cancelled, or KeyboardInterrupt delivered here
            self.give_up()
            raise
        if self.state is FutureState.GIVEN_UP:
            raise InterfaceError("this call was given up by another task awaiting it "
                                 "(that task was cancelled): it did not run, or was "
                                 "cancelled on the server")
        if self._ok:
            return self._value
        raise self._value


collections.abc.Coroutine.register(TrioFuture)


class Timer:
    """``call_later``'s handle: a system task that sleeps, then runs ``fn(*args)``,
    unless ``cancel()`` came first."""

    __slots__ = ("_scope", "_fn", "_args", "_seconds")

    def __init__(self, seconds: float, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._scope = trio.CancelScope()
        self._seconds = seconds
        self._fn = fn
        self._args = args

    async def run(self) -> None:
        with self._scope:
            await trio.sleep(self._seconds)
        if not self._scope.cancel_called:
            self._fn(*self._args)

    def cancel(self) -> None:
        """Run's thread: the sleeping task ends without calling ``fn``."""
        self._scope.cancel()


class TrioFrontEnd(LoopFrontEnd[TrioFuture]):
    """Futures of one trio run: that of the first call, until it ends."""

    waiting = Waiting.AWAITS
    stream_class = Stream
    listener_class = Listener

    def __init__(self) -> None:
        #: the bound run's token (None until the first call)
        self.token: Optional[trio.lowlevel.TrioToken] = None
        self._moved: list[weakref.WeakMethod[Callable[[], None]]] = []

    # -- the loop's primitives -----------------------------------------------------------

    def new_future(self) -> TrioFuture:
        self.running_token()
        return TrioFuture()

    @staticmethod
    def settle(future: TrioFuture, ok: bool, value: Any) -> None:
        future.settle(ok, value)

    @staticmethod
    def abandoned(future: TrioFuture) -> bool:
        return future.state is not FutureState.PENDING

    @staticmethod
    def discard(future: TrioFuture) -> None:
        future.give_up()

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        token = self.token
        if token is None:
            raise RuntimeError("no trio run bound yet")
        token.run_sync_soon(fn)  # trio.RunFinishedError (a RuntimeError) once it ended

    def call_later(self, seconds: float, fn: Callable[..., None], *args: Any) -> Timer:
        timer = Timer(seconds, fn, args)
        self._in_run(trio.lowlevel.spawn_system_task, timer.run)
        return timer

    def spawn(self, coroutine: Any) -> TrioFuture:
        """Run adb's own coroutine in a system task; cancelled if its future is given up."""
        scope = trio.CancelScope()
        future = TrioFuture(scope)
        self._in_run(trio.lowlevel.spawn_system_task, _settle_with, coroutine, future, scope)
        return future

    def _in_run(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` inside the bound run: now from its thread, else soon."""
        if trio.lowlevel.in_trio_run():
            fn(*args)
        else:
            self.call_soon_threadsafe(lambda: fn(*args))

    # -- binding to a run ------------------------------------------------------------------

    def running_token(self) -> trio.lowlevel.TrioToken:
        """The bound run's token, binding the caller's run on first use (or once the
        bound run has ended); a clear error from outside any run, or from another
        run while the bound one lives."""
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            raise InterfaceError(
                f"{self.label}: call it from a trio task (inside trio.run); from another "
                "thread use trio.from_thread.run, or adb.sync.Database for blocking "
                "code") from None
        if token is not self.token:
            self._bind(token)
        return token

    def _bind(self, token: trio.lowlevel.TrioToken) -> None:
        old = self.token
        if old is not None and _alive(old):
            raise InterfaceError(
                f"{self.label} is bound to another trio run; create one Database per run")
        self.token = token
        if old is not None:  # its run ended: this one takes over
            for method in self._moved:
                fn = method()
                if fn is not None:
                    fn()

    def on_new_loop(self, fn: Callable[[], None]) -> None:
        self._moved.append(weakref.WeakMethod(fn))


async def _settle_with(coroutine: Any, future: TrioFuture, scope: trio.CancelScope) -> None:
    """A system task's body, in ``scope`` (``future``'s): ``coroutine``'s outcome
    settles ``future``."""
    with scope:
        try:
            value = await coroutine
        except trio.Cancelled:
            future.give_up()
            raise
        except BaseException as exc:  # handed to the caller, who awaits the future
            future.settle(False, exc)
        else:
            future.settle(True, value)
    if scope.cancelled_caught:  # given up before it could run
        coroutine.close()
        future.give_up()


def _alive(token: trio.lowlevel.TrioToken) -> bool:
    """True while the run of ``token`` has not ended."""
    try:
        token.run_sync_soon(_nothing)
    except trio.RunFinishedError:
        return False
    return True


def _nothing() -> None:
    pass


class Database(BaseDatabase[TrioFuture]):
    """The trio front-end's Database: every method returns a ``TrioFuture`` to await
    in a trio task.

    Every other keyword is an option of ``adb.core.BaseDatabase``, the same on
    every front-end.

    It binds to the trio run of its first call.
    """
    __doc__ = frontend_doc(__doc__)

    _frontend: TrioFrontEnd

    def __init__(self, url: URL = EMBEDDED, **options: Unpack[Options]) -> None:
        super().__init__(TrioFrontEnd(), url, **options)

    async def close(self, timeout: Optional[float] = None) -> None:
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection and join the threads. Idempotent.

        A task cancelled while it waits here stops waiting; the close goes on.

        :param timeout: seconds to wait for queued calls (default: all of them).
        :raises InterfaceError: ``timeout`` is not a number of seconds >= 0.
        """
        closing = self._engine.close(timeout)
        if closing is not None:  # None: a forked child's close, done at once
            await closing

    async def __aenter__(self) -> Database:
        """Open the first connection (``connect()``); a Database that cannot is closed
        again, and the error raised."""
        try:
            await self.connect()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


__all__ = ["Database", "FutureState", "Timer", "TrioFrontEnd", "TrioFuture"]
