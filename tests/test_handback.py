"""Batched hand-back: one loop wake-up per batch of results, none lost."""

import asyncio
import threading

import adb
from adb.handback import BatchedHandback


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
    threads = [threading.Thread(target=lambda n=n: [handback(n, True, i) for i in range(500)])
               for n in range(8)]
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
