"""One test body, run in each front-end's own idiom.

A body is a generator ``body(tx, *args)`` that yields what it calls on ``tx``
(a future, a Deferred, or on adb.sync the value already there) and gets the
value back, or its exception thrown in. ``as_fn`` turns it into the function
each front-end's ``runTransaction`` takes: a coroutine function on asyncio and
Tornado, a function returning a Deferred on Twisted, a plain blocking function on
adb.sync. ``Meeting`` makes two concurrent transactions wait for each other in
the same idiom (an asyncio event, a Deferred, a threading barrier).
"""

import asyncio
import threading

import trio
from twisted.internet.defer import Deferred

import adb.sync
import adb.trio
import adb.twisted
from adb.steps import run_async

from .conftest import ev


def front_of(db):
    if isinstance(db, adb.sync.Database):
        return "sync"
    if isinstance(db, adb.twisted.Database):
        return "twisted"
    if isinstance(db, adb.trio.Database):
        return "trio"
    return "asyncio"


def as_fn(db, body):
    """``body`` as the function ``db.runTransaction`` takes on its front-end."""
    front = front_of(db)
    if front == "sync":
        def blocking(tx, *args, **kwargs):
            return _drive_blocking(body(tx, *args, **kwargs))
        return blocking

    async def coroutine(tx, *args, **kwargs):
        return await run_async(body(tx, *args, **kwargs))

    if front == "twisted":
        return lambda tx, *args, **kwargs: Deferred.fromCoroutine(coroutine(tx, *args, **kwargs))
    return coroutine


def _drive_blocking(steps):
    value, error = None, None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        if isinstance(step, Meeting):
            step = step.arrive()
        value, error = step, None


async def run_transaction(db, fn, *args, **kwargs):
    """``db.runTransaction(...)``'s value: awaited, or on adb.sync run in a thread
    (so two can run at once and the test's loop stays free)."""
    if front_of(db) == "sync":
        return await asyncio.to_thread(db.runTransaction, fn, *args, **kwargs)
    return await ev(db.runTransaction(fn, *args, **kwargs))


class Meeting:
    """``yield meeting.wait()`` in two bodies: each goes on once both are there.
    Only the first ``rounds`` meetings wait (a retried attempt runs alone)."""

    def __init__(self, db, parties=2, rounds=1, timeout=5.0):
        self.front = front_of(db)
        self.parties, self.rounds, self.timeout = parties, rounds, timeout
        self.arrived = 0
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(parties, timeout=timeout)
        self.waiters = []

    def wait(self):
        with self.lock:
            self.arrived += 1
            arrived = self.arrived
        if arrived > self.parties * self.rounds:
            return _done(self.front)
        if self.front == "sync":
            return self
        if self.front == "trio":  # in a task of the run
            met = trio.Event()
            self.waiters.append(met)
            if len(self.waiters) % self.parties == 0:
                for waiter in self.waiters[-self.parties:]:
                    waiter.set()
            return met.wait()
        done = Deferred() if self.front == "twisted" else asyncio.get_running_loop().create_future()
        self.waiters.append(done)
        if len(self.waiters) % self.parties == 0:
            for waiter in self.waiters[-self.parties:]:
                (waiter.callback if self.front == "twisted" else waiter.set_result)(None)
        return done

    def arrive(self):
        """adb.sync: block at the barrier (a broken one means a party never came)."""
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            pass


def _done(front):
    if front == "sync":
        return None
    if front == "trio":
        return trio.lowlevel.checkpoint()
    if front == "twisted":
        done: Deferred[None] = Deferred()
        done.callback(None)
        return done
    future = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def hold_workers(db, count, seconds=30.0):
    """Occupy ``count`` workers of ``db`` (any front-end) until the returned gate is set,
    so that calls made meanwhile are certain to wait in the queue: ``(gate, held)``,
    ``held`` being the interactions' futures or Deferreds, done once the gate opens.
    A caller queuing calls releases the GIL to the workers as it goes, so without a
    gate a loaded machine's workers may take calls as fast as they are queued."""
    gate = threading.Event()
    return gate, [db.runInteraction(lambda cursor: gate.wait(seconds)) for _ in range(count)]
