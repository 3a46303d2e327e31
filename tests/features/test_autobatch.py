"""Group commit (``autobatch``): the contract in adb/worker.py on real servers.

Each test holds the pool's only worker busy (a ``runInteraction`` waiting on an
event) while it queues the calls, so they are certain to meet in one unit, and
then checks every caller's outcome against what the same call gets from a
Database without ``autobatch``: the same rowcount, the same exception type, the
same rows in the table. The stats prove the unit ran (and fell back where a
statement failed).
"""

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from tornado.testing import AsyncTestCase, gen_test

import adb
import adb.sync
import adb.tornado
from adb import sqltext
from adb.sqltext import Path
from adb.drivers import load
from adb.errors import ConnectionLost, InterfaceError, StatementTimeout
from adb.url import make_target

from .. import conftest
from ..conftest import URLS, require_server
from ..faults.ledger import Ledger, TokenTable, cut_under_load, fire, recovers, repeatedly
from ..faults.test_faults import (kill_all, proxy_for, report, server_of, unique, url_for,
                                  url_of, via)
from ..idioms import hold_workers

#: a column whose bad input is a type error on each server; SQLite needs a CHECK for one
_TABLE = {"postgresql": "create table {t} (k int primary key, v varchar(100) not null, n int)",
          "mysql": "create table {t} (k int primary key, v varchar(100) not null, n int)",
          "sqlite": "create table {t} (k int primary key, v varchar(100) not null, "
                    "n int check (typeof(n) in ('integer', 'null')))"}


@pytest.fixture
def table(target, table_name):
    with adb.sync.Database(target.url, pool_size=1) as db:
        db.runOperation(_TABLE[target.kind].format(t=table_name))
    yield table_name
    with adb.sync.Database(target.url, pool_size=1) as db:
        db.runOperation(f"drop table if exists {table_name}")


async def outcomes(url, calls, *, autobatch_size, setup=()):
    """Run ``calls`` (``(sql, params)``) queued behind one busy worker; return each
    outcome (rowcount, or exception type) and the pool's stats."""
    db = adb.Database(url, pool_size=1, autobatch=autobatch_size)
    try:
        for sql, params in setup:
            await db.runOperation(sql, params)
        release, (blocker,) = hold_workers(db, 1, 10)
        futures = [db.runOperation(sql, params) for sql, params in calls]
        release.set()
        await blocker
        results = await asyncio.gather(*futures, return_exceptions=True)
        return [type(r) if isinstance(r, BaseException) else r for r in results], db.stats()
    finally:
        await db.close()


def rows(url, table_name):
    with adb.sync.Database(url, pool_size=1) as db:
        return db.runQuery(f"select k, v, n from {table_name} order by k")


async def same_as_alone(target, table_name, calls, setup=()):
    """The outcomes with autobatch=64 equal those without; so do the rows left."""
    batched, stats = await outcomes(target.url, calls, autobatch_size=64, setup=setup)
    after_batched = rows(target.url, table_name)
    with adb.sync.Database(target.url, pool_size=1) as db:
        db.runOperation(f"delete from {table_name}")
    alone, alone_stats = await outcomes(target.url, calls, autobatch_size=None, setup=setup)
    assert alone_stats["units"] == 0
    assert batched == alone
    assert after_batched == rows(target.url, table_name)
    return batched, stats


async def test_each_caller_gets_its_own_outcome_from_a_failing_unit(target, table):
    ins = target.sql(f"insert into {table} (k, v, n) values (%s, %s, %s)")
    calls = [(ins, (1, "a", 1)), (ins, (2, "b", 2)),
             (ins, (5, "dup", 0)),                                    # duplicate key
             (ins, (3, "c", 3)),
             (target.sql(f"insert into {table}_missing (k) values (%s)"), (9,)),  # bad SQL
             (ins, (4, "d", "not a number")),                         # type error
             (ins, (6, None, 6)),                                     # NOT NULL
             (ins, (7, "g'; drop table " + table + "; --", 7))]       # hostile text
    setup = [(ins, (5, "five", 5))]
    batched, stats = await same_as_alone(target, table, calls, setup)
    assert batched[:2] == [1, 1] and batched[3] == 1 and batched[7] == 1
    with adb.sync.Database(target.url, pool_size=1) as db:
        dbapi = db.dbapi
    assert issubclass(batched[2], dbapi.IntegrityError)
    assert issubclass(batched[4], dbapi.Error) and issubclass(batched[5], dbapi.Error)
    assert issubclass(batched[6], dbapi.IntegrityError)
    assert stats["units"] == 1 and stats["unit_fallbacks"] == 1 and stats["batched"] == 0
    assert (7, "g'; drop table " + table + "; --", 7) in rows(target.url, table)


async def test_update_and_delete_rowcounts_in_one_unit(target, table):
    ins = target.sql(f"insert into {table} (k, v, n) values (%s, %s, %s)")
    setup = [(ins, (k, str(k), k)) for k in range(1, 11)]
    calls = [(target.sql(f"update {table} set n = n + 100 where k < %s"), (5,)),
             (target.sql(f"delete from {table} where k = %s"), (7,)),
             (target.sql(f"update {table} set v = %s where k > 100"), ("none",)),
             (ins, (11, "eleven", 11)),
             (target.sql(f"delete from {table} where k >= %s"), (9,)),
             (target.sql(f"update {table} set v = %s where k = %s;"), ("x", 1))]
    batched, stats = await same_as_alone(target, table, calls, setup)
    assert batched == [4, 1, 0, 1, 3, 1]
    assert stats["units"] == 1 and stats["batched"] == 6 and stats["unit_fallbacks"] == 0


async def test_a_burst_commits_every_row_in_units(target, table):
    db = adb.Database(target.url, pool_size=3, autobatch=64)
    sql = target.sql(f"insert into {table} (k, v, n) values (%s, %s, %s)")
    counts = await asyncio.gather(*(db.runOperation(sql, (k, str(k), k)) for k in range(3000)))
    stats = db.stats()
    await db.close()
    assert counts == [1] * 3000
    assert [r[0] for r in rows(target.url, table)] == list(range(3000))
    assert stats["units"] > 0 and stats["batched"] > 1000


async def test_only_standalone_operations_are_batched(target, table):
    """runQuery and calls inside a transaction never join a unit."""
    db = adb.Database(target.url, pool_size=1, autobatch=64)
    ins = target.sql(f"insert into {table} (k, v, n) values (%s, %s, %s)")
    try:
        release, (blocker,) = hold_workers(db, 1, 10)
        queued: list[asyncio.Future[Any]] = [db.runQuery(f"select count(*) from {table}"),
                  db.runOperation(target.sql(f"update {table} set n = 0 where k = %s"), (1,)),
                  db.runQuery(f"select count(*) from {table}")]
        release.set()
        await blocker
        assert await asyncio.gather(*queued) == [[(0,)], 0, [(0,)]]
        tx = await db.beginTransaction()
        in_tx = await asyncio.gather(*(db.runOperation(ins, (k, "tx", k), tx) for k in range(5)))
        await db.commitTransaction(tx)
        assert in_tx == [1] * 5
        assert db.stats()["units"] == 0
    finally:
        await db.close()


@pytest.mark.parametrize("target", ["postgresql", "psycopg", "sqlite"], indirect=True)
async def test_a_row_trigger_that_skips_rows_keeps_rowcounts_exact(target, table):
    """A BEFORE trigger that drops rows makes a lone insert report 0; batched too.
    (psycopg2 reads only a message's last result: its guard sees the trigger, the
    unit falls back, and the statement batches inside a transaction from then on.
    MySQL has no such trigger: SIGNAL fails the statement.)"""
    with adb.sync.Database(target.url, pool_size=1) as db:
        if target.kind == "sqlite":
            db.runOperation(f"create trigger {table}_skip before insert on {table} "
                            "when new.n < 0 begin select raise(ignore); end")
        else:
            db.runOperation(f"create function {table}_skip() returns trigger language plpgsql "
                            "as $$ begin if new.n < 0 then return null; end if; return new; end $$")
            db.runOperation(f"create trigger {table}_skip before insert on {table} "
                            f"for each row execute function {table}_skip()")
    ins = target.sql(f"insert into {table} (k, v, n) values (%s, %s, %s)")
    calls = [(ins, (k, str(k), -1 if k % 3 == 0 else k)) for k in range(1, 13)]
    first, _ = await same_as_alone(target, table, calls)
    assert first == [0 if k % 3 == 0 else 1 for k in range(1, 13)]
    again, stats = await outcomes(target.url, [(ins, (k + 100, "x", -k - 1)) for k in range(5)],
                                  autobatch_size=64)
    assert again == [0] * 5 and stats["units"] == 1
    if target.kind == "postgresql":
        with adb.sync.Database(target.url, pool_size=1) as db:
            db.runOperation(f"drop function {table}_skip() cascade")


@pytest.mark.parametrize("target", ["postgresql", "psycopg", "mysql"], indirect=True)
async def test_a_statement_past_its_timeout_fails_alone(target, table):
    """The watchdog cancels the unit at its earliest deadline; the unit rolls back,
    its calls run one by one, and only the slow one times out (a server-side sleep)."""
    sleep = "(select 'slow' from pg_sleep(2))" if target.kind == "postgresql" \
        else "(select 'slow' from (select sleep(2)) s)"
    ins = target.sql(f"insert into {table} (k, v, n) values (%s, %s, %s)")
    db = adb.Database(target.url, pool_size=1, autobatch=64)
    try:
        release, (blocker,) = hold_workers(db, 1, 10)
        futures = [db.runOperation(ins, (1, "a", 1), statement_timeout=0.5),
                   db.runOperation(target.sql(f"insert into {table} (k, v, n) values "
                                              f"(%s, {sleep}, %s)"), (2, 2), statement_timeout=0.5),
                   db.runOperation(ins, (3, "c", 3), statement_timeout=5)]
        release.set()
        await blocker
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert results[0] == 1 and results[2] == 1
        assert isinstance(results[1], StatementTimeout) and not results[1].may_have_run
        assert db.stats()["unit_fallbacks"] == 1
    finally:
        await db.close()
    assert [r[0] for r in rows(target.url, table)] == [1, 3]


async def test_a_unit_shares_one_transaction(pg_url, table_name):
    """What makes autobatch opt-in: statements of a unit share a transaction, so
    ``now()`` is one value for all of them (alone, each had its own)."""
    with adb.sync.Database(pg_url, pool_size=1) as db:
        db.runOperation(f"create table {table_name} (k int, at timestamptz default now())")
    try:
        await outcomes(pg_url, [(f"insert into {table_name} (k) values (%s)", (k,))
                                for k in range(20)], autobatch_size=64)
        with adb.sync.Database(pg_url, pool_size=1) as db:
            (distinct,), = db.runQuery(f"select count(distinct at) from {table_name}")
        assert distinct == 1
    finally:
        with adb.sync.Database(pg_url, pool_size=1) as db:
            db.runOperation(f"drop table {table_name}")


# -- which statements qualify, per driver (no server needed) ---------------------------

@pytest.mark.parametrize("sql, contained", [
    ("insert into t values (%s, %s)", True),
    ("insert into t values (%s, 'a;b')  ;  ", True),
    ("update t set v = 'it''s' where k = %s", True),
    ("insert into t values (%s); delete from t", False),
    ("insert into t values (%s) -- note", False),
    ("insert into t values (%s) /* note */", False),
    ("insert into t values ('open", False),
    ("insert into t values (E'\\n')", False),
    ("insert into t values ($$x$$)", False),
])
def test_self_contained_statements(sql, contained):
    assert sqltext.self_contained(sql) is contained


@pytest.mark.parametrize("url, sql, path", [
    ("postgresql://u@h/d", "insert into t (a) values (%s)", Path.MESSAGE),
    ("postgresql://u@h/d", 'insert into s."T" (a) values (%s)', Path.MESSAGE),
    ("postgresql://u@h/d", "insert into t (a) values (%s) on conflict do nothing", Path.TRANSACTION),
    ("postgresql://u@h/d", "insert into t (a) select %s", Path.TRANSACTION),
    ("postgresql://u@h/d", "update t set a = %s", Path.TRANSACTION),
    ("postgresql+psycopg://u@h/d", "update t set a = %s", Path.MESSAGE),
    ("postgresql+psycopg://u@h/d", "delete from t where a = %s -- x", Path.TRANSACTION),
    ("mysql://u@h/d", "replace into t values (%s)", Path.MESSAGE),
    ("mysql://u@h/d", "delete from t # comment", Path.TRANSACTION),
    ("sqlite:///x.db", "insert into t values (?)", Path.TRANSACTION),
    ("sqlite:///x.db", "select 1", Path.ALONE),
    ("sqlite:///x.db", "create table t (a int)", Path.ALONE),
    ("sqlite:///x.db", "with x as (select 1) insert into t select * from x", Path.ALONE),
])
def test_paths_per_driver(url, sql, path):
    target = make_target(url, None, {})
    assert target is not None
    driver = load(target)
    assert driver.batch_path(sql) is path


@pytest.mark.parametrize("value", [0, -1, 2.5, "64", True])
def test_bad_autobatch_values_are_refused(value):
    with pytest.raises(InterfaceError, match="autobatch"):
        adb.sync.Database("sqlite://", autobatch=value)


@pytest.mark.parametrize("driver", ["mysql", "mysqldb"])
def test_mysql_multi_statements_only_with_autobatch(driver, table_name, tmp_path):
    """The multi-statement flag lets one runOperation carry several statements; it is
    on only where autobatch is (PyMySQL's off by default, mysqlclient's turned off)."""
    mysql_url = conftest.make_target(driver, tmp_path).url
    two = f"create table {table_name} (a int); drop table {table_name}"
    with adb.sync.Database(mysql_url, pool_size=1) as db:
        with pytest.raises(db.dbapi.ProgrammingError):
            db.runOperation(two)
    with adb.sync.Database(mysql_url, pool_size=1, autobatch=8) as db:
        db.runOperation(two)  # runs: the documented cost of the flag


# -- the other front-ends ------------------------------------------------------------

def test_sync_front_end_from_many_threads(target, table):
    sql = target.sql(f"insert into {table} (k, v, n) values (%s, %s, %s)")
    results = {}
    with adb.sync.Database(target.url, pool_size=2, autobatch=64) as db:
        def caller(t):
            results[t] = [db.runOperation(sql, (t * 100 + i, "s", i)) for i in range(50)]
        threads = [threading.Thread(target=caller, args=(t,)) for t in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        units = db.stats()["units"]
    assert all(counts == [1] * 50 for counts in results.values()) and len(results) == 16
    assert len(rows(target.url, table)) == 800
    assert units > 0


class TornadoAutobatchTest(AsyncTestCase):
    @gen_test(timeout=30)
    async def test_gen_multi_of_operations_runs_in_units(self):
        require_server("postgresql")
        db = adb.tornado.Database(URLS["postgresql"], pool_size=2, autobatch=64,
                                  ioloop=self.io_loop)
        name = "adb_tornado_ab_" + uuid.uuid4().hex[:10]
        await db.runOperation(f"drop table if exists {name}")
        await db.runOperation(f"create table {name} (k int primary key)")
        from tornado import gen
        counts = await gen.multi([db.runOperation(f"insert into {name} values (%s)", (k,))
                                  for k in range(500)])
        dup = db.runOperation(f"insert into {name} values (%s)", (7,))
        with self.assertRaises(db.dbapi.IntegrityError):
            await dup
        (count,), = await db.runQuery(f"select count(*) from {name}")
        self.assertEqual(counts, [1] * 500)
        self.assertEqual(count, 500)
        self.assertGreater(db.stats()["units"], 0)
        await db.runOperation(f"drop table {name}")
        await db.close()


async def test_twisted_drop_in_with_cp_autobatch(table_name):
    """adbapi's ConnectionPool with ``cp_autobatch``: runOperation still fires None."""
    from twisted.internet.asyncioreactor import AsyncioSelectorReactor

    from adb.twisted import ConnectionPool

    from .. import conftest
    loop = asyncio.get_running_loop()
    reactor = AsyncioSelectorReactor(loop)
    conftest._reactors.append(reactor)
    pool = ConnectionPool("sqlite3", database=":memory:", cp_reactor=reactor, cp_max=1,
                          cp_autobatch=64)
    pool.start()
    try:
        await pool.runOperation(f"create table {table_name} (k int primary key)").asFuture(loop)
        results = await asyncio.gather(*(
            pool.runOperation(f"insert into {table_name} values (?)", (k,)).asFuture(loop)
            for k in range(300)))
        assert results == [None] * 300
        count = await pool.runQuery(f"select count(*) from {table_name}").asFuture(loop)
        assert count == [(300,)]
        assert pool.stats()["units"] > 0
    finally:
        pool.close()


# -- faults: every success is a row, every "did not run" is none, and only the calls
#    of units in flight may have run -----------------------------------------------------

@pytest.mark.parametrize("kind", ["postgresql", "psycopg", "mysql"])
async def test_kills_under_load_with_autobatch(kind):
    name = unique(f"adb-ab-kill-{kind}")
    db = adb.Database(url_for(kind, name), pool_size=4, name=name, autobatch=64)
    table = TokenTable(URLS[server_of(kind)])
    ledger = Ledger()
    with repeatedly(lambda: kill_all(db, kind)) as kills:
        await fire(db, table, 8000, ledger)
    try:
        await recovers(db)
        figures = ledger.check(table.tokens())
        stats = db.stats()
        assert figures["ok"] > 0 and stats["units"] > 0
        # each kill ends at most pool_size units, each of at most 64 calls
        assert figures["ambiguous"] <= len(kills) * 4 * 64
        report("autobatch kills under load", kind=kind, kills=len(kills), **figures, **{
            k: stats[k] for k in ("units", "batched", "unit_fallbacks")})
    finally:
        await db.close()
        table.drop()


@pytest.mark.parametrize("kind", ["postgresql", "psycopg", "mysql"])
async def test_network_cut_under_load_with_autobatch(kind):
    require_server(server_of(kind))
    proxy = proxy_for(kind)
    db = adb.Database(via(proxy, url_of(kind)), pool_size=4, autobatch=64)
    table = TokenTable(URLS[server_of(kind)])
    ledger = Ledger()
    try:
        cut = await cut_under_load(proxy, db, table, ledger, 6000)
        await recovers(db)
        figures = ledger.check(table.tokens())
        assert sum(cut) >= 5 and db.stats()["units"] > 0
        assert figures["ambiguous"] <= sum(cut) * 64
        stats = db.stats()
        report("autobatch cut under load", kind=kind, connections_cut=sum(cut), **figures, **{
            k: stats[k] for k in ("units", "batched", "unit_fallbacks")})
    finally:
        await db.close()
        proxy.close()
        table.drop()


async def test_lost_unit_error_names_the_unit(pg_url, table_name):
    """A unit whose connection dies: each of its callers gets ConnectionLost with
    may_have_run, saying it ran in a unit; nothing else is affected."""
    name = unique("adb-ab-lost")
    db = adb.Database(url_for("postgresql", name), pool_size=1, name=name, autobatch=64)
    await db.runOperation(f"create table {table_name} (k int)")
    try:
        release, (blocker,) = hold_workers(db, 1, 10)
        slow = f"insert into {table_name} (k) values ((select %s from pg_sleep(5)))"
        futures = [db.runOperation(slow, (k,)) for k in range(10)]
        release.set()
        await blocker
        await asyncio.to_thread(unit_running, name, table_name)
        kill_all(db, "postgresql")
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(r, ConnectionLost) and r.may_have_run for r in results), results
        assert "unit of 10 batched calls" in str(results[0])
        assert await db.runQuery(f"select count(*) from {table_name}") == [(0,)]
    finally:
        await db.runOperation(f"drop table {table_name}")
        await db.close()


def unit_running(name, table_name):
    """Wait until PostgreSQL runs the unit of ``name``'s Database (its inserts into
    ``table_name``), so the kill meets it on the server, not before it is sent."""
    with adb.sync.Database(URLS["postgresql"], pool_size=1) as admin:
        deadline = time.monotonic() + 20
        while not admin.runQueryValue(
                "select count(*) from pg_stat_activity where application_name = %s "
                "and state = 'active' and query like %s", (name, f"%insert into {table_name}%")):
            assert time.monotonic() < deadline, "the unit never ran"
            time.sleep(0.01)
