"""Real faults against real servers: killed backends, restarts, cut and black-holed
networks, deaf servers, cancels, timeouts, recycling, backpressure, close, fork.

Every load test checks invariant L (tests/faults/ledger.py): calls reported OK are in the
table exactly once, calls reported "did not run" are absent, ambiguous ones
(ConnectionLost/StatementTimeout with may_have_run) at most once, nothing doubled;
every call settles within a bound; the pool serves again within 10 s.
"""

import asyncio
import json
import os
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

import adb
import adb.options
import adb.sync
from adb.errors import ConnectionLost, ForkError, PoolClosed, QueueFull, ServerUnavailable, StatementTimeout, TransactionError

from benchmarks import privateserver
from benchmarks.faultproxy import FaultProxy

from ..conftest import PIPELINE_VARIANTS, URLS, psycopg_url, require_server, with_pool_options
from .ledger import Ledger, TokenTable, cut_under_load, fire, recovers, repeatedly


def report(name, **figures):
    print(json.dumps({"fault": name, **figures}))


def with_query(url, **params):
    parts = urlsplit(url)
    query = "&".join([parts.query] * bool(parts.query) + [f"{k}={v}" for k, v in params.items()])
    return urlunsplit(parts._replace(query=query))


def via(proxy, url):
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def server_of(kind):
    """The server a fault test's driver talks to: psycopg (3) runs on PostgreSQL."""
    driver = kind.partition("/")[0]
    return "postgresql" if driver == "psycopg" else driver


def url_of(kind):
    """The URL a fault test's ``Database`` uses: ``kind`` is a server or ``psycopg``,
    with the URL query after a ``/`` for a pipeline variant (``PIPELINE_VARIANTS``)."""
    driver, _, query = kind.partition("/")
    url = psycopg_url() if driver == "psycopg" else URLS[driver]
    return with_query(url, **dict([query.split("=", 1)])) if query else url


#: the drivers of the fault tests, those that pipeline both with and without
KINDS = ["postgresql", "psycopg", "mysql", *PIPELINE_VARIANTS]


def proxy_for(kind):
    parts = urlsplit(URLS[server_of(kind)])
    return FaultProxy(parts.hostname or "127.0.0.1", parts.port or {"postgresql": 5432, "mysql": 3306}[server_of(kind)])


def kill_all(db, kind):
    """Kill every connection of ``db`` from the server side."""
    with adb.sync.Database(URLS[server_of(kind)], pool_size=1) as admin:
        if server_of(kind) == "postgresql":
            admin.runQuery("select pg_terminate_backend(pid) from pg_stat_activity "
                           "where application_name = %s", (db.name,))
        else:
            for conn in list(db._engine.pool.connections.values()):
                try:
                    admin.runOperation("KILL CONNECTION %s", (conn.thread_id(),))
                except Exception:  # already gone
                    pass


def url_for(kind, db_name):
    require_server(server_of(kind))
    if server_of(kind) == "postgresql":
        return with_query(url_of(kind), application_name=db_name)
    return url_of(kind)


@pytest.fixture
def tokens(request):
    made = []

    def make(kind):
        table = TokenTable(URLS[server_of(kind)], "%s")
        made.append(table)
        return table
    yield make
    for table in made:
        table.drop()


@pytest.mark.parametrize("kind", KINDS)
async def test_idle_backends_killed_cost_no_errors(kind):
    name = f"adb-f1-{kind}"
    db = adb.Database(url_for(kind, name), pool_size=4, name=name)
    await asyncio.gather(*(db.runQuery("select 1") for _ in range(8)))
    kill_all(db, kind)
    await asyncio.sleep(0.3)
    results = await asyncio.gather(*(db.runQuery("select 1") for _ in range(100)))
    assert results == [[(1,)]] * 100  # every dead socket was seen before anything was sent
    report("F1 idle kill", kind=kind, errors=0, reconnects=db.stats()["connects"] - 4)
    await db.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_kills_under_load(kind, tokens):
    name = f"adb-f2-{kind}"
    db = adb.Database(url_for(kind, name), pool_size=8, name=name)
    table = tokens(kind)
    ledger = Ledger()
    with repeatedly(lambda: kill_all(db, kind)) as kills:
        await fire(db, table, 5000, ledger)
    recovery = await recovers(db)
    figures = ledger.check(table.tokens())
    assert ledger.settle_max < 30
    assert figures["ok"] > 0
    report("F2 kills under load", kind=kind, kills=len(kills), recovery_s=round(recovery, 2),
           **figures)
    await db.close()


@pytest.mark.parametrize("kind", ["postgresql", "psycopg"])
async def test_kill_inside_transaction(kind, tokens):
    name = f"adb-f3-{kind}"
    db = adb.Database(url_for(kind, name), pool_size=2, name=name)
    table = tokens(kind)
    tx = await db.beginTransaction()
    await tx.runOperation(table.insert_sql(), ("in-tx", 1))
    kill_all(db, kind)
    await asyncio.sleep(0.2)
    with pytest.raises(ConnectionLost) as info:
        await tx.runOperation(table.insert_sql(), ("in-tx", 2))
    assert info.value.may_have_run
    with pytest.raises(TransactionError, match="lost its connection"):
        await tx.runOperation(table.insert_sql(), ("in-tx", 3))
    with pytest.raises(TransactionError, match="nothing was committed"):
        await tx.commit()
    assert tx.state is adb.TxState.FAILED
    assert table.tokens() == []
    assert await recovers(db) < 10
    await db.close()


@pytest.fixture(scope="module")
def private_postgresql():
    """A PostgreSQL server of these tests' own (``benchmarks.privateserver``), so the
    restarts below never end anyone else's sessions on the shared server."""
    why = privateserver.unavailable("postgresql")
    if why:
        pytest.skip(f"the restart tests need a private PostgreSQL: {why}")
    server = privateserver.create("postgresql")
    yield server
    privateserver.remove(server)


async def test_postgresql_restart_while_idle(private_postgresql):
    db = adb.Database(with_query(private_postgresql.url, application_name="adb-f5i"),
                      pool_size=4, name="adb-f5i")
    await asyncio.gather(*(db.runQuery("select 1") for _ in range(8)))
    start = time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, privateserver.restart,
                                                     private_postgresql, "fast")
    ready = time.monotonic() - start
    results = await asyncio.gather(*(db.runQuery("select 1") for _ in range(50)))
    assert results == [[(1,)]] * 50  # idle connections replaced before use: no errors
    assert db.stats()["connects"] >= 5  # the restart ended the first connections
    report("F5 restart idle", restart_s=round(ready, 2), errors=0,
           connects=db.stats()["connects"])
    await db.close()


async def test_postgresql_restart_under_load(private_postgresql):
    db = adb.Database(with_query(private_postgresql.url, application_name="adb-f5l"),
                      pool_size=8, name="adb-f5l")
    table = TokenTable(private_postgresql.url, "%s")
    ledger = Ledger()
    loop = asyncio.get_running_loop()

    async def restart_soon():
        await asyncio.sleep(0.3)
        await loop.run_in_executor(None, privateserver.restart, private_postgresql, "immediate")
        return loop.time()
    try:
        restarted, _ = await asyncio.gather(restart_soon(), fire(db, table, 6000, ledger))
        recovery = await recovers(db)
        figures = ledger.check(table.tokens())
        assert figures["ok"] > 0
        report("F5 restart under load", recovery_after_load_s=round(recovery, 2), **figures)
    finally:
        await db.close()
        table.drop()


@pytest.mark.parametrize("kind", KINDS)
async def test_network_cut_under_load(kind, tokens):
    require_server(server_of(kind))
    proxy = proxy_for(kind)
    db = adb.Database(via(proxy, url_of(kind)), pool_size=8)
    table = tokens(kind)
    ledger = Ledger()
    cut = await cut_under_load(proxy, db, table, ledger, 4000)
    recovery = await recovers(db)
    figures = ledger.check(table.tokens())
    # the cuts hit live connections, and the pool replaced them
    assert sum(cut) >= 5 and db.stats()["connects"] > 8, (cut, db.stats()["connects"])
    report("F12 cut under load", kind=kind, connections_cut=sum(cut), recovery_s=round(recovery, 2),
           **figures)
    await db.close()
    proxy.close()


async def test_blackhole_ends_calls_at_their_timeout(tokens):
    kind = "postgresql"
    require_server(kind)
    proxy = proxy_for(kind)
    db = with_pool_options(adb.Database, cancel_grace=0.5)(
        with_query(via(proxy, URLS[kind]), connect_timeout=1), pool_size=4, statement_timeout=0.5)
    table = tokens(kind)
    await db.runQuery("select 1")
    ledger = Ledger()
    proxy.blackhole(True)
    start = time.monotonic()
    await fire(db, table, 40, ledger)
    stuck_for = time.monotonic() - start
    proxy.blackhole(False)
    proxy.cut()  # what the black hole held back must not arrive late
    recovery = await recovers(db)
    figures = ledger.check(table.tokens())
    assert figures["ok"] == 0 and ledger.settle_max < 0.5 + 0.5 + 2 + 1.5 * 10
    report("F13 black hole", stuck_s=round(stuck_for, 2), recovery_s=round(recovery, 2), **figures)
    await db.close()
    proxy.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_deaf_server_fails_fast(kind):
    require_server(server_of(kind))
    proxy = proxy_for(kind)
    proxy.deaf(True)
    start = time.monotonic()
    db = adb.Database(with_query(via(proxy, url_of(kind)), connect_timeout=1), pool_size=2)
    with pytest.raises(ServerUnavailable):
        await db.runQuery("select 1")
    with pytest.raises(ServerUnavailable):  # meanwhile: no new attempt, an immediate answer
        await db.runQuery("select 1")
    elapsed = time.monotonic() - start
    # one attempt and one immediate retry; psycopg 3 raises a connect_timeout under
    # 2 s to 2 s (as libpq documents), psycopg2 and PyMySQL take 1 s as given
    attempt_s = 2.0 if kind.partition("/")[0] == "psycopg" else 1.0
    assert elapsed < 2 * attempt_s + 2, elapsed
    proxy.deaf(False)
    recovery = await recovers(db)
    report("F15 deaf server", kind=kind, failed_within_s=round(elapsed, 2),
           recovery_s=round(recovery, 2))
    await db.close()
    proxy.close()


async def test_refused_server_backs_off_and_recovers():
    kind = "postgresql"
    require_server(kind)
    proxy = proxy_for(kind)
    proxy.refuse(True)
    db = adb.Database(via(proxy, URLS[kind]), pool_size=4)
    started = time.monotonic()
    failures = 0
    while time.monotonic() - started < 2:
        t = time.monotonic()
        with pytest.raises(ServerUnavailable) as info:
            await db.runQuery("select 1")
        assert time.monotonic() - t < 0.5 and info.value.may_have_run is False
        failures += 1
        await asyncio.sleep(0.02)
    attempts = db.stats()["connect_failures"]
    assert attempts < failures  # backoff: most calls did not even try to connect
    proxy.refuse(False)
    recovery = await recovers(db)
    report("F7 server down", calls=failures, connect_attempts=attempts, recovery_s=round(recovery, 2))
    await db.close()
    proxy.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_cancel_running_query(kind):
    name = f"adb-f19-{kind}"
    db = adb.Database(url_for(kind, name), pool_size=2, name=name)
    sleep = "select pg_sleep(30)" if server_of(kind) == "postgresql" else "select sleep(30)"
    start = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(db.runQuery(sleep), 0.3)
    cancelled_in = time.monotonic() - start
    assert cancelled_in < 1.0
    await asyncio.sleep(0.5)
    with adb.sync.Database(URLS[server_of(kind)], pool_size=1) as admin:
        if server_of(kind) == "postgresql":
            active = admin.runQuery("select count(*) from pg_stat_activity where query like "
                                    "'select pg_sleep(30)%%' and state = 'active'")
        else:
            active = admin.runQuery("select count(*) from information_schema.processlist "
                                    "where info like 'select sleep(30)%%'")
    assert active == [(0,)]
    echoes = await asyncio.gather(*(db.runQuery("select %s", (i,)) for i in range(1000)))
    assert echoes == [[(i,)] for i in range(1000)]
    report("F19 cancel running", kind=kind, cancelled_in_s=round(cancelled_in, 2))
    await db.close()


@pytest.mark.parametrize("kind", ["postgresql", "psycopg", "mysql", "sqlite"])
async def test_statement_timeout_cancels_on_the_server(kind, tmp_path):
    if kind == "sqlite":
        url, slow = f"sqlite:///{tmp_path}/slow.db", (
            "with recursive c(x) as (select 1 union all select x + 1 from c) "
            "select count(*) from c")
    else:
        url = url_for(kind, f"adb-st-{kind}")
        slow = "select pg_sleep(5)" if server_of(kind) == "postgresql" else (
            "select count(*) from information_schema.columns a, information_schema.columns b, "
            "information_schema.columns c")  # a killed SLEEP() returns 1 instead of failing
    db = adb.Database(url, pool_size=1, statement_timeout=0.3)
    start = time.monotonic()
    with pytest.raises(StatementTimeout) as info:
        await db.runQuery(slow)
    assert time.monotonic() - start < 1.5
    assert info.value.may_have_run is False
    assert await db.runQuery("select 1", statement_timeout=5) == [(1,)]
    await db.close()


async def test_max_lifetime_rotates_connections_without_errors():
    kind = "postgresql"
    db = adb.Database(url_for(kind, "adb-f17"), pool_size=2, max_lifetime=0.3)
    pids: set[int] = set()
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        rows = await asyncio.gather(*(db.runQuery("select pg_backend_pid()") for _ in range(10)))
        pids.update(r[0][0] for r in rows)
        await asyncio.sleep(0.05)
    assert len(pids) > 2 and db.stats()["recycled"] > 0 and db.stats()["errors"] == 0
    report("F17 max_lifetime", backends_seen=len(pids), recycled=db.stats()["recycled"])
    await db.close()


async def test_max_idle_closes_unused_connections():
    db = adb.Database(url_for("postgresql", "adb-idle"), pool_size=3, max_idle=0.2)
    await asyncio.gather(*(db.runQuery("select 1") for _ in range(6)))
    await asyncio.sleep(0.6)
    assert db.stats()["connected"] == 0
    assert await db.runQuery("select 1") == [(1,)]
    await db.close()


async def test_backpressure_wait_keeps_a_burst_in_bounded_memory(tmp_path):
    from benchmarks.burst import burst
    calls = 300_000
    seconds, _, grown_mb = await burst(f"sqlite:///{tmp_path}/burst.db", calls, 1000, 4)
    assert grown_mb < 50, grown_mb
    report("F23 burst, wait mode", calls=calls, seconds=round(seconds, 1),
           rss_growth_mb=round(grown_mb, 1))
    raising = adb.Database("sqlite://", max_queued=10, on_full="raise")
    tx = await raising.beginTransaction()  # the only worker is pinned: nothing drains
    pending = [raising.runQuery("select 1") for _ in range(10)]
    with pytest.raises(QueueFull, match="max_queued=10"):
        raising.runQuery("select 1")
    await tx.rollback()
    assert await asyncio.gather(*pending) == [[(1,)]] * 10
    await raising.close()


async def test_close_under_load_settles_everything(tokens):
    kind = "postgresql"
    db = adb.Database(url_for(kind, "adb-f25"), pool_size=4)
    table = tokens(kind)
    threads_before = threading.active_count()
    txs = [await db.beginTransaction() for _ in range(3)]
    for tx in txs:
        await tx.runOperation(table.insert_sql(), ("tx", 0))
    pending = [db.runOperation(table.insert_sql(), (f"c{i}", i)) for i in range(2000)]
    start = time.monotonic()
    await db.close(timeout=0.2)
    results = await asyncio.gather(*pending, return_exceptions=True)
    elapsed = time.monotonic() - start
    ok = [r for r in results if r == 1]
    closed = [r for r in results if isinstance(r, PoolClosed)]
    assert len(ok) + len(closed) == 2000 and elapsed < 5
    assert all(tx.state is adb.TxState.FAILED for tx in txs)
    present = table.tokens()
    assert "tx" not in present and len(present) == len(ok)
    await asyncio.sleep(0.2)
    assert threading.active_count() <= threads_before
    await db.close()  # idempotent
    report("F25 close under load", ok=len(ok), closed=len(closed), close_s=round(elapsed, 2))


def test_fork_child_gets_a_clear_error(tmp_path):
    db = adb.sync.Database(f"sqlite:///{tmp_path}/fork.db", pool_size=1)
    assert db.runQuery("select 1") == [(1,)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened through the pipe, then leave
        try:
            db.runQuery("select 1")
            message = b"no error"
        except ForkError as exc:
            message = str(exc).encode()
        os.write(write, message)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    reported = os.read(read, 1000).decode()
    assert "create the Database after forking" in reported
    assert db.runQuery("select 1") == [(1,)]  # the parent is unaffected
    db.close()


@pytest.mark.parametrize("kind", ["postgresql", "mysql", "mysql/pipeline=off"])
async def test_slow_network_costs_time_not_correctness(kind, tokens):
    require_server(server_of(kind))
    proxy = proxy_for(kind)
    db = adb.Database(via(proxy, url_of(kind)), pool_size=8)
    table = tokens(kind)
    await db.runQuery("select 1")
    proxy.delay(0.03)  # 30 ms on every chunk, both ways
    ledger = Ledger()
    start = time.monotonic()
    await fire(db, table, 300, ledger)
    elapsed = time.monotonic() - start
    figures = ledger.check(table.tokens())
    assert figures["ok"] == 300  # slower, never wrong
    report("F14 delay", kind=kind, seconds=round(elapsed, 2), **figures)
    await db.close()
    proxy.close()


async def test_a_killed_pipeline_leaves_at_most_its_depth_in_doubt(tokens):
    """Pipelines (on by default on MariaDB) widen what a lost connection leaves in
    doubt: every statement sent whose answer was not read. Answers read before the
    break settle their calls, and a pipeline holds at most PIPELINE_DEPTH calls, so
    one connection killed mid-burst leaves at most that many calls
    ``ConnectionLost(may_have_run=True)`` (docs/failures.md)."""
    kind = "mysql"
    require_server(server_of(kind))
    depth = adb.options.PIPELINE_DEPTH
    db = adb.Database(url_of(kind), pool_size=10, name="adb-f-pipeline-doubt")
    assert db.stats()["pool_size"] == 10
    table = tokens(kind)
    await db.runQuery("select 1")
    assert db._engine.driver.pipeline_depth == depth
    ledger = Ledger()
    killed = []

    def kill_once():  # once the burst is well under way, with every worker connected
        deadline = time.monotonic() + 30
        while (len(ledger.ok) < 3000 or len(db._engine.pool.connections) < 10) \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        connections = list(db._engine.pool.connections.values())
        killed.append((len(connections), len(ledger.ok)))
        kill_all(db, kind)

    timer = threading.Thread(target=kill_once)
    timer.start()
    try:
        await fire(db, table, 20000, ledger)
        timer.join()
        figures = ledger.check(table.tokens())
        [(connections, done_before)] = killed
        assert connections > 0 and done_before < 20000  # the kill landed mid-burst
        assert figures["ambiguous"] <= connections * depth, (figures, killed)
        assert figures["ok"] > 0
        report("pipeline kill", kind=kind, connections_killed=connections, depth=depth,
               **figures)
    finally:
        timer.join()
        await db.close()
