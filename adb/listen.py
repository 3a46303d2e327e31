"""PostgreSQL LISTEN/NOTIFY: one listening connection per Database, shared by
every listener.

A notification arrives with no call waiting for it, so it cannot travel the
way results do. The ``Hub`` owns one connection outside the pool and one
thread that waits on that connection's socket and on a wake-up pipe (other
threads ring it to say the wanted channels changed, or to stop). The thread
LISTENs and UNLISTENs so that the server listens on exactly the channels some
open listener wants (reference-counted by the ``Router``), reads every
notification that has arrived, and hands the burst to the front-end in one go:
one ``call_soon_threadsafe`` per burst on a loop (``adb.frontend.BatchedSink``), or
straight into each listener's queue on the blocking front-end. The listeners
are routed to on the front-end's side (the loop thread), so a listener's
queue is only ever touched there.

The promises, and how they are kept:

- **A lost connection is never silent.** The thread reconnects with
  ``health.Backoff``, LISTENs every wanted channel again, and only then puts a
  ``NotificationGap(GAP_RECONNECT, None)`` in every listener's queue, before
  anything read from the new connection. Notifications sent while it was down
  are lost (PostgreSQL keeps none for a session that is gone); the gap says so,
  at the moment from which nothing more is missed, so a consumer that reloads
  its state on a gap misses nothing. One connection at a time: nothing is
  delivered twice.
- **A slow listener cannot grow without bound.** Its queue holds at most
  ``max_queued`` items. When it is full, new notifications are dropped (the
  newest ones: what is queued stays, in order) and counted; as soon as the
  consumer takes an item, a ``NotificationGap(GAP_OVERFLOW, missed)`` takes the
  freed place, ``missed`` being exactly how many were dropped (None if a
  reconnect happened meanwhile too, since then nobody knows).
- **close() ends every listener.** The Database's close stops the thread, which
  closes the connection; each listener's iteration then ends after the items
  already queued.

The listeners themselves (their queues, the overflow policy, the async and
blocking forms) are ``adb.listener``; how bursts reach the loop thread is the
front-end's ``sink`` (``adb.frontend``).
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import select
import threading
import weakref
from typing import Any, Callable, NamedTuple, Optional, Protocol, Union

from .drivers.base import Connection, Driver
from .drivers.notify import Notifications
from .errors import InterfaceError, PoolClosed, ServerUnavailable
from .frontend import Sink
from .health import Backoff
from .target import Family

log = logging.getLogger("adb")

#: the longest channel name PostgreSQL keeps (NAMEDATALEN - 1 bytes)
MAX_CHANNEL_BYTES = 63
DEFAULT_MAX_QUEUED = 10000
#: ``NotificationGap.reason`` when the listening connection was lost and reopened
GAP_RECONNECT = "reconnect"
#: ``NotificationGap.reason`` when the listener's queue was full
GAP_OVERFLOW = "overflow"
#: how long close() waits for the listening thread (it may be inside a connect)
JOIN_TIMEOUT = 5.0


class Notification(NamedTuple):
    """One NOTIFY: its channel, its payload ('' when none) and the sender's backend pid."""

    channel: str
    payload: str
    pid: int


class NotificationGap(NamedTuple):
    """Notifications may be missing here. ``reason``: ``"reconnect"`` (the listening
    connection was lost and reopened) or ``"overflow"`` (the listener's queue was
    full); ``missed``: how many were dropped, or None when nobody can know."""

    reason: str
    missed: Optional[int]


Item = Union[Notification, NotificationGap]


class HubState(enum.Enum):
    IDLE = "idle"              # no connection, none needed yet
    LISTENING = "listening"    # connected: LISTENing on the wanted channels
    BACKING_OFF = "backing off"  # a connect failed; the next try waits for the backoff
    STOPPED = "stopped"        # close(): the thread ends, the connection is closed


# -- checks, in the caller's thread, before anything runs --------------------------------

_SERVER_NAMES = {Family.MYSQL: "MariaDB/MySQL", Family.SQLITE: "SQLite"}


def check_supported(driver: Driver) -> Notifications:
    """The driver's LISTEN/NOTIFY; InterfaceError unless the Database's server and
    driver can LISTEN."""
    if driver.notifications is not None:
        return driver.notifications
    family = driver.target.family
    server = _SERVER_NAMES.get(family)
    if server is not None:
        raise InterfaceError(f"{server} has no LISTEN/NOTIFY: listen() and notify() "
                             "need PostgreSQL (psycopg2 or psycopg)")
    raise InterfaceError(f"the driver {driver.name!r} cannot LISTEN: listen() and notify() "
                         "need PostgreSQL through psycopg2 or psycopg")


def check_listen(driver: Driver) -> None:
    """InterfaceError unless this Database can LISTEN: its driver can, and nothing
    in between (a transaction pooler) keeps it from holding one server session."""
    refusal = check_supported(driver).refusal()
    if refusal is not None:
        raise InterfaceError(refusal)


def check_channel(channel: object) -> str:
    """A channel name: a non-empty str of at most 63 bytes (UTF-8), without NUL."""
    if not isinstance(channel, str):
        raise TypeError(f"a channel name must be a str, not {type(channel).__name__}")
    if not channel:
        raise InterfaceError("a channel name must not be empty")
    if "\x00" in channel:
        raise InterfaceError(f"a channel name cannot contain NUL: {channel!r}")
    if len(channel.encode()) > MAX_CHANNEL_BYTES:
        raise InterfaceError(f"the channel name {channel[:20]!r}... is longer than "
                             f"PostgreSQL's {MAX_CHANNEL_BYTES} bytes")
    return channel


def check_channels(channels: tuple[object, ...]) -> tuple[str, ...]:
    """The channels of a ``listen()``, checked, without repeats, in their order."""
    if not channels:
        raise InterfaceError("listen() needs at least one channel name")
    return tuple(dict.fromkeys(check_channel(c) for c in channels))


def check_payload(payload: object) -> str:
    if not isinstance(payload, str):
        raise TypeError(f"a notification payload must be a str, not {type(payload).__name__}")
    return payload


def idle_stats() -> dict[str, Any]:
    """``stats()["listen"]`` of a Database that never listened."""
    return {"state": HubState.IDLE.value, "listeners": 0, "channels": [], "backend_pid": None,
            "reconnects": 0, "delivered": 0, "dropped": 0}


# -- the listeners' registry, and delivery on the front-end's side ------------------------

class Ask(NamedTuple):
    """Something for the listening thread to do once the wanted channels are
    LISTENed: run ``fn(conn)`` (None: nothing) and hand ``reply(ok, value)`` back.
    A ``standing`` ask (a listener waiting to be ready) survives a failed connect,
    whose error it is told, and is answered again once connected."""

    fn: Optional[Callable[[Connection], Any]]
    reply: Callable[[bool, Any], None]
    standing: bool


class Routed(Protocol):
    """A listener as the router sees it (``adb.listener.ListenerCore``)."""

    channels: tuple[str, ...]

    def offer(self, item: Item) -> bool: ...
    def wake(self) -> None: ...
    def end(self) -> None: ...


class Router:
    """Which open listener wants which channel, and what the listening thread is
    asked to do. Written by listeners (any thread) under ``lock``; read by the
    listening thread (what to LISTEN) and by ``deliver`` (where items go)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.by_channel: dict[str, weakref.WeakSet[Routed]] = {}
        self.open: weakref.WeakSet[Routed] = weakref.WeakSet()
        self.asks: list[Ask] = []
        self.version = 0  # moves on every change the listening thread must act on
        self.delivered = 0
        self.dropped = 0

    def add(self, listener: Routed) -> None:
        with self.lock:
            self.open.add(listener)
            for channel in listener.channels:
                self.by_channel.setdefault(channel, weakref.WeakSet()).add(listener)
            self.version += 1

    def remove(self, listener: Routed) -> None:
        with self.lock:
            self.open.discard(listener)
            for channel in listener.channels:
                members = self.by_channel.get(channel)
                if members is not None:
                    members.discard(listener)
            self.version += 1

    def ask(self, ask: Ask) -> None:
        with self.lock:
            self.asks.append(ask)
            self.version += 1

    def changed(self) -> None:
        """A listener left without saying so (it was collected): look again."""
        with self.lock:
            self.version += 1

    def count(self, delivered: int = 0, dropped: int = 0) -> None:
        """Notifications a listener queued, or dropped because its queue was full
        (called under the listener's own lock, where the router delivers)."""
        self.delivered += delivered
        self.dropped += dropped

    def wanted(self) -> tuple[int, frozenset[str], list[Ask]]:
        """(version, the channels some open listener wants, the asks taken)."""
        with self.lock:
            channels = frozenset(c for c, members in self.by_channel.items() if members)
            for channel in [c for c, members in self.by_channel.items() if not members]:
                del self.by_channel[channel]
            asks, self.asks = self.asks, []
            return self.version, channels, asks

    def deliver(self, items: list[Any]) -> None:
        """Route a burst (front-end side): each notification to every listener of its
        channel, each gap to every open listener, each reply to its asker. Waiters
        are woken after the lock is released, so no user code runs under it."""
        wake: list[Routed] = []
        replies: list[Callable[[], None]] = []
        with self.lock:
            by_channel = self.by_channel
            for item in items:
                if type(item) is Notification:
                    members = by_channel.get(item.channel)
                    if members:
                        for listener in members:
                            if listener.offer(item):
                                wake.append(listener)
                elif type(item) is NotificationGap:
                    for listener in self.open:
                        if listener.offer(item):
                            wake.append(listener)
                else:
                    replies.append(item)
        for listener in dict.fromkeys(wake):
            listener.wake()
        for reply in replies:
            reply()

    def end_all(self) -> None:
        """The Database closed: every listener ends after what it has queued."""
        with self.lock:
            listeners = list(self.open)
            self.open = weakref.WeakSet()
            self.by_channel = {}
        for listener in listeners:
            listener.end()


# -- the listening thread --------------------------------------------------------------

class Hub:
    """One Database's listening connection and the thread that owns it.

    Everything about the connection happens in that thread: connect (with
    backoff), LISTEN/UNLISTEN to match the ``Router``, read notifications, notice
    the loss, reconnect. Other threads only change the router and ``wake()`` it.
    The hub holds no reference to its Database, so an unclosed Database can
    still be collected (its ``__del__`` stops the hub).
    """

    def __init__(self, name: str, driver: Driver, router: Router, sink: Sink) -> None:
        self.name = name
        self.driver = driver
        self.notifications = check_supported(driver)
        self.router = router
        self.sink = sink
        self.state = HubState.IDLE
        self.backoff = Backoff()
        self.reconnects = 0
        self.backend_pid: Optional[int] = None
        self.listened: frozenset[str] = frozenset()  # what the server LISTENs for us
        self._conn: Optional[Connection] = None
        self._seen_version = -1
        self._lost: Optional[str] = None  # why the last connection was lost, until re-LISTENed
        self._standing: list[Ask] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._pipe_lock = threading.Lock()  # no write to a descriptor number closed (and reused)
        self._pipe_open = True
        self._stopping = threading.Event()  # close() asked; only the thread sets STOPPED
        self._thread = threading.Thread(target=self._run, name=f"{name}-listen", daemon=True)
        self._thread.start()

    # -- from any thread ------------------------------------------------------------

    @property
    def conn(self) -> Optional[Connection]:
        """The listening connection now, or None (a forked child lets go of it)."""
        return self._conn

    def wake(self) -> None:
        """Make the thread look at the router again (or notice it must stop)."""
        with self._pipe_lock:
            if not self._pipe_open:
                return
            try:
                os.write(self._wake_w, b"!")
            except BlockingIOError:  # full: a wake-up is pending already
                pass

    def stop(self) -> None:
        """Begin the end: the thread closes the connection and exits."""
        self._stopping.set()
        self.wake()

    def close(self) -> None:
        """The close's last step: wait for the thread (it closes its connection), hand
        over what it read, and end every listener after what it has queued."""
        self.stop()
        self.join()
        self.sink.drain()
        self.router.end_all()

    @property
    def serving(self) -> bool:
        """True while connected and not stopping: an ask will be answered soon."""
        return self.state is HubState.LISTENING and not self._stopping.is_set()

    def join(self) -> None:
        """Wait (a bounded time: it may be inside a connect) for the thread to end."""
        if self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT)

    def stats(self) -> dict[str, Any]:
        router = self.router
        return {"state": self.state.value, "listeners": len(router.open),
                "channels": sorted(self.listened), "backend_pid": self.backend_pid,
                "reconnects": self.reconnects, "delivered": router.delivered,
                "dropped": router.dropped}

    # -- the thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._step()
        except BaseException:
            log.exception("%s: the listening thread failed", self.name)
        finally:
            self._last_read()
            self._disconnect()
            self.state = HubState.STOPPED
            self._close_pipe()
            self._refuse_asks()

    def _refuse_asks(self) -> None:
        """The thread is gone: whoever still waits for an answer gets PoolClosed."""
        _, _, asks = self.router.wanted()
        asks, self._standing = self._standing + asks, []
        refusal = PoolClosed.refused(self.name)
        if asks:
            self.sink([functools.partial(ask.reply, False, refusal) for ask in asks])

    def _close_pipe(self) -> None:
        """The thread's last act: nobody can wake it any more (``wake`` checks)."""
        with self._pipe_lock:
            self._pipe_open = False
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _last_read(self) -> None:
        """Stopping: hand over what has already arrived (best effort), so a
        notification received before the close is not lost with the connection."""
        if self._conn is None:
            return
        try:
            items = self._read()
        except Exception:
            return
        if items:
            self.sink(items)

    def _step(self) -> None:
        """One turn: connect if needed, match the LISTENs, read, then sleep until the
        socket or the wake-up pipe has something."""
        if self._conn is None:
            if not self._needed():
                self._lost = None  # no listener left to tell of a loss
                self._sleep(None)
                return
            if not self._connect():
                return
        try:
            items = self._reconcile()
            items += self._read()
            fd = self.notifications.fileno(self._conn)
        except Exception as exc:
            self._lose(exc)
            return
        if items:
            self.sink(items)
        self._sleep(fd)

    def _needed(self) -> bool:
        """A connection is needed once some listener wants a channel or asks something."""
        with self.router.lock:
            return bool(self.router.asks or self._standing
                        or any(self.router.by_channel.values()))

    def _sleep(self, fd: Optional[int], timeout: Optional[float] = None) -> None:
        """Wait until ``fd`` (the connection) is readable, the thread is woken, or
        ``timeout`` seconds pass; empty the wake-up pipe."""
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        if fd is not None:
            poller.register(fd, select.POLLIN | select.POLLPRI)
        ready = poller.poll(None if timeout is None else timeout * 1000)
        if any(ready_fd == self._wake_r for ready_fd, _ in ready):
            try:
                while os.read(self._wake_r, 512):
                    pass
            except (BlockingIOError, OSError):
                pass

    def _connect(self) -> bool:
        """Open the listening connection; False (after waiting out the backoff, or a
        failed attempt whose error the waiting listeners are told) if not."""
        wait = self.backoff.wait_left()
        if wait:
            self._sleep(None, wait)
            return False
        try:
            conn = self.notifications.connect()
        except Exception as exc:
            self._connect_failed(exc)
            return False
        if self.backoff.succeeded():
            log.warning("%s: the listening connection to %s is open again",
                        self.name, self.driver.target)
        self._conn = conn
        self.backend_pid = self.notifications.backend_pid(conn)
        self.state = HubState.LISTENING
        self._seen_version = -1  # LISTEN everything again
        return True

    def _connect_failed(self, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
        delay = self.backoff.failed(error)
        self.state = HubState.BACKING_OFF
        if self.backoff.failures in (1, 5) or self.backoff.failures % 20 == 0:
            log.warning("%s: cannot open the listening connection to %s (%s); %d failure(s), "
                        "next attempt in %.1f s", self.name, self.driver.target, error,
                        self.backoff.failures, delay)
        failure = ServerUnavailable(
            f"{self.name!r} cannot open its listening connection to {self.driver.target}: "
            f"{error}; retrying")
        _, _, asks = self.router.wanted()
        self._standing += [ask for ask in asks if ask.standing]
        replies = [functools.partial(ask.reply, False, failure) for ask in self._standing + asks]
        self._seen_version = -1
        if replies:
            self.sink(replies)

    def _reconcile(self) -> list[Any]:
        """LISTEN the channels newly wanted, UNLISTEN those no longer wanted; then the
        reconnect gap (if the connection was new after a loss) and the replies to
        the asks. Raises if the connection fails (the asks are kept for the next one)."""
        router = self.router
        if router.version == self._seen_version:
            return []
        version, wanted, asks = router.wanted()
        asks = self._standing + asks
        self._standing = []
        try:
            conn = self._conn
            add = wanted - self.listened
            drop = self.listened - wanted
            if add:
                self.notifications.set_channels(conn, sorted(add), True)
            if drop:
                self.notifications.set_channels(conn, sorted(drop), False)
            self.listened = wanted
            replies = [self._answer(ask, conn) for ask in asks]
        except Exception:
            self._standing = asks  # (a failed ask's own error ended in _answer)
            raise
        self._seen_version = version
        items: list[Any] = []
        if self._lost is not None:
            self.reconnects += 1
            log.warning("%s: listening again on %d channel(s) after losing the connection "
                        "(%s)", self.name, len(wanted), self._lost)
            self._lost = None
            items.append(NotificationGap(GAP_RECONNECT, None))
        return items + replies

    def _answer(self, ask: Ask, conn: Connection) -> Callable[[], None]:
        if ask.fn is None:
            return functools.partial(ask.reply, True, None)
        try:
            value = ask.fn(conn)
        except self.driver.dbapi.Error as exc:
            if self.driver.is_disconnect(exc, conn):
                raise
            return functools.partial(ask.reply, False, exc)
        return functools.partial(ask.reply, True, value)

    def _read(self) -> list[Any]:
        """Every notification that has arrived, in order (never blocks)."""
        return [Notification(channel, payload, pid)
                for pid, channel, payload in self.notifications.read(self._conn)]

    def _lose(self, exc: Exception) -> None:
        """The connection failed: drop it; the next turn reconnects and LISTENs again."""
        reason = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        if self._lost is None:
            self._lost = reason
        log.warning("%s: the listening connection was lost (%s); reconnecting",
                    self.name, reason)
        self._disconnect()
        self.backoff.failed(reason)
        self.state = HubState.BACKING_OFF

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        self.listened = frozenset()
        self.backend_pid = None
        if conn is not None:
            self.driver.close(conn)


# -- the listeners --------------------------------------------------------------------


__all__ = ["Notification", "NotificationGap", "Item", "JOIN_TIMEOUT", "Hub", "HubState",
           "Router", "Routed", "Ask", "GAP_OVERFLOW", "GAP_RECONNECT"]
