"""Pipelined standalone calls (``Database(pipeline=)``): the contract in adb/pipeline.py
on real servers.

Each test holds the pool's only worker busy (a ``runInteraction`` waiting on an
event) while it queues the calls, so they are certain to meet in one pipeline,
and checks every caller's outcome against what the same call gets from a
Database with ``pipeline=False``: the same rows, rowcount, exception type, the
same rows left in the table. The worker's counters prove the pipeline ran.
"""

import asyncio
from typing import Any

import pytest

import adb
import adb.sync
from adb.errors import InterfaceError

from ..conftest import TARGETS, psycopg_url, require_server, with_pool_options
from ..idioms import hold_workers

#: the drivers that pipeline, and their servers
PIPELINING = {"psycopg": "postgresql", "mysql": "mysql"}


def url_of(name):
    require_server(PIPELINING[name])
    return psycopg_url() if name == "psycopg" else adb_url(name)


def adb_url(name):
    from ..conftest import URLS
    return URLS[PIPELINING[name]]


@pytest.fixture(params=list(PIPELINING))
def driver(request):
    return request.param


@pytest.fixture
def table(driver, table_name):
    with adb.sync.Database(url_of(driver), pool_size=1) as db:
        db.runOperation(f"create table {table_name} (k int primary key, v varchar(100) not null)")
    yield table_name
    with adb.sync.Database(url_of(driver), pool_size=1) as db:
        db.runOperation(f"drop table if exists {table_name}")


def pipelined(db):
    """(pipelines run, calls they carried) by the pool's workers."""
    workers = db._engine.pool.workers
    return (sum(w.pipeliner.pipelines for w in workers if w.pipeliner),
            sum(w.pipeliner.pipelined for w in workers if w.pipeliner))


async def queued(url, calls, *, pipeline):
    """Run ``calls`` (``(method, sql, params)``) queued behind the one busy worker;
    return each outcome (its value, or its exception's type) and what was pipelined."""
    db = adb.Database(url, pool_size=1, pipeline=pipeline)
    try:
        await db.runQuery("select 1")
        release, (blocker,) = hold_workers(db, 1, 10)
        futures = [getattr(db, method)(sql, params) for method, sql, params in calls]
        release.set()
        await blocker
        results = await asyncio.gather(*futures, return_exceptions=True)
        outcomes = [type(r) if isinstance(r, BaseException) else r for r in results]
        return outcomes, results, pipelined(db)
    finally:
        await db.close()


def rows(url, table_name):
    with adb.sync.Database(url, pool_size=1) as db:
        return db.runQuery(f"select k, v from {table_name} order by k")


async def same_as_alone(url, table_name, calls, alone=0):
    """The outcomes with pipelining equal those without; so do the rows left. All
    calls but ``alone`` (which may not join) ran in pipelines."""
    piped, errors, (pipelines, carried) = await queued(url, calls, pipeline=True)
    after_piped = rows(url, table_name)
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"delete from {table_name}")
    one_by_one, _, (none, _) = await queued(url, calls, pipeline=False)
    assert none == 0
    assert pipelines >= 1 and carried == len(calls) - alone, (pipelines, carried)
    assert piped == one_by_one
    assert after_piped == rows(url, table_name)
    return piped, errors


async def test_results_and_rowcounts_match_one_by_one(driver, table):
    ins = f"insert into {table} (k, v) values (%s, %s)"
    calls: list[tuple[str, str, Any]] = [("runOperation", ins, (k, f"v{k}")) for k in range(1, 6)]
    calls += [("runOperation", f"update {table} set v = 'x' where k <= %s", (3,)),
              ("runOperation", f"delete from {table} where k = %s", (99,)),
              ("runQuery", f"select k, v from {table} order by k", None),
              ("runQueryRow", f"select v from {table} where k = %s", (2,)),
              ("runQueryRow", f"select v from {table} where k = %s", (42,)),
              ("runQueryValue", f"select count(*) from {table}", None),
              ("runQuery", "select %s, %s", (7, "it's; a -- quote")),
              ("runQuery", f"select * from {table} where k < 0", None)]
    outcomes, _ = await same_as_alone(url_of(driver), table, calls)
    assert outcomes[:5] == [1] * 5 and outcomes[5:7] == [3, 0]
    assert outcomes[7] == [(1, "x"), (2, "x"), (3, "x"), (4, "v4"), (5, "v5")]
    assert outcomes[8:11] == [("x",), None, 5]
    assert outcomes[11] == [(7, "it's; a -- quote")] and outcomes[12] == []


async def test_a_failing_statement_affects_no_neighbour(driver, table):
    """PostgreSQL: a Sync after each statement, so an error aborts only its own;
    MariaDB: the statements after the failing one are sent again. Either way the
    failing call gets its own error and every other its own result."""
    ins = f"insert into {table} (k, v) values (%s, %s)"
    calls: list[tuple[str, str, Any]] = [("runOperation", ins, (k, f"v{k}")) for k in range(1, 4)]
    calls += [("runOperation", ins, (2, "again")),  # duplicate key
              ("runQuery", "select no_such_column from " + table, None),
              ("runQueryValue", f"select count(*) from {table}", None),
              ("runOperation", ins, (4, "v4")),
              ("runOperation", ins, (5, None)),  # not null
              ("runOperation", ins, (6, "v6")),
              ("runOperation", ins, (7,)),  # a parameter short: refused before it is sent
              ("runOperation", ins, (8, "v8"))]
    outcomes, errors = await same_as_alone(url_of(driver), table, calls)
    dbapi = __import__("psycopg" if driver == "psycopg" else "pymysql")
    assert outcomes[:3] == [1, 1, 1] and outcomes[5] == 3 and outcomes[6] == 1 \
        and outcomes[8] == 1
    assert isinstance(errors[3], dbapi.IntegrityError) and "2" in str(errors[3])
    assert isinstance(errors[4], dbapi.ProgrammingError if driver == "psycopg"
                      else dbapi.err.OperationalError) and "no_such_column" in str(errors[4])
    assert isinstance(errors[7], dbapi.IntegrityError)
    assert isinstance(errors[9], Exception) and outcomes[10] == 1
    assert rows(url_of(driver), table) == [(1, "v1"), (2, "v2"), (3, "v3"), (4, "v4"), (6, "v6"),
                                           (8, "v8")]


async def test_mariadb_statements_after_a_failure_run_exactly_once(table_name):
    """A message stops at its failing statement: those after it have not run and go
    again. A table with no key counts how often each statement ran."""
    url = url_of("mysql")
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"create table {table_name} (n int not null)")
    try:
        calls = [("runOperation", f"insert into {table_name} (n) values (%s)",
                  (None if n % 7 == 3 else n,)) for n in range(40)]
        outcomes, errors, (pipelines, carried) = await queued(url, calls, pipeline=True)
        failed = [n for n in range(40) if n % 7 == 3]
        assert [n for n, o in enumerate(outcomes) if o != 1] == failed
        assert all("cannot be null" in str(errors[n]) for n in failed)
        assert pipelines >= 1 and carried == 40
        with adb.sync.Database(url, pool_size=1) as db:
            ran = db.runQuery(f"select n, count(*) from {table_name} group by n order by n")
        assert ran == [(n, 1) for n in range(40) if n not in failed]
    finally:
        with adb.sync.Database(url, pool_size=1) as db:
            db.runOperation(f"drop table if exists {table_name}")


async def test_a_text_with_two_statements_runs_as_it_would_alone(driver, table):
    """Multi-statement messages never make one caller's text two statements: such a
    text runs alone, and gets what it gets alone (MariaDB refuses it, psycopg 3 runs
    a parameterless one as one simple query), never more."""
    ins = f"insert into {table} (k, v) values (%s, %s)"
    calls = [("runOperation", ins, (1, "a")),
             ("runOperation", f"insert into {table} (k, v) values (10, 'x'); "
                              f"insert into {table} (k, v) values (11, 'y')", None),
             ("runOperation", ins, (2, "b")),
             ("runQuery", "select 1; select 2", None),
             ("runOperation", f"insert into {table} (k, v) values (%s, %s) -- ; delete "
                              f"from {table}", (3, "c")),
             ("runOperation", ins, (4, "d"))]
    outcomes, _ = await same_as_alone(url_of(driver), table, calls, alone=3)
    left = {k for k, _ in rows(url_of(driver), table)}
    if driver == "mysql":
        assert left == {1, 2, 3, 4}
        assert isinstance(outcomes[1], type) and isinstance(outcomes[3], type)
    else:
        assert left == {1, 2, 3, 4, 10, 11} and outcomes[3] == [(1,)]


def test_texts_that_may_not_join_a_pipeline():
    """Only one read or DML statement whose text ends where it ends may join."""
    require_server("postgresql")
    with adb.sync.Database(psycopg_url(), pool_size=1) as db:
        pipelines = db._engine.driver.pipelines
        assert pipelines is not None
        safe = pipelines.safe
        assert safe("select 1") and safe("insert into t values (%s) ") \
            and safe("update t set v = 'a;b' where k = 1;")
        for text in ("select 1; select 2", "select 1 -- x", "select $$a$$", "vacuum t",
                     "create table t (k int)", "select 'a\\'", "select /* x */ 1",
                     b"select 1", "set x = 1", "begin", "commit"):
            assert not safe(text), text


def test_the_option_is_checked_and_turns_pipelines_off(tmp_path):
    url = psycopg_url()
    require_server("postgresql")
    bad: Any
    for bad in ("maybe", 1, 0.5):
        with pytest.raises(InterfaceError, match="pipeline must be True or False"):
            adb.sync.Database(url, pipeline=bad)
    with pytest.raises(InterfaceError, match="the URL's pipeline must be True or False"):
        adb.sync.Database(url + "?pipeline=maybe")
    with pytest.raises(InterfaceError, match="say it once"):
        adb.sync.Database(url + "?pipeline=off", pipeline=True)
    for off in (adb.sync.Database(url, pool_size=1, pipeline=False),
                adb.sync.Database(url + "?pipeline=off", pool_size=1),
                adb.sync.Database(url + "?pipeline=OFF", pool_size=1, pipeline=False),
                adb.sync.Database(f"sqlite:///{tmp_path}/p.db", pool_size=1, pipeline=True)):
        with off:
            assert off._engine.pool.config.pipeline == 0
            assert off.runQuery("select 1") == [(1,)]
    with adb.sync.Database(url + "?pipeline=on", pool_size=1) as on:
        assert on._engine.pool.config.pipeline > 1
    assert set(PIPELINING) <= set(TARGETS)


def test_the_default_is_on_for_pymysql_and_off_for_psycopg():
    """Where it measured faster (docs/usage.md, "Pipelines")."""
    require_server("postgresql")
    require_server("mysql")
    with adb.sync.Database(psycopg_url(), pool_size=1) as pg, \
            adb.sync.Database(adb_url("mysql"), pool_size=1) as my:
        assert pg._engine.pool.config.pipeline == 0
        assert my._engine.pool.config.pipeline > 1
    # native sessions (the adbapi drop-in's): the driver's own transaction mode, never pipelined
    with with_pool_options(adb.sync.Database, native=True)(adb_url("mysql"), pool_size=1,
                                                           pipeline=True) as native:
        assert native._engine.pool.config.pipeline == 0
        assert native.runQuery("select 1") == [(1,)]


# -- group commit on the pipeline (psycopg 3 with pipeline=True) -------------------------

@pytest.fixture
def unit_table(table_name):
    url = psycopg_url() + "?pipeline=on"
    require_server("postgresql")
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"create table {table_name} (k int primary key, v varchar(100) not null, "
                        "n int)")
    yield url, table_name
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"drop table if exists {table_name}")


async def unit_outcomes(url, calls, autobatch):
    """``calls`` (``(sql, params)``) queued behind the one busy worker, with
    ``autobatch``; each outcome, the stats, and the server's prepared statements."""
    db = adb.Database(url, pool_size=1, autobatch=autobatch)
    try:
        release, (blocker,) = hold_workers(db, 1, 10)
        futures = [db.runOperation(sql, params) for sql, params in calls]
        release.set()
        await blocker
        results = await asyncio.gather(*futures, return_exceptions=True)
        prepared = await db.runQueryValue("select count(*) from pg_prepared_statements")
        return [type(r) if isinstance(r, BaseException) else r for r in results], \
            db.stats(), prepared
    finally:
        await db.close()


async def test_a_unit_runs_prepared_in_one_pipeline_with_each_outcome_its_own(unit_table):
    """A unit is BEGIN, its statements prepared, COMMIT, one Sync: each caller's
    rowcount as alone; a failing unit rolls back and runs one by one."""
    url, table = unit_table
    ins = f"insert into {table} (k, v, n) values (%s, %s, %s)"
    good = [(ins, (k, str(k), k)) for k in range(1, 11)] + [
        (f"update {table} set n = n + 100 where k < %s", (5,)),
        (f"delete from {table} where k = %s", (99,))]
    outcomes, stats, prepared = await unit_outcomes(url, good, 64)
    assert outcomes == [1] * 10 + [4, 0]
    assert stats["units"] == 1 and stats["batched"] == 12 and prepared >= 3
    bad = [(ins, (20, "a", 1)), (ins, (1, "dup", 0)), (ins, (21, "b", "not a number")),
           (ins, (22, None, 2)), (ins, (23, "g'; drop table " + table + "; --", 3))]
    outcomes, stats, _ = await unit_outcomes(url, bad, 64)
    assert outcomes[0] == 1 and outcomes[4] == 1
    assert issubclass(outcomes[1], psycopg_errors().UniqueViolation)
    assert issubclass(outcomes[2], psycopg_errors().InvalidTextRepresentation)
    assert issubclass(outcomes[3], psycopg_errors().NotNullViolation)
    assert stats["units"] == 1 and stats["unit_fallbacks"] == 1
    keys = [k for k, _ in rows(url, table)]
    assert 20 in keys and 23 in keys and 21 not in keys and 22 not in keys


def psycopg_errors():
    import psycopg
    return psycopg.errors


def test_a_pymysql_without_the_message_internals_runs_one_statement_at_a_time():
    """The messages are built from PyMySQL internals: the installed PyMySQL has them,
    and a module lacking one of them gets no pipelines (instead of failing mid-call)."""
    import types

    import pymysql

    from adb.drivers.pymysql import _speaks_messages

    assert _speaks_messages(pymysql)
    cursors = types.SimpleNamespace(Cursor=pymysql.cursors.Cursor)
    older = type("Connection", (), {"_execute_command": None, "_read_packet": None})
    stripped = types.SimpleNamespace(connections=types.SimpleNamespace(Connection=older),
                                     cursors=cursors)
    assert not _speaks_messages(stripped)
