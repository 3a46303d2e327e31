"""``wait_for_room()`` bounds what a caller has in flight, delivered or not.

A caller that never yields to its loop but in ``wait_for_room()`` finds room at
once while the queue is drained; workers faster than it then hand back results that
no drain delivers until it yields. ``wait_for_room()`` waits while ``max_queued``
of those wait too (``adb.admission``): without that, they piled up without bound
(50,000 after 50,000 calls with ``max_queued=1000`` on the free-threaded build,
where four workers outran the caller). ``tests/contract/test_handback.py`` checks
the same on asyncio alone, by holding the loop thread.

The caller here is made slower than the workers on purpose: before each call it
waits, in its own thread and without yielding to its loop, until the workers have
taken every queued call.
"""

import asyncio
import time

import pytest

from adb.handback import MOST_PER_TURN

from ..conftest import FRONTS, ev

LIMIT = 20
POOL = 2
CALLS = 600
BOUND = 30  # seconds: never a hang


def when_done(call, done):
    """Count ``call``'s settlement in ``done`` (a future or a Deferred)."""
    if hasattr(call, "addBoth"):
        call.addBoth(lambda result: done.append(1))
    else:
        call.add_done_callback(lambda _: done.append(1))


def drained(db):
    """Wait, blocking the loop, until the workers have taken every queued call."""
    deadline = time.monotonic() + BOUND
    while db.stats()["queued"]:
        assert time.monotonic() < deadline, "the workers never took the queued calls"
        time.sleep(0.0002)


@pytest.mark.parametrize("front", ["asyncio", "tornado", "twisted"])
async def test_undelivered_results_take_room(front, tmp_path):
    db = FRONTS[front](f"sqlite:///{tmp_path}/backlog.db", pool_size=POOL, max_queued=LIMIT)
    done: list[int] = []
    most = 0
    try:
        for made in range(1, CALLS + 1):
            await ev(db.wait_for_room())
            drained(db)
            when_done(db.runQuery("select 1"), done)
            most = max(most, made - len(done))
        deadline = time.monotonic() + BOUND
        while len(done) < CALLS:  # yield to the loop until every result is delivered
            assert time.monotonic() < deadline, f"{CALLS - len(done)} calls never settled"
            await asyncio.sleep(0.001)
    finally:
        await ev(db.close())
    # the queue is drained before each call, so what is in flight is undelivered
    # (fewer than LIMIT when a waiter is let through), the calls that finished while
    # the caller waited for the workers to take the queue (POOL at most), the one call
    # just made, POOL running, and one turn's share of results settled in the turn
    # under way but not yet counted above (MOST_PER_TURN; on Twisted a Deferred
    # counts as it is settled)
    bound = LIMIT + 2 * POOL + MOST_PER_TURN
    assert most <= bound, f"{most} calls in flight with max_queued={LIMIT}"
