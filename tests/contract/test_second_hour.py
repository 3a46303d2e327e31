"""The second hour (issue "The second hour", items 1-3): start-up that costs only the
driver in use and serves the first call on the first connection ready; driver
mistakes with a note that names them; counters and messages that mean what they
say; rowcounts alike across servers where adb can make them so.

On PostgreSQL (psycopg2 and psycopg 3), MariaDB and SQLite.
"""

import json
import logging
import os
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import pytest

import adb.sync
from adb.errors import ConnectionRejected, ServerUnavailable, StatementTimeout
from adb.sqltext import NOT_GIVEN, placeholder_hint

from ..conftest import (TARGETS, URLS, make_target, own_database, require_server,
                       server_kwargs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: every DB-API module a built-in driver imports
DRIVER_MODULES = ("psycopg", "psycopg2", "pymysql", "MySQLdb", "sqlite3")


def modules_after_one_query(url):
    """The driver modules imported by a fresh interpreter that made a Database of
    ``url`` and ran one query on it."""
    code = (
        "import json, sys, adb.sync\n"
        f"db = adb.sync.Database({url!r}, pool_size=2)\n"
        "assert db.runQueryValue('select 1') == 1\n"
        "db.close()\n"
        f"print(json.dumps([m for m in {DRIVER_MODULES!r} if m in sys.modules]))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


# -- 1. start-up imports only the driver in use ---------------------------------------

DRIVER_OF = {"postgresql": "psycopg2", "psycopg": "psycopg", "mysql": "pymysql",
             "mysqldb": "MySQLdb", "sqlite": "sqlite3"}


@pytest.mark.parametrize("name", list(TARGETS))
def test_start_up_imports_only_the_driver_in_use(name, tmp_path):
    target = make_target(name, tmp_path)
    assert modules_after_one_query(target.url) == [DRIVER_OF[name]]


# -- 1. the first call is served by the first connection ready ------------------------

@pytest.mark.parametrize("name", list(TARGETS))
def test_the_pools_first_connect_goes_alone_and_serves_the_first_call(name, tmp_path):
    """Ten connects at once share the client's GIL (PyMySQL is pure Python) and the
    server's CPUs: all end together, after about ten connects' time, and the first
    call waited for the whole pool. So the first connect goes alone: it ends before
    any other begins, and its worker serves the first call. ``on_connect`` (run in
    each connect) stands in for a connect's work here, so overlaps are seen; every
    connect after the first then waits until the first call has been served, so
    a first call that waited for any other connect would wait in vain."""
    spans: list[tuple[float, float, int]] = []
    lock = threading.Lock()
    served = threading.Event()
    waited_in_vain = []

    def slow_connect(conn):
        begun = time.monotonic()
        time.sleep(0.2)
        with lock:
            first = not spans
            spans.append((begun, time.monotonic(), threading.get_ident()))
        if not first and not served.wait(10):
            waited_in_vain.append(threading.get_ident())

    target = make_target(name, tmp_path)
    with adb.sync.Database(target.url, pool_size=6, on_connect=slow_connect) as db:
        try:
            thread = db.runInteraction(lambda cursor: threading.get_ident())
        finally:
            served.set()
        deadline = time.monotonic() + 20
        while db.stats()["connected"] < 6:
            assert time.monotonic() < deadline, db.stats()
            time.sleep(0.01)
    spans.sort()
    first_end, first_thread = spans[0][1], spans[0][2]
    assert all(begun >= first_end for begun, _, _ in spans[1:]), spans
    assert thread == first_thread
    assert not waited_in_vain  # the first call came before any other connect ended


# -- 2. one WARNING per failed connect, not one per worker ----------------------------

def every_worker_warmed_up(db):
    """Wait until every worker of ``db`` has tried its connect before its first job
    (failed or not) and gone idle: a close before that would stop a worker from
    trying, and spare it the WARNING the test counts."""
    idle = db._engine.pool.dispatch.idle
    deadline = time.monotonic() + 20
    while len(idle) < db.stats()["pool_size"]:
        assert time.monotonic() < deadline, f"{len(idle)} workers idle"
        time.sleep(0.01)


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_an_unreachable_server_logs_one_warning_per_failed_connect(kind, caplog):
    require_server(kind)
    url = URLS[kind].replace(f":{urlsplit(URLS[kind]).port}/", ":1/")  # nobody listens on 1
    with caplog.at_level(logging.WARNING, logger="adb"):
        db = adb.sync.Database(url, pool_size=6)
        try:
            with pytest.raises(ServerUnavailable):
                db.runQuery("select 1")
            every_worker_warmed_up(db)  # every worker has met the failure
        finally:
            db.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "cannot connect" in warnings[0] and "127.0.0.1:1" in warnings[0]


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_a_rejected_connection_logs_one_warning(kind, caplog):
    require_server(kind)
    url = URLS[kind].rsplit("/", 1)[0] + "/adb_no_such_database"
    with caplog.at_level(logging.WARNING, logger="adb"):
        db = adb.sync.Database(url, pool_size=6)
        try:
            with pytest.raises(ConnectionRejected, match="adb_no_such_database"):
                db.runQuery("select 1")
            every_worker_warmed_up(db)
        finally:
            db.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings


# -- 2. a note for parameters that do not fit the statement's placeholders -------------

@pytest.mark.parametrize("sql, params, says", [
    ("select %s, %s", (1,), "2 placeholders (%s) but 1 parameter was passed"),
    ("select %s", (1, 2), "1 placeholder (%s) but 2 parameters were passed"),
    ("select 5 % 2, %s", (1,), "written %% when parameters are passed (a lone % at character 9"),
    ("select %(x)s", (1,), "named placeholders (%(x)s), which take a mapping"),
    ("select %s", {"x": 1}, "positional placeholders (%s) take a sequence"),
    ("select %(x)s", {"y": 1}, "the parameters have no 'x'"),
    ("select %s", None, "1 placeholder but no parameters were passed (params=None)"),
    ("select 5 %% 2", None, "write a literal percent sign as % then"),
])
def test_placeholder_hint_names_the_mismatch(sql, params, says):
    assert says in (placeholder_hint(sql, "pyformat", params) or "")


@pytest.mark.parametrize("sql, params", [
    ("select %s, %s", (1, 2)), ("select 5 %% 2, %s", (1,)), ("select %(x)s", {"x": 1}),
    ("select 1", None), ("select 5 % 2", None), ("select 'a%s'", NOT_GIVEN),
])
def test_placeholder_hint_says_nothing_when_they_fit(sql, params):
    assert placeholder_hint(sql, "pyformat", params) is None


MISTAKES = [  # what psycopg2 says alone, and what the note says
    ("select %s, %s", (1,), IndexError, "2 placeholders (%s) but 1 parameter"),
    ("select 5 % 2, %s", (1,), IndexError, "written %%"),
    ("select %(x)s", (1,), TypeError, "take a mapping"),
    ("select %s", None, Exception, "no parameters were passed (params=None)"),
]


@pytest.mark.parametrize("name", ["postgresql", "psycopg", "mysql"])
@pytest.mark.parametrize("sql, params, error, says",
                         MISTAKES)
def test_a_parameter_mistake_gets_an_adb_note(name, sql, params, error, says, tmp_path):
    target = make_target(name, tmp_path)
    with adb.sync.Database(target.url, pool_size=1) as db:
        with pytest.raises(Exception) as raised:
            db.runQuery(sql, params)
        if name == "postgresql":
            assert isinstance(raised.value, error)
        assert any(says in note for note in getattr(raised.value, "__notes__", [])), \
            (raised.value, getattr(raised.value, "__notes__", None))
        tx = db.beginTransaction()  # inside a transaction too
        with pytest.raises(Exception) as raised:
            db.runOperation(sql, params, tx=tx)
        db.rollbackTransaction(tx)
        assert any(says in note for note in getattr(raised.value, "__notes__", []))
        assert db.runQueryValue("select %s", (5,)) == 5


# -- 2. dsn= and keyword forms keep host and database in reprs and messages ------------

def connect_forms(kind):
    """(keywords for Database) of each non-URL form for ``kind``'s server, with a
    password that must never show, and a database that does not exist."""
    kw = server_kwargs(kind)
    host, port, user = kw["host"], kw["port"], kw["user"]
    if kind == "mysql":
        return [dict(driver="pymysql", host=host, port=port, user=user, password="s3cr3t-pw",
                     database="adb_no_such_db")]
    dsn = f"host={host} port={port} dbname=adb_no_such_db user={user} password=s3cr3t-pw"
    uri = f"postgresql://{user}:s3cr3t-pw@{host}:{port}/adb_no_such_db"
    return [dict(driver="psycopg2", dsn=text) for text in (dsn, uri)] \
        + [dict(driver="psycopg2", host=host, port=port, user=user, password="s3cr3t-pw",
                dbname="adb_no_such_db")]


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_dsn_and_keyword_forms_name_host_and_database(kind):
    require_server(kind)
    for form in connect_forms(kind):
        db = adb.sync.Database(pool_size=1, **form)
        try:
            shown = repr(db)
            with pytest.raises(Exception) as raised:
                db.runQuery("select 1")
        finally:
            db.close()
        host = server_kwargs(kind)["host"]
        for text in (shown, str(raised.value)):
            assert f"@{host}" in text and "/adb_no_such_db" in text, (form, text)
            assert "s3cr3t-pw" not in text and "***" in text, (form, text)


# -- 2. stats(): reconnects counts the connections that replaced a lost one -------------

KILL_ALL = {  # kill every session of one database but the caller's own
    "postgresql": ("select pg_terminate_backend(pid) from pg_stat_activity "
                   "where datname = %s and pid <> pg_backend_pid()"),
    "mysql": "select id from information_schema.processlist where db = %s and id <> connection_id()",
}


def kill_sessions(kind, url, database):
    with adb.sync.Database(url, pool_size=1) as admin:
        if kind == "postgresql":
            admin.runQuery(KILL_ALL[kind], (database,))
        else:
            for (pid,) in admin.runQuery(KILL_ALL[kind], (database,)):
                try:
                    admin.runOperation(f"kill {int(pid)}")
                except Exception:  # it ended meanwhile
                    pass


@pytest.mark.parametrize("name", ["postgresql", "psycopg", "mysql"])
def test_reconnects_counts_the_connections_that_replaced_lost_ones(name):
    kind = TARGETS[name]
    # a database of this test's own: the kill below ends every session of it
    url = own_database(kind, "adb_second_hour_stats")
    database = urlsplit(url).path.lstrip("/")
    if name == "psycopg":
        url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    with adb.sync.Database(url, pool_size=3) as db:
        hold = [db.beginTransaction() for _ in range(3)]  # every worker connected
        for tx in hold:
            db.rollbackTransaction(tx)
        assert db.stats()["connects"] == 3 and db.stats()["reconnects"] == 0
        for _ in range(2):
            kill_sessions(kind, URLS[kind], database)
            before = db.stats()["connects"]
            deadline = time.monotonic() + 20
            while db.stats()["connects"] < before + 3 and time.monotonic() < deadline:
                txs = []
                for _ in range(3):  # three at once: each worker meets its dead connection
                    try:
                        txs.append(db.beginTransaction())
                        db.runQuery("select 1", tx=txs[-1])
                    except Exception:  # ConnectionLost: its worker reconnects next time
                        pass
                for tx in txs:
                    try:
                        db.rollbackTransaction(tx)
                    except Exception:  # lost with its connection
                        pass
        stats = db.stats()
        assert stats["connects"] == 9, stats
        assert stats["reconnects"] == 6, stats
        assert stats["recycled"] == 0 and stats["alive"] == 3, stats


# -- 3. rowcounts alike across servers where adb can make them so -----------------------

@pytest.mark.parametrize("name", list(TARGETS))
def test_rowcounts_are_alike_across_servers(name, tmp_path, table_name):
    target = make_target(name, tmp_path)
    sql = target.sql
    with adb.sync.Database(target.url, pool_size=1) as db:
        db.runOperation(f"create table {table_name} (k int)")
        try:
            assert db.runMany(sql(f"insert into {table_name} values (%s)"), []) == 0
            assert db.runMany(sql(f"insert into {table_name} values (%s)"), iter([])) == 0
            assert db.runMany(sql(f"insert into {table_name} values (%s)"),
                              ((k,) for k in range(3))) == 3
            tx = db.beginTransaction()  # the cursor's previous statement counted 2
            assert db.runMany(sql(f"insert into {table_name} values (%s)"), [(7,), (8,)],
                              tx=tx) == 2
            assert db.runMany(sql(f"insert into {table_name} values (%s)"), [], tx=tx) == 0
            db.rollbackTransaction(tx)
            assert db.runOperation("select 1") == 1
            assert db.runOperation(f"select k from {table_name}") == 3
            assert db.runOperation(f"select k from {table_name} where k > 5") == 0
            assert db.runOperation(f"delete from {table_name} where k < 2") == 2
        finally:
            db.runOperation(f"drop table {table_name}")


def test_sqlite_statement_timeout_says_interrupted(tmp_path):
    slow = ("with recursive c(x) as (select 1 union all select x + 1 from c "
            "where x < 100000000) select count(*) from c")
    with adb.sync.Database(f"sqlite:///{tmp_path}/t.db", pool_size=1) as db:
        with pytest.raises(StatementTimeout) as raised:
            db.runQuery(slow, statement_timeout=0.2)
    assert "interrupted" in str(raised.value) and "server" not in str(raised.value)
    assert raised.value.may_have_run is False


# -- 3. a connection closed by the caller's own code is replaced ----------------------

@pytest.mark.parametrize("name", list(TARGETS))
def test_a_connection_closed_by_a_callers_function_is_replaced(name, tmp_path):
    """A statement that succeeded vouches for its connection: the next call skips the
    driver's check that it is closed. A caller's own function is handed the
    connection and may close it (in a transaction or not; it then fails, or its
    transaction cannot commit): every call after that runs on a new connection,
    never on the closed one."""
    target = make_target(name, tmp_path)

    def close_it(cursor):
        cursor.connection.close()

    with adb.sync.Database(target.url, pool_size=1) as db:
        for round in range(3):
            assert db.runQueryValue("select 1") == 1  # vouches for the connection
            with pytest.raises(Exception):
                if round == 0:
                    db.runInteraction(close_it)
                else:  # in a transaction: the function, then its commit or the next call
                    with db.transaction() as tx:
                        tx.runInteraction(close_it)
                        tx.runQueryValue("select 1")
            assert db.runQueryValue("select 2") == 2, round
        assert db.stats()["connects"] == 4
