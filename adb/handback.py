"""Hand-back of results from worker threads to the caller's world.

``BatchedHandback`` serves front-ends with a loop thread (asyncio, Tornado,
Twisted). A naive ``call_soon_threadsafe`` per result wakes the loop (a syscall)
once per call. Here workers append to a deque and only the first appender after
a drain schedules a wake-up; the loop thread then settles the batch, a turn's
share at a time (below).

Why no wake-up is lost: a worker appends *before* it reads the flag, and a
drain clears the flag *before* it empties the deque. A worker that finds the
flag set therefore knows that some drain has not cleared it yet; that drain
clears it after this append and so takes the item. Without the GIL
(free-threaded builds) the deque's own lock orders the two sides: every append and
popleft holds it (a per-object lock, PEP 703). If the worker's append takes it
after the drain's last popleft, the drain's earlier ``_scheduled = False`` is
visible to the worker once it holds that lock, so the worker signals; if before,
that popleft takes the item. A drain that stops at a turn's share leaves the rest
to the loop's next turn, which it schedules itself: what it leaves needs no signal.

Under saturation (``busy()`` true: every worker busy with standalone calls and
more calls queued; ``Pool.saturated``) the loop
stops being woken at all: it leaves the flag set, so workers never signal, and
drains on a timer every ``POLL_INTERVAL`` seconds instead. Each signal costs the
worker a syscall and the loop an extra wake-up, and each is a moment where threads
trade the GIL; under saturation results arrive faster than that, and the queued
calls keep every worker busy meanwhile, so a millisecond's delay in delivery costs
no throughput. The first drain that finds the pool no longer busy clears the flag
before it empties the deque, exactly as above, and signalling resumes.

One drain settles at most ``MOST_PER_TURN`` results; the rest wait for the loop's
next turn (``soon(...)`` where the front-end has it, else ``later(0, ...)``), which
settles the next share (a signal's drain, the
saturation timer's and the next turn's may meet in one turn, each with its share).
Settling is cheap, but each settled future runs its caller on, and behind a web
server that means writing an answer, after which the next request arrives. Settling
all that came back at once (65 a drain, 229 at most, traced behind uvicorn at 256
connections) made each turn of the loop 10-40 ms long, and the loop's own I/O waits
for the turn to end: uvloop accepts one new connection per turn, so 256 new
connections took 2-3 s to be accepted. A few results per turn keep turns short (2.5
ms at the median with 4, traced the same way) and serve the loop's other work between
them, the way a native driver's results arrive, one socket's read per turn
(docs/performance.md, "The tail at 256 connections").

``DirectHandback`` serves a blocking front-end: there is no loop thread, so
each result is settled at once in the worker thread (waking the one caller
thread that waits for it).
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, Callable, Optional, Protocol

#: seconds between drains while the pool is saturated
POLL_INTERVAL = 0.001
#: results one drain settles; the rest are settled on the loop's next turns
MOST_PER_TURN = 4
#: the limit where the hand-back has no way to schedule the next turn (no ``later``)
_ALL = sys.maxsize

#: ``settle(future, ok, value)``: give a future its value (``ok``) or exception
Settle = Callable[[Any, bool, Any], None]
#: one call's outcome on its way back: ``(future, ok, value)``
Result = tuple[Any, bool, Any]


class Handback(Protocol):
    """What the workers hand results to (worker threads) and the core reads.

    Futures are whatever the front-end makes (``Any`` here: the hand-back only
    passes them to ``settle``)."""

    @property
    def wakeups(self) -> Optional[int]:
        """Drains a worker's signal caused (None: no loop thread to wake)."""

    @property
    def polls(self) -> Optional[int]:
        """Drains the saturation timer caused (None: no loop thread)."""

    @property
    def settled(self) -> int:
        """Results settled so far."""

    @property
    def largest_batch(self) -> Optional[int]:
        """The most results settled in one drain (None: no batches)."""

    def __call__(self, future: Any, ok: bool, value: Any) -> None:
        """Queue one result for settling."""

    def many(self, results: list[Result]) -> None:
        """Queue several results at once (a unit's)."""

    def undelivered(self) -> int:
        """Results queued for the loop thread and not settled yet (0 where each is
        settled at once)."""

    def nudge(self) -> None:
        """Run the after-delivery hook soon though no result came."""

    def stop(self) -> None:
        """Settle whatever is queued and stop any timer (loop thread)."""

    def restart(self) -> None:
        """The loop thread is another now (the old loop closed): what was scheduled
        on the old one never runs; deliver what is pending on the new (its thread)."""


class BatchedHandback:
    """Deliver ``(future, ok, value)`` to a loop thread, one wake-up per batch.

    ``schedule(fn)`` must be thread-safe and run ``fn`` on the loop thread
    (``loop.call_soon_threadsafe``, ``reactor.callFromThread``);
    ``settle(future, ok, value)`` runs on the loop thread for every result, and
    ``after()``, if given, once after each batch. With ``later(seconds, fn)`` (loop
    thread only: ``loop.call_later``, ``reactor.callLater``) and ``busy()``, the
    loop drains on a timer instead of being woken while ``busy()`` holds; with
    ``later``, a drain settles at most ``MOST_PER_TURN`` results and the loop's next
    turns settle the rest: through ``soon(fn)`` where given (loop thread only:
    ``loop.call_soon``), else ``later(0, fn)``. On asyncio's own loop both run in the
    next turn, after its poll (the timer after that poll's callbacks, ``call_soon``
    before them), and the timer costs a ``TimerHandle`` and a heap push and pop more;
    uvloop makes ``call_later(0)`` a ``call_soon`` itself.
    """

    def __init__(self, schedule: Callable[[Callable[[], None]], Any], settle: Settle,
                 after: Optional[Callable[[], None]] = None,
                 later: Optional[Callable[[float, Callable[[], None]], Any]] = None,
                 busy: Optional[Callable[[], bool]] = None,
                 soon: Optional[Callable[[Callable[[], None]], Any]] = None) -> None:
        self._after = after  # called on the loop thread after each drain
        self._pending: deque[Result] = deque()
        self._scheduled = False
        self._polling = False
        self._timer: Any = None  # the pending saturation timer, while polling
        self._rest: Any = None  # the next turn's settling of what a turn left
        self._most = MOST_PER_TURN if later is not None else _ALL
        self._schedule = schedule
        self._settle = settle
        self._later = later
        self._soon = soon  # the next turn's settling, where the loop offers it
        self._busy = busy if later is not None else None
        self.wakeups = 0  # drains a worker's signal caused
        self.polls = 0    # drains the saturation timer caused
        self.settled = 0
        self.largest_batch = 0

    def __call__(self, future: Any, ok: bool, value: Any) -> None:
        """Queue one result (worker thread)."""
        self._pending.append((future, ok, value))
        if not self._scheduled:
            self._signal()

    def many(self, results: list[Result]) -> None:
        """Queue ``(future, ok, value)`` results at once (a unit's, worker thread)."""
        self._pending.extend(results)
        if not self._scheduled:
            self._signal()

    def undelivered(self) -> int:
        """Results queued and not settled yet: they wait for the loop thread (any thread)."""
        return len(self._pending)

    def nudge(self) -> None:
        """Have ``after()`` run soon though no result came (worker thread): a worker
        skipped a call whose caller gave up, and parked calls may now fit."""
        if self._after is not None and not self._scheduled:
            self._signal()

    def _signal(self) -> None:
        self._scheduled = True
        try:
            self._schedule(self._drain)
        except RuntimeError:  # the loop is closed: nobody is left to deliver to
            self._scheduled = False

    def _drain(self) -> None:
        """Settle a turn's share of the queued results (loop thread, on a worker's signal)."""
        self.wakeups += 1
        if self._polling:  # a signal sent just before polling began: the timer owns the flag
            self._settle_turn(self._most)
            return
        self._scheduled = False
        self._settle_turn(self._most)
        if self._busy is not None and self._busy():
            self._polling = self._scheduled = True  # workers stop signalling from here
            self._timer = self._later(POLL_INTERVAL, self._poll)  # type: ignore[misc]

    def _poll(self) -> None:
        """Settle a turn's share of the queued results (loop thread, on the saturation
        timer). A tick that finds the pool no longer saturated ends polling; so does one
        that finds nothing to settle: the pool is busy with calls
        that are not coming back soon (cancelled ones, long statements)."""
        self.polls += 1
        self._timer = None
        if self._pending and self._busy():  # type: ignore[misc]
            self._settle_turn(self._most)
            self._timer = self._later(POLL_INTERVAL, self._poll)  # type: ignore[misc]
        else:  # polling ends: the next result signals again
            self._polling = self._scheduled = False
            self._settle_turn(self._most)

    def _settle_each(self, most: int) -> int:
        """Settle queued results, ``most`` at most; how many there were (a front-end's
        subclass may settle its own futures here without a call each)."""
        popleft, settle = self._pending.popleft, self._settle
        count = 0
        while count < most:
            try:
                future, ok, value = popleft()
            except IndexError:
                return count
            settle(future, ok, value)
            count += 1
        return count

    def stop(self) -> None:
        """End polling and settle whatever is queued, all of it (loop thread): after the
        workers exited, so that no timer outlives the pool."""
        for timer in (self._timer, self._rest):
            if timer is not None:
                timer.cancel()
        self._timer = self._rest = None
        self._polling = self._scheduled = False
        self._settle_turn(_ALL)

    def restart(self) -> None:
        """The loop changed (see ``Handback.restart``): forget the old loop's drain
        and timers, which never run, and drain what waits on the new loop."""
        self._timer = self._rest = None
        self._polling = self._scheduled = False
        self._settle_turn(_ALL)

    def _settle_turn(self, most: int) -> None:
        """Settle ``most`` queued results at most, and have the loop's next turn settle
        the next share of what is left (loop thread). The next share is asked for
        after ``after()``, so that a caller it let in (``wait_for_room``) runs before
        that share is settled, as it would before a timer's."""
        count = self._settle_each(most)
        self.settled += count
        if count > self.largest_batch:
            self.largest_batch = count
        if self._after is not None:
            self._after()
        if self._pending and self._rest is None and self._later is not None:
            soon = self._soon
            self._rest = self._later(0, self._next_turn) if soon is None \
                else soon(self._next_turn)

    def _next_turn(self) -> None:
        """The loop's next turn: settle the next share (loop thread)."""
        self._rest = None
        self._settle_turn(self._most)


class DirectHandback:
    """Settle each result at once, in the worker thread (blocking front-ends)."""

    def __init__(self, settle: Settle, after: Optional[Callable[[], None]] = None) -> None:
        self.wakeups: Optional[int] = None  # no loop thread: never woken, never polled
        self.polls: Optional[int] = None
        self.largest_batch: Optional[int] = None
        self._settle = settle
        self._after = after
        self.settled = 0

    def __call__(self, future: Any, ok: bool, value: Any) -> None:
        self._settle(future, ok, value)
        self.settled += 1  # approximate (stats()): worker threads count without a lock
        if self._after is not None:
            self._after()

    def many(self, results: list[Result]) -> None:
        for future, ok, value in results:
            self(future, ok, value)

    def undelivered(self) -> int:
        """Each result is settled as it comes: none ever waits."""
        return 0

    def nudge(self) -> None:
        if self._after is not None:
            self._after()

    def stop(self) -> None:
        """Nothing is ever pending here."""

    def restart(self) -> None:
        """Nothing is ever pending here (a method of its own, not an alias of ``stop``:
        a compiled class body holds no aliases)."""


class FutureHandback(BatchedHandback):
    """The hand-back of asyncio futures: a drain settles each one in its own loop,
    as ``adb.asyncio.AsyncioFrontEnd.settle`` would, without a call per result."""

    def _settle_each(self, most: int) -> int:
        popleft = self._pending.popleft
        count = 0
        while count < most:
            try:
                future, ok, value = popleft()
            except IndexError:
                return count
            count += 1
            if not future.done():  # cancelled or timed out meanwhile
                try:
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
                except RuntimeError:  # its loop is closed: nobody is left to read it
                    pass
        return count


class WaiterHandback(DirectHandback):
    """The hand-back of Waiters: each outcome is put in its Waiter at once (worker
    thread), as ``adb.sync.SyncFrontEnd.settle`` would, without a call per result."""

    def __call__(self, future: Any, ok: bool, value: Any) -> None:
        future.put((ok, value))
        self.settled += 1  # approximate (stats()): worker threads count without a lock
        if self._after is not None:
            self._after()
