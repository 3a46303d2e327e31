"""psycopg 3's statement as one blocking libpq call (``adb.drivers._psycopg_exec``):
a caller sees what psycopg's own ``execute`` gives, statement by statement, on the
same connection; psycopg's prepared statements and transactions still come; adb's
connections get the cursor unless the application names its own."""

import datetime
import decimal
import uuid
from typing import Any, Optional

import psycopg
import pytest
from psycopg.types.json import Jsonb

import adb.sync
from adb.drivers._psycopg_exec import blocking_cursor

from ..conftest import psycopg_url, require_server

#: statements with parameters, across the types psycopg binds
STATEMENTS: list[tuple[str, Any]] = [
    ("select %s::int + 1", (41,)),
    ("select %s, %s", ("text", None)),
    ("select %s::numeric * 2", (decimal.Decimal("1.25"),)),
    ("select %s::date + 1", (datetime.date(2026, 11, 29),)),
    ("select %s::jsonb -> 'a'", (Jsonb({"a": [1, 2]}),)),
    ("select %s::int[]", ([1, 2, 3],)),
    ("select %s::bytea", (b"\x00\xff",)),
    ("select %(a)s::text || %(b)s::text", {"a": "x", "b": "y"}),
    ("select generate_series(1, %s)", (3,)),
    ("select 1 where %s", (False,)),
    ("values (%s), (%s)", (1, 2)),
    ("select %s::uuid", (uuid.UUID(int=5),)),
    ("select %s", ("it's \\ ; -- not SQL",)),
]
#: statements that fail: on the server, or in psycopg before anything is sent
FAILING: list[tuple[str, Any]] = [
    ("select * from no_such_table where a = %s", (1,)),
    ("select 1 / %s", (0,)),
    ("select %s::int", ("not a number",)),
    ("select %s, %s", (1,)),
    ("select %(a)s", {"b": 1}),
]


def _blocking() -> Any:
    made = blocking_cursor(psycopg)
    assert made is not None
    return made


@pytest.fixture
def conninfo():
    require_server("postgresql")
    return "host=127.0.0.1 user=root dbname=" + psycopg_url().rsplit("/", 1)[1]


def _outcome(cursor):
    """What a caller reads after ``execute``: rows, columns, counts."""
    rows = cursor.fetchall() if cursor.description is not None else None
    columns = None if cursor.description is None else [
        (c.name, c.type_code) for c in cursor.description]
    return rows, columns, cursor.rowcount, cursor.statusmessage


def _run(cursor, sql, params):
    try:
        cursor.execute(sql, params)
    except psycopg.Error as exc:
        return "error", type(exc), exc.sqlstate, str(exc)
    return "ok", _outcome(cursor)


def test_psycopg_has_what_the_blocking_execute_calls():
    """The internals it calls are there (else the plain Cursor would serve, unnoticed)."""
    assert blocking_cursor(psycopg) is not None


@pytest.mark.parametrize("sql, params", STATEMENTS + FAILING)
def test_a_statement_gives_what_psycopgs_own_execute_gives(conninfo, sql, params):
    blocking = _blocking()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        theirs = _run(psycopg.Cursor(conn), sql, params)
        ours = _run(blocking(conn), sql, params)
        assert ours == theirs
        # and the connection serves on after it, out of any transaction
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("select 1").fetchone() == (1,)


def test_rows_written_and_counted_as_psycopg_counts_them(conninfo):
    blocking = _blocking()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("create temp table written (a int primary key, b text)")
        outcomes = []
        for cursor_class in (psycopg.Cursor, blocking):
            cur = cursor_class(conn)
            for sql, params in [("insert into written values (%s, %s)", (1, "x")),
                                ("insert into written values (%s, %s) returning a", (2, "y")),
                                ("update written set b = %s where a <= %s", ("z", 2)),
                                ("insert into written values (%s, %s)", (1, "dup")),
                                ("delete from written where a > %s", (0,))]:
                outcomes.append(_run(cur, sql, params))
        half = len(outcomes) // 2
        assert outcomes[half:] == outcomes[:half]
        assert outcomes[0] == ("ok", (None, None, 1, "INSERT 0 1"))
        assert outcomes[3][1] is psycopg.errors.UniqueViolation


def test_the_description_is_built_once_per_result_and_anew_for_the_next(conninfo):
    """psycopg builds ``description`` afresh at every read; this cursor keeps it for
    the result it was built from, and the next statement's, or the next result set's,
    is its own, as on psycopg's cursor."""
    blocking = _blocking()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("create temp table described (a int)")
        theirs, ours = psycopg.Cursor(conn), blocking(conn)
        # a statement and its parameters, or None: the next result set
        steps: list[tuple[Optional[str], Any]] = [
            ("select %s::int as a, %s::text as b", (1, "x")),
            ("select 1 as only", None),
            ("set application_name to 'described'", None),
            ("select %s::int as c", (3,)),
            ("select 1 as first; select 2 as second, 3 as third", None),
            (None, None),
            ("insert into described values (%s)", (1,))]
        for sql, params in steps:
            seen = []
            for cursor in (theirs, ours):
                if sql is None:
                    cursor.nextset()
                else:
                    cursor.execute(sql, params)
                described = cursor.description
                seen.append(None if described is None else [c.name for c in described])
            assert seen[0] == seen[1], (sql, seen)
            if seen[1] is None:
                assert ours.description is None
            else:
                assert ours.description is ours.description  # kept, not built again
        assert seen[1] is None


def test_returns_rows_says_what_a_description_would(conninfo):
    """``returns_rows`` answers ``description is not None`` from the result alone,
    after every kind of statement: rows, none, no columns (``select;``), a command, a
    failure, a second result set; and adb's tuple rows are shaped without building
    the description, while a dict row factory still reads it."""
    from adb import ops, rows
    blocking = _blocking()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("create temp table told (a int)")
        cursor = blocking(conn)
        steps: list[tuple[Optional[str], Any]] = [
            ("select %s::int as a", (1,)), ("select 1 where %s", (False,)),
            ("select", None), ("insert into told values (%s)", (1,)),
            ("insert into told values (%s) returning a", (2,)), ("set timezone to 'UTC'", None),
            ("select 1; insert into told values (3)", None), (None, None)]
        for sql, params in steps:
            if sql is None:
                cursor.nextset()
            else:
                cursor.execute(sql, params)
            told = blocking.returns_rows(cursor)
            assert told is (cursor.description is not None), sql
        with pytest.raises(psycopg.errors.DivisionByZero):
            cursor.execute("select 1 / %s", (0,))
        assert blocking.returns_rows(cursor) is (cursor.description is not None)
        with adb.sync.Database(psycopg_url(), pool_size=1) as db:
            driver = db._engine.driver
        assert driver.returns_rows is blocking.returns_rows
        fresh = blocking(conn)
        got = ops.query(fresh, driver, "select %s::int as a", (7,), rows.tuple_row)
        assert got == [(7,)] and fresh._adb_described is None  # never built
        got = ops.query(fresh, driver, "select %s::int as a", (8,), rows.dict_row)
        assert got == [{"a": 8}] and fresh._adb_described is not None
        assert ops.query(fresh, driver, "insert into told values (%s)", (4,),
                         rows.dict_row) == []


def test_psycopg_still_prepares_a_statement_run_often(conninfo):
    """``prepare_threshold`` decides, as on psycopg's own path: prepared on the server
    after that many runs, never with None."""
    blocking = _blocking()
    sql = "select %s::int * 3"
    for threshold, prepared in ((2, 1), (None, 0)):
        with psycopg.connect(conninfo, autocommit=True, prepare_threshold=threshold,
                             cursor_factory=blocking) as conn:
            for n in range(4):
                assert conn.cursor().execute(sql, (n,)).fetchone() == (n * 3,)
            (count,), = conn.execute(
                "select count(*) from pg_prepared_statements where statement like %s",
                ("select $1::int * 3%",)).fetchall()
            assert count == prepared


def test_outside_autocommit_a_statement_begins_the_transaction(conninfo):
    blocking = _blocking()
    with psycopg.connect(conninfo, cursor_factory=blocking) as conn:
        conn.execute("create temp table kept (a int)")
        conn.commit()
        conn.cursor().execute("insert into kept values (%s)", (1,))
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
        assert conn.execute("select count(*) from kept").fetchone() == (0,)


def test_adbs_connections_get_it_unless_the_application_names_a_cursor():
    require_server("postgresql")
    seen = []
    with adb.sync.Database(psycopg_url(), pool_size=1) as db:
        db.runInteraction(lambda cursor: seen.append(type(cursor)))
        assert db.runQuery("select %s::int + %s::int", (2, 3)) == [(5,)]
    with adb.sync.Database(psycopg_url(), pool_size=1,
                           cursor_factory=psycopg.ClientCursor) as db:
        db.runInteraction(lambda cursor: seen.append(type(cursor)))
    assert seen == [blocking_cursor(psycopg), psycopg.ClientCursor]
