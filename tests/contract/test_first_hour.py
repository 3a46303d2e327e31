"""The first hour: mistakes caught at once, and said plainly (issue 35's 18 points).

Each test is a newcomer's mistake or wish, on every front-end it applies to and on
PostgreSQL (psycopg2 and psycopg 3), MariaDB and SQLite: options checked where they
are given, connection failures told apart from an unreachable server, ``connect()``,
isolation levels, the row and value helpers, clear errors for what cannot work.
"""

import asyncio
import gc
import glob
import inspect
import logging
import math
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from tornado.ioloop import IOLoop

import adb
import adb.sync
import adb.tornado
import adb.trio
import adb.twisted
from adb.errors import (ConnectionRejected, InterfaceError, PoolTimeout, ServerUnavailable,
                        TransactionError)

from ..conftest import FRONTS, URLS, blocking, close, ev, in_front, psycopg_url, require_server
from ..idioms import hold_workers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def slow_sql(target, seconds=0.3):
    """A statement that runs about ``seconds`` and returns one row."""
    if target.kind == "postgresql":
        return f"select 1 from pg_sleep({seconds})"
    if target.kind == "mysql":
        return f"select sleep({seconds})"
    rows = int(seconds * 8_000_000)  # a recursive count: SQLite has no sleep
    return (f"with recursive c(x) as (select 1 union all select x + 1 from c where x < {rows}) "
            "select count(*) from c")


async def opened(front, url, **options):
    """A Database of ``front`` that has served one call (its pool warm)."""
    db = FRONTS[front](url, **options)
    assert await ev(db.runQuery("select 1")) in ([(1,)], [[1]])
    return db


# -- 1. timeout=0: an idle worker takes the call; a busy pool refuses it at once -------

async def test_timeout_0_runs_on_an_idle_pool_and_fails_at_once_on_a_busy_one(front, target):
    db = await opened(front, target.url, pool_size=4, timeout=0)
    try:
        for _ in range(10):
            assert await ev(db.runQuery("select 1", timeout=0)) == [(1,)]
            assert await ev(db.runQuery("select 1")) == [(1,)]  # the Database's timeout=0
        if blocking(db):  # its calls block: hold the workers from threads
            gate = threading.Event()
            held = [asyncio.create_task(asyncio.to_thread(
                db.runInteraction, lambda cursor: gate.wait(30))) for _ in range(4)]
        else:
            gate, held = hold_workers(db, 4)
        try:
            deadline = time.monotonic() + 20
            while db.stats()["busy"] < 4:
                assert time.monotonic() < deadline, "the workers were never all held"
                await asyncio.sleep(0.01)
            start = time.monotonic()
            with pytest.raises(PoolTimeout, match="within 0 s.*did not run"):
                await ev(db.runQuery("select 1", timeout=0))
            # refused, not queued: a queued call would wait for the held workers (30 s)
            assert time.monotonic() - start < 5.0
        finally:
            gate.set()
            for one in held:
                await ev(one)
    finally:
        await close(db)


# -- 2. statement_timeout: 0 or None is no limit; nonsense is refused ------------------

async def test_statement_timeout_0_means_no_limit(front, target):
    db = await opened(front, target.url, pool_size=2, statement_timeout=0)
    try:
        assert len(await ev(db.runQuery(slow_sql(target)))) == 1  # not cancelled at once
        assert db.stats()["errors"] == 0
    finally:
        await close(db)
    strict = await opened(front, target.url, pool_size=2, statement_timeout=0.05)
    try:  # a call's own 0 lifts the Database's limit for that call
        assert len(await ev(strict.runQuery(slow_sql(target), statement_timeout=0))) == 1
    finally:
        await close(strict)


@pytest.mark.parametrize("value", [math.nan, -1, "1", True])
async def test_statement_timeout_nonsense_names_the_option(front, value):
    with pytest.raises(InterfaceError, match=f"statement_timeout must be .*not {value!r}"):
        FRONTS[front]("sqlite://", statement_timeout=value)
    db = await opened(front, "sqlite://")
    try:
        with pytest.raises(InterfaceError, match="statement_timeout must be"):
            await ev(db.runQuery("select 1", statement_timeout=value))
    finally:
        await close(db)


# -- 3. a call's timeout is checked where it is given -----------------------------------

@pytest.mark.parametrize("value", [-1, "1", math.nan, True])
async def test_a_calls_timeout_is_checked_where_it_is_given(front, value):
    db = await opened(front, "sqlite://")
    try:
        with pytest.raises(InterfaceError, match=f"timeout must be a number of seconds >= 0, "
                                                 f"not {value!r}"):
            await ev(db.runQuery("select 1", timeout=value))
        assert db.stats()["completed"] == 1  # nothing ran
        assert await ev(db.runQuery("select 1", timeout=math.inf)) == [(1,)]  # wait forever
    finally:
        await close(db)


# -- 4. connection failures: rejected at once, or unreachable and retried ---------------

def rejected_urls(kind):
    """URLs whose server (or driver) rejects the connection, with what the error says."""
    if kind == "mysql":
        require_server("mysql")
        return [(URLS["mysql"].replace("root@", "root:wrong@"), "refused the credentials"),
                (URLS["mysql"].rsplit("/", 1)[0] + "/adb_no_such_db", "no such database")]
    if kind == "sqlite":
        return [("sqlite:////adb-no-such-folder/x.db", "cannot be opened")]
    require_server("postgresql")
    base = psycopg_url() if kind == "psycopg" else URLS["postgresql"]
    return [(base.rsplit("/", 1)[0] + "/adb_no_such_db", 'database "adb_no_such_db" does not exist'),
            (base.replace("root@", "adb_no_such_role@"), 'role "adb_no_such_role" does not exist')]


@pytest.mark.parametrize("kind", ["postgresql", "psycopg", "mysql", "sqlite"])
async def test_a_rejected_connection_fails_at_once_naming_its_cause(front, kind):
    for url, cause in rejected_urls(kind):
        db = FRONTS[front](url, pool_size=2, retries=5)
        try:
            start = time.monotonic()
            with pytest.raises(ConnectionRejected, match=cause) as rejected:
                await ev(db.runQuery("select 1"))
            # what adb did: no retry of the call, no connect backoff begun (the next
            # attempt is not put off: a rejection is not an unreachable server)
            assert db.stats()["retries"] == 0
            assert db.stats()["connect_failures"] == 0
            # and no wait on the way: a wait for the driver's connect timeout is 10 s,
            # five retries behind the connect backoff 2.3 s at least; a rejected
            # connect takes milliseconds, a loaded machine's a few hundred at most
            assert time.monotonic() - start < 2.0
            assert "cannot reach" not in str(rejected.value)
            assert rejected.value.__cause__ is not None  # the driver's own error
            assert "wrong" not in str(rejected.value)  # never the password
        finally:
            await close(db)


@pytest.mark.parametrize("url,option", [
    ("postgresql://root@127.0.0.1/test?sslmode=bogus", "sslmode"),
    ("postgresql+psycopg://root@127.0.0.1/test?sslmode=bogus", "sslmode"),
    ("postgresql://root@127.0.0.1/test?connect_timeout=abc", "connect_timeout"),
    ("postgresql+psycopg://root@127.0.0.1/test?connect_timeout=abc", "connect_timeout"),
    ("postgresql://root@127.0.0.1:x/test", "port"),
    ("mysql://root@127.0.0.1/test?connect_timeout=abc", "connect_timeout"),
])
async def test_a_bad_option_value_fails_at_construction(front, url, option):
    with pytest.raises(InterfaceError, match=option):
        FRONTS[front](url)


@pytest.mark.parametrize("options", [
    {"url": "postgresql://root:se%00cret@127.0.0.1/test"},
    {"url": "postgresql+psycopg://root:se%00cret@127.0.0.1/test"},
    {"url": "postgresql://root@127.0.0.1/test", "password": "se\0cret"},
    {"url": "postgresql+psycopg://root@127.0.0.1/test", "application_name": "a\0b"},
])
async def test_a_nul_character_for_libpq_fails_at_construction_naming_the_option(front, options):
    """libpq's strings end at a NUL: psycopg2 failed every connect with a ValueError (the
    pool took it for a server away, and retried for good), psycopg cut the value short."""
    options = dict(options)
    url = options.pop("url")
    with pytest.raises(InterfaceError, match="holds a NUL character") as caught:
        FRONTS[front](url, **options)
    assert "cret" not in str(caught.value) and "a\0b" not in str(caught.value)
    assert next(iter(options), "password") + "=" in str(caught.value)


async def test_a_bad_port_keyword_fails_at_construction(front):
    for url in ("postgresql://root@127.0.0.1/test", "postgresql+psycopg://root@127.0.0.1/test",
                "mysql://root@127.0.0.1/test"):
        with pytest.raises(InterfaceError, match="port"):
            FRONTS[front](url, port="x")


async def test_an_unreachable_server_is_retried_and_the_first_failure_has_its_cause(front):
    db = FRONTS[front]("postgresql://root@127.0.0.1:1/test", pool_size=1)  # nothing listens
    try:
        for _ in range(2):  # the first call (after the warm-up failed) and a later one
            with pytest.raises(ServerUnavailable) as failed:
                await ev(db.runQuery("select 1"))
            assert failed.value.__cause__ is not None
    finally:
        await close(db)


# -- 5. unknown keywords: refused at construction, with the nearest valid name ----------

@pytest.mark.parametrize("url", ["sqlite://", "postgresql://root@127.0.0.1/test",
                                 "postgresql+psycopg://root@127.0.0.1/test",
                                 "mysql://root@127.0.0.1/test"])
async def test_a_typo_of_an_option_names_it_and_the_option_meant(front, url):
    with pytest.raises(InterfaceError, match=r"'pool_sise' \(did you mean 'pool_size'\?\)"):
        FRONTS[front](url, pool_sise=3)
    with pytest.raises(InterfaceError, match=r"'statment_timeout' \(did you mean "
                                             r"'statement_timeout'\?\)"):
        FRONTS[front](url, statment_timeout=1)


# -- 6. None is not the embedded default -------------------------------------------------

async def test_none_as_the_url_says_how_to_ask_for_the_embedded_default(front):
    with pytest.raises(InterfaceError, match=r"URL is None.*Database\(\).*embedded default"):
        FRONTS[front](os.environ.get("ADB_TEST_SURELY_UNSET_VARIABLE"))
    db = FRONTS[front]()  # no URL: the embedded default
    try:
        assert await ev(db.runQuery("select 1")) == [(1,)]
        assert inspect.signature(adb.sync.Database).parameters["url"].default is adb.EMBEDDED
    finally:
        await close(db)


# -- 7. Tornado's Database binds to the loop of its first call --------------------------

def test_a_tornado_database_made_before_asyncio_run_serves():
    db = adb.tornado.Database("sqlite://")  # Tornado 6's start: the loop comes later

    async def main():
        assert await db.runQuery("select 1") == [(1,)]
        assert db.ioloop is IOLoop.current()
        await db.close()
    asyncio.run(main())


# -- 8. connect(): start-up fails at start-up --------------------------------------------

async def test_connect_opens_a_connection_now_and_raises_the_real_error(front, target):
    db = FRONTS[front](target.url, pool_size=2)
    try:
        assert await ev(db.connect()) is None
        assert db.stats()["connected"] >= 1
    finally:
        await close(db)
    url, cause = rejected_urls(target.kind if target.name != "psycopg" else "psycopg")[0]
    bad = FRONTS[front](url, pool_size=2)
    try:
        with pytest.raises(ConnectionRejected, match=cause):
            await ev(bad.connect())
    finally:
        await close(bad)


async def test_entering_a_database_connects_and_closes_it_when_that_fails(target):
    async with adb.Database(target.url, pool_size=2) as db:
        assert db.stats()["connected"] >= 1
    url, cause = rejected_urls(target.kind if target.name != "psycopg" else "psycopg")[0]
    entered = adb.Database(url, pool_size=2)
    with pytest.raises(ConnectionRejected, match=cause):
        async with entered:
            pytest.fail("entered a Database that cannot connect")
    assert entered.closed
    with pytest.raises(ConnectionRejected, match=cause):
        with adb.sync.Database(url, pool_size=2):
            pytest.fail("entered a Database that cannot connect")


# -- 9. isolation levels and read-only transactions, tested with a real anomaly ----------

async def write_skew(db, table, isolation):
    """Two doctors on call; each transaction counts those on call and, seeing two,
    takes itself off; each waits (a second at most) for the other to have counted
    before it writes. Both committing is the write skew. Returns how many of the
    two transactions failed, and how many doctors are left on call."""
    await ev(db.runOperation(f"delete from {table}"))
    await ev(db.runOperation(db.target.sql(f"insert into {table} values (%s, 1), (%s, 1)"), (1, 2)))

    async def call(method, *args, **kwargs):
        if blocking(db):
            return await asyncio.to_thread(method, *args, **kwargs)
        return await ev(method(*args, **kwargs))
    counted = {1: asyncio.Event(), 2: asyncio.Event()}
    count = f"select count(*) from {table} where on_call = 1"

    async def one(me, other):
        tx = await call(db.beginTransaction, isolation=isolation)
        try:
            on_call = (await call(tx.runQuery, count))[0][0]
            counted[me].set()
            try:  # SQLite: the other waits for this one's end at its BEGIN
                await asyncio.wait_for(counted[other].wait(), 1.0)
            except asyncio.TimeoutError:
                pass
            if on_call >= 2:
                await call(tx.runOperation,
                           db.target.sql(f"update {table} set on_call = 0 where id = %s"), (me,))
            await call(tx.commit)
        finally:
            if tx.active:
                await call(tx.rollback)
    outcomes = await asyncio.gather(one(1, 2), one(2, 1), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            assert isinstance(outcome, (db.dbapi.Error, TransactionError)), outcome
    left = (await ev(db.runQuery(count)))[0][0]
    return sum(isinstance(o, BaseException) for o in outcomes), left


async def test_serializable_refuses_the_write_skew_that_read_committed_allows(db):
    table = db.table + "_oncall"
    await ev(db.runOperation(f"create table {table} (id int primary key, on_call int)"))
    try:
        failed, left = await write_skew(db, table, "serializable")
        assert left >= 1  # never both off call
        if db.target.kind != "sqlite":
            assert failed >= 1  # the server refused one of them
            failed, left = await write_skew(db, table, "read committed")
            assert (failed, left) == (0, 0)  # the anomaly: both committed
    finally:
        await ev(db.runOperation(f"drop table {table}"))


async def in_context(db, body, **options):
    """Run ``body(tx, wait)`` in ``db.transaction(**options)``, in each front-end's own
    idiom; ``body`` awaits ``wait(call)`` for each call on the handle (a Deferred is
    awaited as it is inside Twisted's coroutine, a plain value passes through)."""
    if blocking(db):
        def run():
            with db.transaction(**options) as tx:
                asyncio.run(body(tx, ev))
        return await asyncio.to_thread(run)
    # inside Twisted's coroutine runner or a trio task, a call's result is awaited as it is
    native = isinstance(db, (adb.twisted.Database, adb.trio.Database))

    async def block():
        async with db.transaction(**options) as tx:
            await body(tx, _same if native else ev)
    return await in_front(db, block())


async def _same(awaitable):
    return await awaitable


async def test_a_read_only_transaction_refuses_a_write(db):
    insert = db.target.sql(f"insert into {db.table} values (%s, %s)")

    async def write(tx, wait):
        await wait(tx.runOperation(insert, (1, "x")))
    with pytest.raises(db.dbapi.Error):
        await in_context(db, write, read_only=True)
    assert await ev(db.runQuery(f"select count(*) from {db.table}")) == [(0,)]
    assert await ev(db.runOperation(insert, (2, "y"))) == 1  # the connection writes again


@pytest.mark.parametrize("name", ["postgresql", "psycopg"])
async def test_the_isolation_level_is_the_one_asked_for(front, name):
    require_server("postgresql")
    db = FRONTS[front](psycopg_url() if name == "psycopg" else URLS["postgresql"], pool_size=1)
    try:
        for level in ("read committed", "repeatable read", "serializable"):
            tx = await ev(db.beginTransaction(isolation=level.upper().replace(" ", "_")))
            try:
                assert await ev(tx.runQueryValue("show transaction_isolation")) == level
            finally:
                await ev(tx.rollback())

        async def reads(tx, wait):
            assert await wait(tx.runQueryValue("show transaction_read_only")) == "on"
            assert await wait(tx.runQueryValue("show transaction_isolation")) == "serializable"
        await in_context(db, reads, isolation="serializable", read_only=True)
    finally:
        await close(db)


async def test_isolation_nonsense_is_refused_before_anything_runs(front):
    db = await opened(front, "sqlite://")
    try:
        with pytest.raises(InterfaceError, match="isolation must be one of"):
            db.transaction(isolation="snapshot")
        with pytest.raises(InterfaceError, match="isolation must be one of"):
            await ev(db.beginTransaction(isolation="serialisable"))
        with pytest.raises(InterfaceError, match="read_only must be True or False"):
            await ev(db.beginTransaction(read_only="no"))
        assert db.stats()["open_transactions"] == 0
    finally:
        await close(db)


# -- 10. one row, one value ----------------------------------------------------------------

async def test_run_query_row_and_value_on_the_database_and_on_a_handle(db):
    ins = db.target.sql(f"insert into {db.table} values (%s, %s)")
    await ev(db.runMany(ins, [(1, "one"), (2, "two")]))
    sql = db.target.sql(f"select userid, data from {db.table} where userid = %s")
    assert await ev(db.runQueryRow(sql, (1,))) == (1, "one")
    assert await ev(db.runQueryRow(sql, (3,))) is None
    assert await ev(db.runQueryRow(sql, (2,), row_factory="dict")) == {"userid": 2, "data": "two"}
    assert await ev(db.runQueryValue(f"select count(*) from {db.table}")) == 2
    assert await ev(db.runQueryValue(sql, (3,))) is None
    tx = await ev(db.beginTransaction())
    try:
        assert await ev(tx.runQueryRow(sql, (2,))) == (2, "two")
        assert await ev(tx.runQueryValue(db.target.sql(f"select data from {db.table} "
                                                       "where userid = %s"), (1,))) == "one"
        assert await ev(db.runQueryValue(f"select count(*) from {db.table}", tx=tx)) == 2
    finally:
        await ev(tx.rollback())


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
async def test_run_query_value_of_a_row_of_no_column_names_the_problem(front, driver):
    """PostgreSQL's ``select`` of nothing gives one row of no column: ``runQueryValue``
    has no first column to give and says so (it raised a bare IndexError)."""
    require_server("postgresql")
    db = FRONTS[front](psycopg_url() if driver == "psycopg" else URLS["postgresql"],
                       pool_size=1)
    try:
        assert await ev(db.runQueryRow("select")) == ()
        with pytest.raises(ValueError, match="row of no column"):
            await ev(db.runQueryValue("select"))
        assert await ev(db.runQueryValue("select 1 where false")) is None
        assert await ev(db.runQueryValue("select 2")) == 2  # the connection serves on
    finally:
        await close(db)


# -- 11. runInteraction refuses a coroutine function -----------------------------------------

async def test_run_interaction_refuses_a_coroutine_function_before_anything_runs(db):
    async def fn(cursor):
        cursor.execute(f"delete from {db.table}")
    with pytest.raises(TypeError, match="coroutine function"):
        db.runInteraction(fn)
    assert db.stats()["completed"] == 2  # the fixture's two statements: nothing more ran
    with pytest.raises(TypeError, match="cannot await"):  # one that returns a coroutine
        await ev(db.runInteraction(lambda cursor: fn(cursor)))


# -- 12. every failed call carries the driver's error (see the unreachable server above) ---

# -- 13. the embedded default leaves no file -------------------------------------------------

def embedded_files():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "adb-*.db*")))


async def test_the_embedded_default_leaves_no_file_behind(front, tmp_path, monkeypatch):
    # a temporary directory of its own: other processes' embedded files come and go in
    # the shared one (the tests run in several processes)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = embedded_files()
    for options in ({"pool_size": 0}, {"pool_size": -1}, {"timeout": -1}):
        with pytest.raises(InterfaceError):
            FRONTS[front](**options)
    assert embedded_files() - before == set()
    with pytest.warns(ResourceWarning, match="unclosed"):
        db = FRONTS[front]()
        await ev(db.runOperation("create table t (x int)"))
        del db
        gc.collect()
    deadline = time.monotonic() + 20  # the workers' exit, on a loaded machine too
    while embedded_files() - before and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        gc.collect()
    assert embedded_files() - before == set()


# -- 14. a cancel that was asked for is no WARNING, and names its statement --------------

async def test_a_statement_timeout_is_logged_at_info_naming_the_statement(front, target, caplog):
    db = await opened(front, target.url, pool_size=1)
    marker = "adb_first_hour_marker"
    sql = slow_sql(target, 3).replace("select", f"select /* {marker} */", 1)
    try:
        with caplog.at_level(logging.DEBUG, logger="adb"):
            with pytest.raises(adb.StatementTimeout):
                await ev(db.runQuery(sql, statement_timeout=0.2))
        cancels = [r for r in caplog.records if "statement_timeout passed" in r.getMessage()]
        assert cancels and all(r.levelno <= logging.INFO for r in cancels)
        assert marker in cancels[0].getMessage()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        await close(db)


# -- 15. a missing front-end dependency names its extra ----------------------------------

@pytest.mark.parametrize("module,extra", [("tornado", "tornado"), ("twisted", "twisted")])
def test_a_missing_framework_names_the_extra_to_install(module, extra):
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            f"import adb.{module}\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode != 0
    assert "ModuleNotFoundError" in run.stderr
    assert f"pip install 'adb-async[{extra}]'" in run.stderr


# -- 16. a placeholder of another paramstyle is explained --------------------------------

async def test_a_placeholder_of_another_paramstyle_gets_a_note(front, target):
    db = await opened(front, target.url, pool_size=1)
    wrong = "select %s" if target.kind == "sqlite" else "select ?"
    try:
        with pytest.raises(db.dbapi.Error) as failed:
            await ev(db.runQuery(wrong, (1,)))
        notes = getattr(failed.value, "__notes__", [])
        assert any("db.paramstyle" in note and db.paramstyle in note for note in notes), notes
    finally:
        await close(db)


# -- 17. every public method typed per front-end: tests/typing/usage.py, checked by mypy ---

def test_typed_usage_covers_the_new_calls_and_the_handles():
    with open(os.path.join(ROOT, "tests", "typing", "usage.py")) as f:
        usage = f.read()
    for name in ("connect()", "runQueryRow", "runQueryValue", "isolation=", "read_only="):
        assert name in usage
    for front in ("adb.asyncio.Transaction", "adb.sync.Transaction", "adb.twisted.Transaction"):
        assert front in usage


# -- 18. a transaction pooler found by its symptom: see tests/topologies/test_pgbouncer.py ----------

def test_the_constructor_shows_every_option_to_an_ide():
    parameters = inspect.signature(adb.Database.__init__).parameters
    assert "Unpack[Options]" in str(parameters["options"])
