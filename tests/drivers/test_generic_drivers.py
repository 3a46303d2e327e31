"""PEP 249 modules adb has no driver of its own for, through the generic driver
(``Database(driver="pg8000.dbapi", host=...)``): pg8000 and mysql-connector-python
keep docs/failures.md's rules as the built-in drivers do (mysqlclient, once run here
through the generic driver, has a module of its own now: ``adb.drivers.mysqldb``): a connection killed while idle costs nothing, a call whose connection breaks
fails with ``ConnectionLost(may_have_run=True)`` and the next one gets a new
connection, a transaction lost with its connection commits nothing, a server
restarted while the pool is idle costs nothing. DuckDB, whose transactions are
not PEP 249's, is refused at construction; a ``:memory:`` database gets one worker.
"""

import asyncio
import gc
import importlib
import time
import uuid
from urllib.parse import urlsplit

import pytest

import adb
import adb.sync
from adb.drivers.base import readable
from adb.errors import ConnectionLost, InterfaceError, TransactionError
from adb.session import LIVENESS_AFTER
from benchmarks import privateserver

from ..conftest import IN_CI, URLS, require_server

#: module -> the server it talks to
DRIVERS = {"pg8000.dbapi": "postgresql", "mysql.connector": "mysql"}


def keywords(module, url, name):
    """The connect() keywords of ``module`` for the server at ``url``."""
    parts = urlsplit(url)
    kwargs = {"host": parts.hostname, "port": parts.port, "user": parts.username,
              "database": parts.path.lstrip("/")}
    if module.startswith("pg8000"):
        kwargs["application_name"] = name
    return kwargs


def need(module):
    """Import ``module``. Where it is missing the test is skipped saying why, and fails
    under CI=true."""
    try:
        return importlib.import_module(module)
    except ImportError:
        why = f"{module} is not installed (pip install -e '.[test]')"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


def generic(module, url=None, name="adb-gen", **options):
    """A Database on ``module`` through the generic driver, its ``name`` made this
    run's own: the kills and looks below select its sessions by it (PostgreSQL's
    application_name; on MySQL it marks the statement waited for)."""
    need(module)
    name = f"{name}-{uuid.uuid4().hex[:8]}"
    url = url or URLS[DRIVERS[module]]
    return adb.Database(driver=module, name=name, **keywords(module, url, name), **options)


def rows(got):
    """Rows as tuples: pg8000 gives each row as a list, and adb passes rows on as given."""
    return [tuple(row) for row in got]


def server_ids(db, module):
    """The server's ids of ``db``'s open connections (MySQL's thread ids)."""
    conns = list(db._engine.pool.connections.values())
    return [c.connection_id if module == "mysql.connector" else c.thread_id() for c in conns]


def kill_all(db, module, url=None, ids=None):
    """End every connection of ``db`` from the server side, and only those (on
    MySQL ``ids``, the server's ids of them, when they are busy)."""
    url = url or URLS[DRIVERS[module]]
    with adb.sync.Database(url, pool_size=1) as admin:
        if DRIVERS[module] == "postgresql":
            admin.runQuery("select pg_terminate_backend(pid) from pg_stat_activity "
                           "where application_name = %s", (db.name,))
        else:
            for ident in ids or server_ids(db, module):
                try:
                    admin.runOperation("KILL CONNECTION %s", (ident,))
                except Exception:  # already gone
                    pass


def until_ended(db, limit=20):
    """Return once every open connection of ``db`` has the server's goodbye on its
    socket (EOF, a hang-up, or an error packet to read), as the generic driver sees
    it: a kill or a restart ends a connection when the server next runs that
    session, not when it is asked to, and a call sent before would meet a live one."""
    driver = db._engine.driver
    deadline = time.monotonic() + limit
    while True:
        fds = [driver.fd_of(conn) for conn in list(db._engine.pool.connections.values())]
        assert None not in fds, f"the generic driver found no socket on {driver}"
        if all(fd == -1 or readable(fd) for fd in fds):
            return
        assert time.monotonic() < deadline, "the server never ended the connections"
        time.sleep(0.01)


def until_connected(db, count, limit=20):
    """Return once ``db`` holds ``count`` open connections."""
    deadline = time.monotonic() + limit
    while db.stats()["connected"] < count:
        assert time.monotonic() < deadline, f"the pool never opened {count} connections"
        time.sleep(0.01)


async def idle_past_the_socket_check(used):
    """Return once connections last used at ``used`` count as idle: only then does
    a call check the socket first (docs/failures.md, rule 3); a call within
    ``LIVENESS_AFTER`` of the last use meets a dead socket itself (ConnectionLost)."""
    await asyncio.sleep(max(0.0, used + 2 * LIVENESS_AFTER - time.monotonic()))


def statement_seen(module, db_name, text, limit=20):
    """Return once the server shows a statement containing ``text`` running (the
    caller's own session excluded); on PostgreSQL only ``db_name``'s sessions."""
    params: tuple[str, ...]
    if DRIVERS[module] == "postgresql":
        sql = ("select 1 from pg_stat_activity where application_name = %s "
               "and state = 'active' and query like %s")
        params = (db_name, f"%{text}%")
    else:
        sql = ("select 1 from information_schema.processlist where id <> connection_id() "
               "and info like %s")
        params = (f"%{text}%",)
    deadline = time.monotonic() + limit
    with adb.sync.Database(URLS[DRIVERS[module]], pool_size=1) as admin:
        while not admin.runQuery(sql, params):
            assert time.monotonic() < deadline, f"the server never showed {text!r} running"
            time.sleep(0.01)


@pytest.fixture(params=list(DRIVERS))
def module(request):
    require_server(DRIVERS[request.param])
    return request.param


async def test_calls_and_transactions_keep_the_contract(module, table_name):
    db = generic(module, pool_size=2)
    try:
        await db.runOperation(f"create table {table_name} (id int primary key, v varchar(20))")
        await db.runOperation(f"insert into {table_name} values (%s, %s)", (1, "one"))
        assert rows(await db.runQuery(f"select id, v from {table_name}")) == [(1, "one")]

        def writes_then_raises(cursor):
            cursor.execute(f"insert into {table_name} values (2, 'two')")
            raise KeyError("mine")
        with pytest.raises(KeyError):
            await db.runInteraction(writes_then_raises)
        with pytest.raises(KeyError):
            async with db.transaction() as tx:
                await tx.runOperation(f"insert into {table_name} values (3, 'three')")
                raise KeyError("mine")
        tx = await db.beginTransaction()
        await tx.runOperation(f"insert into {table_name} values (4, 'four')")
        assert rows(await db.runQuery(f"select count(*) from {table_name}")) == [(1,)]  # not yet
        await tx.commit()
        assert rows(await db.runQuery(f"select id from {table_name} order by id")) == [(1,), (4,)]
        connects = db.stats()["connects"]
        with pytest.raises(db.dbapi.Error) as info:  # the server's error, not a lost connection
            await db.runQuery("select no_such_column from " + table_name)
        assert not isinstance(info.value, ConnectionLost)
        assert rows(await db.runQuery("select 1")) == [(1,)]
        assert db.stats()["connects"] == connects  # no connection was replaced for it
    finally:
        await db.runOperation(f"drop table if exists {table_name}")
        await db.close()


async def test_connections_killed_while_idle_cost_nothing(module):
    db = generic(module, name=f"adb-gen-idle-{module}", pool_size=4)
    try:
        await asyncio.gather(*(db.runQuery("select 1") for _ in range(8)))
        await asyncio.to_thread(until_connected, db, 4)  # every start-up connect done
        used = time.monotonic()
        before = db.stats()["connects"]
        kill_all(db, module)
        until_ended(db)
        await idle_past_the_socket_check(used)
        for _ in range(30):  # one after another: each goes to the most recently idle worker
            assert rows(await db.runQuery("select 1")) == [(1,)]
        got = await asyncio.gather(*(db.runQuery("select 1") for _ in range(20)))
        assert [rows(each) for each in got] == [[(1,)]] * 20
        assert db.stats()["connects"] > before  # the dead ones were replaced before use
    finally:
        await db.close()


async def test_connection_killed_under_a_call_is_lost_then_replaced(module):
    db = generic(module, name=f"adb-gen-mid-{module}", pool_size=1)
    sleep = ("select pg_sleep(5)" if DRIVERS[module] == "postgresql"
             else f"select sleep(5.01) /* {db.name} */")
    try:
        await db.runQuery("select 1")
        ids = server_ids(db, module) if DRIVERS[module] == "mysql" else None
        call = asyncio.ensure_future(db.runQuery(sleep))
        await asyncio.to_thread(statement_seen, module, db.name, sleep)
        started = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, kill_all, db, module, None, ids)
        with pytest.raises(ConnectionLost) as info:
            await call
        assert info.value.may_have_run
        assert time.monotonic() - started < 3  # the kill ended it, not the sleep
        for _ in range(10):
            assert rows(await db.runQuery("select 1")) == [(1,)]
        assert db.stats()["connects"] == 2
    finally:
        await db.close()


async def test_connection_killed_inside_a_transaction_commits_nothing(module, table_name):
    db = generic(module, name=f"adb-gen-tx-{module}", pool_size=1)
    try:
        await db.runOperation(f"create table {table_name} (id int)")
        tx = await db.beginTransaction()
        await tx.runOperation(f"insert into {table_name} values (1)")
        kill_all(db, module)
        until_ended(db)
        with pytest.raises(ConnectionLost) as info:
            await tx.runOperation(f"insert into {table_name} values (2)")
        assert info.value.may_have_run
        with pytest.raises(TransactionError, match="nothing was committed"):
            await tx.commit()
        assert rows(await db.runQuery(f"select count(*) from {table_name}")) == [(0,)]
    finally:
        await db.runOperation(f"drop table if exists {table_name}")
        await db.close()


@pytest.fixture(scope="module")
def private_servers():
    """A PostgreSQL and a MariaDB of these tests' own (``benchmarks.privateserver``),
    made when first asked for: restarting the shared servers is never done."""
    made = {}

    def get(kind):
        if kind not in made:
            why = privateserver.unavailable(kind)
            if why:
                pytest.skip(f"the restart test needs a private {kind} server: {why}")
            made[kind] = privateserver.create(kind)
        return made[kind]
    yield get
    for server in made.values():
        privateserver.remove(server)


# pg8000 (1.31) leaves the socket of a connect that fails in its handshake (a server
# restarting accepts, then closes) to the garbage collector: a listener that accepts
# and closes, pg8000.dbapi.connect() and gc.collect() show it without adb. Its
# ResourceWarning would land in whichever later test the collector ran in, so this
# test collects its own garbage before it ends, under its own filter: the rule that an
# unclosed resource fails the suite holds everywhere else.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_server_restarted_while_idle_costs_nothing(module, private_servers):
    server = private_servers(DRIVERS[module])
    db = generic(module, url=server.url, name=f"adb-gen-restart-{module}", pool_size=3)
    try:
        await asyncio.gather(*(db.runQuery("select 1") for _ in range(6)))
        # idle means every worker's start-up connect is done: one still connecting
        # when the server went down would meet the restart, not an idle pool
        await asyncio.to_thread(until_connected, db, 3)
        used = time.monotonic()
        before = db.stats()["connects"]
        await asyncio.get_running_loop().run_in_executor(None, privateserver.restart, server)
        until_ended(db)
        await idle_past_the_socket_check(used)
        for _ in range(20):
            assert rows(await db.runQuery("select 1")) == [(1,)]
        assert db.stats()["connects"] > before  # the restart ended the first connections
    finally:
        await db.close()
        del db  # with it the failed connects' errors, whose tracebacks hold the sockets
        gc.collect()


def test_duckdb_is_refused_saying_why():
    need("duckdb")
    with pytest.raises(InterfaceError) as info:
        adb.sync.Database(driver="duckdb", database=":memory:")
    message = str(info.value)
    assert "'duckdb'" in message and "cursor() is a second connection" in message
    assert "sqlite:///" in message  # what to use instead


def test_in_memory_database_gets_one_worker():
    # sqlite3.dbapi2: the standard library's module under a name adb has no driver for
    with pytest.raises(InterfaceError, match="in-memory sqlite3.dbapi2 database"):
        adb.sync.Database(driver="sqlite3.dbapi2", database=":memory:", pool_size=4)
    with adb.sync.Database(driver="sqlite3.dbapi2", database=":memory:", pool_size=1) as db:
        db.runOperation("create table t (x int)")
        db.runOperation("insert into t values (1)")
        assert rows(db.runQuery("select x from t")) == [(1,)]  # the same database every call
