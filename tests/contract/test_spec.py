"""The public contract that docs/usage.md describes (queries and operations, rows,
interactions, transactions, errors, timeouts, closing), run on every front-end x every
driver (those that pipeline standalone calls both with and without: ``PIPELINE_VARIANTS``).

Each test gets ``db`` (asyncio, Tornado or sync front-end on PostgreSQL, MariaDB
or SQLite, pool of 4) with an empty table ``db.table``; ``ev()`` turns any
front-end's result into its value.
"""

import asyncio

import pytest
from twisted.internet.defer import Deferred

import adb
import adb.twisted
from adb.errors import PoolClosed, PoolTimeout, TransactionError

from ..conftest import (ALL_FRONTS, PIPELINE_VARIANTS, TARGETS, blocking, close, ev,
                        fronts_fixture, gather_calls, in_front, make_target)

#: the core contract: every front-end, adb.trio included
front = fronts_fixture(ALL_FRONTS)


@pytest.fixture(name="target", params=[*TARGETS, *PIPELINE_VARIANTS])
def _target(request, tmp_path):
    """Every driver, and those that pipeline both with and without (``db`` uses it)."""
    return make_target(request.param, tmp_path)


def _settled(future):
    """Whether an asyncio future or a Deferred has its result."""
    return future.called if isinstance(future, Deferred) else future.done()


def ins(db):
    return db.target.sql(f"insert into {db.table} (userid, data) values (%s, %s)")


async def count(db):
    rows = await ev(db.runQuery(f"select count(*) from {db.table}"))
    return rows[0][0]


async def gather(db, calls):
    """Start every call first, then collect (the sync front-end runs them in threads)."""
    if blocking(db):
        loop = asyncio.get_running_loop()
        return await asyncio.gather(*(loop.run_in_executor(None, c) for c in calls))
    return await gather_calls(c() for c in calls)


async def test_run_query_returns_list_of_tuples(db):
    await ev(db.runOperation(ins(db), (1, "one")))
    await ev(db.runOperation(ins(db), (2, "two")))
    rows = await ev(db.runQuery(
        db.target.sql(f"select userid, data from {db.table} where userid >= %s order by userid"), (1,)))
    assert rows == [(1, "one"), (2, "two")]
    assert isinstance(rows, list)


async def test_run_operation_returns_rowcount_and_autocommits(db):
    assert await ev(db.runOperation(ins(db), (1, "a"))) == 1
    assert await ev(db.runOperation(ins(db), [2, "b"])) == 1
    updated = await ev(db.runOperation(f"update {db.table} set data = 'z'"))
    assert updated == 2
    # another Database sees the rows: they were committed
    other = adb.sync.Database(db.target.url, pool_size=1)
    try:
        assert other.runQuery(f"select count(*) from {db.table} where data = 'z'") == [(2,)]
    finally:
        other.close()


async def test_seed_tuple_form_and_map(db):
    stmts = [(ins(db), (i, str(i))) for i in range(100)]
    if blocking(db):
        counts = list(map(db.runOperation, stmts))
    else:
        counts = await gather_calls(map(db.runOperation, stmts))
    assert counts == [1] * 100
    assert await count(db) == 100


async def test_hundred_parallel_inserts(db):
    calls = [lambda i=i: db.runOperation(ins(db), (i, str(i))) for i in range(100)]
    assert await gather(db, calls) == [1] * 100
    rows = await ev(db.runQuery(f"select userid, data from {db.table} order by userid"))
    assert rows == [(i, str(i)) for i in range(100)]


async def test_run_many_inserts_every_row_atomically(db):
    n = await ev(db.runMany(ins(db), [(i, f"m{i}") for i in range(2500)]))
    assert n == 2500
    assert await count(db) == 2500
    # a duplicate key in the middle: nothing of that batch stays
    with pytest.raises(db.dbapi.IntegrityError):
        await ev(db.runMany(ins(db), [(5000, "x"), (5001, "y"), (1, "dup"), (5002, "z")]))
    assert await count(db) == 2500


async def test_run_many_accepts_a_generator(db):
    assert await ev(db.runMany(ins(db), ((i, "g") for i in range(10)))) == 10
    assert await count(db) == 10


async def test_run_interaction_commits_and_returns(db):
    def work(cursor, base, data=None):
        for i in range(3):
            cursor.execute(ins(db), (base + i, data))
        cursor.execute(f"select count(*) from {db.table}")
        return cursor.fetchall()[0][0]
    assert await ev(db.runInteraction(work, 10, data="i")) == 3
    assert await count(db) == 3


async def test_run_interaction_rolls_back_and_reraises(db):
    class Boom(Exception):
        pass

    def work(cursor):
        cursor.execute(ins(db), (1, "gone"))
        raise Boom("from the interaction")
    with pytest.raises(Boom, match="from the interaction"):
        await ev(db.runInteraction(work))
    assert await count(db) == 0


async def test_begin_commit_with_positional_tx(db):
    tx = await ev(db.beginTransaction())
    assert isinstance(tx, adb.Transaction)
    assert await ev(db.runOperation(ins(db), (1, "tx"), tx)) == 1
    assert await ev(db.runQuery(f"select data from {db.table}", None, tx)) == [("tx",)]
    await ev(db.commitTransaction(tx))
    assert tx.state is adb.TxState.COMMITTED
    assert await ev(db.runQuery(f"select data from {db.table}")) == [("tx",)]


async def test_rollback_discards(db):
    tx = await ev(db.beginTransaction())
    await ev(db.runOperation(ins(db), (1, "tx"), tx=tx))
    await ev(tx.runMany(ins(db), [(2, "a"), (3, "b")]))
    await ev(db.rollbackTransaction(tx))
    assert tx.state is adb.TxState.ROLLED_BACK
    assert await count(db) == 0


async def test_transaction_context_commits_and_rolls_back(db):
    if blocking(db):
        with db.transaction() as tx:
            tx.runOperation(ins(db), (1, "kept"))
        with pytest.raises(ZeroDivisionError):
            with db.transaction() as tx:
                tx.runOperation(ins(db), (2, "dropped"))
                1 / 0
    else:
        async def blocks():
            async with db.transaction() as tx:
                await tx.runOperation(ins(db), (1, "kept"))
            with pytest.raises(ZeroDivisionError):
                async with db.transaction() as tx:
                    await tx.runOperation(ins(db), (2, "dropped"))
                    1 / 0
        await in_front(db, blocks())
    assert await ev(db.runQuery(f"select userid from {db.table}")) == [(1,)]


async def test_interaction_inside_transaction(db):
    tx = await ev(db.beginTransaction())
    await ev(tx.runInteraction(lambda cur: cur.execute(ins(db), (7, "in tx"))))
    await ev(tx.rollback())
    assert await count(db) == 0


async def test_error_inside_transaction_then_rollback(db):
    tx = await ev(db.beginTransaction())
    await ev(tx.runOperation(ins(db), (1, "a")))
    with pytest.raises(db.dbapi.IntegrityError):
        await ev(tx.runOperation(ins(db), (1, "dup")))
    await ev(tx.rollback())
    assert await count(db) == 0
    assert await ev(db.runQuery("select 1")) == [(1,)]


async def test_commit_after_error_never_commits_silently(db):
    tx = await ev(db.beginTransaction())
    await ev(tx.runOperation(ins(db), (1, "a")))
    with pytest.raises(db.dbapi.IntegrityError):
        await ev(tx.runOperation(ins(db), (1, "dup")))
    if db.target.kind == "postgresql":
        # PostgreSQL aborted the transaction: COMMIT would roll back; adb says so
        with pytest.raises(TransactionError, match="aborted"):
            await ev(tx.commit())
        assert await count(db) == 0
    else:
        # MySQL and SQLite keep the transaction: the first row commits
        await ev(tx.commit())
        assert await count(db) == 1


async def test_finished_transaction_is_refused(db):
    tx = await ev(db.beginTransaction())
    await ev(db.commitTransaction(tx))
    with pytest.raises(TransactionError, match="finished"):
        await ev(db.runOperation(ins(db), (1, "late"), tx))
    with pytest.raises(TransactionError, match="finished"):
        await ev(db.commitTransaction(tx))
    with pytest.raises(TransactionError):
        await ev(db.rollbackTransaction(tx))
    with pytest.raises(TypeError, match="transaction handle"):
        await ev(db.runOperation(ins(db), (1, "x"), 42))
    assert await count(db) == 0


async def test_concurrent_transactions_more_than_workers(db):
    # pool of 4, 12 transactions at once: each waits for a free worker
    async def one(i):
        tx = await ev(db.beginTransaction())
        await ev(tx.runOperation(ins(db), (i, "t")))
        await asyncio.sleep(0.01)
        await ev(tx.runOperation(ins(db), (100 + i, "t")))
        if i % 3:
            await ev(tx.commit())
        else:
            await ev(tx.rollback())
    if blocking(db):
        loop = asyncio.get_running_loop()

        def one_sync(i):
            with db.transaction() as tx:
                tx.runOperation(ins(db), (i, "t"))
                tx.runOperation(ins(db), (100 + i, "t"))
                if i % 3 == 0:
                    tx.rollback()
        await asyncio.gather(*(loop.run_in_executor(None, one_sync, i) for i in range(12)))
    else:
        await asyncio.gather(*(one(i) for i in range(12)))
    assert await count(db) == 16  # 8 committed transactions x 2 rows
    assert db.stats()["pinned"] == 0


async def test_row_factories(db):
    await ev(db.runOperation(ins(db), (1, "one")))
    sql = f"select userid, data from {db.table}"
    assert await ev(db.runQuery(sql, row_factory="dict")) == [{"userid": 1, "data": "one"}]
    row = (await ev(db.runQuery(sql, row_factory="namedtuple")))[0]
    assert (row.userid, row.data) == (1, "one")
    assert await ev(db.runQuery(sql, row_factory=lambda desc, rows: [r[1] for r in rows])) == ["one"]
    with pytest.raises(adb.InterfaceError, match="row_factory"):
        db.runQuery(sql, row_factory="yaml")


async def test_row_factory_per_database(front, target):
    database = ALL_FRONTS[front](target.url, pool_size=1, row_factory="dict")
    try:
        assert await ev(database.runQuery("select 1 as one")) == [{"one": 1}]
    finally:
        await close(database)


async def test_paramstyle_and_dbapi(db):
    expected = {"postgresql": "pyformat", "mysql": "pyformat", "sqlite": "qmark"}
    # mysqlclient declares "format" (%s), though it takes %(name)s with a dict as well
    assert db.paramstyle == ("format" if db.target.name == "mysqldb" else expected[db.target.kind])
    assert db.dbapi.__name__ == {"postgresql": "psycopg2", "psycopg": "psycopg", "mysql": "pymysql",
                                 "mysqldb": "MySQLdb", "sqlite": "sqlite3"}[db.target.name]


async def test_driver_errors_pass_through_and_pool_stays_usable(db):
    await ev(db.runOperation(ins(db), (1, "a")))
    with pytest.raises(db.dbapi.IntegrityError):
        await ev(db.runOperation(ins(db), (1, "dup")))
    with pytest.raises(db.dbapi.Error):
        await ev(db.runQuery("selec nonsense from nowhere"))
    with pytest.raises((db.dbapi.Error, TypeError, IndexError)):  # one parameter for two placeholders
        await ev(db.runOperation(ins(db), (2,)))
    with pytest.raises((db.dbapi.Error, TypeError)):  # three for two
        await ev(db.runOperation(ins(db), (2, "b", "c")))
    # every worker still serves
    calls = [lambda i=i: db.runOperation(ins(db), (10 + i, "ok")) for i in range(20)]
    assert await gather(db, calls) == [1] * 20
    assert await count(db) == 21
    assert db.stats()["errors"] >= 4


async def test_bad_arguments_fail_at_call(db):
    with pytest.raises(TypeError, match="wrap|for one value"):
        db.runQuery("select %s", "abc")
    with pytest.raises(TypeError, match="parameters must be"):
        db.runQuery("select %s", 5)
    with pytest.raises(TypeError, match="SQL must be a str"):
        db.runQuery(42)
    with pytest.raises(TypeError, match="sequence of parameter sets"):
        db.runMany(ins(db), "abc")
    with pytest.raises(TypeError, match="callable"):
        db.runInteraction("not a function")


async def test_values_are_data_not_sql(db):
    evil = "x'); drop table " + db.table + "; --"
    await ev(db.runOperation(ins(db), (1, evil)))
    assert await ev(db.runQuery(db.target.sql(f"select data from {db.table} where userid = %s"), (1,))) == [(evil,)]
    assert await count(db) == 1


async def test_literal_percent_without_parameters(db):
    assert await ev(db.runQuery("select '100%'")) == [("100%",)]


async def test_stats(db):
    await ev(db.runQuery("select 1"))
    stats = db.stats()
    assert stats["pool_size"] == 4
    assert stats["completed"] >= 1
    assert stats["queued"] == 0
    assert stats["closed"] is False
    assert set(stats) >= {"busy", "idle", "pinned", "errors", "connects", "wakeups"}


async def test_close_settles_pending_calls(front, target, table_name):
    database = ALL_FRONTS[front](target.url, pool_size=2)
    sql = target.sql(f"insert into {table_name} (userid, data) values (%s, %s)")
    await ev(database.runOperation(f"create table {table_name} (userid int primary key, data varchar(10))"))
    try:
        if blocking(database):
            pending = [database.runOperation(sql, (i, "p")) for i in range(200)]
            database.close()
            assert pending == [1] * 200
        else:
            pending = [database.runOperation(sql, (i, "p")) for i in range(200)]
            await ev(database.close())
            assert all(_settled(f) for f in pending)
            assert await gather_calls(pending) == [1] * 200
        assert database.closed
        with pytest.raises(PoolClosed, match=database.name):
            database.runQuery("select 1")
        await ev(database.close())  # idempotent
        assert all(not w.thread.is_alive() for w in database._engine.pool.workers)
    finally:
        check = adb.sync.Database(target.url, pool_size=1)
        assert check.runQuery(f"select count(*) from {table_name}") == [(200,)]
        check.runOperation(f"drop table {table_name}")
        check.close()


async def test_close_rolls_back_open_transactions(front, target, table_name):
    database = ALL_FRONTS[front](target.url, pool_size=2)
    sql = target.sql(f"insert into {table_name} (userid, data) values (%s, %s)")
    await ev(database.runOperation(f"create table {table_name} (userid int primary key, data varchar(10))"))
    tx = await ev(database.beginTransaction())
    await ev(tx.runOperation(sql, (1, "open")))
    await ev(database.close())
    assert tx.state is adb.TxState.FAILED
    with pytest.raises(TransactionError):
        tx.commit()
    check = adb.sync.Database(target.url, pool_size=1)
    assert check.runQuery(f"select count(*) from {table_name}") == [(0,)]
    check.runOperation(f"drop table {table_name}")
    check.close()


async def test_pool_timeout_when_every_worker_is_pinned(front, target):
    database = ALL_FRONTS[front](target.url, pool_size=1)
    try:
        tx = await ev(database.beginTransaction())
        with pytest.raises(PoolTimeout, match="1 of 1 workers are pinned.*did not run"):
            await ev(database.runQuery("select 1", timeout=0.2))
        await ev(tx.rollback())
        # the worker is free again: a call waits for it (a generous bound: if the
        # rollback left it pinned, this times out)
        assert await ev(database.runQuery("select 1", timeout=10)) == [(1,)]
    finally:
        await close(database)


async def test_repr_names_target_without_password(front, target):
    database = ALL_FRONTS[front](target.url, pool_size=1, name="reprdb")
    try:
        text = repr(database)
        assert "reprdb" in text and target.kind[:5] in text and "open" in text
    finally:
        await close(database)
    assert "closed" in repr(database)


def test_named_tuple_columns_that_are_not_identifiers():
    rows = adb.namedtuple_row([("count(*)",), ("ok",)], [(3, True)])
    assert rows[0]._0 == 3 and rows[0].ok is True
    assert isinstance(rows[0], tuple)
    # the class is made once per column list, not once per call
    assert type(adb.namedtuple_row([("count(*)",), ("ok",)], [(1, 2)])[0]) is type(rows[0])
    assert type(adb.namedtuple_row([("n",)], [(1,)])[0]) is not type(rows[0])
