"""How each driver's ``copy_in`` sends a load (issue 37), on the real servers.

- psycopg2: one COPY reading a file that renders the rows as they are asked for;
- psycopg 3: a binary COPY while the rows fit the columns' types, text after;
- PyMySQL with ``local_infile=1``: one LOAD DATA LOCAL reading a pipe a thread fills.

What a load means is test_copy.py's (every front-end x every driver); here, that
each path streams, that binary loads every value as the text format would, and
that each path falls back or fails as it should.
"""

import datetime
import decimal
import os
import threading
import uuid

import psycopg
import pytest

import adb
import adb.sync
from adb.copytext import RowReader, line, mysql_value_text, text_of, value_text
from adb.drivers.psycopg import BinaryPlan

from ..conftest import URLS, psycopg_url, require_server

#: the servers and drivers each load path runs on: name -> (server kind, URL)
PATHS = {"postgresql": "postgresql", "psycopg": "postgresql", "mysql_infile": "mysql"}


def url_of(name):
    require_server(PATHS[name])
    if name == "psycopg":
        return psycopg_url()
    if name == "mysql_infile":
        return URLS["mysql"] + ("&" if "?" in URLS["mysql"] else "?") + "local_infile=1"
    return URLS[name]


@pytest.fixture
def table_name():
    return "adb_path_" + uuid.uuid4().hex[:10]


@pytest.fixture(params=list(PATHS))
def path(request, table_name):
    """A Database on one load path, a side Database on the same server, and an
    empty table ``(userid int primary key, data varchar(100))``."""
    url = url_of(request.param)
    db, side = adb.sync.Database(url, pool_size=1), adb.sync.Database(url, pool_size=1)
    side.runOperation(f"create table {table_name} (userid int not null primary key, "
                      "data varchar(100))")
    yield request.param, db, side, table_name
    db.close()
    side.runOperation(f"drop table if exists {table_name}")
    side.close()


def load_running(side, kind, backend):
    """What the server says of ``backend``'s load while it runs: PostgreSQL's count
    of rows its COPY has processed, MariaDB's statement text."""
    if kind == "postgresql":
        rows = side.runQuery("select tuples_processed from pg_stat_progress_copy "
                             "where pid = %s", (backend,))
        return rows[0][0] if rows else None
    rows = side.runQuery("select info from information_schema.processlist where id = %s",
                         (backend,))
    return rows[0][0] if rows else None


def test_a_load_is_streamed_to_the_server_while_its_source_is_read(path):
    """At row 50,000 of 60,000 the server is already loading the rows before it:
    one statement reads the rows as they come, none waits for a chunk to be
    rendered (the text for psycopg2, the pipe for LOAD DATA) before it starts."""
    name, db, side, table = path
    kind = PATHS[name]
    backend = db.runQuery("select pg_backend_pid()" if kind == "postgresql"
                          else "select connection_id()")[0][0]
    seen = []

    def rows():
        for i in range(60000):
            if i == 50000:
                seen.append(load_running(side, kind, backend))
            yield (i, f"s{i}")
    assert db.copy_in(table, rows()) == 60000
    if kind == "postgresql":
        assert seen[0] is not None and seen[0] > 0, seen
    else:
        assert seen[0] is not None and seen[0].startswith("LOAD DATA LOCAL INFILE"), seen
    assert tuple(side.runQuery(f"select count(*), sum(userid) from {table}")[0]) == (
        60000, 60000 * 59999 // 2)


def test_a_row_reader_renders_as_it_is_read():
    source = iter([(i, f"t\t{i}") for i in range(2500)])
    reader = RowReader(source, rows_per_read=1000)
    first = reader.read(10)
    assert first.count("\n") == 1000 and first.startswith("0\tt\\t0\n")
    assert reader.count == 1000 and next(source) == (1000, "t\t1000")  # the rest unread
    assert reader.read().count("\n") == 1000 and reader.read().count("\n") == 499
    assert reader.read() == "" and reader.count == 2499
    reader = RowReader([(1, None), (2, "é")], encoding="utf-8")
    assert reader.read() == "1\t\\N\n2\té\n".encode() and reader.read() == b""
    with pytest.raises(ValueError, match="rows_per_read"):
        RowReader([], rows_per_read=0)


# -- psycopg 3: binary COPY ---------------------------------------------------------------

TYPED_COLUMNS = ("k int4 primary key, small int2, big int8, t text, v varchar(20), "
                 "n numeric(12, 3), d date, b bytea, f float8, ok bool, u uuid")
TYPED_NAMES = ["k", "small", "big", "t", "v", "n", "d", "b", "f", "ok", "u"]
UUID = uuid.UUID("12345678-1234-5678-1234-567812345678")
TYPED_ROWS = [
    (1, -32768, 2 ** 62, "tab\there", "new\nline", decimal.Decimal("1.500"),
     datetime.date(2020, 2, 29), b"\x00\\\t\n\xff", 1.5, True, UUID),
    (2, None, None, None, None, None, None, None, None, None, None),
    (3, 32767, -2 ** 63, "back\\slash \\N", "", decimal.Decimal("-0.001"),
     datetime.date(1, 1, 1), b"", float("inf"), False, UUID),
    (4, 0, 0, "naïve café\r\n", "\\", decimal.Decimal("123456789.125"),
     datetime.date(9999, 12, 31), bytes(range(256)), -0.25, True, None),
]


@pytest.mark.parametrize("name", ["psycopg", "postgresql"])
def test_binary_copy_loads_every_type_as_the_text_format_does(name, table_name):
    """The same rows through psycopg 3's binary COPY and psycopg2's text COPY load
    the same values: integers at their limits, text with tabs, newlines,
    backslashes and ``\\N``, NULLs, dates, numerics, bytea, floats, booleans, uuids
    (every column one binary takes: ``test_a_binary_plan_is_made...``)."""
    db = adb.sync.Database(url_of(name), pool_size=1)
    db.runOperation(f"create table {table_name} ({TYPED_COLUMNS})")
    try:
        assert db.copy_in(table_name, TYPED_ROWS) == len(TYPED_ROWS)
        back = [tuple(row) for row in db.runQuery(f"select * from {table_name} order by k")]
        # psycopg2 gives bytea as memoryview and uuid as str
        expected = [tuple(str(v) if isinstance(v, uuid.UUID) and name == "postgresql" else v
                          for v in row) for row in TYPED_ROWS]
        assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in back] == expected
    finally:
        db.runOperation(f"drop table if exists {table_name}")
        db.close()


@pytest.fixture
def pg3(table_name):
    """A psycopg 3 connection (autocommit) and the typed table with a char and a jsonb
    column more, types binary does not take here."""
    require_server("postgresql")
    conn = psycopg.connect(psycopg_url().replace("+psycopg", ""), autocommit=True)
    conn.execute(f"create table {table_name} ({TYPED_COLUMNS}, c char(3), j jsonb)")
    yield conn
    conn.execute(f"drop table if exists {table_name}")
    conn.close()


def plan_of(cursor, table, columns):
    """The binary plan, which the test expects there to be."""
    plan = BinaryPlan.of(cursor, table, columns)
    assert plan is not None
    return plan


def test_a_binary_plan_is_made_only_for_types_it_knows(pg3, table_name):
    cursor = pg3.cursor()
    assert plan_of(cursor, table_name, ["k", "t", "n", "d", "b", "u"]).oids == [
        23, 25, 1700, 1082, 17, 2950]
    assert plan_of(cursor, table_name, TYPED_NAMES).fits(TYPED_ROWS)
    assert BinaryPlan.of(cursor, table_name, None) is None  # char, jsonb: the text format
    assert BinaryPlan.of(cursor, table_name, ["k", "j"]) is None
    assert BinaryPlan.of(cursor, table_name, ["k", "c"]) is None
    assert BinaryPlan.of(cursor, table_name, ["k", "nosuch"]) is None
    assert BinaryPlan.of(cursor, "adb_path_no_such_table", None) is None
    assert plan_of(cursor, table_name.upper(), ["K", '"k"']).oids == [23, 23]


def test_a_binary_plan_takes_only_rows_that_load_alike(pg3, table_name):
    plan = plan_of(pg3.cursor(), table_name, ["k", "small", "t", "n"])
    good = [(1, 2, "x", decimal.Decimal(1)), (2, None, None, None), (3, -32768, "", None)]
    assert plan.fits(good) and plan.fits([])
    for bad in [(1, 32768, "x", None),       # out of int2's range: binary would wrap it
                (1, True, "x", None),        # a bool where the text would be refused
                ("1", 2, "x", None),         # text the server would parse
                (1, 2, "x", 1.5),            # a float into numeric
                (1, 2, "x"),                 # a value short
                (1, 2, "x", None, None)]:    # one too many
        assert not plan.fits(good + [bad]), bad
    assert not plan.fits([object()])         # not a row at all


def test_rows_that_do_not_fit_go_on_in_the_text_format(table_name):
    """Binary for the rows that fit; from the first batch that does not, text: every
    row loads once, in one transaction, with what the text format makes of it."""
    db = adb.sync.Database(url_of("psycopg"), pool_size=1)
    db.runOperation(f"create table {table_name} (k int4 primary key, t text)")
    try:
        rows = [(i, f"b{i}") for i in range(2500)] + [("2500", "as text")] + \
            [(i, f"t{i}") for i in range(2501, 3001)]
        assert db.copy_in(table_name, iter(rows)) == 3001
        count, total = db.runQuery(f"select count(*), sum(k) from {table_name}")[0]
        assert (count, total) == (3001, 3001 * 3000 // 2)
        assert db.runQuery(f"select t from {table_name} where k in (2499, 2500, 3000) "
                           "order by k") == [("b2499",), ("as text",), ("t3000",)]
    finally:
        db.runOperation(f"drop table if exists {table_name}")
        db.close()


def test_an_integer_out_of_range_fails_as_in_the_text_format(table_name):
    """Binary would wrap 2**40 into an int4; the load fails as the text COPY does."""
    db = adb.sync.Database(url_of("psycopg"), pool_size=1)
    db.runOperation(f"create table {table_name} (k int4, t text)")
    try:
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            db.copy_in(table_name, [(1, "a"), (2 ** 40, "b")])
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            db.copy_in(table_name, [(True, "a")])
        assert db.runQuery(f"select count(*) from {table_name}") == [(0,)]
    finally:
        db.runOperation(f"drop table if exists {table_name}")
        db.close()


# -- MariaDB: LOAD DATA through a pipe --------------------------------------------------------

def feed_threads():
    return [t for t in threading.enumerate() if t.name == "adb-load-feed"]


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_a_load_data_that_fails_before_reading_its_pipe_leaves_nothing_behind():
    """The statement fails before it opens the pipe (no such table), with far more
    rows than a pipe holds waiting: the feeding thread stops, no descriptor stays
    open, and the next load runs."""
    db = adb.sync.Database(url_of("mysql_infile"), pool_size=1)
    try:
        db.runQuery("select 1")
        before = open_fds()
        with pytest.raises(db.dbapi.ProgrammingError):
            db.copy_in("adb_path_no_such_table", ((i, "x" * 90) for i in range(200000)))
        assert feed_threads() == [] and open_fds() == before
        assert db.stats()["pinned"] == 0 and db.runQuery("select 1") == [(1,)]
    finally:
        db.close()


def test_a_source_failing_mid_pipe_fails_the_load_and_stops_the_feed(table_name):
    """The thread feeding the pipe reads the source: its error is the load's, raised
    after the statement has read the pipe to its end, and rolls the load back."""
    db = adb.sync.Database(url_of("mysql_infile"), pool_size=1)
    db.runOperation(f"create table {table_name} (userid int primary key, data varchar(10))")

    def rows():
        for i in range(30000):
            if i == 25000:
                raise LookupError("the source broke at row 25000")
            yield (i, "x")
    try:
        with pytest.raises(LookupError, match="row 25000"):
            db.copy_in(table_name, rows())
        assert feed_threads() == []
        assert db.runQuery(f"select count(*) from {table_name}") == [(0,)]
    finally:
        db.runOperation(f"drop table if exists {table_name}")
        db.close()


@pytest.mark.parametrize("render", [value_text, mysql_value_text])
def test_text_of_a_batch_is_its_lines_whatever_the_columns_hold(render):
    """Column by column (ints, plain strs, strs to escape, NULLs, other types) or row
    by row (rows of different widths), a batch renders as its rows' lines."""
    batches: list[list[tuple[object, ...]]] = [
        [(i, f"plain {i}") for i in range(50)],
        [(i, "tab\there" if i == 30 else f"p{i}") for i in range(50)],
        [(None, "back\\slash", 1.5, True, b"\x00\n", datetime.date(2020, 1, 2))] * 3,
        [(1, "x"), (2,), (3, "y", None)],
        [(True, 1), (2, False)],  # bools are not ints here
        [],
    ]
    for batch in batches:
        assert text_of(batch, render) == "".join(line(row, render) for row in batch)
        assert text_of(iter(batch), render) == text_of(batch, render)
