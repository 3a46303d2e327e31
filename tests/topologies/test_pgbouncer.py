"""adb behind pgbouncer in transaction pooling mode, with psycopg2 and psycopg 3.

The contract tests of ``test_spec`` run here again, through pgbouncer, on every
front-end (``target`` below replaces conftest's: the same tests, pgbouncer's
URL with ``?pooler=transaction``). Then what transaction pooling changes, each
shown on the real pooler: psycopg 3's prepared statements, the cancel of
``statement_timeout`` (checked on the server itself, in ``pg_stat_activity``),
LISTEN refused and NOTIFY working, session settings, streams, savepoints and
retried transactions. ``docs/poolers.md`` says why each is as it is.

Needs pgbouncer on 127.0.0.1:6432 in transaction mode (``bash .ci/start-pgbouncer``)
or ADB_TEST_PGBOUNCER_URL; skipped with that message elsewhere, failed under CI=true.
"""

import asyncio
import io
import logging
import os
import socket
import time
import uuid
from urllib.parse import urlsplit

import psycopg
import psycopg2
import pytest

import adb
import adb.sync
from adb.errors import InterfaceError, StatementTimeout

from ..conftest import FRONTS, IN_CI, URLS, Target, close, ev, with_pool_options
from ..contract.test_spec import *  # noqa: F401,F403 - the contract tests, collected again here
from ..conftest import fronts_fixture

#: the spec's four front-ends here (the spec module's own ``front`` adds trio)
front = fronts_fixture(FRONTS)

del test_named_tuple_columns_that_are_not_identifiers  # noqa: F821 - no server in it

PGBOUNCER_URL = os.environ.get("ADB_TEST_PGBOUNCER_URL", "postgresql://root@127.0.0.1:6432/test")
HOW_TO_START = ("start pgbouncer on 127.0.0.1:6432 in transaction mode in front of the "
                "PostgreSQL test server (`bash .ci/start-pgbouncer`, or `bash .ci/start-servers`) "
                "or set ADB_TEST_PGBOUNCER_URL")
#: psycopg's default: a statement run this many times on a connection is prepared
PREPARE_THRESHOLD = 5
_reachable: list[bool] = []


def require_pgbouncer() -> None:
    """Skip (or, under CI=true, fail) unless pgbouncer answers on TCP."""
    if not _reachable:
        parts = urlsplit(PGBOUNCER_URL)
        try:
            socket.create_connection((parts.hostname, parts.port or 0), timeout=2).close()
            _reachable.append(True)
        except OSError:
            _reachable.append(False)
    if not _reachable[0]:
        message = f"no pgbouncer at {urlsplit(PGBOUNCER_URL).netloc}: {HOW_TO_START}"
        if IN_CI:
            pytest.fail(message + " (CI=true: server-backed tests must run)")
        pytest.skip(message)


def bouncer_url(driver: str, pooler: str = "transaction") -> str:
    """pgbouncer's URL for ``driver`` (psycopg2 or psycopg), saying ``?pooler=`` unless ''."""
    scheme, rest = PGBOUNCER_URL.split("://", 1)
    scheme = scheme.split("+")[0] + ("+psycopg" if driver == "psycopg" else "")
    query = f"pooler={pooler}" if pooler else ""
    sep = "&" if "?" in rest else "?"
    return f"{scheme}://{rest}{sep + query if query else ''}"


#: the contract's targets through pgbouncer: conftest's names (test_spec reads them)
BOUNCED = {"pgbouncer-psycopg2": ("postgresql", "psycopg2"),
           "pgbouncer-psycopg": ("psycopg", "psycopg")}


@pytest.fixture(params=list(BOUNCED))
def target(request):
    """Replaces conftest's ``target`` in this module: the spec through pgbouncer."""
    require_pgbouncer()
    name, driver = BOUNCED[request.param]
    return Target("postgresql", bouncer_url(driver), name)


@pytest.fixture(params=["psycopg2", "psycopg"])
def driver(request):
    require_pgbouncer()
    return request.param


@pytest.fixture
def direct():
    """A Database on the PostgreSQL server itself (5432), to look at what runs there."""
    database = adb.sync.Database(URLS["postgresql"], pool_size=1)
    yield database
    database.close()


# -- the option --------------------------------------------------------------------------

def test_pooler_is_checked_and_named_in_its_error():
    url = bouncer_url("psycopg2", "")
    with pytest.raises(InterfaceError, match=r"pooler must be 'session', 'transaction' or None, "
                                             r"not 'transactions'"):
        adb.sync.Database(url, pooler="transactions")
    with pytest.raises(InterfaceError, match="pooler must be .* not 'bogus'"):
        adb.sync.Database(bouncer_url("psycopg2", "bogus"))
    with pytest.raises(InterfaceError, match="pooler='transaction' but the URL says pooler='session'"):
        adb.sync.Database(bouncer_url("psycopg", "session"), pooler="transaction")
    with pytest.raises(InterfaceError, match="sqlite3 cannot go through a pooler"):
        adb.sync.Database("sqlite://", pooler="session")


# -- psycopg 3's prepared statements -----------------------------------------------------

@pytest.mark.parametrize("pooler", ["transaction", None], ids=["pooler=transaction", "no-pooler"])
def test_psycopg_prepares_nothing_through_a_transaction_pooler(pooler, caplog):
    """Two clients run one query in turn, well past psycopg's prepare threshold.
    With ``pooler="transaction"`` nothing is ever prepared and every call answers.
    Without it, a statement psycopg prepared on one server connection is missing on
    the next, or its name already taken there by the other client's: adb knows that
    symptom (psycopg's own ``_pg3_`` names), stops preparing, says so once in the
    log, and runs again the call that met it (it did not run): every call answers."""
    require_pgbouncer()
    url = bouncer_url("psycopg", pooler or "")
    clients = [adb.sync.Database(url, pool_size=1) for _ in range(2)]
    try:
        with caplog.at_level(logging.WARNING, logger="adb"):
            for i in range(4 * PREPARE_THRESHOLD):
                for client in clients:
                    assert client.runQuery("select %s::int + 1", (i,)) == [(i + 1,)]
        thresholds = [client.runInteraction(lambda cursor: cursor.connection.prepare_threshold)
                      for client in clients]
        said = [r for r in caplog.records if "pooler='transaction'" in r.getMessage()]
        if pooler:
            assert thresholds == [None, None] and said == []
        else:  # a client that met the symptom prepares no more, and said so once
            assert thresholds.count(None) == len(said) >= 1
            assert all(c.stats()["errors"] == 0 for c in clients)
    finally:
        # what the clients prepared stays on pgbouncer's server connections, where only
        # a client that prepares (psycopg 3 without pooler=) meets it
        for client in clients:
            client.close()


def test_inside_a_transaction_the_symptom_is_an_error_naming_the_pooler_option():
    """Transactions that each run one statement past psycopg's prepare threshold,
    while another client holds a server connection every other time, so that
    pgbouncer hands them different server connections: one meets a prepared
    statement missing (or already there, left by another client). That error ends
    its transaction (nothing of it runs again) with a note naming
    ``pooler="transaction"``; from then on nothing is prepared and all is well."""
    require_pgbouncer()
    db = adb.sync.Database(bouncer_url("psycopg", ""), pool_size=1)
    holder = adb.sync.Database(bouncer_url("psycopg2"), pool_size=1)
    met = None
    try:
        for attempt in range(10):
            held = holder.beginTransaction() if attempt % 2 else None
            try:
                if held is not None:
                    holder.runQuery("select 1", tx=held)
                with db.transaction() as tx:
                    for i in range(PREPARE_THRESHOLD + 1):
                        assert tx.runQuery("select %s::int + 41", (i,)) == [(i + 41,)]
            except psycopg.Error as exc:
                met = exc
                break
            finally:
                if held is not None:
                    holder.rollbackTransaction(held)
        assert met is not None, "no transaction met a prepared statement of another session"
        assert met.sqlstate in ("26000", "42P05")
        assert any('pooler="transaction"' in note for note in getattr(met, "__notes__", []))
        assert db.runInteraction(lambda cursor: cursor.connection.prepare_threshold) is None
        for attempt in range(4):
            with db.transaction() as tx:
                assert tx.runQuery("select %s::int + 41", (attempt,)) == [(attempt + 41,)]
    finally:
        db.close()
        holder.close()


# -- statement_timeout: the cancel through the pooler ------------------------------------

def active(direct, marker):
    """How many backends of the server itself run a statement containing ``marker``."""
    return direct.runQuery(
        "select count(*) from pg_stat_activity where state = 'active' "
        "and query like %s and pid <> pg_backend_pid()", (f"%{marker}%",))[0][0]


def test_statement_timeout_cancels_on_the_server_through_pgbouncer(driver, direct):
    """``select pg_sleep(3)`` with a 0.5 s timeout ends as a clean cancel
    (``may_have_run=False``), sooner than the cancel grace (2 s) would have cut the
    connection and than the sleep's end, and the server no longer runs it."""
    marker = f"adb_pgb_{uuid.uuid4().hex[:10]}"
    db = adb.sync.Database(bouncer_url(driver), pool_size=1, statement_timeout=0.5)
    try:
        assert db.runQuery("select 1") == [(1,)]
        start = time.monotonic()
        with pytest.raises(StatementTimeout) as timed_out:
            db.runQuery(f"select pg_sleep(3) /* {marker} */")
        took = time.monotonic() - start
        assert took < 0.5 + 1.5, took  # (slack for a loaded machine; a cut would be 2.5 s)
        assert timed_out.value.may_have_run is False
        assert active(direct, marker) == 0
        assert db.runQuery("select 2") == [(2,)]
    finally:
        db.close()


def test_a_timed_out_call_returns_only_once_its_cancel_has_returned(driver):
    """A cancel can outlive the statement it ended: PostgreSQL signals the backend
    twice, and a second signal handled after the error cancels the next statement
    on that server connection. So the worker waits for the cancel itself to return
    (here made 0.4 s slower than the server) before it checks the connection, with
    a check that meets a pending cancel, and only then settles the call."""
    db = adb.sync.Database(bouncer_url(driver), pool_size=1, statement_timeout=0.3)
    returned = []
    canceller = db._engine.driver.cancel
    assert canceller is not None
    cancel = canceller.cancel

    def slow_cancel(conn):
        cancel(conn)
        time.sleep(0.4)
        returned.append(time.monotonic())
    setattr(canceller, "cancel", slow_cancel)  # the real cancel, instrumented
    try:
        with pytest.raises(StatementTimeout) as timed_out:
            db.runQuery("select pg_sleep(3)")
        settled = time.monotonic()
        assert timed_out.value.may_have_run is False
        assert returned and settled >= returned[0]
        assert [db.runQuery("select pg_sleep(0.01), %s::int", (i,))[0][1] for i in range(5)] \
            == list(range(5))
    finally:
        db.close()


def test_without_pooler_psycopg2s_cancel_reaches_nothing_and_says_why(direct, caplog):
    """The proof: without ``pooler=``, psycopg2's ``pg_cancel_backend`` names the
    pid pgbouncer made up. The call ends only when its connection is cut (it may
    have run), the server still runs the statement (a sleep long enough to be there
    still however slow the cut), and the log says to pass pooler=."""
    require_pgbouncer()
    marker = f"adb_pgb_{uuid.uuid4().hex[:10]}"
    db = with_pool_options(adb.sync.Database, cancel_grace=0.3)(
        bouncer_url("psycopg2", ""), pool_size=1, statement_timeout=0.3)
    try:
        with caplog.at_level(logging.WARNING, logger="adb"):
            with pytest.raises(StatementTimeout) as timed_out:
                db.runQuery(f"select pg_sleep(5) /* {marker} */")
        assert timed_out.value.may_have_run is True
        assert active(direct, marker) == 1
        assert "pass Database(pooler=...)" in caplog.text
    finally:
        db.close()


# -- LISTEN refused, NOTIFY working ------------------------------------------------------

async def test_listen_through_a_transaction_pooler_is_refused_saying_why(front, driver):
    db = FRONTS[front](bouncer_url(driver), pool_size=1)
    try:
        with pytest.raises(InterfaceError, match="transaction pooler.*Listen through a Database "
                                                 "connected to the server itself"):
            db.listen("adb_never")
        assert db.stats()["listen"]["state"] == "idle"
        assert await ev(db.runQuery("select 1")) == [(1,)]
    finally:
        await close(db)


def test_notify_through_pgbouncer_reaches_a_listener_on_the_server(driver):
    channel = f"adb_pgb_{uuid.uuid4().hex[:10]}"
    server = adb.sync.Database(URLS["postgresql"], pool_size=1)
    bounced = adb.sync.Database(bouncer_url(driver), pool_size=1)
    try:
        with server.listen(channel) as listener:
            bounced.notify(channel, "through pgbouncer")
            with bounced.transaction() as tx:
                bounced.notify(channel, "at commit", tx=tx)
            payloads = [getattr(listener.get(10), "payload", None) for _ in range(2)]
        assert payloads == ["through pgbouncer", "at commit"]
    finally:
        bounced.close()
        server.close()


# -- session settings ---------------------------------------------------------------------

def test_on_connect_settings_only_the_tracked_ones_stay_with_their_client(driver):
    """pgbouncer keeps a few parameters per client (TimeZone, DateStyle,
    client_encoding, application_name, standard_conforming_strings) and sets them
    on whichever server connection the client gets. Any other ``SET`` stays on the
    server connection it ran on: the next client there sees it (docs/poolers.md)."""
    owner = f"adb_pgb_{uuid.uuid4().hex[:10]}"

    def setup(conn):
        conn.cursor().execute(f"set time zone 'Asia/Tokyo'; set adb_test.owner = '{owner}'")

    setter = adb.sync.Database(bouncer_url(driver), pool_size=1, on_connect=setup)
    other = adb.sync.Database(bouncer_url(driver), pool_size=1)
    read = "select current_setting('TimeZone'), current_setting('adb_test.owner', true)"
    try:
        assert setter.runQuery("select current_setting('TimeZone')") == [("Asia/Tokyo",)]
        zone, leaked = other.runQuery(read)[0]
        assert zone != "Asia/Tokyo"
        assert leaked == owner  # the server connection it landed on kept the setter's SET
        other.runOperation("reset adb_test.owner")  # most likely on that same connection
    finally:
        setter.close()
        other.close()


# -- what lives inside one transaction works: streams, savepoints, runTransaction ----------

@pytest.fixture
async def adb_db(driver, table_name):
    """An asyncio Database through pgbouncer with a table ``table_name`` of 2,500 rows."""
    db = adb.Database(bouncer_url(driver), pool_size=2)
    await db.runOperation(f"create table {table_name} (userid int primary key, data text)")
    await db.runMany(f"insert into {table_name} values (%s, %s)",
                     [(i, f"row {i}") for i in range(1, 2501)])
    yield db
    await db.runOperation(f"drop table if exists {table_name}")
    await db.close()


async def test_a_stream_reads_every_row_in_batches_through_pgbouncer(adb_db, table_name):
    """A server-side cursor lives in the stream's transaction, so one server connection."""
    sql = f"select userid, data from {table_name} order by userid"
    rows = [row async for row in adb_db.stream(sql, batch=100)]
    assert [r[0] for r in rows] == list(range(1, 2501))
    assert rows[41] == (42, "row 42")
    assert adb_db.stats()["streams"] == 0 and adb_db.stats()["pinned"] == 0


async def test_copy_out_and_copy_in_through_pgbouncer(adb_db, table_name):
    """COPY runs inside its transaction: one server connection from start to end."""
    lines = [line async for line in adb_db.copy_out(f"select userid + 10000, data from {table_name}")]
    assert len(lines) == 2500 and lines[0] == "10001\trow 1\n"
    assert await adb_db.copy_in(table_name, io.StringIO("".join(lines))) == 2500
    assert await adb_db.runQuery(f"select count(*), max(userid) from {table_name}") == [(5000, 12500)]


async def test_savepoints_and_run_transaction_through_pgbouncer(adb_db, table_name):
    table = table_name
    async with adb_db.transaction() as tx:
        await tx.runOperation(f"delete from {table} where userid > 2")
        with pytest.raises(adb_db.dbapi.IntegrityError):
            async with tx.savepoint():
                await tx.runOperation(f"insert into {table} values (3, 'kept')")
                await tx.runOperation(f"insert into {table} values (1, 'duplicate')")
        async with tx.savepoint():
            await tx.runOperation(f"insert into {table} values (4, 'kept')")

    async def move(tx, key):
        await tx.runOperation(f"update {table} set data = 'moved' where userid = %s", (key,))
        return await tx.runQuery(f"select count(*) from {table} where data = 'moved'")

    assert await adb_db.runTransaction(move, 4) == [(1,)]
    assert await adb_db.runQuery(f"select userid, data from {table} order by 1") == \
        [(1, "row 1"), (2, "row 2"), (4, "moved")]


async def test_autobatch_units_run_whole_through_pgbouncer(driver, table_name):
    """Group commit's units are one message or one transaction: each lands on one
    server connection. psycopg2's guard is not prepared through a transaction
    pooler (prepared, it would be missing on the server connection the next unit
    gets): no server connection the client lands on has had it prepared since
    the test began (an older one is another client's)."""
    db = adb.Database(bouncer_url(driver), pool_size=2, autobatch=32)
    sql = f"insert into {table_name} values (%s, %s)"
    try:
        [(began,)] = await db.runQuery("select clock_timestamp()")
        await db.runOperation(f"create table {table_name} (userid int primary key, data text)")
        assert await asyncio.gather(*(db.runOperation(sql, (i, "b")) for i in range(400))) \
            == [1] * 400
        assert await db.runQuery(f"select count(*) from {table_name}") == [(400,)]
        stats = db.stats()
        assert stats["batched"] > 0 and stats["unit_fallbacks"] == 0
        assert await asyncio.gather(*(db.runQuery(
            "select count(*) from pg_prepared_statements "
            "where name = 'adb_autobatch_guard' and prepare_time >= %s", (began,))
            for _ in range(4))) == [[(0,)]] * 4
        if driver == "psycopg2":
            assert not getattr(db._engine.driver, "guarded")  # no connection of its own had it prepared either
    finally:
        await db.runOperation(f"drop table if exists {table_name}")
        await db.close()
