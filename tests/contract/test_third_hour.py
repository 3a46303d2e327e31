"""The third hour (issue "The third hour", items 1-8): a torndb application and an
asyncpg program ported by the guides, with the mistakes a newcomer makes.

torndb's session on each connection (``on_connect``), torndb's rows as a built-in
row factory (``"attrdict"``), parameters passed one by one named as such,
prepared statements on both PostgreSQL drivers as the asyncpg guide says,
``ServerUnavailable`` that says the call did not run and an outage logged once,
and where a forgotten ``await`` shows its line. On PostgreSQL (psycopg2 and
psycopg 3), MariaDB and SQLite, on every front-end a change touches.
"""

import asyncio
import datetime
import decimal
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

import adb
import adb.rows
import adb.sync
from adb.errors import ServerUnavailable

from ..conftest import FRONTS, URLS, close, ev, psycopg_url, require_server
from ..project.test_docs import ROOT, python_blocks
from benchmarks.faultproxy import FaultProxy


# -- 1. torndb's session: the guide's on_connect restores TRADITIONAL -------------------

def guide_function(page, name):
    """The function ``name`` as a guide defines it (its block's own text, run here),
    so the test checks the recipe readers copy, not a copy of it."""
    for block in python_blocks(page):
        found = re.search(rf"^def {name}\(.*?(?=^\S)", block, re.S | re.M)
        if found:
            scope: dict[str, Any] = {}
            exec(found.group(0), scope)
            return scope[name]
    raise AssertionError(f"{page} defines no {name}()")


def non_strict(conn):
    """A server whose default sql_mode is not strict, as torndb's users often met."""
    cursor = conn.cursor()
    cursor.execute("set sql_mode = ''")
    cursor.close()


async def insert_too_long(db):
    """Insert 8 characters into a varchar(5) (a temporary table, on one connection);
    what is stored, or the error."""
    tx = await ev(db.beginTransaction())
    try:
        await ev(tx.runOperation("create temporary table t3h_session (title varchar(5))"))
        try:
            await ev(tx.runOperation("insert into t3h_session values (%s)", ("too long",)))
        except db.dbapi.DataError as exc:
            return exc
        return await ev(tx.runQueryValue("select title from t3h_session"))
    finally:
        await ev(tx.rollback())


async def test_the_guides_torndb_session_restores_traditional_on_a_non_strict_server(front):
    require_server("mysql")
    torndb_session = guide_function("docs/coming-from-torndb.md", "torndb_session")
    lax = FRONTS[front](URLS["mysql"], pool_size=2, on_connect=non_strict)
    try:
        assert await insert_too_long(lax) == "too l"  # cut short, silently: the mistake
    finally:
        await close(lax)

    def server_default_then_torndb(conn):
        non_strict(conn)
        torndb_session(conn)

    db = FRONTS[front](URLS["mysql"], pool_size=2, on_connect=server_default_then_torndb)
    try:
        error = await insert_too_long(db)
        assert isinstance(error, db.dbapi.DataError) and error.args[0] == 1406, error
        mode, zone = (await ev(db.runQuery("select @@session.sql_mode, @@session.time_zone")))[0]
        assert "TRADITIONAL" in mode.split(",") and zone == "+00:00"
    finally:
        await close(db)


# -- 3. torndb's rows: row_factory="attrdict" -------------------------------------------

async def test_attrdict_rows_read_as_attributes_and_keys_and_dump_as_json_objects(front, target):
    db = FRONTS[front](target.url, pool_size=2, row_factory="attrdict")
    try:
        sql = "select 1 as id, 'a' as name"
        rows = await ev(db.runQuery(sql))
        assert [json.dumps(row) for row in rows] == ['{"id": 1, "name": "a"}']
        row = await ev(db.runQueryRow(sql))
        assert isinstance(row, adb.rows.AttrDict) and issubclass(adb.rows.AttrDict, dict)
        assert row.name == row["name"] == "a" and row.id == row["id"] == 1
        assert row == {"id": 1, "name": "a"}
        with pytest.raises(AttributeError, match="no column 'title'.*id, name"):
            row.title
        with pytest.raises(AttributeError):
            row.title = "b"  # type: ignore[attr-defined]  # not a column: not in its JSON
        tx = await ev(db.beginTransaction())  # in a transaction, and per call
        try:
            (row,) = await ev(tx.runQuery(sql))
            assert row.name == "a"
            (plain,) = await ev(tx.runQuery(sql, row_factory="tuple"))
            assert tuple(plain) == (1, "a")
        finally:
            await ev(tx.rollback())
    finally:
        await close(db)
    other = FRONTS[front](target.url, pool_size=1)
    try:  # named per call on a Database with the default
        (row,) = await ev(other.runQuery("select 2 as n", row_factory="attrdict"))
        assert row.n == 2 and json.loads(json.dumps(row)) == {"n": 2}
    finally:
        await close(other)


def test_a_wrong_row_factory_name_lists_attrdict():
    with pytest.raises(adb.errors.InterfaceError, match="'namedtuple', 'attrdict' or a callable"):
        adb.sync.Database("sqlite://", row_factory="Row")


# -- 4. parameters one by one: the error writes the one tuple out -----------------------

#: the first two parameters a torndb (or asyncpg) call passes one by one, and the tuple
#: the error must write: every type a parameter has
SCATTERED = [
    ((7, "x"), "(7, 'x')"),
    (("x", 7), "('x', 7)"),
    ((1.5, 2), "(1.5, 2)"),
    ((None, "x"), "(None, 'x')"),
    ((decimal.Decimal("1.5"), 2), "(Decimal('1.5'), 2)"),
    ((b"ab", 2), "(b'ab', 2)"),
    ((datetime.date(2024, 2, 29), "x"), "(datetime.date(2024, 2, 29), 'x')"),
    ((True, datetime.datetime(2024, 1, 1, 12, 0)), "(True, datetime.datetime(2024, 1, 1, 12, 0))"),
]
#: one parameter not in a tuple, and the tuple the error must write
ALONE = [(7, "(7,)"), ("x", "('x',)"), (1.5, "(1.5,)"), (decimal.Decimal("2"), "(Decimal('2'),)"),
         (b"ab", "(b'ab',)"), (datetime.date(2024, 2, 29), "(datetime.date(2024, 2, 29),)")]
METHODS = ["runQuery", "runQueryRow", "runQueryValue", "runOperation"]


@pytest.mark.parametrize("values, written", SCATTERED, ids=[w for _, w in SCATTERED])
async def test_parameters_one_by_one_are_named_with_the_tuple_written_out(front, values, written):
    db = FRONTS[front]("sqlite://", pool_size=1)
    try:
        for method in METHODS:
            with pytest.raises(TypeError) as raised:  # at once: nothing ran
                getattr(db, method)("select ?, ?", *values)
            message = str(raised.value)
            assert f"{method} takes the parameters as one tuple" in message, message
            assert f"write {method}(sql, {written})" in message, message
            assert "not as separate arguments" in message
        assert db.stats()["completed"] == 0
    finally:
        await close(db)


@pytest.mark.parametrize("value, written", ALONE, ids=[w for _, w in ALONE])
async def test_one_parameter_not_in_a_tuple_gets_the_tuple_written_out(front, value, written):
    db = FRONTS[front]("sqlite://", pool_size=1)
    try:
        tx = await ev(db.beginTransaction())
        try:
            calls = [getattr(db, m) for m in METHODS] + [getattr(tx, m) for m in METHODS]
            for call in calls:
                with pytest.raises(TypeError, match=re.escape(f"(for one value write {written})")):
                    call("select ?", value)
        finally:
            await ev(tx.rollback())
    finally:
        await close(db)


async def test_a_wrong_tx_after_a_tuple_of_parameters_is_still_named_as_tx(front):
    db = FRONTS[front]("sqlite://", pool_size=1)
    try:
        for method in METHODS:
            with pytest.raises(TypeError, match="^tx must be a transaction handle .*not str$"):
                getattr(db, method)("select ?", (1,), "x")
        with pytest.raises(TypeError, match="^tx must be a transaction handle .*not int$"):
            db.runMany("insert into t values (?)", [(1,)], 7)
    finally:
        await close(db)


# -- 5. the asyncpg guide's prepared statements, on the real server ---------------------

def test_psycopg2_prepared_statements_live_on_one_connection_and_share_a_run_interaction(pg_url):
    """A PREPARE in one call and an EXECUTE in another meet different connections;
    in one runInteraction they meet one (what the guide's add_one does)."""
    add_one = guide_function("docs/coming-from-asyncpg.md", "add_one")
    with adb.sync.Database(pg_url, pool_size=2) as db:
        tx = db.beginTransaction()  # pins one worker: the next call takes the other
        try:
            tx.runOperation("prepare t3h_add (int) as select $1 + 1")
            with pytest.raises(db.dbapi.errors.InvalidSqlStatementName):
                db.runQueryValue("execute t3h_add (%s)", (1,))
        finally:
            tx.rollback()
        assert db.runInteraction(add_one, [1, 41]) == [2, 42]


def test_psycopg3_fails_the_psycopg2_recipe_and_prepare_true_works():
    require_server("postgresql")
    import psycopg

    def untyped(cursor):
        cursor.execute("prepare t3h_echo as select $1")
        try:
            cursor.execute("execute t3h_echo (%s)", ("x",))
            return cursor.fetchone()[0]
        finally:
            cursor.execute("deallocate t3h_echo")

    psycopg2_recipe = guide_function("docs/coming-from-asyncpg.md", "add_one")  # the first
    with adb.sync.Database(psycopg_url(), pool_size=2) as db:
        with pytest.raises(psycopg.errors.InFailedSqlTransaction) as raised:  # DEALLOCATE's
            db.runInteraction(psycopg2_recipe, [1])
        assert isinstance(raised.value.__context__, psycopg.errors.UndefinedParameter)  # EXECUTE $1
        with pytest.raises(psycopg.errors.InFailedSqlTransaction) as raised:
            db.runInteraction(untyped)
        assert isinstance(raised.value.__context__, psycopg.errors.IndeterminateDatatype)
    # (a PREPARE outlives the rollback of its transaction: a fresh pool for the count)
    (block,) = [b for b in python_blocks("docs/coming-from-asyncpg.md") if "prepare=True" in b]
    found = re.search(r"^def add_one\(.*?(?=^\S)", block, re.S | re.M)
    assert found is not None
    scope: dict[str, Any] = {}
    exec(found.group(0), scope)
    with adb.sync.Database(psycopg_url(), pool_size=1) as db:
        assert db.runInteraction(scope["add_one"], [1, 41]) == ([2, 42], 1)


# -- 6. ServerUnavailable says the call did not run; an outage is logged once ----------

def refused_url(kind):
    """The test server's URL on port 1, where nobody listens."""
    return URLS[kind].replace(f":{urlsplit(URLS[kind]).port}/", ":1/")


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_server_unavailable_says_this_call_did_not_run(front, kind):
    require_server(kind)
    db = FRONTS[front](refused_url(kind), pool_size=2)
    try:
        for _ in range(3):  # the connect's own failure, then the backoff's
            with pytest.raises(ServerUnavailable) as raised:
                await ev(db.runQuery("select 1"))
            message = str(raised.value)
            assert "cannot reach" in message and "127.0.0.1:1" in message, message
            assert re.search(r"this call did not run; the pool tries to connect again in "
                             r"\d+\.\d s$", message), message
            assert "next attempt" not in message
            assert raised.value.may_have_run is False
    finally:
        await close(db)


class SaysNoThenHangsUp:
    """A TCP server that answers any client with one byte, ``N``, and hangs up: a
    server that answers adb's probe (PostgreSQL's SSLRequest, MySQL's handshake)
    but where no connect succeeds. Each probe then lets the pool try a connect, so
    failed connects add up fast, as when a server is up but refuses work."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                client.sendall(b"N")
            except OSError:
                pass
            client.close()

    def close(self):
        self.closed = True
        self.listener.close()


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and r.name == "adb"]


def fail_until(db, failures, seconds=60.0):
    """Call until the pool has failed ``failures`` connects in a row (its own count),
    within a generous bound; how many calls failed with ServerUnavailable."""
    deadline, failed = time.monotonic() + seconds, 0
    while db.stats()["connect_failures"] < failures:
        assert time.monotonic() < deadline, db.stats()
        with pytest.raises(adb.errors.ConnectionLost):  # ServerUnavailable, or the cut
            db.runQuery("select 1")
        failed += 1
        time.sleep(0.005)
    return failed


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg", "pymysql"])
def test_an_outage_logs_one_warning_however_many_connects_fail(driver, caplog):
    server = SaysNoThenHangsUp()
    caplog.set_level(logging.DEBUG, logger="adb")
    db = adb.sync.Database(driver=driver, host="127.0.0.1", port=server.port, user="root",
                           database="test", pool_size=2, connect_timeout=5)
    try:
        failed = fail_until(db, 21)  # past the 5th and 20th, which used to warn again
    finally:
        db.close()
        server.close()
    warned = warnings_of(caplog)
    assert len(warned) == 1, warned
    assert "cannot connect" in warned[0] and f"127.0.0.1:{server.port}" in warned[0]
    assert failed > len(warned)


def stop_listening(proxy):
    """The server goes away: the proxy's port refuses connects (nobody listens) and
    its open connections are cut. (A refused connect leaves no socket behind in any
    driver; pg8000 leaks the socket of a connect reset during its handshake.)"""
    try:
        proxy.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() in its thread
    except OSError:
        pass
    proxy.listener.close()
    proxy.cut()


def listen_again(proxy):
    """The server is back on the same port."""
    proxy.listener = socket.create_server(("127.0.0.1", proxy.port))
    threading.Thread(target=proxy._accept, daemon=True).start()


@pytest.mark.parametrize("kind, driver, failures", [
    ("postgresql", "psycopg2", 2), ("postgresql", "pg8000", 5), ("mysql", "pymysql", 2)])
def test_an_outage_warns_when_it_begins_and_when_it_ends(kind, driver, failures, caplog):
    """Two WARNINGs for one outage: its first failed connect, and the connect that
    ended it; none for the calls between. A driver that probes the server
    (psycopg2, PyMySQL) tries no connect while the probe finds it down, so its
    failures stay few; pg8000 (the generic driver, which cannot probe) tries after
    each backoff, and used to stay down as long as calls kept coming."""
    require_server(kind)
    if driver == "pg8000":
        pytest.importorskip("pg8000")
    parts = urlsplit(URLS[kind])
    assert parts.hostname and parts.port and parts.username
    proxy = FaultProxy(parts.hostname, parts.port)
    caplog.set_level(logging.DEBUG, logger="adb")
    db = adb.sync.Database(driver=driver, host="127.0.0.1", port=proxy.port, user=parts.username,
                           database=parts.path.lstrip("/"), pool_size=1)
    try:
        assert db.runQueryValue("select 1") == 1
        stop_listening(proxy)
        fail_until(db, failures)
        listen_again(proxy)
        deadline = time.monotonic() + 60
        while True:  # the pool connects again: within its backoff (at most 10 s)
            try:
                assert db.runQueryValue("select 1") == 1
                break
            except (ServerUnavailable, adb.errors.ConnectionLost):
                assert time.monotonic() < deadline, db.stats()
                time.sleep(0.01)
    finally:
        db.close()
        proxy.close()
    warned = warnings_of(caplog)
    assert len(warned) == 2, warned
    assert "cannot connect" in warned[0] and "connected to" in warned[1] and "again" in warned[1]


# -- 7. a call nobody awaited: debug mode names the line that made it -------------------

FORGOTTEN = """\
import asyncio
from adb import Database


async def main():
    db = Database("sqlite://")
    assert await db.runQueryValue("select 1") == 1  # the loop bound: calls on the fast path
    db.runOperation("insert into t3h_no_such_table values (1)")  # the await forgotten
    await db.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("flags, env", [(["-X", "dev"], {}), ([], {"PYTHONASYNCIODEBUG": "1"})],
                         ids=["-X dev", "PYTHONASYNCIODEBUG=1"])
def test_debug_mode_names_the_line_of_a_call_nobody_awaited(flags, env, tmp_path):
    """What docs/usage.md says: in asyncio's debug mode the loop logs the failure
    with the line that made the call; without it, with adb's frames only."""
    script = tmp_path / "forgot.py"
    script.write_text(FORGOTTEN)
    here = {**os.environ, "PYTHONPATH": str(ROOT)}
    here.pop("PYTHONASYNCIODEBUG", None)
    debug = subprocess.run([sys.executable, *flags, str(script)], env={**here, **env},
                           capture_output=True, text=True, timeout=120)
    assert "exception was never retrieved" in debug.stderr, debug.stderr
    assert re.search(r'forgot\.py", line 8, in main\n\s+db\.runOperation', debug.stderr), \
        debug.stderr
    plain = subprocess.run([sys.executable, str(script)], env=here, capture_output=True,
                           text=True, timeout=120)
    assert "exception was never retrieved" in plain.stderr, plain.stderr
    assert "forgot.py" not in plain.stderr  # what the guide's advice is for
