"""A listener: the front-end's side of LISTEN/NOTIFY (``db.listen``).

Each listener has its own queue of at most ``max_queued`` items, filled by the
router (``adb.listen``) where it delivers: on the loop thread, or on the
listening thread for the blocking front-end. When the queue is full, new
notifications are dropped (the newest: what is queued stays, in order) and
counted; as soon as the consumer takes an item, a
``NotificationGap(GAP_OVERFLOW, missed)`` takes the freed place.

``Listener`` is the asynchronous form (asyncio, Tornado; Twisted subclasses it
with Deferreds), ``SyncListener`` the blocking one; ``ListenerCore`` is what
they share.
"""

from __future__ import annotations

import enum
import threading
import weakref
from collections import deque
from typing import Any, Optional, Protocol

from .listen import (GAP_OVERFLOW, GAP_RECONNECT, JOIN_TIMEOUT, Ask, Hub, Item, Notification,
                     NotificationGap)

class ListenerState(enum.Enum):
    STARTING = "starting"  # its channels are not all LISTENed yet
    READY = "ready"        # a NOTIFY sent from now on reaches it
    CLOSED = "closed"      # closed or its Database closed; queued items can still be read



class Listening(Protocol):
    """What a listener uses of its front-end (``adb.frontend.FrontEnd``)."""

    def new_future(self) -> Any: ...
    def settle(self, future: Any, ok: bool, value: Any) -> None: ...


class ListenerCore:
    """A listener's channels, queue and state, whatever its front-end. ``offer``
    runs where the router delivers (the loop thread, or the listening thread on
    the blocking front-end); a subclass says how its consumer waits (``wake``)."""

    def __init__(self, frontend: Listening, name: str, hub: Hub, channels: tuple[str, ...],
                 max_queued: int) -> None:
        self._frontend = frontend
        self.name = name
        self._hub = hub
        self.channels = channels
        self.max_queued = max_queued
        self.state = ListenerState.STARTING
        self._items: deque[Item] = deque()
        self._lock = threading.Lock()  # the queue: offered on one thread, taken on another (sync)
        self._gap: Optional[NotificationGap] = None  # owed once there is room again
        self._error: Optional[BaseException] = None  # why the last LISTEN attempt failed
        hub.router.add(self)
        weakref.finalize(self, _dropped, hub).atexit = False
        hub.router.ask(Ask(None, self._reply_ready, True))
        hub.wake()

    def __repr__(self) -> str:
        return (f"<adb listener of {self.name!r} on {', '.join(self.channels)} "
                f"{self.state.value}, {len(self._items)} queued>")

    @property
    def closed(self) -> bool:
        """True once closed (by ``close``/``aclose`` or the Database's close)."""
        return self.state is ListenerState.CLOSED

    # -- where the router delivers ----------------------------------------------------

    def offer(self, item: Item) -> bool:
        """Queue ``item``, or drop it into the owed gap when full (the policy in the
        module docstring). True when the consumer should be woken."""
        router = self._hub.router
        with self._lock:
            if self.state is ListenerState.CLOSED:
                return False
            if self._gap is None and len(self._items) < self.max_queued:
                self._items.append(item)
                if type(item) is Notification:
                    router.count(delivered=1)
                return True
            gap = self._gap or NotificationGap(GAP_OVERFLOW, 0)
            if type(item) is Notification:
                router.count(dropped=1)
                self._gap = gap._replace(missed=None if gap.missed is None else gap.missed + 1)
            else:  # a reconnect meanwhile: nobody knows how many
                self._gap = NotificationGap(GAP_RECONNECT, None)
            return False

    def _reply_ready(self, ok: bool, value: Any) -> None:
        """The listening thread's answer to this listener's LISTEN."""
        if ok:
            if self.state is ListenerState.STARTING:
                self.state = ListenerState.READY
            self._error = None
        else:
            self._error = value
        self.ready_changed()

    def end(self) -> None:
        """The Database closed (or ``aclose``): no more items; what is queued stays."""
        with self._lock:
            self.state = ListenerState.CLOSED
        self.wake()
        self.ready_changed()

    def _unregister(self) -> bool:
        """Leave the router (its channels are UNLISTENed if nobody else wants them);
        False if already closed."""
        if self.state is ListenerState.CLOSED:
            return False
        self._hub.router.remove(self)
        self.end()
        return True

    # -- the consumer side ------------------------------------------------------------

    def _take(self) -> Optional[Item]:
        """The next item, or None; taking one pays an owed gap into the freed room."""
        with self._lock:
            if not self._items:
                return None
            item = self._items.popleft()
            if self._gap is not None:
                self._items.append(self._gap)
                self._gap = None
            return item

    def wake(self) -> None:
        raise NotImplementedError

    def ready_changed(self) -> None:
        raise NotImplementedError


def _dropped(hub: Hub) -> None:
    """A listener was dropped unclosed: the listening thread looks again (the
    router held it weakly, so its channels no longer count)."""
    hub.router.changed()
    hub.wake()


class Listener(ListenerCore):
    """``async for item in db.listen("a", "b")`` (asyncio, Tornado).

    Items are ``Notification(channel, payload, pid)`` or ``NotificationGap(reason,
    missed)``. ``await ready()`` returns once every channel is LISTENed (a NOTIFY
    sent after that is delivered); iterating waits for it too. ``await aclose()``
    (or leaving ``async with``) ends it: iteration stops after what is queued, and
    its channels are UNLISTENed unless another listener wants them. The Database's
    close ends it the same way.

    Queue policy: at most ``max_queued`` items wait; when full, newly arriving
    notifications are dropped and counted, and a ``NotificationGap("overflow",
    missed)`` takes the first place that frees up.
    """

    def __init__(self, frontend: Listening, name: str, hub: Hub, channels: tuple[str, ...],
                 max_queued: int) -> None:
        self._waiter: Any = None
        self._ready_waiters: list[Any] = []
        super().__init__(frontend, name, hub, channels, max_queued)

    @classmethod
    def open(cls, frontend: Listening, name: str, hub: Hub, channels: tuple[str, ...],
             max_queued: int) -> Listener:
        """What ``db.listen()`` returns: a listener, LISTENing soon (``ready()``)."""
        frontend.new_future()  # binds the loop the notifications are delivered on
        return cls(frontend, name, hub, channels, max_queued)

    def wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._frontend.settle(waiter, True, None)

    def ready_changed(self) -> None:
        if self.state is ListenerState.STARTING and self._error is None:
            return
        waiters, self._ready_waiters = self._ready_waiters, []
        for waiter in waiters:
            if self.state is ListenerState.STARTING:
                self._frontend.settle(waiter, False, self._error)
            else:
                self._frontend.settle(waiter, True, None)

    async def _wait_ready(self) -> None:
        if self.state is ListenerState.STARTING:
            waiter = self._frontend.new_future()
            self._ready_waiters.append(waiter)
            await waiter

    async def ready(self) -> Listener:
        """Return this listener once its channels are all LISTENed. Raises
        ServerUnavailable if the listening connection cannot be opened (it keeps
        trying: await ``ready()`` again, or ``aclose()``)."""
        await self._wait_ready()
        return self

    def __aiter__(self) -> Listener:
        return self

    async def __anext__(self) -> Item:
        while True:
            item = self._take()
            if item is not None:
                return item
            if self.state is ListenerState.CLOSED:
                raise StopAsyncIteration
            self._waiter = waiter = self._frontend.new_future()
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None

    async def aclose(self) -> None:
        """End this listener; returns once its channels that nobody else wants are
        UNLISTENed (at once if the Database is closed or the server unreachable)."""
        if not self._unregister() or not self._hub.serving:
            return
        done = self._frontend.new_future()
        settle = self._frontend.settle
        self._hub.router.ask(Ask(None, lambda ok, value: settle(done, True, None), False))
        self._hub.wake()
        await done

    async def __aenter__(self) -> Listener:
        await self._wait_ready()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


class SyncListener(ListenerCore):
    """``for item in db.listen("a")`` on adb.sync: ``db.listen`` returns once every
    channel is LISTENed. ``get(timeout)`` waits for the next item (None when
    ``timeout`` passes first, or once closed and empty); iteration blocks until an
    item comes and stops once closed and empty. ``close()`` (or leaving ``with``)
    ends it; the Database's close ends it too. The queue policy is ``Listener``'s.
    """

    def __init__(self, frontend: Listening, name: str, hub: Hub, channels: tuple[str, ...],
                 max_queued: int) -> None:
        self._cond = threading.Condition(threading.Lock())
        super().__init__(frontend, name, hub, channels, max_queued)

    @classmethod
    def open(cls, frontend: Listening, name: str, hub: Hub, channels: tuple[str, ...],
             max_queued: int) -> SyncListener:
        """What ``db.listen()`` returns on adb.sync: a listener whose channels are
        LISTENed (it waits for that)."""
        listener = cls(frontend, name, hub, channels, max_queued)
        try:
            return listener.ready()
        except BaseException:
            listener.close()
            raise

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    ready_changed = wake

    def ready(self, timeout: Optional[float] = None) -> SyncListener:
        """Wait until its channels are all LISTENed; return the listener. Raises
        ServerUnavailable when the listening connection cannot be opened, TimeoutError
        when ``timeout`` passes first."""
        with self._cond:
            self._error = None
            ok = self._cond.wait_for(
                lambda: self.state is not ListenerState.STARTING or self._error is not None,
                timeout)
        if self._error is not None and self.state is ListenerState.STARTING:
            raise self._error
        if not ok:
            raise TimeoutError(f"{self!r}: not LISTENing within {timeout} s")
        return self

    def get(self, timeout: Optional[float] = None) -> Optional[Item]:
        """The next item; None if ``timeout`` seconds pass first or the listener is
        closed with nothing queued (``closed`` tells which)."""
        item = self._take()
        if item is not None or self.state is ListenerState.CLOSED:
            return item
        with self._cond:
            self._cond.wait_for(lambda: bool(self._items) or self.closed, timeout)
        return self._take()

    def __iter__(self) -> SyncListener:
        return self

    def __next__(self) -> Item:
        while True:
            item = self.get()
            if item is not None:
                return item
            if self.closed:
                raise StopIteration

    def close(self) -> None:
        """End this listener; returns once its channels that nobody else wants are
        UNLISTENed (at once if the Database is closed or the server unreachable)."""
        if not self._unregister() or not self._hub.serving:
            return
        done = threading.Event()
        self._hub.router.ask(Ask(None, lambda ok, value: done.set(), False))
        self._hub.wake()
        done.wait(JOIN_TIMEOUT)

    def __enter__(self) -> SyncListener:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


__all__ = ["Listener", "ListenerCore", "ListenerState", "SyncListener"]
