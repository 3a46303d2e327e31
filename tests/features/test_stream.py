"""Streams on every front-end and driver: every row once, at most two batches
buffered, and every way out leaving the connection clean and the worker free."""

import asyncio
import threading
import time

import pytest
from twisted.internet.defer import Deferred, inlineCallbacks

import adb
import adb.sync
from adb.errors import ConnectionLost, PoolClosed, StreamTimeout

from ..conftest import ALL_FRONTS, FRONTS, ev, fronts_fixture, in_front

#: the core contract: every front-end, adb.trio included
front = fronts_fixture(ALL_FRONTS)

ROWS = 2500


async def fill(db, n=ROWS):
    """``n`` rows (userid 1..n) in the fixture's table, by copy_in."""
    count = await ev(db.copy_in(db.table, [(i, f"row {i}") for i in range(1, n + 1)]))
    assert count == n


def read(db, stream, limit=None):
    """The rows of ``stream`` (up to ``limit``), read in the front-end's own idiom:
    ``for`` on adb.sync, ``async for`` elsewhere (in a coroutine run by
    ``Deferred.fromCoroutine`` on Twisted); an awaitable of the list."""
    if isinstance(db, adb.sync.Database):
        rows = []
        for row in stream:
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
        return ev(rows)

    async def collect():
        rows = []
        async for row in stream:
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
        return rows
    return in_front(db, collect())


async def settled(db, key="pinned", value=0, within=20.0):
    """Wait until ``db.stats()[key] == value`` (a close job runs after the caller moved on)."""
    deadline = time.monotonic() + within
    while db.stats()[key] != value:
        assert time.monotonic() < deadline, f"stats()[{key!r}] stayed {db.stats()[key]}"
        await asyncio.sleep(0.01)


class HeldAfterFirstBatch:
    """A row factory (it runs in the worker, once per batch) that holds every batch
    after the first until ``release`` is set: a consumer that has read the first
    batch then waits for batch two, for as long as the test likes. ``second`` is
    set once batch two is being fetched."""

    def __init__(self):
        self.second = threading.Event()
        self.release = threading.Event()
        self.batches: list[int] = []

    def __call__(self, description, rows):
        if self.batches:
            self.second.set()
            self.release.wait(20)
        self.batches.append(len(rows))
        return list(rows)

    async def reached(self, got, rows):
        """Wait until the consumer has ``rows`` rows in ``got`` and batch two is held."""
        deadline = time.monotonic() + 20
        while len(got) < rows or not self.second.is_set():
            assert time.monotonic() < deadline, (len(got), self.batches)
            await asyncio.sleep(0.01)


def counting_sql(kind, n):
    """A query of the numbers 1..n on ``kind``'s server."""
    if kind == "postgresql":
        return f"select i from generate_series(1, {n}) i"
    if kind == "mysql":
        return f"select seq from seq_1_to_{n}"
    return (f"with recursive s(i) as (select 1 union all select i + 1 from s where i < {n}) "
            "select i from s")


async def test_every_row_once_in_batches_and_the_worker_freed(db):
    await fill(db)
    rows = await read(db, db.stream(f"select userid, data from {db.table} order by userid",
                                    batch=1000))
    assert [r[0] for r in rows] == list(range(1, ROWS + 1))
    assert rows[41][1] == "row 42"
    stats = db.stats()
    assert (stats["streams"], stats["pinned"], stats["open_transactions"]) == (0, 0, 0)


async def test_row_factory_and_params(db):
    await fill(db, 10)
    sql = db.target.sql(f"select userid as id from {db.table} where userid > %s order by userid")
    rows = await read(db, db.stream(sql, (7,), row_factory="dict", batch=2))
    assert rows == [{"id": 8}, {"id": 9}, {"id": 10}]


async def test_fetch_gives_batches_then_an_empty_list(db):
    await fill(db, 5)
    stream = db.stream(f"select userid from {db.table} order by userid", batch=2)
    if isinstance(db, adb.sync.Database):
        batches = [stream.fetch() for _ in range(4)]
    else:
        batches = [await ev(stream.fetch()) for _ in range(4)]
    assert batches == [[(1,), (2,)], [(3,), (4,)], [(5,)], []]
    await settled(db)


async def test_a_stream_holds_its_worker_and_stats_show_it(db):
    await fill(db, 50)
    stream = db.stream(f"select userid from {db.table}", batch=10)
    first = await read(db, stream, limit=1)
    assert len(first) == 1
    stats = db.stats()
    assert stats["streams"] == 1 and stats["pinned"] == 1
    await ev(stream.close() if hasattr(stream, "close") else stream.aclose())
    assert db.stats()["streams"] == 0 and db.stats()["pinned"] == 0


async def test_break_closes_the_stream_and_frees_the_worker(db):
    await fill(db)
    assert len(await read(db, db.stream(f"select userid from {db.table}", batch=100),
                          limit=5)) == 5
    await settled(db)
    assert db.stats()["streams"] == 0
    # every worker serves again: as many concurrent calls as the pool has workers
    counts = await asyncio.gather(*(ev(db.runQuery(f"select count(*) from {db.table}"))
                                    for _ in range(4)))
    assert all(c[0][0] == ROWS for c in counts)


async def test_an_exception_in_the_loop_closes_the_stream(db):
    await fill(db, 300)

    class Stop(Exception):
        pass

    sql = f"select userid from {db.table}"
    if isinstance(db, adb.sync.Database):
        with pytest.raises(Stop):
            with db.stream(sql, batch=50) as rows:
                for _ in rows:
                    raise Stop
    else:
        async def consume():
            async with db.stream(sql, batch=50) as rows:
                async for _ in rows:
                    raise Stop
        run = consume()
        with pytest.raises(Stop):
            await in_front(db, run)
    await settled(db)
    assert await ev(db.runQuery(f"select count(*) from {db.table}")) == [(300,)]


@pytest.mark.parametrize("front_name", ["asyncio", "tornado"])
async def test_cancelling_the_consuming_task_closes_the_stream(front_name, target, table_name):
    db = ALL_FRONTS[front_name](target.url, pool_size=2)
    got = []
    held = HeldAfterFirstBatch()

    async def consume():
        async for row in db.stream(counting_sql(target.kind, 20), batch=4, row_factory=held):
            got.append(row)
    task = asyncio.ensure_future(consume())
    try:
        await held.reached(got, 4)  # the task now waits for the second (held) batch
        task.cancel()
    finally:
        held.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(got) == 4
    await settled(db)
    assert db.stats()["streams"] == 0
    assert await db.runQuery("select 1") == [(1,)]
    await db.close()


async def test_cancelling_the_consuming_deferred_closes_the_stream(target):
    db = FRONTS["twisted"](target.url, pool_size=2)
    got = []
    held = HeldAfterFirstBatch()

    async def consume():
        async for row in db.stream(counting_sql(target.kind, 20), batch=4, row_factory=held):
            got.append(row)
    consuming = Deferred.fromCoroutine(consume())
    try:
        await held.reached(got, 4)
        consuming.cancel()
    finally:
        held.release.set()
    with pytest.raises(Exception) as raised:
        await ev(consuming)
    assert "Cancelled" in type(raised.value).__name__
    await settled(db)
    assert await ev(db.runQuery("select 1")) == [(1,)]
    await ev(db.close())


async def test_a_slow_consumer_holds_at_most_two_batches(db):
    await fill(db, 1000)
    fetched = []

    def counting(description, rows):  # runs in the worker, once per batch fetched
        fetched.append(len(rows))
        return list(rows)
    stream = db.stream(f"select userid from {db.table} order by userid", batch=100,
                       row_factory=counting)
    assert len(await read(db, stream, limit=1)) == 1
    deadline = time.monotonic() + 20
    while len(fetched) < 2:  # the batch after the one read is fetched ahead
        assert time.monotonic() < deadline, fetched
        await asyncio.sleep(0.01)
    # a consumer busy with its first row: the worker waits. (A worker that fetched
    # beyond would do so at once; this window can miss that, never fail adb.)
    await asyncio.sleep(0.3)
    assert fetched == [100, 100], "the worker fetched beyond the batch after the one read"
    rows = await read(db, stream)
    assert len(rows) == 999 and sum(fetched) == 1000


async def test_an_idle_consumer_gets_stream_timeout_and_the_worker_is_freed(db):
    await fill(db, 100)
    stream = db.stream(f"select userid from {db.table}", batch=10, idle_timeout=0.2)
    assert len(await read(db, stream, limit=15)) == 15  # the second batch is being read
    await settled(db)  # the worker gave up on the consumer and was freed
    with pytest.raises(StreamTimeout) as raised:
        await read(db, stream)  # what was fetched before the timeout still arrives
    assert raised.value.delivered == 30
    assert "idle for more than 0.2 s" in str(raised.value) and "30 rows" in str(raised.value)
    assert await ev(db.runQuery(f"select count(*) from {db.table}")) == [(100,)]


async def test_closing_the_database_ends_a_stream_with_pool_closed(db):
    await fill(db, 100)
    stream = db.stream(f"select userid from {db.table}", batch=10)
    assert len(await read(db, stream, limit=5)) == 5
    await ev(db.close())  # rolls the stream's transaction back; the workers exit
    assert db.stats()["alive"] == 0
    with pytest.raises(PoolClosed) as raised:
        await read(db, stream)
    assert (raised.value.delivered or 0) >= 5 and "rows" in str(raised.value)


@pytest.mark.parametrize("target", ["postgresql", "psycopg", "mysql"], indirect=True)
async def test_a_killed_backend_ends_the_stream_with_connection_lost(db):
    kind = db.target.kind
    me = "pg_backend_pid()" if kind == "postgresql" else "connection_id()"
    sql = (f"select {me}, i from generate_series(1, 100000) i" if kind == "postgresql"
           else f"select {me}, seq from seq_1_to_5000000")  # more than socket buffers hold
    stream = db.stream(sql, batch=100)
    first = await read(db, stream, limit=1)
    killer = adb.sync.Database(db.target.url, pool_size=1)
    kill = "select pg_terminate_backend(%s)" if kind == "postgresql" else "kill %s"
    killer.runOperation(kill, (first[0][0],))
    killer.close()
    with pytest.raises(ConnectionLost) as raised:
        await read(db, stream)
    assert (raised.value.delivered or 0) >= 1 and "rows" in str(raised.value)
    await settled(db)
    assert await ev(db.runQuery("select 1")) == [(1,)]


async def test_a_stream_inside_a_transaction_sees_it_and_leaves_it_open(db):
    tx = await ev(db.beginTransaction())
    await ev(tx.runOperation(db.target.sql(f"insert into {db.table} values (%s, %s)"), (1, "a")))
    rows = await read(db, db.stream(f"select userid from {db.table}", tx=tx))
    assert rows == [(1,)]
    await ev(tx.runOperation(db.target.sql(f"insert into {db.table} values (%s, %s)"), (2, "b")))
    await ev(tx.rollback())
    assert await ev(db.runQuery(f"select count(*) from {db.table}")) == [(0,)]
    assert db.stats()["pinned"] == 0


async def test_closing_a_stream_early_inside_a_transaction_keeps_the_transaction(db):
    await fill(db, 500)
    tx = await ev(db.beginTransaction())
    stream = db.stream(f"select userid from {db.table}", tx=tx, batch=10)
    assert len(await read(db, stream, limit=3)) == 3
    await ev(stream.close() if hasattr(stream, "close") else stream.aclose())
    await ev(tx.runOperation(db.target.sql(f"delete from {db.table} where userid = %s"), (1,)))
    await ev(tx.commit())
    assert await ev(db.runQuery(f"select count(*) from {db.table}")) == [(499,)]


@pytest.mark.parametrize("front_name", ["sync"])
async def test_pymysql_drops_the_connection_of_a_stream_closed_early(front_name, mysql_url):
    """PyMySQL must read an unbuffered result to its end before the connection runs
    anything else: a stream closed early in its own transaction drops the
    connection instead (one reconnect, not millions of rows read)."""
    db = adb.sync.Database(mysql_url, pool_size=1)
    stream = db.stream("select seq from seq_1_to_1000000", batch=100)
    assert next(stream) == (1,)
    connects = db.stats()["connects"]
    stream.close()
    assert db.runQuery("select 1") == [(1,)]
    assert db.stats()["connects"] == connects + 1
    tx = db.beginTransaction()
    stream = db.stream("select seq from seq_1_to_1000", tx=tx, batch=100)
    assert next(stream) == (1,)
    with pytest.raises(adb.InterfaceError, match="close the stream first"):
        tx.runQuery("select 1")
    stream.close()  # in a transaction: the rest is read, the connection kept
    assert tx.runQuery("select 2") == [(2,)]
    tx.commit()
    db.close()


@inlineCallbacks
def _batches_by_callbacks(stream):
    batches: list[list] = []
    while True:
        batch = yield stream.fetch()
        if not batch:
            return batches
        batches.append(batch)


async def test_twisted_callback_code_reads_a_deferred_per_batch(target, table_name):
    db = FRONTS["twisted"](target.url, pool_size=2)
    batches = await ev(_batches_by_callbacks(db.stream(counting_sql(target.kind, 5), batch=2)))
    assert batches == [[(1,), (2,)], [(3,), (4,)], [(5,)]]
    await ev(db.close())


async def test_bad_stream_arguments_fail_at_the_call(db):
    with pytest.raises(adb.InterfaceError, match="batch"):
        db.stream("select 1", batch=0)
    with pytest.raises(adb.InterfaceError, match="idle_timeout"):
        db.stream("select 1", idle_timeout=-1)
    with pytest.raises(TypeError, match="SQL must be a str"):
        db.stream(42)
    with pytest.raises(TypeError, match="transaction handle"):
        db.stream("select 1", tx="nope")


async def test_a_failing_statement_fails_the_stream_and_frees_the_worker(db):
    with pytest.raises(db.dbapi.Error):
        await read(db, db.stream("select * from adb_no_such_table"))
    await settled(db)
    assert await ev(db.runQuery("select 1")) == [(1,)]
