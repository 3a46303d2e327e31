"""Where shared jobs wait for a worker: the queue, the idle workers, the pinned ones.

``Dispatch`` is built first, before the pool, the hand-back and admission that
all read it, so the core wires them in one direction: a caller submits a job
here, a worker takes it from here, and the hand-back asks here whether every
worker is busy (``saturated``).

A caller hands a job to the most recently idle worker through that worker's
inbox (LIFO, so a hot thread serves sequential calls) or, with none idle, to
the shared ``queue.SimpleQueue``. A worker pinned by a transaction reads only
that transaction's queue, and is listed in ``pinned`` meanwhile.
"""

from __future__ import annotations

import enum
import os
import time
from queue import SimpleQueue
from typing import Callable, Final, Optional, Protocol, Union

from .call import Job


class Marker(enum.Enum):
    """A sentinel in a job queue, in place of a job."""

    #: shared-queue sentinel: the worker that takes it exits
    STOP = "stop"
    #: inbox sentinel: look at the shared queue again
    WAKE = "wake"


STOP: Final = Marker.STOP
WAKE: Final = Marker.WAKE

#: what a job queue holds
Queued = Union[Job, Marker]


class Idle(Protocol):
    """A worker as the dispatch sees it while it sleeps: an inbox to hand jobs to."""

    inbox: SimpleQueue[Queued]


#: a caller that queues this many calls behind busy workers releases the GIL once
YIELD_EVERY = 64
#: a GIL release that lets a waiting thread in: ``sched_yield`` (about 1 us here;
#: ``time.sleep(0)`` costs 60 us, the kernel's timer slack), else ``sleep(0)``
_release_gil: Callable[[], None] = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


class Dispatch:
    """The shared job queue of one pool, its stack of idle workers, its pinned workers.

    ``late(job)``, if set, is called after a job was queued once nobody will run
    it (the pool's workers have all exited): a call that raced the close.
    """

    __slots__ = ("queue", "idle", "pinned", "late", "until_yield")

    def __init__(self) -> None:
        self.queue: SimpleQueue[Queued] = SimpleQueue()
        self.idle: list[Idle] = []  # waiting for a job, most recently idle last
        self.pinned: set[int] = set()  # indices of workers pinned by a transaction
        self.late: Optional[Callable[[], None]] = None
        self.until_yield = YIELD_EVERY

    def submit(self, job: Job) -> None:
        """Hand ``job`` to the most recently idle worker, or queue it for the next free one.

        Under a burst no worker is idle: the length test spares that case an
        IndexError per call (0.3-0.4 us of the loop's 2.5 us per submitted call).

        A job queued because no worker was idle is followed by a second look at the
        idle stack (``wake_one``): a worker that registered between the first look
        and the ``put``, and looked at the queue before the ``put``, would otherwise
        sleep on its inbox with the job stranded in the queue (the classic lost
        wake-up; the worker registers, then looks at the queue, so one of the two
        sides always sees the other)."""
        if self.idle:
            try:
                worker = self.idle.pop()
            except IndexError:  # the last idle worker took a job meanwhile
                pass
            else:
                worker.inbox.put(job)
                return
        self.queue.put(job)
        if self.idle:
            self.wake_one()
        if self.late is not None:  # a call that raced close from another thread
            self.late()
        left = self.until_yield - 1
        if left > 0:
            self.until_yield = left
        else:  # <= 0: two callers that both read 1 must not leave it below 0 for good
            self.yield_to_workers()

    def submit_idle(self, job: Job) -> bool:
        """Hand ``job`` to the most recently idle worker; False (and nothing queued)
        when none is idle."""
        try:
            worker = self.idle.pop()
        except IndexError:
            return False
        worker.inbox.put(job)
        return True

    def yield_to_workers(self) -> None:
        """Release the GIL for a moment. A caller submitting a burst never blocks, so
        without this the busy workers, each needing the GIL only briefly to take
        its next job (or gather its next unit) before it waits on the server again,
        get it only when the interpreter's switch interval (5 ms) takes it from the
        caller: the first half second of a 100,000-call burst then ran at a fifth
        (one call per statement) to two thirds (``autobatch``) of the round's rate
        (docs/performance.md). Callers in several threads share the countdown
        without a lock; a lost decrement only moves the next release by a call, and
        ``submit`` releases at any count down to 0 or below, so no interleaving
        leaves the countdown past 0 for good."""
        self.until_yield = YIELD_EVERY
        _release_gil()

    def queued(self) -> int:
        return self.queue.qsize()

    def saturated(self) -> bool:
        """True while every worker is busy with calls that need nothing back from the
        caller before the next one, and calls wait for a worker. A worker pinned by a
        transaction waits for its caller's next statement: it needs its results at once."""
        return not self.idle and self.queue.qsize() > 0 and not self.pinned

    def add_idle(self, worker: Idle) -> None:
        """``worker`` is about to sleep on its inbox (its thread)."""
        self.idle.append(worker)

    def add_cold(self, worker: Idle) -> None:
        """``worker``, new to the pool, is about to sleep on its inbox (its thread): at
        the bottom of the stack, below the workers that have served, so a worker that
        finishes connecting late never takes a caller's next call from the one that
        served its last (the drop-in's sequential calls, ``Worker.go_idle``)."""
        self.idle.insert(0, worker)

    def remove_idle(self, worker: Idle) -> None:
        """``worker`` woke with a job of its own finding (its thread); a caller that
        took it meanwhile has put a job in its inbox, which waits there."""
        try:
            self.idle.remove(worker)
        except ValueError:
            pass

    def pin(self, index: int) -> None:
        """Worker ``index`` began a transaction: it takes no shared work until ``unpin``."""
        self.pinned.add(index)

    def unpin(self, index: int) -> None:
        self.pinned.discard(index)

    def wake_one(self) -> None:
        """Send the most recently idle worker to look at the shared queue: a job was
        queued while it registered. If it took the job already, the WAKE costs it one
        empty turn of its loop."""
        try:
            self.idle.pop().inbox.put(WAKE)
        except IndexError:  # it woke by itself meanwhile
            pass

    def wake_idle(self) -> None:
        """Send every sleeping worker to look at the shared queue (for its STOP)."""
        while self.idle:
            try:
                self.idle.pop().inbox.put(WAKE)
            except IndexError:
                break


__all__ = ["Dispatch", "Idle", "Marker", "Queued", "STOP", "WAKE"]
