"""close() settles every call it accepted, on every front-end x every database:
calls queued, calls parked by ``max_queued`` (``on_full="wait"``), callers
waiting in ``wait_for_room()``, and callers racing the close from other threads.

The hang these guard against: close used to queue the workers' STOP markers and
then admit parked calls *behind* them, where no worker was left to run them.
"""

import asyncio
import concurrent.futures
import threading
import time

import pytest

import adb
from adb.errors import PoolClosed

from ..conftest import FRONTS, Target, blocking, ev
from ..gates import Gate

CALLS = 8
BOUND = 20  # seconds within which everything must be settled: never a hang


class Calls:
    """Start calls on any front-end and collect their outcomes: a blocking
    front-end's calls each run in a thread of their own (``threads`` of them)."""

    def __init__(self, db, threads=CALLS + 4):
        self.db = db
        self.threads = concurrent.futures.ThreadPoolExecutor(threads) if blocking(db) else None
        self.pending = []

    def start(self, method, *args, **kwargs):
        call = getattr(self.db, method)
        if self.threads is not None:
            self.pending.append(asyncio.wrap_future(self.threads.submit(call, *args, **kwargs)))
        else:
            self.pending.append(ev(call(*args, **kwargs)))

    async def outcomes(self):
        """Each call's value or exception, in the order they were started."""
        try:
            return await asyncio.wait_for(
                asyncio.gather(*self.pending, return_exceptions=True), BOUND)
        finally:
            if self.threads is not None:
                self.threads.shutdown(wait=False)


async def until(condition, what):
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def parked_setup(front, target, gate):
    """pool_size=2 with one worker pinned by a transaction, then CALLS calls held
    by ``gate``: one runs (blocked at the gate), up to two queue (max_queued=2), the
    rest are parked (five or six: a parked call moves into the queue when a call
    finishes, not when a worker takes one), and stay so until the gate opens. One
    call at a time: a pipeline would take queued calls in flight, so how many park
    would be timing's."""
    db = FRONTS[front](target.url, pool_size=2, max_queued=2, pipeline=False, **gate.options)
    tx = await ev(db.beginTransaction())
    calls = Calls(db)
    for _ in range(CALLS):
        calls.start("runQuery", gate.sql)
    await until(lambda: waiting(db) == (1, CALLS - 1), "calls to be parked")
    assert db.stats()["parked"] >= CALLS - 3
    return db, tx, calls


def waiting(db):
    """(calls running, calls queued or parked)."""
    stats = db.stats()
    return stats["busy"], stats["queued"] + stats["parked"]


def stats_are(db, **expected):
    """A condition: ``db`` is closing and its stats() have the ``expected`` values."""
    def condition():
        stats = db.stats()
        return db.closed and all(stats[key] == value for key, value in expected.items())
    return condition


def none_queued(db):
    """A condition: ``db`` is closing and no call is left queued. While it closes,
    ``stats()["queued"]`` counts the STOP that ends each worker too: at most
    ``pool_size`` is none."""
    return lambda: db.closed and db.stats()["queued"] <= db.stats()["pool_size"] \
        and db.stats()["parked"] == 0


async def test_close_runs_parked_calls_and_fails_room_waiters(front, target):
    with Gate(target) as gate:
        db, tx, calls = await parked_setup(front, target, gate)
        room = Calls(db)
        room.start("wait_for_room")
        room.start("wait_for_room")
        await until(lambda: db.stats()["waiting_for_room"] == 2, "room waiters")
        # the gated calls run once the close has queued the parked ones and failed
        # the room waiters: no call can finish and make room before that
        opener = gate.open_when(stats_are(db, parked=0, waiting_for_room=0),
                                "the close to take the parked calls and room waiters")

        await asyncio.wait_for(ev(db.close()), BOUND)
        opener.check()

    assert await calls.outcomes() == [[(1,)]] * CALLS  # accepted, so run
    waiters = await room.outcomes()
    assert all(isinstance(w, PoolClosed) for w in waiters), waiters
    assert "waited for room" in str(waiters[0])
    assert tx.state is adb.TxState.FAILED
    stats = db.stats()
    assert (stats["parked"], stats["waiting_for_room"], stats["queued"]) == (0, 0, 0)
    assert not any(w.thread.is_alive() for w in db._engine.pool.workers)
    with pytest.raises(PoolClosed):
        db.wait_for_room()


async def test_close_timeout_fails_what_is_still_queued(front, target):
    """The gated calls cannot finish before the close's timeout: the queued ones
    are certain to be there when it ends."""
    with Gate(target) as gate:
        db, tx, calls = await parked_setup(front, target, gate)
        opener = gate.open_when(none_queued(db), "the close's timeout to fail the queued calls")
        await asyncio.wait_for(ev(db.close(timeout=0.02)), BOUND)
        opener.check()
    outcomes = await calls.outcomes()
    ran = [o for o in outcomes if o == [(1,)]]
    failed = [o for o in outcomes if isinstance(o, PoolClosed)]
    assert len(ran) + len(failed) == CALLS, outcomes
    # the running call finished (and the one the freed worker of the rolled-back
    # transaction may have taken); the queued and parked ones were cut off
    assert 1 <= len(ran) <= 2 and failed, outcomes
    assert "closed before this call could run" in str(failed[0])
    assert tx.state is adb.TxState.FAILED


async def test_close_while_other_threads_keep_calling(target):
    """Blocking callers racing close from other threads: each call returns or fails
    with PoolClosed; none is stranded behind the workers' STOP markers. The close
    comes once calls have been served (counted), and every caller goes on calling
    until it meets PoolClosed."""
    db = adb.sync.Database(target.url, pool_size=2, max_queued=4)
    outcomes = {"ok": 0, "closed": 0}
    lock = threading.Lock()
    stop = threading.Event()  # only if the test fails: no caller loops on

    def caller():
        while not stop.is_set():
            try:
                db.runQuery("select 1")
                key = "ok"
            except PoolClosed:
                key = "closed"
            with lock:
                outcomes[key] += 1
            if key == "closed":
                return

    threads = [threading.Thread(target=caller, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        await until(lambda: outcomes["ok"] >= len(threads), "calls served before the close")
        db.close()
        for thread in threads:
            thread.join(BOUND)
        assert not any(thread.is_alive() for thread in threads), "a caller hangs after close"
    finally:
        stop.set()
    assert outcomes["ok"] >= len(threads) and outcomes["closed"] == len(threads), outcomes


async def test_sync_close_timeout_is_one_overall_limit(target):
    """adb.sync's close(timeout) waits ``timeout`` once, not once per worker; one call
    at a time, the calls still queued then fail with PoolClosed. 24 gated calls: four
    run (held at the gate), twenty queue; the gate opens once the timeout has failed
    those, so close then waits for the running ones."""
    timeout = 0.5
    with Gate(target) as gate:
        db = adb.sync.Database(target.url, pool_size=4, pipeline=False, **gate.options)
        calls = Calls(db, threads=24)
        for _ in range(24):
            calls.start("runQuery", gate.sql)
        await until(lambda: waiting(db) == (4, 20), "four calls running, twenty queued")
        opener = gate.open_when(none_queued(db), "the close's timeout to fail the queued calls")
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        await loop.run_in_executor(None, db.close, timeout)
        took = time.monotonic() - start
        opener.check()
    outcomes = await calls.outcomes()
    assert outcomes.count([(1,)]) == 4, outcomes  # the four running: waited for
    assert all(isinstance(o, PoolClosed) for o in outcomes if o != [(1,)]), outcomes
    # 0.5 s, plus the gated calls finishing once the gate opens; a wait per worker
    # would be 4 x 0.5 = 2 s at least
    assert took < 4 * timeout, took


async def test_close_timeout_lets_a_sent_pipeline_finish(mysql_url):
    """Pipelined, the calls a worker took were sent before the close: they are in
    flight, like a running call, and finish; the rest fail with PoolClosed. Each
    call settles once, with its rows or PoolClosed, and close waits ``timeout`` plus
    the pipelines in flight. 80 gated calls on 4 workers that send up to 16 each:
    at least 16 are still queued when the timeout ends, and the gate opens after
    that, so the pipelines are still in flight then."""
    timeout = 0.5
    target = Target("mysql", mysql_url)
    with Gate(target) as gate:
        db = adb.Database(mysql_url, pool_size=4, pipeline=True)
        pending = [db.runQuery(gate.sql) for _ in range(80)]
        await until(lambda: db.stats()["busy"] == 4, "every worker busy")
        opener = gate.open_when(none_queued(db), "the close's timeout to fail the queued calls")
        start = time.monotonic()
        await asyncio.wait_for(db.close(timeout=timeout), BOUND)
        took = time.monotonic() - start
        opener.check()
    outcomes = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), BOUND)
    ran = outcomes.count([(1,)])
    assert ran + sum(isinstance(o, PoolClosed) for o in outcomes) == 80, outcomes
    assert 4 < ran <= 4 * 16, ran  # more than one call a worker: the pipelines finished
    assert took < 4 * timeout, took


async def test_wait_for_room_blocks_until_room_then_returns(front, target):
    """A room waiter wakes once the parked calls are in and the queue has room."""
    with Gate(target) as gate:
        db, tx, calls = await parked_setup(front, target, gate)
        room = Calls(db)
        room.start("wait_for_room")
        await until(lambda: db.stats()["waiting_for_room"] == 1, "a room waiter")
        assert waiting(db) == (1, CALLS - 1)  # nothing could drain meanwhile
        gate.open()
        assert await room.outcomes() == [None]  # woke as the calls drained
    assert db.stats()["parked"] == 0
    assert await calls.outcomes() == [[(1,)]] * CALLS
    await ev(db.rollbackTransaction(tx))
    await ev(db.close())
