"""Batched hand-back: one loop wake-up per batch of results, none lost."""

import asyncio
import threading

import pytest

import adb
from adb.handback import MOST_PER_TURN, POLL_INTERVAL, BatchedHandback

from ..conftest import Target
from ..gates import Gate
from ..idioms import hold_workers


class Recorder:
    def __init__(self):
        self.scheduled = []
        self.settled = []

    def schedule(self, fn):
        self.scheduled.append(fn)

    def settle(self, future, ok, value):
        self.settled.append((future, ok, value))


def test_one_wakeup_until_the_loop_drains():
    rec = Recorder()
    handback = BatchedHandback(rec.schedule, rec.settle)
    def hand_back(n: int) -> None:
        for i in range(500):
            handback(n, True, i)
    threads = [threading.Thread(target=hand_back, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(rec.scheduled) == 1  # 4,000 results, one wake-up scheduled
    rec.scheduled.pop()()
    assert len(rec.settled) == 4000
    assert handback.wakeups == 1 and handback.largest_batch == 4000
    for n in range(8):  # each worker's results stay in its order
        assert [v for f, ok, v in rec.settled if f == n] == list(range(500))
    handback("next", False, ValueError("x"))
    assert len(rec.scheduled) == 1  # the next result after a drain schedules again


def test_closed_loop_does_not_break_the_worker():
    def closed(fn):
        raise RuntimeError("Event loop is closed")
    handback = BatchedHandback(closed, lambda *a: None)
    handback(1, True, None)
    handback(2, True, None)  # retried, still no exception


async def test_burst_is_batched_on_a_real_loop(tmp_path):
    db = adb.Database(f"sqlite:///{tmp_path}/b.db", pool_size=4)
    await db.runOperation("create table t (k int primary key)")
    before = db.stats()["wakeups"]
    n = 10_000
    counts = await asyncio.gather(*(db.runOperation("insert into t values (?)", (i,))
                                    for i in range(n)))
    stats = db.stats()
    assert counts == [1] * n
    wakeups = stats["wakeups"] - before
    assert 0 < wakeups < n * 0.9, wakeups  # one per call would be n
    assert stats["largest_batch"] > 1
    assert (await db.runQuery("select count(*) from t")) == [(n,)]
    await db.close()


async def test_wait_for_room_waits_for_the_loop_to_deliver_what_the_workers_did(tmp_path):
    """A producer that awaits only ``wait_for_room()`` gives the loop a turn only when
    that waits. With workers as fast as the producer the queue never filled, so it
    never waited, and results nobody delivered piled up (300,000 ``select 1`` on
    SQLite: RSS +120 MB, against the 1,000 queued calls ``max_queued`` allows). Here
    the loop thread is held while the workers run every call: the queue is empty, and
    ``wait_for_room()`` still waits, until the loop has delivered the results."""
    import time
    db = adb.Database(f"sqlite:///{tmp_path}/room.db", pool_size=2, max_queued=10)
    await db.runQuery("select 1")
    calls = [db.runQuery("select 1") for _ in range(10)]
    deadline = time.monotonic() + 30
    while db._engine.handback.undelivered() < 10:  # the loop thread held: none delivered
        assert time.monotonic() < deadline, db.stats()
        time.sleep(0.001)
    assert db.stats()["queued"] == 0  # room in the queue, but ten results wait
    room = db.wait_for_room()
    assert not room.done()
    await asyncio.wait_for(room, 10)
    # room means fewer than max_queued results wait: a turn of the loop delivered some
    assert db._engine.handback.undelivered() < 10 and any(call.done() for call in calls)
    assert await asyncio.gather(*calls) == [[(1,)]] * 10
    await db.close()


class Timer(Recorder):
    """A loop double with a timer: ``later`` records, the test fires."""

    def __init__(self):
        super().__init__()
        self.timers = []
        self.busy = True

    def later(self, seconds, fn):
        self.timers.append((seconds, fn))
        return Cancellable(self.timers, (seconds, fn))


class Cancellable:
    def __init__(self, timers, entry):
        self.timers, self.entry = timers, entry

    def cancel(self):
        self.timers.remove(self.entry)


def next_turns(rec: Timer) -> int:
    """Run the hand-back's next turns (its ``later(0, ...)``) until none is left; how
    many there were. Each settles one turn's share at most."""
    turns = 0
    while any(seconds == 0 for seconds, fn in rec.timers):
        entry = next(entry for entry in rec.timers if entry[0] == 0)
        rec.timers.remove(entry)
        before = len(rec.settled)
        entry[1]()
        assert 0 < len(rec.settled) - before <= MOST_PER_TURN
        turns += 1
    return turns


def test_saturated_pool_is_drained_by_timer_not_by_signals():
    rec = Timer()
    handback = BatchedHandback(rec.schedule, rec.settle, later=rec.later, busy=lambda: rec.busy)
    handback("a", True, 1)
    rec.scheduled.pop()()  # the signalled drain finds the pool busy: polling starts
    assert [f for f, ok, v in rec.settled] == ["a"] and len(rec.timers) == 1
    for i in range(100):
        handback(i, True, i)
    assert rec.scheduled == []  # no worker signals while polling
    rec.timers.pop()[1]()  # one tick: one turn's share, the rest on the loop's next turns
    assert len(rec.settled) == 1 + MOST_PER_TURN and handback.polls == 1
    assert sorted(seconds for seconds, fn in rec.timers) == [0, POLL_INTERVAL]
    assert next_turns(rec) == -(-(100 - MOST_PER_TURN) // MOST_PER_TURN)
    assert len(rec.settled) == 101 and [seconds for seconds, fn in rec.timers] == [POLL_INTERVAL]
    rec.busy = False
    handback("b", True, 2)
    rec.timers.pop()[1]()  # not busy any more: last timed drain, signalling resumes
    assert rec.settled[-1][0] == "b" and rec.timers == []
    handback("c", True, 3)
    assert len(rec.scheduled) == 1
    rec.scheduled.pop()()
    assert rec.settled[-1][0] == "c" and handback.wakeups == 2 and rec.timers == []


@pytest.mark.parametrize("next_turn", ["call_later", "call_soon", "front-end"])
async def test_a_turn_of_the_loop_settles_a_share_and_serves_its_other_work_between(
        next_turn, monkeypatch):
    """Ten results back at once are settled a few per turn of the loop, with the loop's
    other work (here a callback that reschedules itself every turn, as a socket's read
    would come) run between the shares: a web server's loop accepts and reads between
    them instead of after all of them. The same whether the next turn is asked for with
    a timer (``later(0, ...)``), with ``call_soon``, or as the asyncio front-end asks."""
    from adb.asyncio import AsyncioFrontEnd, FutureHandback
    loop = asyncio.get_running_loop()
    timers: list[float] = []  # the loop's call_later, recorded
    timer = loop.call_later

    def recorded(delay, *args, **kwargs):
        timers.append(delay)
        return timer(delay, *args, **kwargs)
    monkeypatch.setattr(loop, "call_later", recorded)
    if next_turn == "front-end":
        handback = AsyncioFrontEnd(loop).handback(None, lambda: False)
    else:
        soon = loop.call_soon if next_turn == "call_soon" else None
        handback = FutureHandback(loop.call_soon_threadsafe, AsyncioFrontEnd.settle, None,
                                  loop.call_later, lambda: False, soon)
    futures = [loop.create_future() for _ in range(10)]
    seen: list[int] = []  # how many were settled, at each turn of the loop

    def probe() -> None:
        seen.append(sum(future.done() for future in futures))
        if seen[-1] < len(futures):
            loop.call_soon(probe)

    for value, future in enumerate(futures):
        handback(future, True, value)
    loop.call_soon(probe)
    assert await asyncio.gather(*futures) == list(range(10))
    for _ in range(3):
        await asyncio.sleep(0)
    steps = [later - earlier for earlier, later in zip(seen, seen[1:])]
    assert seen[-1] == 10 and max(steps) <= MOST_PER_TURN, seen
    shares = [*range(MOST_PER_TURN, 10, MOST_PER_TURN), 10]  # 4, 8, 10: a turn each
    assert sorted(set(seen)) == shares, seen
    assert handback.largest_batch == MOST_PER_TURN
    # a timer a share with call_later; none where the loop's call_soon is used
    assert timers == ([0, 0] if next_turn == "call_later" else []), timers


class Soon(Timer):
    """A loop double with ``call_soon`` besides its timer: ``soon`` records too."""

    def __init__(self):
        super().__init__()
        self.soon_calls = []

    def soon(self, fn):
        self.soon_calls.append(fn)
        return Cancellable(self.soon_calls, fn)


def test_next_turns_are_asked_for_with_soon_where_the_loop_has_it():
    """Given ``soon``, the shares left after a drain are settled through it, one share
    a call, and no zero-second timer is made; ``stop`` cancels a pending one and
    settles the rest itself."""
    rec = Soon()
    rec.busy = False
    handback = BatchedHandback(rec.schedule, rec.settle, later=rec.later,
                               busy=lambda: rec.busy, soon=rec.soon)
    for i in range(10):
        handback(i, True, i)
    rec.scheduled.pop()()
    assert len(rec.settled) == MOST_PER_TURN and rec.timers == []
    assert len(rec.soon_calls) == 1
    rec.soon_calls.pop()()
    assert len(rec.settled) == 2 * MOST_PER_TURN and len(rec.soon_calls) == 1
    handback.stop()  # the pending next turn is cancelled; stop settles what is left
    assert rec.soon_calls == [] and [f for f, ok, v in rec.settled] == list(range(10))


def test_signal_sent_as_polling_began_settles_without_a_second_timer():
    rec = Timer()
    handback = BatchedHandback(rec.schedule, rec.settle, later=rec.later, busy=lambda: rec.busy)
    handback("a", True, 1)
    first = rec.scheduled.pop()
    handback._scheduled = False  # as if a worker had read the flag during that drain
    handback("b", True, 2)
    second = rec.scheduled.pop()
    first()
    second()
    assert [f for f, ok, v in rec.settled] == ["a", "b"]
    assert len(rec.timers) == 1  # one timer chain, not two
    handback("c", True, 3)
    assert rec.scheduled == []  # still polling: the flag stays set


async def test_saturated_burst_polls_and_delivers_every_result(tmp_path):
    db = adb.Database(f"sqlite:///{tmp_path}/p.db", pool_size=2)
    await db.runOperation("create table t (k int primary key)")
    n = 3000
    gate, held = hold_workers(db, 2)
    burst = [db.runOperation("insert into t values (?)", (i,)) for i in range(n)]
    gate.set()
    await asyncio.gather(*held)
    counts = await asyncio.gather(*burst)
    stats = db.stats()
    assert counts == [1] * n
    assert stats["polls"] > 0 and stats["wakeups"] < stats["polls"], stats
    assert (await db.runQuery("select count(*) from t")) == [(n,)]
    single = await db.runQuery("select 1")  # idle again: a signal, not a timer, delivers it
    assert single == [(1,)] and db.stats()["wakeups"] > stats["wakeups"]
    await db.close()


def test_empty_tick_ends_polling_and_stop_cancels_the_timer():
    rec = Timer()
    handback = BatchedHandback(rec.schedule, rec.settle, later=rec.later, busy=lambda: rec.busy)
    handback("a", True, 1)
    rec.scheduled.pop()()
    rec.timers.pop()[1]()  # busy, but nothing came back within the interval
    assert rec.timers == [] and not handback._polling
    handback("b", True, 2)
    rec.scheduled.pop()()  # polling again
    handback("c", True, 3)
    assert len(rec.timers) == 1 and rec.scheduled == []
    handback.stop()  # the pool is gone: deliver what is left, leave no timer behind
    assert rec.timers == [] and [f for f, ok, v in rec.settled] == ["a", "b", "c"]


async def test_no_timed_drains_while_a_transaction_pins_a_worker(tmp_path):
    """A pinned worker waits for its caller's next statement: its results must not
    wait for a timer, so an open transaction keeps the hand-back on signals."""
    url = f"sqlite:///{tmp_path}/x.db"
    with Gate(Target("sqlite", url)) as second:
        db = adb.Database(url, pool_size=2, **second.options)
        await db.runOperation("create table t (k int)")
        tx = await db.beginTransaction()
        await tx.runOperation("insert into t values (1)")
        rows = await asyncio.gather(*(db.runQuery("select 1") for _ in range(2000)))
        assert rows == [[(1,)]] * 2000
        assert db.stats()["polls"] == 0  # saturated by the burst, but a worker is pinned
        await db.commitTransaction(tx)
        gate, held = hold_workers(db, 2)
        # the burst's first two calls wait at a second gate: when the held calls'
        # results are drained the pool is saturated (a loaded loop thread might
        # otherwise come to them after the workers ran the whole burst)
        burst = [db.runQuery(second.sql) for _ in range(2)]
        burst += [db.runQuery("select 1") for _ in range(2000)]
        gate.set()
        await asyncio.gather(*held)
        second.open()
        await asyncio.gather(*burst)
        assert db.stats()["polls"] > 0  # the same burst with no transaction open
        await db.close()


def test_nudge_runs_after_without_a_result_and_only_once_per_drain():
    """A worker that skips a given-up call nudges: parked calls may fit now."""
    rec = Recorder()
    afters = []
    handback = BatchedHandback(rec.schedule, rec.settle, after=lambda: afters.append(1))
    handback.nudge()
    handback.nudge()  # a drain is already scheduled
    assert len(rec.scheduled) == 1
    rec.scheduled.pop()()
    assert afters == [1] and rec.settled == []
    BatchedHandback(rec.schedule, rec.settle).nudge()  # no after(): nothing to do
    assert rec.scheduled == []


def test_direct_handback_settles_in_the_calling_thread_then_admits():
    from adb.handback import DirectHandback
    events: list[object] = []
    handback = DirectHandback(lambda f, ok, v: events.append((f, ok, v)),
                              after=lambda: events.append("after"))
    handback("f", True, 3)
    handback.nudge()
    assert events == [("f", True, 3), "after", "after"]
    assert handback.settled == 1


def test_future_handback_settles_asyncio_futures_in_its_drain():
    """The asyncio hand-back settles each future in the drain itself: results and
    errors arrive, a future cancelled meanwhile is left as it is, one of a closed
    loop is skipped without an error, and the drain counts every one."""
    from adb.asyncio import FutureHandback
    rec = Recorder()
    handback = FutureHandback(rec.schedule, rec.settle)
    loop = asyncio.new_event_loop()
    other = asyncio.new_event_loop()
    try:
        done, failed, cancelled = loop.create_future(), loop.create_future(), loop.create_future()
        orphan = other.create_future()
        other.close()
        cancelled.cancel()
        error = ValueError("the driver's")
        for future, ok, value in ((done, True, 7), (failed, False, error),
                                  (cancelled, True, 8), (orphan, True, 9)):
            handback(future, ok, value)
        assert len(rec.scheduled) == 1
        rec.scheduled.pop()()
        assert done.result() == 7 and failed.exception() is error
        assert cancelled.cancelled() and orphan.result() == 9
        assert rec.settled == []  # nothing went through the generic settle
        assert handback.settled == 4 and handback.largest_batch == 4
    finally:
        loop.close()


def test_waiter_handback_puts_each_outcome_in_its_waiter_then_admits():
    from adb.sync import Waiter, WaiterHandback
    events: list[object] = []
    handback = WaiterHandback(lambda *a: events.append(a), after=lambda: events.append("after"))
    ok, failed = Waiter(), Waiter()
    assert not adb.sync.SyncFrontEnd.abandoned(ok)  # a Waiter's caller never gives it up
    handback(ok, True, 3)
    handback(failed, False, KeyError("k"))
    assert events == ["after", "after"] and handback.settled == 2
    assert ok.wait(None) and ok.result() == 3
    assert failed.wait(0) and isinstance(_raised(failed.result), KeyError)
    assert not Waiter().wait(0.01)  # nothing delivered: the wait times out


def _raised(fn):
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


def test_asyncio_futures_come_from_the_bound_loop_and_its_own_create_future():
    """Futures are made on the loop the Database is bound to (in C where that loop's
    create_future is asyncio's, by its own create_future otherwise); a call from
    outside any loop, or from a second loop while the first is open, is refused;
    once the first loop has closed, the next loop's calls take over."""
    made = []

    class OwnFutures(asyncio.SelectorEventLoop):
        def create_future(self):
            made.append(1)
            return super().create_future()

    db = adb.Database("sqlite://", pool_size=1)

    async def value():
        return await db.runQueryValue("select 41 + 1")
    with pytest.raises(adb.InterfaceError, match="running event loop"):
        db.runQueryValue("select 1")
    first = asyncio.new_event_loop()
    assert first.run_until_complete(value()) == 42
    second = OwnFutures()
    with pytest.raises(adb.InterfaceError, match="bound to another event loop"):
        second.run_until_complete(value())
    first.close()
    assert second.run_until_complete(value()) == 42 and made  # moved: its own futures
    assert second.run_until_complete(value()) == 42 and len(made) == 2
    second.run_until_complete(db.close())
    second.close()
