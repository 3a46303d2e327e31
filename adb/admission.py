"""Backpressure: what happens to a call when ``max_queued`` calls already wait.

With ``on_full="raise"`` the call fails at once with QueueFull. With
``on_full="wait"`` it is *parked* here, already accepted (its caller has its
future), and handed to the pool as room frees up; ``wait_for_room()`` callers
wait here too, to be woken once nothing is parked and the pool has room.

Room is checked after every delivery of results (``after()``: on the loop
thread, or in a worker thread for a blocking front-end), and after a worker
skipped a call that was given up, so a parked call never waits on a result that
will not come.

A room waiter also waits while ``max_queued`` results or more wait to be
delivered (``watch_deliveries``). A producer that never awaits its calls gives
the loop a turn only when ``wait_for_room()`` makes it wait; with workers as fast
as the producer the queue never filled, so it never waited, and the results the
loop had no turn to deliver grew without bound (300,000 ``select 1`` on SQLite:
295,000 undelivered, RSS +120 MB). Each pending result means a drain is coming
(``adb.handback``), and ``after()`` runs at its end, so such a waiter is woken
(seen on python3.13t too, where four workers outran the caller: 50,000 held after
50,000 calls with ``max_queued=1000``).

One lock orders ``put`` against ``after``: without it a caller could park a call
just after the last delivery looked for parked calls.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Protocol

from .call import Job
from .errors import PoolClosed, QueueFull
from .handback import Settle


class Feed(Protocol):
    """Where admitted calls go (``adb.dispatch.Dispatch``)."""

    def submit(self, job: Job) -> None: ...
    def queued(self) -> int: ...


class Admission:
    """Parked calls and room waiters of one Database with ``max_queued``.

    :param dispatch: where admitted calls go (and whose queue length is the room).
    :param settle: ``settle(future, ok, value)``, to wake or fail room waiters.
    """

    def __init__(self, name: str, limit: int, on_full: str, dispatch: Feed,
                 settle: Settle) -> None:
        self.name = name
        self.limit = limit
        self.raise_when_full = on_full == "raise"
        self._submit = dispatch.submit
        self._queued = dispatch.queued
        self._settle = settle
        self._lock = threading.Lock()
        self._parked: deque[Job] = deque()
        self._waiters: deque[Any] = deque()
        self._closed = False
        self._undelivered: Callable[[], int] = _none

    def watch_deliveries(self, undelivered: Callable[[], int]) -> None:
        """``undelivered()``: how many results wait for the loop thread (the
        hand-back's, made after this Admission)."""
        self._undelivered = undelivered

    def _room(self) -> bool:
        return self._queued() < self.limit

    def _room_for_waiter(self) -> bool:
        """Room, and fewer than ``limit`` results waiting to be delivered."""
        return self._queued() < self.limit and self._undelivered() < self.limit

    def put(self, job: Job) -> None:
        """Queue ``job`` if there is room, else park it or raise QueueFull (caller's thread)."""
        with self._lock:
            if self._closed:
                raise PoolClosed.refused(self.name)
            if not self._parked and self._room():
                self._submit(job)
            elif self.raise_when_full:
                raise QueueFull(
                    f"the Database {self.name!r} already has {self.limit} calls waiting "
                    f"(max_queued={self.limit}); this call did not run")
            else:
                self._parked.append(job)

    def wait(self, waiter: Any) -> None:
        """Settle ``waiter`` once nothing is parked and the pool has room (caller's thread)."""
        # settled outside the lock: a Deferred runs its callbacks at once, and they
        # may make the next call
        with self._lock:
            closed = self._closed
            ready = not closed and not self._parked and self._room_for_waiter()
            if not (closed or ready):
                self._waiters.append(waiter)
        if closed:
            self._settle(waiter, False, PoolClosed.refused(self.name))
        elif ready:
            self._settle(waiter, True, None)

    def after(self) -> None:
        """Move parked calls into the pool while there is room, then wake room waiters
        (after each delivery of results)."""
        woken = []
        with self._lock:
            parked = self._parked
            while parked and self._room():
                self._submit(parked.popleft())
            waiters = self._waiters
            while waiters and not parked and self._room_for_waiter():
                woken.append(waiters.popleft())
        for waiter in woken:
            self._settle(waiter, True, None)

    def close(self) -> None:
        """At close: hand every parked call to the pool, room or not (they were accepted
        and run like queued calls), and fail every room waiter with PoolClosed."""
        with self._lock:
            self._closed = True
            parked, self._parked = self._parked, deque()
            waiters, self._waiters = self._waiters, deque()
            for parked_job in parked:
                self._submit(parked_job)
        error = PoolClosed.waiting_for_room(self.name)
        for waiter in waiters:
            self._settle(waiter, False, error)

    @property
    def parked(self) -> int:
        return len(self._parked)

    @property
    def waiting(self) -> int:
        return len(self._waiters)


def _none() -> int:
    """No results ever wait (until ``watch_deliveries``)."""
    return 0
