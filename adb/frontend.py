"""What a front-end supplies: one ``FrontEnd`` object, the written interface.

A front-end (``adb.asyncio``, ``adb.tornado``, ``adb.twisted``, ``adb.sync``) is
one module: a Database class (the public API, written once in ``adb.core``) and a
``FrontEnd`` that says how its world waits. The engine (``adb.engine``) and the
features (streams, bulk loads, retried transactions, listeners) ask only this
object; nothing below the front-end modules knows which front-end it serves.

The interface, every member of which a front-end's class provides (most of them
by subclassing ``LoopFrontEnd`` or ``BlockingFrontEnd`` below):

- ``waiting``: how its callers wait (``Waiting``): they block, await futures, or
  hold Deferreds.
- ``new_future()``: a new future for one call (caller's thread).
- ``settle(future, ok, value)``: give it its result (``ok``) or exception (loop
  thread; for a blocking front-end, any thread). It must do nothing to a future
  already settled or abandoned.
- ``abandoned(future)``: True once its caller gave up on it, e.g. cancelled it
  (any thread; a worker skips such a call, the watchdog cancels it if running).
- ``discard(future)``: the caller will not wait for it after all: cancel it and
  keep its outcome from being reported as unhandled.
- ``call_soon_threadsafe(fn)``: run ``fn()`` on the loop thread soon (any thread);
  ``call_later(seconds, fn, *args)``: run ``fn(*args)`` there later, returning a
  handle with ``cancel()``.
- ``handback(after, saturated)``: where workers hand results (``adb.handback``).
- ``returned(future, claim, timeout, expiry)``: what a public method gives its
  caller for ``future``: the future (whose ``claim`` expires after ``timeout``),
  or, on a blocking front-end, its value once settled.
- ``pending(future, claim, timeout, expiry)``: the same, as a future that steps
  (``adb.steps``) can wait on.
- ``outcomes``: None where a call without a claim gives its caller the future
  itself; on a blocking front-end, its ``Outcomes``: how to wait for a future's one
  ``(ok, value)``, and what to do with a future whose caller's wait was interrupted.
  The engine's path for the common call then waits itself, in its compiled code,
  and makes no ``returned`` call for it.
- ``run_steps(steps)``: drive work written as steps; what the caller gets.
- ``delay(seconds)``: a future settled after ``seconds``.
- ``sink(deliver)``: where the listening thread hands notifications (``adb.listen``),
  which ``deliver`` on the loop thread; its ``drain()`` delivers what is pending.
- ``on_new_loop(fn)``: call ``fn()`` when the front-end moves to another loop (an
  asyncio Database whose loop closed, used from the next: test suites, notebooks).
- ``lost_error``: the ConnectionLost class callers get.
- ``stream_class``, ``listener_class``, ``transaction_class``: what ``stream()``,
  ``listen()`` (through the class's ``open``) and ``beginTransaction()`` hand out.

A FrontEnd must not hold the Database: worker threads reach it, and a Database
dropped unclosed must still be collected (and warn).
"""

from __future__ import annotations

import enum
import threading
import time
import weakref
from typing import Any, Callable, Generic, NamedTuple, Optional, Protocol, TypeVar

from .call import Claim
from .errors import ConnectionLost, PoolTimeout
from .handback import BatchedHandback, DirectHandback, Handback
from .steps import Steps, run_async, run_blocking
from .transaction import Transaction

#: the future type of a front-end: an asyncio Future, a Deferred, a blocking Waiter
F = TypeVar("F")


class Waiting(enum.Enum):
    """How a front-end's callers wait for a result."""

    #: every call blocks and returns its value (adb.sync); nothing is awaited
    BLOCKS = "blocks"
    #: calls return futures that coroutines await (asyncio, Tornado)
    AWAITS = "awaits"
    #: calls return Deferreds: awaited in coroutines, or given callbacks (Twisted)
    DEFERS = "defers"


class Outcomes(NamedTuple):
    """A blocking front-end's futures as the engine waits on them (``outcomes``):
    each receives one ``(ok, value)``, the call's value (``ok``) or its exception."""

    #: ``take(future)``: block until the future's ``(ok, value)`` is there; give it
    take: Callable[[Any], tuple[bool, Any]]
    #: ``give_up(future)``: that wait was interrupted (Ctrl-C, any exception raised
    #: in the waiting thread): the call is given up before the exception goes on
    give_up: Callable[[Any], None]


class Cancellable(Protocol):
    """A timer handle: ``loop.call_later``'s TimerHandle, Twisted's DelayedCall."""

    def cancel(self) -> object: ...


class Expiry(Protocol):
    """Who decides what a call that waited too long for a worker gets (``adb.engine``)."""

    def expire(self, future: Any, claim: Claim, timeout: float) -> None: ...
    def pool_timeout(self, timeout: Optional[float]) -> PoolTimeout: ...


class Waitable(Protocol):
    """The future of a blocking front-end (``adb.sync.Waiter``)."""

    def wait(self, timeout: Optional[float]) -> bool: ...
    def result(self) -> Any: ...


class Sink(Protocol):
    """Where another thread hands items for the loop thread (``FrontEnd.sink``)."""

    def __call__(self, items: list[Any]) -> None: ...
    def drain(self) -> None: ...
    def restart(self) -> None: ...


class WorkerSession(Protocol):
    """A worker's connection as a hosted call sees it (``engine.hosted``: the adbapi
    drop-in's calls, in the worker's thread): the connection it has, opening one,
    dropping it."""

    @property
    def conn(self) -> Any: ...
    def connection(self) -> Any: ...
    def disconnect(self, reason: Optional[str] = None) -> None: ...


class FrontEnd(Generic[F]):
    """The interface above; ``LoopFrontEnd`` and ``BlockingFrontEnd`` build most of
    it from a few primitives."""

    waiting: Waiting
    lost_error: type[ConnectionLost] = ConnectionLost
    stream_class: Callable[..., Any]
    listener_class: Any
    transaction_class: Callable[..., Transaction] = Transaction
    #: who the front-end's errors are about (set by the Database it serves)
    label = "the Database"
    #: a blocking front-end's; None: an unclaimed call gives its caller the future
    outcomes: Optional[Outcomes] = None

    def new_future(self) -> F:
        raise NotImplementedError

    @staticmethod
    def settle(future: F, ok: bool, value: Any) -> None:
        raise NotImplementedError

    @staticmethod
    def abandoned(future: F) -> bool:
        return False

    @staticmethod
    def discard(future: F) -> None:
        pass

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> object:
        raise NotImplementedError

    def call_later(self, seconds: float, fn: Callable[..., None], *args: Any) -> Cancellable:
        raise NotImplementedError

    def handback(self, after: Optional[Callable[[], None]],
                 saturated: Callable[[], bool]) -> Handback:
        raise NotImplementedError

    def returned(self, future: F, claim: Optional[Claim], timeout: Optional[float],
                 expiry: Expiry) -> Any:
        raise NotImplementedError

    def pending(self, future: F, claim: Optional[Claim], timeout: Optional[float],
                expiry: Expiry) -> F:
        raise NotImplementedError

    def run_steps(self, steps: Steps) -> Any:
        raise NotImplementedError

    def delay(self, seconds: float) -> F:
        raise NotImplementedError

    def sink(self, deliver: Callable[[list[Any]], None]) -> Sink:
        raise NotImplementedError

    def on_new_loop(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (held weakly, a bound method) on the new loop's thread when
        the front-end moves to another loop, its old one having closed. Most never do."""


class LoopFrontEnd(FrontEnd[F]):
    """A front-end whose results are settled on a loop thread (an event loop, a
    reactor). A subclass supplies ``new_future``, ``settle``, ``abandoned``,
    ``discard``, ``call_soon_threadsafe``, ``call_later`` and ``spawn``."""

    def spawn(self, coroutine: Any) -> F:
        """Run a coroutine of adb's own that awaits this front-end's futures; its future."""
        raise NotImplementedError

    def handback(self, after: Optional[Callable[[], None]],
                 saturated: Callable[[], bool]) -> Handback:
        return BatchedHandback(self.call_soon_threadsafe, self.settle, after,
                               self.call_later, saturated)

    def returned(self, future: F, claim: Optional[Claim], timeout: Optional[float],
                 expiry: Expiry) -> Any:
        if claim is not None and timeout is not None:  # a claim comes with a timeout
            # held weakly: a settled future nobody keeps (a begin's, whose value is a
            # handle its caller dropped) must not outlive its call by ``timeout``
            self.call_later(timeout, _expire, weakref.ref(future), claim, timeout, expiry)
        return future

    pending = returned

    def run_steps(self, steps: Steps) -> Any:
        return self.spawn(run_async(steps))

    def delay(self, seconds: float) -> F:
        future = self.new_future()
        self.call_later(seconds, self.settle, future, True, None)
        return future

    def sink(self, deliver: Callable[[list[Any]], None]) -> Sink:
        return BatchedSink(self.call_soon_threadsafe, deliver)


def _expire(future: Callable[[], Any], claim: Claim, timeout: float, expiry: Expiry) -> None:
    """A call's wait for a worker ran out: ``expiry`` fails it unless a worker took it
    first, or nobody holds its future any more (it ran, and its result was let go)."""
    held = future()
    if held is not None:
        expiry.expire(held, claim, timeout)


class BlockingFrontEnd(FrontEnd[F]):
    """A front-end whose callers block: results are settled in the worker thread,
    and every call returns its value. A subclass supplies ``new_future`` (a
    ``Waitable``) and ``settle``."""

    waiting = Waiting.BLOCKS

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> object:
        """No loop thread: ``fn`` runs now, in the calling thread."""
        fn()
        return None

    def call_later(self, seconds: float, fn: Callable[..., None], *args: Any) -> Cancellable:
        timer = threading.Timer(seconds, fn, args)
        timer.daemon = True
        timer.start()
        return timer

    def handback(self, after: Optional[Callable[[], None]],
                 saturated: Callable[[], bool]) -> Handback:
        return DirectHandback(self.settle, after)

    def returned(self, future: F, claim: Optional[Claim], timeout: Optional[float],
                 expiry: Expiry) -> Any:
        waiter: Waitable = future  # type: ignore[assignment]
        if claim is not None and not waiter.wait(timeout):
            if claim.take():
                raise expiry.pool_timeout(timeout)
            waiter.wait(None)  # a worker started it meanwhile: wait for the result
        elif claim is None:
            waiter.wait(None)
        return waiter.result()

    def pending(self, future: F, claim: Optional[Claim], timeout: Optional[float],
                expiry: Expiry) -> F:
        """Wait as ``returned`` does (raising what it raises), then hand over a
        future already settled with the value."""
        value = self.returned(future, claim, timeout, expiry)
        settled = self.new_future()
        self.settle(settled, True, value)
        return settled

    def run_steps(self, steps: Steps) -> Any:
        return run_blocking(steps)

    def delay(self, seconds: float) -> F:
        time.sleep(seconds)
        future = self.new_future()
        self.settle(future, True, None)
        return future

    def sink(self, deliver: Callable[[list[Any]], None]) -> Sink:
        return DirectSink(deliver)


class BatchedSink:
    """Hands bursts from another thread to the loop thread: only the first burst
    after a drain calls ``call_soon_threadsafe``, so a storm of notifications wakes
    the loop once per drain, not once each."""

    def __init__(self, call_soon_threadsafe: Callable[[Callable[[], None]], object],
                 deliver: Callable[[list[Any]], None]) -> None:
        self._call_soon = call_soon_threadsafe
        self._deliver = deliver
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self._scheduled = False

    def __call__(self, items: list[Any]) -> None:
        with self._lock:
            self._items.extend(items)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._call_soon(self.drain)
        except RuntimeError:  # the loop is closed (or not bound): nobody can read them
            with self._lock:
                self._scheduled = False

    def drain(self) -> None:
        """Deliver what has arrived (loop thread; also the close, to flush)."""
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        if items:
            self._deliver(items)

    #: the loop changed: a drain scheduled on the old one never runs; drain on the new
    restart = drain


class DirectSink:
    """A blocking front-end has no loop thread: items are delivered at once."""

    def __init__(self, deliver: Callable[[list[Any]], None]) -> None:
        self._deliver = deliver

    def __call__(self, items: list[Any]) -> None:
        self._deliver(items)

    def drain(self) -> None:
        """Nothing is ever pending."""

    restart = drain


__all__ = ["WorkerSession", "BatchedSink", "BlockingFrontEnd", "Cancellable", "DirectSink", "Expiry", "F",
           "FrontEnd", "LoopFrontEnd", "Sink", "Waitable", "Waiting"]
