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

SLOW = {  # ~0.1 s, returns [(1,)]
    "postgresql": "select 1 from pg_sleep(0.1)",
    "mysql": "select sleep(0.1) + 1",
    "sqlite": "with recursive c(x) as (select 1 union all select x + 1 from c "
              "where x < 200000) select min(x) from c",
}
CALLS = 8
BOUND = 20  # seconds within which everything must be settled: never a hang


class Calls:
    """Start calls on any front-end and collect their outcomes: a blocking
    front-end's calls each run in a thread of their own."""

    def __init__(self, db):
        self.db = db
        self.threads = concurrent.futures.ThreadPoolExecutor(CALLS + 4) if blocking(db) else None
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


async def parked_setup(front, target):
    """pool_size=2 with one worker pinned by a transaction, then CALLS slow queries:
    one runs, two queue (max_queued=2), the rest are parked. One call at a time: a
    pipeline would take queued calls in flight, so how many park would be timing's."""
    db = FRONTS[front](target.url, pool_size=2, max_queued=2, pipeline=False)
    tx = await ev(db.beginTransaction())
    calls = Calls(db)
    for _ in range(CALLS):
        calls.start("runQuery", SLOW[target.kind])
    await until(lambda: db.stats()["parked"] >= CALLS - 3, "calls to be parked")
    return db, tx, calls


async def test_close_runs_parked_calls_and_fails_room_waiters(front, target):
    db, tx, calls = await parked_setup(front, target)
    room = Calls(db)
    room.start("wait_for_room")
    room.start("wait_for_room")
    await until(lambda: db.stats()["waiting_for_room"] == 2, "room waiters")

    await asyncio.wait_for(ev(db.close()), BOUND)

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
    db, tx, calls = await parked_setup(front, target)
    await asyncio.wait_for(ev(db.close(timeout=0.02)), BOUND)
    outcomes = await calls.outcomes()
    ran = [o for o in outcomes if o == [(1,)]]
    failed = [o for o in outcomes if isinstance(o, PoolClosed)]
    assert len(ran) + len(failed) == CALLS, outcomes
    assert ran and failed  # the running call finished; parked ones were cut off
    assert "closed before this call could run" in str(failed[0])
    assert tx.state is adb.TxState.FAILED


async def test_close_while_other_threads_keep_calling(target):
    """Blocking callers racing close from other threads: each call returns or fails
    with PoolClosed; none is stranded behind the workers' STOP markers."""
    db = adb.sync.Database(target.url, pool_size=2, max_queued=4)
    outcomes = {"ok": 0, "closed": 0}
    lock = threading.Lock()
    stop = threading.Event()

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
    time.sleep(0.2)
    db.close()
    stop.set()
    for thread in threads:
        thread.join(BOUND)
    assert not any(thread.is_alive() for thread in threads), "a caller hangs after close"
    assert outcomes["ok"] > 0 and outcomes["closed"] > 0, outcomes


async def closed_under_load(target, pipeline):
    """Close a sync Database of 4 workers after 0.3 s while 24 slow calls are queued
    or running: (seconds close took, each call's outcome)."""
    db = adb.sync.Database(target.url, pool_size=4, pipeline=pipeline)
    calls = Calls(db)
    for _ in range(24):
        calls.start("runQuery", SLOW[target.kind])
    await until(lambda: db.stats()["busy"] == 4, "every worker busy")
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    await loop.run_in_executor(None, db.close, 0.3)
    return time.monotonic() - start, await calls.outcomes()


async def test_sync_close_timeout_is_one_overall_limit(target):
    """adb.sync's close(timeout) waits ``timeout`` once, not once per worker; one call
    at a time, the calls still queued then fail with PoolClosed."""
    took, outcomes = await closed_under_load(target, pipeline=False)
    assert any(isinstance(o, PoolClosed) for o in outcomes), [type(o).__name__ for o in outcomes]
    # 0.3 s, plus the calls then running (~0.1 s each, but slower on a loaded machine);
    # a wait per worker would be 4 x 0.3 = 1.2 s at least
    assert took < 4 * 0.3, took


async def test_close_timeout_lets_a_sent_pipeline_finish(mysql_url):
    """Pipelined, the calls a worker took were sent before the close: they are in
    flight, like a running call, and finish; the rest fail with PoolClosed. Each
    call settles once, with its rows or PoolClosed, and close waits ``timeout`` plus
    at most the pipelines in flight (24 x 0.1 s over 4 workers)."""
    took, outcomes = await closed_under_load(Target("mysql", mysql_url), pipeline=True)
    assert all(o == [(1,)] or isinstance(o, PoolClosed) for o in outcomes), outcomes
    assert len(outcomes) == 24
    assert took < 0.3 + 24 * 0.1 / 4 + 1.0, took


async def test_wait_for_room_blocks_until_room_then_returns(front, target):
    """A room waiter wakes once the parked calls are in and the queue has room."""
    db, tx, calls = await parked_setup(front, target)
    room = Calls(db)
    room.start("wait_for_room")
    await until(lambda: db.stats()["waiting_for_room"] == 1, "a room waiter")
    assert await room.outcomes() == [None]  # woke as the calls drained
    assert db.stats()["parked"] == 0
    assert await calls.outcomes() == [[(1,)]] * CALLS
    await ev(db.rollbackTransaction(tx))
    await ev(db.close())
