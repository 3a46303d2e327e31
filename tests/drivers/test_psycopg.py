"""What differs on psycopg 3 (``postgresql+psycopg://``): server-side binding and
the opt-out from it, the pipelined bulk path, the in-band cancel. The whole spec
and the fault tests run on it too (the ``psycopg`` target and kind)."""

import os
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import adb
from adb.drivers.base import hung_up, readable
from adb.errors import StatementTimeout

from ..conftest import URLS, own_database, psycopg_url, require_server


@pytest.fixture
def url():
    require_server("postgresql")
    return psycopg_url()


async def test_parameters_are_bound_on_the_server(url):
    """A placeholder where PostgreSQL takes no parameter is the server's error,
    passed through; the pool serves on. ClientCursor interpolates as psycopg2 does."""
    db = adb.Database(url, pool_size=1)
    try:
        with pytest.raises(psycopg.errors.SyntaxError):
            await db.runOperation("set application_name = %s", ("x",))
        assert await db.runQuery("select %s::int + 1", (41,)) == [(42,)]
    finally:
        await db.close()
    db = adb.Database(url, pool_size=1, cursor_factory=psycopg.ClientCursor)
    try:
        await db.runOperation("set application_name = %s", ("adb-client-side",))
        assert await db.runQuery("show application_name") == [("adb-client-side",)]
    finally:
        await db.close()


async def test_run_many_pipelines_and_counts_every_row(url, table_name):
    db = adb.Database(url, pool_size=2)
    try:
        await db.runOperation(f"create table {table_name} (k int primary key, v text)")
        rows = [(i, f"v{i}") for i in range(3000)]
        assert await db.runMany(f"insert into {table_name} values (%s, %s)", rows) == 3000
        updated = await db.runMany(f"update {table_name} set v = %s where k < %s",
                                   [("a", 10), ("b", 5)])
        assert updated == 15  # the sum over the parameter sets, as psycopg2's path gives
        assert await db.runMany(f"insert into {table_name} values (%s, %s)", []) == 0
        assert await db.runQuery(f"select count(*), max(k) from {table_name}") == [(3000, 2999)]
    finally:
        await db.runOperation(f"drop table if exists {table_name}")
        await db.close()


def until(condition, what, limit=20):
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.01)


async def test_a_socket_that_failed_before_libpq_saw_it_is_a_disconnect(url):
    """psycopg's own wait can see the socket fail (a hang-up with nothing to read)
    before libpq has: it raises ``OperationalError("connection socket closed")``
    with no SQLSTATE and the connection still looks healthy, a command in progress.
    The killed-under-load stress test met it on the free-threaded build, and the
    pool reused the connection ("another command is already in progress"). Forced
    here: the server ends the session, a byte sent into it draws a reset, libpq has
    read nothing."""
    db = adb.Database(url, pool_size=1)
    driver = db._engine.driver
    conn = driver.connect()
    healthy = driver.connect()
    try:
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as killer:
            killer.execute("select pg_terminate_backend(%s)", (conn.info.backend_pid,))
        until(lambda: readable(conn.fileno()), "the server's goodbye")
        os.write(conn.fileno(), b"Q")
        until(lambda: hung_up(conn.fileno()), "the reset")
        assert not conn.closed and not conn.broken, "libpq saw it: not the case under test"
        assert driver.is_disconnect(psycopg.OperationalError("connection socket closed"), conn)
        # the same error on a connection whose socket is sound is not a disconnect
        assert not driver.is_disconnect(psycopg.OperationalError("x"), healthy)
        assert not hung_up(healthy.fileno())
    finally:
        conn.close()
        healthy.close()
        await db.close()


LOGINS_DB = "adb_test_cancel_logins"


@pytest.mark.parametrize("driver, side_logins", [("psycopg", 0), ("psycopg2", 1)])
async def test_statement_timeout_cancels_in_band(driver, side_logins):
    """psycopg's cancel goes over PostgreSQL's cancel protocol: no side connection
    logs in. psycopg2's driver opens one to call pg_cancel_backend, which shows
    that the count below sees such a login."""
    require_server("postgresql")
    url = psycopg_url() if driver == "psycopg" else URLS["postgresql"]
    # a database this test alone logs into, so pg_stat_database's count of its logins
    # is this test's own (other programs log into ``test`` at any time, and the other
    # driver's case may run beside this one)
    own = own_database("postgresql", LOGINS_DB)
    db = adb.Database(urlunsplit(urlsplit(url)._replace(path=urlsplit(own).path)), pool_size=1,
                      statement_timeout=0.3)
    admin = adb.Database(own, pool_size=1)
    sessions = "select sessions from pg_stat_database where datname = current_database()"
    try:
        await db.runQuery("select 1")
        await admin.runQuery("select 1")
        before = (await admin.runQuery(sessions))[0][0]
        with pytest.raises(StatementTimeout) as info:
            await db.runQuery("select pg_sleep(5)")
        assert info.value.may_have_run is False
        after = (await admin.runQuery(sessions))[0][0]
        assert after - before == side_logins
        assert await db.runQuery("select 1", statement_timeout=5) == [(1,)]
    finally:
        await db.close()
        await admin.close()
