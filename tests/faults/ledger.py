"""Helpers for the fault tests: token inserts, outcome accounting, invariant checks."""

import asyncio
import contextlib
import itertools
import threading
import time
import uuid

import adb.sync
from adb.errors import ConnectionLost, PoolClosed, PoolTimeout, QueueFull, StatementTimeout

from ..conftest import ev

#: outcomes that say the call never ran / may have run
NOT_RUN = (PoolTimeout, QueueFull, PoolClosed)
#: the longest a load may run waiting for the fault it is for to be seen, and the
#: longest a poll waits for a condition: generous, so that only a fault that never
#: lands or a condition that never comes fails them, loudly
SEEN_LIMIT = 60.0
POLL_LIMIT = 30.0


class Ledger:
    """What every call reported, checked against the rows in the table (invariant L)."""

    def __init__(self):
        self.ok, self.not_run, self.ambiguous, self.unexpected = set(), set(), set(), []
        self.settle_max = 0.0

    def record(self, token, outcome, seconds=0.0):
        self.settle_max = max(self.settle_max, seconds)
        if not isinstance(outcome, BaseException):
            self.ok.add(token)
        elif isinstance(outcome, (ConnectionLost, StatementTimeout)):
            (self.ambiguous if outcome.may_have_run else self.not_run).add(token)
        elif isinstance(outcome, NOT_RUN):
            self.not_run.add(token)
        else:
            self.unexpected.append(outcome)

    def failed(self):
        """How many calls failed with ConnectionLost or StatementTimeout (or were
        refused): proof that a fault met calls in flight."""
        return len(self.ambiguous) + len(self.not_run)

    def check(self, present):
        """``present``: list of tokens found in the table (duplicates included)."""
        counts: dict[str, int] = {}
        for token in present:
            counts[token] = counts.get(token, 0) + 1
        doubled = [t for t, n in counts.items() if n > 1]
        lost = self.ok - set(counts)
        ran_anyway = self.not_run & set(counts)
        stray = set(counts) - self.ok - self.ambiguous
        assert not self.unexpected, f"unexpected errors: {self.unexpected[:3]}"
        assert not doubled, f"{len(doubled)} tokens written twice"
        assert not lost, f"{len(lost)} calls reported OK but their rows are missing"
        assert not ran_anyway, f"{len(ran_anyway)} calls reported 'did not run' but ran"
        assert not stray, f"{len(stray)} rows nobody reported"
        return {"ok": len(self.ok), "ambiguous": len(self.ambiguous),
                "not_run": len(self.not_run), "rows": len(present),
                "settle_max_s": round(self.settle_max, 2)}


class TokenTable:
    """A table of tokens with no unique index, so a doubled insert would show."""

    def __init__(self, url, p="%s"):
        self.url, self.p = url, p
        self.name = "adb_fault_" + uuid.uuid4().hex[:8]
        with adb.sync.Database(url, pool_size=1) as db:
            db.runOperation(f"create table {self.name} (token varchar(40), n int)")

    def insert_sql(self):
        return f"insert into {self.name} (token, n) values ({self.p}, {self.p})"

    def tokens(self):
        with adb.sync.Database(self.url, pool_size=1) as db:
            return [row[0] for row in db.runQuery(f"select token from {self.name}")]

    def drop(self):
        with adb.sync.Database(self.url, pool_size=1) as db:
            db.runOperation(f"drop table if exists {self.name}")


async def fire(db, table, count, ledger, prefix="t", **kw):
    """Fire ``count`` token inserts at once; record each outcome with its settle time."""
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def one(i):
        token = f"{prefix}{i}"
        try:
            outcome = await ev(db.runOperation(table.insert_sql(), (token, i), **kw))
        except Exception as exc:
            outcome = exc
        ledger.record(token, outcome, loop.time() - start)
    await asyncio.gather(*(one(i) for i in range(count)))


async def until(condition, what, limit=POLL_LIMIT, every=0.02):
    """Poll ``condition()`` (a plain call: a look at the server's view or at the
    pool's stats) until it is true, on the loop; fails, saying ``what`` it waited
    for, past ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"waited {limit} s for {what}")
        await asyncio.sleep(every)


async def load_until(db, table, ledger, seen, lanes, prefix="t", what="the fault",
                     limit=SEEN_LIMIT):
    """Keep ``lanes`` token inserts in flight, tokens numbered as they go, until
    ``seen()`` is true: a load that outlasts the fault it is there for instead of
    racing it. Each outcome is recorded with its call's own settle time. Fails,
    naming ``what`` was awaited, past ``limit`` seconds; returns the calls made."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    numbers = itertools.count()
    made = 0

    async def lane():
        nonlocal made
        while not seen() and loop.time() < deadline:
            i = next(numbers)
            token, started = f"{prefix}{i}", loop.time()
            made += 1
            try:
                outcome = await ev(db.runOperation(table.insert_sql(), (token, i)))
            except Exception as exc:
                outcome = exc
            ledger.record(token, outcome, loop.time() - started)
    await asyncio.gather(*(lane() for _ in range(lanes)))
    assert seen(), (f"{what} was not seen in {limit} s of load ({made} calls: "
                    f"{len(ledger.ok)} acknowledged, {ledger.failed()} failed; "
                    f"the pool's stats {db.stats()})")
    return made


async def cut_under_load(proxy, db, table, ledger, chunk, ready=None):
    """``cut_repeatedly`` while ``chunk`` token inserts are kept in flight until the
    last cut: a load that ended before the cuts did would leave nothing to cut."""
    cutter = asyncio.ensure_future(cut_repeatedly(proxy, ready=ready))
    try:
        await load_until(db, table, ledger, cutter.done, chunk, what="the last cut")
    finally:
        if not cutter.done():
            cutter.cancel()
    return await cutter


@contextlib.contextmanager
def repeatedly(action, every=0.1):
    """Run ``action()`` every ``every`` seconds in a thread while the block runs;
    yields the list of the times it ran (the killer of the load tests)."""
    stop = threading.Event()
    times = []

    def loop():
        while not stop.wait(every):
            action()
            times.append(time.monotonic())
    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield times
    finally:
        stop.set()
        thread.join()


async def cut_repeatedly(proxy, times=5, every=0.15, ready=None):
    """Cut every connection through ``proxy`` ``times`` times, ``every`` seconds
    apart at least (on the loop, beside the load), each once there is a connection
    to cut, the first also once ``ready()`` is true; the number cut each time."""
    cut: list[int] = []
    for _ in range(times):
        await asyncio.sleep(every)
        if ready is not None and not cut:
            await until(ready, "the first cut's condition")
        await until(lambda: len(proxy.pairs) > 0, "a connection through the proxy to cut")
        cut.append(proxy.cut())
    return cut


async def recovers(db, probes=20, within=10.0):
    """Seconds until ``probes`` consecutive ``select 1`` succeed (fails past ``within``)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    streak = 0
    last = None
    while streak < probes:
        if loop.time() - start > within:
            raise AssertionError(f"the pool did not serve again within {within} s: {last!r}")
        try:
            assert await ev(db.runQuery("select 1")) == [(1,)]
            streak += 1
        except Exception as exc:
            last, streak = exc, 0
            await asyncio.sleep(0.05)
    return loop.time() - start


