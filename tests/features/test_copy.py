"""Bulk loads and exports: ``copy_in`` and ``copy_out`` on every front-end x every driver.
The loader is adb/bulk.py (its steps, chunks and rollback); test_copy_paths.py has
how each driver sends a load (adb/copytext.py, the drivers' copy paths).

``db`` (conftest) is asyncio, Tornado, adb.sync or Twisted on psycopg2, psycopg 3,
PyMySQL or sqlite3, with an empty table ``db.table`` (userid int primary key, data
varchar(100)). This module adds one target to conftest's: ``mysql_infile``, MariaDB
opened with ``local_infile=1``, where copy_in uses ``LOAD DATA LOCAL INFILE``
instead of multi-row INSERTs. ``ev()`` gives any front-end's value.

A Twisted stream is iterated in a coroutine run by ``Deferred.fromCoroutine`` (it
awaits Deferreds); its ``fetch()`` returns a Deferred, which ``ev()`` awaits.
"""

import asyncio
import io
import threading
import time
import uuid

import pytest
import pytest_asyncio
from twisted.internet import defer
from twisted.internet.asyncioreactor import AsyncioSelectorReactor

import adb
import adb.sync
import adb.twisted

from .. import conftest
from ..conftest import FRONTS, Target, close, ev, require_server, server_kwargs

ASYNC_FRONTS = [name for name in FRONTS if name != "sync"]

#: the drivers copy_in runs on: name -> server kind (MariaDB twice: INSERTs, LOAD DATA)
TARGETS = {"postgresql": "postgresql", "psycopg": "postgresql", "mysql": "mysql",
           "mysql_infile": "mysql", "mysqldb": "mysql", "mysqldb_infile": "mysql",
           "sqlite": "sqlite"}
SERVER_TARGETS = [name for name, kind in TARGETS.items() if kind != "sqlite"]


def infile_url(url: str) -> str:
    return url + ("&" if "?" in url else "?") + "local_infile=1"


def url_of(name, tmp_path):
    if name == "sqlite":
        return f"sqlite:///{tmp_path}/test.db"
    driver, infile, _ = name.partition("_infile")
    url = conftest.make_target(driver, tmp_path).url
    return infile_url(url) if infile else url


@pytest.fixture(params=list(TARGETS))
def target(request, tmp_path):
    """conftest's targets plus ``mysql_infile`` (overrides conftest's ``target``, so
    conftest's ``db`` runs on these)."""
    name = request.param
    return Target(TARGETS[name], url_of(name, tmp_path), name)


def new_table_name() -> str:
    return "adb_copy_" + uuid.uuid4().hex[:10]


@pytest_asyncio.fixture
async def table_b(db):
    """A second empty table like ``db.table``, dropped after the test."""
    name = new_table_name()
    await ev(db.runOperation(
        f"create table {name} (userid int not null primary key, data varchar(100))"))
    yield name
    if not db.closed:
        await ev(db.runOperation(f"drop table if exists {name}"))


def is_sync(db):
    return isinstance(db, adb.sync.Database)


def is_twisted(db):
    return isinstance(db, adb.twisted.Database)


async def table_rows(db, table=None):
    rows = await ev(db.runQuery(f"select userid, data from {table or db.table} order by userid"))
    return [tuple(row) for row in rows]


async def summary(db, table=None):
    """(row count, key sum) of a table: 0 rows gives (0, 0)."""
    rows = await ev(db.runQuery(f"select count(*), coalesce(sum(userid), 0) from {table or db.table}"))
    return int(rows[0][0]), int(rows[0][1])


async def value_of(db, userid, table=None):
    rows = await ev(db.runQuery(
        db.target.sql(f"select data from {table or db.table} where userid = %s"), (userid,)))
    return [row[0] for row in rows]


async def run_coroutine(db, coroutine_function):
    """Run ``coroutine_function()`` as the front-end's code would: on Twisted in a
    coroutine driven by Deferred.fromCoroutine, elsewhere as a plain coroutine."""
    if is_twisted(db):
        return await ev(defer.Deferred.fromCoroutine(coroutine_function()))
    return await coroutine_function()


async def read_lines(db, stream):
    """Every line of a copy_out stream, iterated the way its front-end iterates."""
    if is_sync(db):
        return list(stream)

    async def collect():
        return [line async for line in stream]
    return await run_coroutine(db, collect)


async def settle(db, seconds=20.0):
    """The stats once no worker is pinned and no stream open, waiting up to ``seconds``
    (a stream that failed is rolled back by a job nobody waits for). Everywhere else
    the worker is free when the call returns, and the tests read stats() at once."""
    for _ in range(int(seconds / 0.02)):
        stats = db.stats()
        if stats["pinned"] == 0 and stats["streams"] == 0:
            return stats
        await asyncio.sleep(0.02)
    return db.stats()


#: values that need the text format's escapes, and what copy_out writes for them
SPECIAL = [
    (1, "tab\there"),
    (2, "new\nline"),
    (3, "back\\slash"),
    (4, None),
    (5, "\\N"),           # the two characters, not NULL
    (6, ""),              # empty, not NULL
    (7, "cr\rlf\n"),
    (8, "naïve café"),
    (9, "a\t\\t\n\\n"),   # escapes next to what looks like one
]
SPECIAL_LINES = [
    "1\ttab\\there\n",
    "2\tnew\\nline\n",
    "3\tback\\\\slash\n",
    "4\t\\N\n",
    "5\t\\\\N\n",
    "6\t\n",
    "7\tcr\\rlf\\n\n",
    "8\tnaïve café\n",
    "9\ta\\t\\\\t\\n\\\\n\n",
]


# -- copy_in: what it loads ------------------------------------------------------------

async def test_copy_in_a_list_loads_exactly_its_rows(db):
    rows = SPECIAL + [(i, f"row {i}") for i in range(100, 200)]
    assert await ev(db.copy_in(db.table, rows)) == len(rows)
    assert await table_rows(db) == sorted(rows)
    stats = db.stats()
    assert stats["pinned"] == 0 and stats["open_transactions"] == 0


async def test_copy_in_an_empty_source_loads_nothing(db):
    assert await ev(db.copy_in(db.table, [])) == 0
    assert await ev(db.copy_in(db.table, io.StringIO(""))) == 0
    assert await summary(db) == (0, 0)


async def test_copy_in_a_generator_is_read_in_a_worker_thread(db):
    n = 12001  # more than two chunks of every driver's chunking
    readers = set()

    def rows():
        for i in range(n):
            readers.add(threading.get_ident())
            yield (i, f"g{i}")
    assert await ev(db.copy_in(db.table, rows())) == n
    assert await summary(db) == (n, n * (n - 1) // 2)
    for i in (0, 4999, 5000, 7000, 12000):
        assert await value_of(db, i) == [f"g{i}"]
    # read by one thread, which is not the caller's (nor the loop's)
    assert len(readers) == 1 and threading.get_ident() not in readers


@pytest.mark.parametrize("front", ASYNC_FRONTS)
async def test_copy_in_an_async_generator_is_read_on_the_loop(db):
    n = 12001  # three chunks of 5000
    readers = set()

    async def rows():
        for i in range(n):
            if i % 1000 == 0:  # a real source awaits something now and then
                await (defer.succeed(None) if is_twisted(db) else asyncio.sleep(0))
            readers.add(threading.get_ident())
            yield (i, None if i % 3 == 0 else f"a{i}")
    assert await ev(db.copy_in(db.table, rows())) == n
    assert await summary(db) == (n, n * (n - 1) // 2)
    assert await value_of(db, 0) == [None]
    assert await value_of(db, 5000) == ["a5000"]
    assert await value_of(db, 12000) == [None]
    assert await value_of(db, 11999) == ["a11999"]
    assert readers == {threading.get_ident()}  # the test's own thread runs the loop
    assert db.stats()["pinned"] == 0


FILE_TEXT = ("1\ttab\\there\n"
             "2\tnew\\nline\n"
             "3\tback\\\\slash\n"
             "4\t\\N\n"
             "5\t\\\\N\n"
             "6\t\n"
             "7\tnaïve\n"
             "8\tlast line without its newline")
FILE_ROWS = [(1, "tab\there"), (2, "new\nline"), (3, "back\\slash"), (4, None), (5, "\\N"),
             (6, ""), (7, "naïve"), (8, "last line without its newline")]


async def test_copy_in_a_file_of_text_format_lines(db, table_b):
    assert await ev(db.copy_in(db.table, io.StringIO(FILE_TEXT))) == len(FILE_ROWS)
    assert await table_rows(db) == FILE_ROWS
    assert await ev(db.copy_in(table_b, io.BytesIO(FILE_TEXT.encode()))) == len(FILE_ROWS)
    assert await table_rows(db, table_b) == FILE_ROWS


@pytest.mark.parametrize("front", ["asyncio", "sync"])
async def test_copy_in_a_file_longer_than_one_read(db):
    """More than 2 MB of text: the readers cut it in pieces (64 KiB, 2 MiB for LOAD
    DATA) and a line cut by a piece's end must still load whole."""
    n = 21000
    text = "".join(f"{i}\t{'x' * 90}{i}\n" for i in range(n))
    assert len(text) > 2 * (1 << 20)
    assert await ev(db.copy_in(db.table, io.StringIO(text))) == n
    assert await summary(db) == (n, n * (n - 1) // 2)
    for i in (0, 700, 20000, n - 1):
        assert await value_of(db, i) == ["x" * 90 + str(i)]


# every line is 100 bytes and each two-byte 'é' starts at an odd offset: every
# read of an even number of bytes that ends inside the data splits a character
MULTIBYTE_LINES = 21000


def multibyte_file() -> bytes:
    data = "".join(f"{i:06d}\t" + "é" * 46 + "\n" for i in range(MULTIBYTE_LINES)).encode()
    assert len(data) == MULTIBYTE_LINES * 100
    assert data[65535:65537].decode() == "é"          # 64 KiB cuts a character
    assert data[(1 << 21) - 1:(1 << 21) + 1].decode() == "é"  # and so does 2 MiB
    return data


@pytest.mark.parametrize("target", list(TARGETS), indirect=True)
async def test_copy_in_a_bytes_file_with_characters_across_read_boundaries(target):
    db = adb.Database(target.url, pool_size=1)
    table = new_table_name()
    try:
        await db.runOperation(
            f"create table {table} (userid int not null primary key, data varchar(100))")
        try:
            count = await db.copy_in(table, io.BytesIO(multibyte_file()))
        finally:
            rows = await db.runQuery(f"select count(*), count(distinct data), min(data) "
                                     f"from {table}")
            assert db.stats()["pinned"] == 0
        assert count == MULTIBYTE_LINES
        assert tuple(rows[0]) == (MULTIBYTE_LINES, 1, "é" * 46)
    finally:
        await db.runOperation(f"drop table if exists {table}")
        await db.close()


POSTGRES_ESCAPES = "1\toct\\101\n2\tbs\\b\n3\tff\\f\n4\tvt\\v\n5\tq\\q\n"
POSTGRES_ESCAPED = [(1, "octA"), (2, "bs\b"), (3, "ff\f"), (4, "vt\v"), (5, "qq")]


@pytest.mark.parametrize("target", list(TARGETS), indirect=True)
async def test_copy_in_reads_postgresql_escapes_alike_everywhere(target):
    db = adb.sync.Database(target.url, pool_size=1)
    table = new_table_name()
    db.runOperation(f"create table {table} (userid int not null primary key, data varchar(100))")
    try:
        assert db.copy_in(table, io.StringIO(POSTGRES_ESCAPES)) == 5
        rows = [tuple(row) for row in db.runQuery(f"select userid, data from {table} order by userid")]
        assert rows == POSTGRES_ESCAPED
    finally:
        db.runOperation(f"drop table if exists {table}")
        db.close()


async def test_copy_in_a_subset_of_columns(db):
    table = new_table_name()
    await ev(db.runOperation(f"create table {table} (userid int not null primary key, "
                             f"data varchar(100), note varchar(20) default 'dflt')"))
    try:
        assert await ev(db.copy_in(table, [(i,) for i in range(10)], ["userid"])) == 10
        # listed in another order than the table's
        assert await ev(db.copy_in(table, [("x10", 10), ("x11", 11)], ("data", "userid"))) == 2
        assert await ev(db.copy_in(table, io.StringIO("12\tn12\n13\t\\N\n"),
                                   columns=["userid", "note"])) == 2
        rows = await ev(db.runQuery(f"select userid, data, note from {table} order by userid"))
        assert [tuple(row) for row in rows] == (
            [(i, None, "dflt") for i in range(10)]
            + [(10, "x10", "dflt"), (11, "x11", "dflt"), (12, None, "n12"), (13, None, None)])
    finally:
        await ev(db.runOperation(f"drop table if exists {table}"))


# -- copy_in: one transaction -----------------------------------------------------------

def duplicate_error(db):
    """The error a duplicate key fails a load with, per driver: IntegrityError from
    psycopg2 and psycopg (UniqueViolation), PyMySQL's INSERTs (1062) and sqlite3;
    DataError on MariaDB with local_infile=1, raised by adb itself."""
    if db.target.name.endswith("_infile"):
        return db.dbapi.DataError  # LOAD DATA LOCAL skips it with a warning: adb fails the load
    return db.dbapi.IntegrityError


def with_duplicate(n, at):
    """Rows 0..n-1 whose row ``at`` repeats key 3."""
    for i in range(n):
        yield (3 if i == at else i, f"d{i}")


async def check_failed_cleanly(db, excinfo):
    assert await summary(db) == (0, 0)
    stats = db.stats()
    assert stats["pinned"] == 0 and stats["open_transactions"] == 0
    assert await ev(db.runQuery("select 1")) in ([(1,)], [[1]])
    # the Database loads again
    assert await ev(db.copy_in(db.table, [(1, "after")])) == 1
    assert await table_rows(db) == [(1, "after")]
    if db.target.name.endswith("_infile"):
        assert excinfo.type is db.dbapi.DataError
        assert "LOAD DATA loaded" in str(excinfo.value) and "Duplicate entry" in str(excinfo.value)
    else:
        assert not isinstance(excinfo.value, db.dbapi.DataError)


@pytest.mark.parametrize("source", ["generator", "file"])
async def test_a_load_failing_in_its_second_chunk_leaves_no_row(db, source):
    n = 12000
    if source == "generator":
        rows = with_duplicate(n, 7000)
    else:
        rows = io.StringIO("".join(f"{userid}\t{data}\n" for userid, data in with_duplicate(n, 7000)))
    with pytest.raises(duplicate_error(db)) as excinfo:
        await ev(db.copy_in(db.table, rows))
    await check_failed_cleanly(db, excinfo)


@pytest.mark.parametrize("front", ASYNC_FRONTS)
async def test_an_async_load_failing_in_its_second_chunk_leaves_no_row(db):
    async def rows():
        for row in with_duplicate(12000, 7000):
            yield row
    with pytest.raises(duplicate_error(db)) as excinfo:
        await ev(db.copy_in(db.table, rows()))
    await check_failed_cleanly(db, excinfo)


class SourceBroke(Exception):
    pass


async def test_a_source_that_raises_fails_the_load_with_its_error(db):
    def rows():
        for i in range(9000):
            if i == 7000:
                raise SourceBroke("the source broke at row 7000")
            yield (i, "s")
    with pytest.raises(SourceBroke, match="row 7000"):
        await ev(db.copy_in(db.table, rows()))
    assert await summary(db) == (0, 0)
    assert db.stats()["pinned"] == 0


@pytest.mark.parametrize("front", ASYNC_FRONTS)
async def test_an_async_source_that_raises_fails_the_load_with_its_error(db):
    async def rows():
        for i in range(9000):
            if i == 7000:
                raise SourceBroke("the async source broke at row 7000")
            yield (i, "s")
    with pytest.raises(SourceBroke, match="row 7000"):
        await ev(db.copy_in(db.table, rows()))
    assert await summary(db) == (0, 0)
    assert db.stats()["pinned"] == 0


KILL_AFTER = 22000  # after the first LOAD DATA (20000 rows) and four COPY/INSERT chunks
KILL_TOTAL = 30000


def backend_sql(kind):
    return "select pg_backend_pid()" if kind == "postgresql" else "select connection_id()"


def kill_backend(side, kind, backend):
    """Kill ``backend`` from ``side`` (an adb.sync.Database); True once it is gone."""
    if kind == "postgresql":
        if side.runQuery("select pg_terminate_backend(%s)", (backend,))[0][0] is not True:
            return False
        alive = "select count(*) from pg_stat_activity where pid = %s"
    else:
        side.runOperation("KILL %s", (backend,))
        alive = "select count(*) from information_schema.processlist where id = %s"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if side.runQuery(alive, (backend,))[0][0] == 0:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("target", SERVER_TARGETS, indirect=True)
async def test_a_backend_killed_mid_load_leaves_nothing_half_loaded(front, target):
    """The source (read by the worker) kills the loading connection after 22000 rows,
    some of them already sent; the load fails with ConnectionLost and none remain."""
    db = FRONTS[front](target.url, pool_size=1)  # one worker: its connection loads
    side = adb.sync.Database(target.url, pool_size=1)
    table = new_table_name()
    side.runOperation(f"create table {table} (userid int not null primary key, data varchar(100))")
    try:
        backend = (await ev(db.runQuery(backend_sql(target.kind))))[0][0]
        kills = []

        def rows():
            for i in range(KILL_TOTAL):
                if i == KILL_AFTER:
                    kills.append(kill_backend(side, target.kind, backend))
                yield (i, "k")
        with pytest.raises(adb.ConnectionLost) as excinfo:
            await ev(db.copy_in(table, rows()))
        assert kills == [True]
        if is_twisted(db):
            assert isinstance(excinfo.value, adb.twisted.ConnectionLost)
        assert side.runQuery(f"select count(*) from {table}")[0][0] == 0
        # the Database serves the next call, on a new connection
        assert db.stats()["pinned"] == 0
        assert (await ev(db.runQuery(backend_sql(target.kind))))[0][0] != backend
        assert await ev(db.copy_in(table, [(1, "again")])) == 1
        assert side.runQuery(f"select userid, data from {table}") in ([(1, "again")],
                                                                      [[1, "again"]])
    finally:
        if not db.closed:
            await close(db)
        side.runOperation(f"drop table if exists {table}")
        side.close()


@pytest.mark.parametrize("commit", [True, False])
async def test_copy_in_inside_a_transaction_is_part_of_it(db, commit):
    tx = await ev(db.beginTransaction())
    assert await ev(db.runOperation(
        db.target.sql(f"insert into {db.table} (userid, data) values (%s, %s)"), (0, "first"), tx)) == 1
    assert await ev(db.copy_in(db.table, [(i, f"t{i}") for i in range(1, 101)], tx=tx)) == 100
    assert await ev(db.copy_in(db.table, io.StringIO("101\tfile\n"), None, tx)) == 1
    seen = await ev(db.runQuery(f"select count(*), sum(userid) from {db.table}", None, tx))
    assert tuple(seen[0]) == (102, sum(range(102)))
    assert db.stats()["pinned"] == 1  # the transaction's worker, nothing more
    if commit:
        await ev(db.commitTransaction(tx))
        assert await summary(db) == (102, sum(range(102)))
        assert await value_of(db, 101) == ["file"]
    else:
        await ev(db.rollbackTransaction(tx))
        assert await summary(db) == (0, 0)
    assert db.stats()["pinned"] == 0


# -- copy_out ---------------------------------------------------------------------------

async def fill(db, rows, table=None):
    sql = db.target.sql(f"insert into {table or db.table} (userid, data) values (%s, %s)")
    assert await ev(db.runMany(sql, rows)) == len(rows)


async def test_copy_out_writes_the_text_format(db):
    await fill(db, SPECIAL + [(10, "ten"), (11, "eleven")])
    stream = db.copy_out(db.target.sql(f"select userid, data, userid * 10 from {db.table} "
                                       f"where userid < %s order by userid"), (10,))
    lines = await read_lines(db, stream)
    assert lines == [line[:-1] + f"\t{userid * 10}\n"
                     for (userid, _), line in zip(SPECIAL, SPECIAL_LINES)]
    assert all(isinstance(line, str) for line in lines)
    stats = db.stats()
    assert stats["streams"] == 0 and stats["pinned"] == 0 and stats["open_transactions"] == 0


async def test_copy_out_lines_load_back_with_copy_in(db, table_b):
    rows = SPECIAL + [(i, f"r{i}\t{i}") for i in range(100, 1100)]
    await fill(db, rows)
    lines = await read_lines(db, db.copy_out(f"select userid, data from {db.table}", batch=300))
    assert len(lines) == len(rows)
    assert await ev(db.copy_in(table_b, io.StringIO("".join(lines)))) == len(rows)
    assert await table_rows(db, table_b) == await table_rows(db) == sorted(rows)


async def test_copy_out_in_small_batches(db):
    await fill(db, [(i, f"b{i}") for i in range(5)])
    sql = f"select userid, data from {db.table} order by userid"
    expected = [f"{i}\tb{i}\n" for i in range(5)]
    assert await read_lines(db, db.copy_out(sql, batch=2)) == expected
    stats = db.stats()
    assert stats["streams"] == 0 and stats["pinned"] == 0
    # fetch(): a batch at a time, [] at the end (a Deferred on Twisted)
    stream = db.copy_out(sql, batch=2)
    batches = []
    while True:
        batch = await ev(stream.fetch())
        if not batch:
            break
        batches.append(batch)
    assert batches == [expected[0:2], expected[2:4], expected[4:5]]
    assert await ev(stream.fetch()) == []
    stats = db.stats()
    assert stats["streams"] == 0 and stats["pinned"] == 0 and stats["open_transactions"] == 0


#: fifty numbered rows without a table (so a worker left pinned locks no table)
FIFTY = ("with recursive c (x) as (select 1 union all select x + 1 from c where x < 50) "
         "select x, 'e' from c order by x")


async def close_within(db, seconds=10.0):
    """Close ``db``, failing (not hanging) if the close does not end in time (a worker
    left pinned by a transaction nobody can end is never stopped)."""
    if is_sync(db):
        closed = threading.Event()

        def close_it():
            db.close(timeout=1)
            closed.set()
        threading.Thread(target=close_it, daemon=True).start()
        done = await asyncio.get_running_loop().run_in_executor(None, closed.wait, seconds)
    else:
        try:
            await asyncio.wait_for(ev(db.close(timeout=1)), seconds)
            done = True
        except asyncio.TimeoutError:
            done = False
    assert done, f"close() of {db!r} did not end within {seconds} s"


@pytest.mark.parametrize("front, target", [
    *((front, name) for front in FRONTS
      for name in TARGETS),
], indirect=["target"])
async def test_copy_out_closed_early_frees_its_worker(front, target):
    # a Database of its own, closed with a time limit (see close_within)
    db = FRONTS[front](target.url, pool_size=2)
    db.target = target
    try:
        if is_sync(db):
            with db.copy_out(FIFTY, batch=5) as stream:
                first = stream.fetch()
        elif is_twisted(db):
            stream = db.copy_out(FIFTY, batch=5)
            first = await ev(stream.fetch())
            closing = stream.close()
            assert isinstance(closing, defer.Deferred)  # fired once the worker is free
            await ev(closing)
        else:
            async with db.copy_out(FIFTY, batch=5) as stream:
                first = await stream.fetch()
        assert first == [f"{i}\te\n" for i in range(1, 6)]
        stats = db.stats()
        assert stats["streams"] == 0 and stats["pinned"] == 0
        assert len(await read_lines(db, db.copy_out(FIFTY))) == 50  # and the Database goes on
    finally:  # a worker left pinned never stops: do not wait long for that close
        await close_within(db, 1.5 if db.stats()["pinned"] else 10.0)


async def test_copy_out_inside_a_transaction_sees_its_rows(db):
    tx = await ev(db.beginTransaction())
    await ev(db.copy_in(db.table, [(1, "in tx"), (2, None)], tx=tx))
    lines = await read_lines(db, db.copy_out(f"select userid, data from {db.table} order by userid",
                                             tx=tx))
    assert lines == ["1\tin tx\n", "2\t\\N\n"]
    await ev(db.rollbackTransaction(tx))
    assert await summary(db) == (0, 0)
    assert db.stats()["pinned"] == 0


async def test_copy_out_of_a_failing_statement_raises_and_frees_everything(db):
    stream = db.copy_out("select * from adb_copy_no_such_table")
    error = db.dbapi.OperationalError if db.target.kind == "sqlite" else db.dbapi.ProgrammingError
    with pytest.raises(error):
        await read_lines(db, stream)
    stats = await settle(db)
    assert stats["streams"] == 0 and stats["pinned"] == 0
    assert await summary(db) == (0, 0)


async def test_copy_out_of_a_failing_statement_leaves_no_open_transaction(db):
    stream = db.copy_out("select * from adb_copy_no_such_table")
    with pytest.raises(db.dbapi.Error):
        await read_lines(db, stream)
    await settle(db)
    assert db.stats()["open_transactions"] == 0


@pytest.mark.parametrize("target", ["postgresql", "psycopg"], indirect=True)
@pytest.mark.parametrize("front", ["sync"])
async def test_copy_out_of_postgresql_types_loads_back(db, request):
    """COPY's own text (psycopg 3) loads back into the same columns; so must the lines
    adb renders from psycopg2's Python values."""
    source, copy = new_table_name(), new_table_name()
    columns = "k int, j json, jb jsonb, a int[], b boolean, by bytea, n numeric, d date"
    for table in (source, copy):
        db.runOperation(f"create table {table} ({columns})")
    try:
        db.runOperation(f"insert into {source} values (1, '{{\"a\": 1}}', '{{\"k\": [1, \"x\"]}}', "
                        f"'{{1,2}}', true, '\\x0102', 1.50, '2024-01-02')")
        lines = list(db.copy_out(f"select * from {source}"))
        assert db.copy_in(copy, io.StringIO("".join(lines))) == 1
        same = db.runQuery(f"select count(*) from {source} s join {copy} c on "
                           f"s.j::text = c.j::text and s.jb = c.jb and s.a = c.a and s.b = c.b "
                           f"and s.by = c.by and s.n = c.n and s.d = c.d")
        assert same == [(1,)]
    finally:
        for table in (source, copy):
            db.runOperation(f"drop table if exists {table}")


# -- Twisted idioms ---------------------------------------------------------------------

@pytest.mark.parametrize("front", ["twisted"])
async def test_twisted_copy_in_gives_a_deferred_and_fetch_deferreds(db):
    @defer.inlineCallbacks
    def work():
        loading = db.copy_in(db.table, [(i, f"tw{i}") for i in range(7)])
        assert isinstance(loading, defer.Deferred)
        count = yield loading
        stream = db.copy_out(f"select userid, data from {db.table} order by userid", batch=3)
        batches = []
        while True:
            fetching = stream.fetch()
            assert isinstance(fetching, defer.Deferred)
            batch = yield fetching
            if not batch:
                break
            batches.append(batch)
        return count, batches
    count, batches = await ev(work())
    assert count == 7
    assert [len(batch) for batch in batches] == [3, 3, 1]
    assert sum(batches, []) == [f"{i}\ttw{i}\n" for i in range(7)]
    stats = db.stats()
    assert stats["streams"] == 0 and stats["pinned"] == 0


@pytest.mark.parametrize("front", ["twisted"])
async def test_twisted_load_failure_is_the_deferreds_errback(db):
    loading = db.copy_in(db.table, with_duplicate(12000, 7000))
    assert isinstance(loading, defer.Deferred)
    with pytest.raises(duplicate_error(db)):
        await ev(loading)
    assert await summary(db) == (0, 0)


# -- the adbapi drop-in ------------------------------------------------------------------

POOL_TARGETS = {
    "sqlite3": "sqlite",
    "psycopg2": "postgresql",
    "psycopg": "postgresql",
    "pymysql": "mysql",
    "pymysql_infile": "mysql",
}


@pytest.mark.parametrize("name", list(POOL_TARGETS))
async def test_adbapi_connection_pool_copy_in_and_copy_out(name, tmp_path):
    kind = POOL_TARGETS[name]
    if kind == "sqlite":
        kwargs = {"database": str(tmp_path / "pool.db"), "check_same_thread": False, "cp_max": 1}
    else:
        require_server(kind)
        kwargs = {**server_kwargs(kind), "cp_max": 2}
    if name == "psycopg":  # connect() gets exactly these, as under adbapi: libpq's name
        kwargs["dbname"] = kwargs.pop("database")
    if name == "pymysql_infile":
        kwargs["local_infile"] = 1
    loop = asyncio.get_running_loop()
    reactor = AsyncioSelectorReactor(loop)
    conftest._reactors.append(reactor)
    pool = adb.twisted.ConnectionPool(name.split("_")[0], cp_reactor=reactor, **kwargs)
    pool.start()
    table = new_table_name()
    try:
        await ev(pool.runOperation(
            f"create table {table} (userid int not null primary key, data varchar(100))"))
        loading = pool.copy_in(table, SPECIAL)
        assert isinstance(loading, defer.Deferred)
        assert await ev(loading) == len(SPECIAL)
        assert await ev(pool.copy_in(table, io.StringIO("100\tfrom a file\n"), ["userid", "data"])) == 1
        stream = pool.copy_out(f"select userid, data from {table} order by userid", batch=4)
        lines = []
        while True:
            batch = await ev(stream.fetch())
            if not batch:
                break
            lines.extend(batch)
        assert lines == SPECIAL_LINES + ["100\tfrom a file\n"]
        rows = await ev(pool.runQuery(f"select userid, data from {table} order by userid"))
        assert [tuple(row) for row in rows] == SPECIAL + [(100, "from a file")]
        assert pool.stats()["pinned"] == 0
    finally:
        await ev(pool.runOperation(f"drop table if exists {table}"))
        pool.close()


# -- bad input: refused at the call, before anything runs ---------------------------------

BAD_TABLES = ["t; drop table x", 5, "", None, "a b", "1abc", "x.y.z.w", b"t"]
BAD_COLUMNS = ["userid", b"userid", [], (), ["userid", "x; drop"], [5], ["user id"], 5]
BAD_SOURCES = [5, "1\tx\n", b"1\tx\n", None, object()]


async def test_copy_in_refuses_bad_input_at_the_call(db):
    """Each is raised by the call itself (no future, nothing queued)."""
    for table in BAD_TABLES:
        with pytest.raises(adb.InterfaceError, match="table name"):
            db.copy_in(table, [(1, "x")])
    for columns in BAD_COLUMNS:
        with pytest.raises(adb.InterfaceError):
            db.copy_in(db.table, [(1,)], columns)
    for rows in BAD_SOURCES:
        with pytest.raises(TypeError, match="copy_in needs"):
            db.copy_in(db.table, rows)
    stats = db.stats()
    assert stats["pinned"] == 0 and stats["open_transactions"] == 0
    assert await summary(db) == (0, 0)


@pytest.mark.parametrize("front", ["sync"])
async def test_sync_copy_in_refuses_an_async_iterable(db):
    async def rows():
        yield (1, "x")
    source = rows()
    with pytest.raises(TypeError, match="async iterable"):
        db.copy_in(db.table, source)
    await source.aclose()
    assert await summary(db) == (0, 0)


async def test_copy_in_into_a_missing_table_fails_in_the_result(db):
    error = db.dbapi.OperationalError if db.target.kind == "sqlite" else db.dbapi.ProgrammingError
    if is_sync(db):
        with pytest.raises(error):
            db.copy_in("adb_copy_no_such_table", [(1, "x")])
    else:
        loading = db.copy_in("adb_copy_no_such_table", [(1, "x")])  # a valid name: it runs
        with pytest.raises(error):
            await ev(loading)
    assert db.stats()["pinned"] == 0
    assert await ev(db.copy_in(db.table, [(1, "x")])) == 1


async def test_copy_out_refuses_bad_input_at_the_call(db):
    for kwargs in ({"batch": 0}, {"batch": -1}, {"batch": "2"}, {"batch": True},
                   {"idle_timeout": -1}, {"idle_timeout": "soon"}):
        with pytest.raises(adb.InterfaceError):
            db.copy_out(f"select userid from {db.table}", **kwargs)
    with pytest.raises(TypeError, match="SQL must be a str"):
        db.copy_out(5)
    with pytest.raises(TypeError, match="parameters"):
        db.copy_out(f"select userid from {db.table}", "x")
    stats = db.stats()
    assert stats["streams"] == 0 and stats["open_transactions"] == 0 and stats["pinned"] == 0


@pytest.mark.parametrize("front", ["asyncio", "sync"])
async def test_copy_out_refuses_batch_none_at_the_call(front, target):
    db = FRONTS[front](target.url, pool_size=2)  # its own: see close_within
    try:
        try:
            stream = db.copy_out("select 1", batch=None)
        except adb.InterfaceError:
            return
        try:
            await read_lines(db, stream)
        except TypeError:
            pass
        pytest.fail("copy_out accepted batch=None")
    finally:
        await close_within(db)
