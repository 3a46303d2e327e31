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
import subprocess
import sys
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import adb
import adb.pool
import adb.options
import adb.sync
import adb.trio
from adb.session import LIVENESS_AFTER
from adb.errors import ConnectionLost, ForkError, PoolClosed, QueueFull, ServerUnavailable, StatementTimeout, TransactionError

from benchmarks import privateserver
from benchmarks.faultproxy import FaultProxy

from .. import trio_guest
from ..conftest import (PIPELINE_VARIANTS, TARGETS, URLS, close, ev, fronts_fixture, gather_calls,
                        mysql_thread_id, require_server, target_url, with_pool_options)
from .ledger import SEEN_LIMIT, Ledger, TokenTable, cut_under_load, fire, load_until, recovers, repeatedly, until


#: the front-ends the faults run on: asyncio, and trio (hosted on the test's own loop,
#: ``tests/trio_guest.py``, its calls awaited through ``ev``)
FRONT_CLASSES = {"asyncio": adb.Database, "trio": adb.trio.Database}
front = fronts_fixture(FRONT_CLASSES)


def database(front, *args, **kwargs):
    """A Database of ``front``, on the running test's loop."""
    if front == "trio":
        trio_guest.guest()
    return FRONT_CLASSES[front](*args, **kwargs)


def tuned(front, **options):
    """``front``'s Database class with adb's protected pool options set."""
    if front == "trio":
        trio_guest.guest()
    return with_pool_options(FRONT_CLASSES[front], **options)


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
    """The server a fault test's driver talks to (psycopg 3 runs on PostgreSQL,
    mysqlclient on MariaDB)."""
    return TARGETS[kind.partition("/")[0]]


def url_of(kind):
    """The URL a fault test's ``Database`` uses: ``kind`` is a key of TARGETS, with the
    URL query after a ``/`` for a pipeline variant (``PIPELINE_VARIANTS``)."""
    driver, _, query = kind.partition("/")
    url = target_url(driver)
    return with_query(url, **dict([query.split("=", 1)])) if query else url


#: the drivers of the fault tests, those that pipeline both with and without
KINDS = ["postgresql", "psycopg", "mysql", "mysqldb", *PIPELINE_VARIANTS]


def long_select(kind):
    """A select that runs far longer than any test waits on ``kind``'s server and
    fails when cancelled (a killed SLEEP() returns 1 instead of failing)."""
    return "select pg_sleep(30)" if server_of(kind) == "postgresql" else (
        "select count(*) from information_schema.columns a, information_schema.columns b, "
        "information_schema.columns c")


def proxy_for(kind):
    parts = urlsplit(URLS[server_of(kind)])
    return FaultProxy(parts.hostname or "127.0.0.1", parts.port or {"postgresql": 5432, "mysql": 3306}[server_of(kind)])


def kill_all(db, kind, wait=False):
    """Kill every connection of ``db`` from the server side; how many were killed.
    With ``wait``, return once the server lists none of them any more: a backend
    is told to end, and ends when it is next scheduled, so until then a statement
    sent to it may still run."""
    with adb.sync.Database(URLS[server_of(kind)], pool_size=1) as admin:
        if server_of(kind) == "postgresql":
            ids = [pid for pid, _ in admin.runQuery(
                "select pid, pg_terminate_backend(pid) from pg_stat_activity "
                "where application_name = %s", (db.name,))]
            left: tuple[str, Any] = (
                "select count(*) from pg_stat_activity where pid = any(%s)", (ids,))
        else:
            ids = []
            for conn in list(db._engine.pool.connections.values()):
                try:
                    admin.runOperation("KILL CONNECTION %s", (mysql_thread_id(conn),))
                    ids.append(mysql_thread_id(conn))
                except Exception:  # already gone
                    pass
            left = ("select count(*) from information_schema.processlist where id in (%s)"
                    % ", ".join(map(str, ids or [0])), None)
        deadline = time.monotonic() + 30
        while wait and admin.runQueryValue(*left):
            assert time.monotonic() < deadline, f"killed connections still listed after 30 s: {ids}"
            time.sleep(0.01)
    return len(ids)


async def all_connected(db, count):
    """Wait until every one of ``db``'s ``count`` workers holds a connection (they
    connect one after another at start-up): a fault meant for all of them then hits all."""
    await until(lambda: db.stats()["connected"] == count, f"{count} connections")


def unique(name):
    """``name`` made this run's own: the server-side checks and kills that select by
    it (application_name) must not meet another run's connections."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


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
async def test_idle_backends_killed_cost_no_errors(front, kind):
    name = unique(f"adb-f1-{kind}")
    db = database(front, url_for(kind, name), pool_size=4, name=name)
    await gather_calls(db.runQuery("select 1") for _ in range(8))
    await all_connected(db, 4)
    used = time.monotonic()
    assert kill_all(db, kind, wait=True) == 4
    # idle past the socket check's threshold (docs/failures.md, rule 3), and gone on
    # the server: each socket holds the server's goodbye or EOF
    await asyncio.sleep(max(0.0, used + 2 * LIVENESS_AFTER - time.monotonic()))
    results = await gather_calls(db.runQuery("select 1") for _ in range(100))
    assert results == [[(1,)]] * 100  # every dead socket was seen before anything was sent
    report("F1 idle kill", kind=kind, errors=0, reconnects=db.stats()["connects"] - 4)
    await close(db)


@pytest.mark.parametrize("kind", KINDS)
async def test_kills_under_load(front, kind, tokens):
    """Every 100 ms the server kills every connection of the pool, under a load that
    goes on until five kills have been made and calls in flight have met one."""
    name = unique(f"adb-f2-{kind}")
    db = database(front, url_for(kind, name), pool_size=8, name=name)
    table = tokens(kind)
    ledger = Ledger()
    with repeatedly(lambda: kill_all(db, kind)) as kills:
        await load_until(db, table, ledger, lambda: len(kills) >= 5 and ledger.failed() > 0,
                         1000, what="five kills, one of them under a call")
    recovery = await recovers(db)
    figures = ledger.check(table.tokens())
    assert ledger.settle_max < 30
    assert figures["ok"] > 0 and figures["ambiguous"] + figures["not_run"] > 0
    report("F2 kills under load", kind=kind, kills=len(kills), recovery_s=round(recovery, 2),
           **figures)
    await close(db)


@pytest.mark.parametrize("kind", ["postgresql", "psycopg"])
async def test_kill_inside_transaction(front, kind, tokens):
    name = unique(f"adb-f3-{kind}")
    db = database(front, url_for(kind, name), pool_size=2, name=name)
    table = tokens(kind)
    tx = await ev(db.beginTransaction())
    await ev(tx.runOperation(table.insert_sql(), ("in-tx", 1)))
    assert kill_all(db, kind, wait=True) >= 1
    with pytest.raises(ConnectionLost) as info:
        await ev(tx.runOperation(table.insert_sql(), ("in-tx", 2)))
    assert info.value.may_have_run
    with pytest.raises(TransactionError, match="lost its connection"):
        await ev(tx.runOperation(table.insert_sql(), ("in-tx", 3)))
    with pytest.raises(TransactionError, match="nothing was committed"):
        await ev(tx.commit())
    assert tx.state is adb.TxState.FAILED
    assert table.tokens() == []
    assert await recovers(db) < 10
    await close(db)


def test_a_private_mariadb_leaves_the_temporary_files_of_other_servers_alone():
    """A MariaDB server deletes every ``#sql*`` file of its tmpdir as it starts; in the
    shared /tmp those are the temporary tables the test server is using mid-query
    (an endings test's look at the process list once failed with "Error on delete of
    '/tmp/#sql-temptable-...MAI'" while a private server started). So each private
    server, and each Galera node, has a tmpdir of its own: a file like the test
    server's, the mysql user's, outlives a private server's start and restart."""
    why = privateserver.unavailable("mysql")
    if why:
        pytest.skip(f"this test needs a private MariaDB: {why}")
    probe = f"/tmp/#sql-adb-probe-{uuid.uuid4().hex[:10]}.MAI"
    subprocess.run(["runuser", "-u", "mysql", "--", "touch", probe], check=True)
    try:
        server = privateserver.create("mysql")
        try:
            assert os.path.exists(probe), "the private server's start deleted it"
            privateserver.restart(server)
            assert os.path.exists(probe), "the private server's restart deleted it"
        finally:
            privateserver.remove(server)
    finally:
        if os.path.exists(probe):
            os.remove(probe)


async def test_postgresql_restart_while_idle(front, private_postgresql):
    db = database(front, with_query(private_postgresql.url, application_name="adb-f5i"),
                      pool_size=4, name="adb-f5i")
    await gather_calls(db.runQuery("select 1") for _ in range(8))
    await all_connected(db, 4)  # no worker left to connect while the server is down
    start = time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, privateserver.restart,
                                                     private_postgresql, "fast")
    ready = time.monotonic() - start
    results = await gather_calls(db.runQuery("select 1") for _ in range(50))
    assert results == [[(1,)]] * 50  # idle connections replaced before use: no errors
    assert db.stats()["connects"] >= 5  # the restart ended the first connections
    report("F5 restart idle", restart_s=round(ready, 2), errors=0,
           connects=db.stats()["connects"])
    await close(db)


async def test_postgresql_restart_under_load(front, private_postgresql):
    db = database(front, with_query(private_postgresql.url, application_name="adb-f5l"),
                      pool_size=8, name="adb-f5l")
    table = TokenTable(private_postgresql.url, "%s")
    ledger = Ledger()
    loop = asyncio.get_running_loop()

    async def restart_under_load():
        """Restart the server once 500 more inserts have been acknowledged, until a
        restart has met calls in flight (up to five times): one that lands while
        every worker is between calls is only a reconnect, with no failure to prove
        (seen once on trio, with other test runs loading the machine). Each restart
        is judged once the load has outlived it: 500 inserts acknowledged after it,
        on the connections the pool made again. Returns the restarts made."""
        for restarts in range(1, 6):
            floor = len(ledger.ok) + 500
            await until(lambda: len(ledger.ok) >= floor, "500 more inserts before a restart")
            await loop.run_in_executor(None, privateserver.restart, private_postgresql, "immediate")
            floor = len(ledger.ok) + 500
            await until(lambda: len(ledger.ok) >= floor, "500 inserts after the restart")
            if ledger.failed() > 0:
                break
        return restarts
    restarter = asyncio.ensure_future(restart_under_load())
    try:
        await load_until(db, table, ledger, restarter.done, 1000,
                         what="the restarts, met by the load and outlived",
                         limit=SEEN_LIMIT * 3)
        restarts = await restarter
        assert ledger.failed() > 0, f"{restarts} restarts under load met no call in flight"
        assert db.stats()["reconnects"] > 0, db.stats()
        recovery = await recovers(db)
        figures = ledger.check(table.tokens())
        assert figures["ok"] > 0
        report("F5 restart under load", restarts=restarts,
               recovery_after_load_s=round(recovery, 2), **figures)
    finally:
        print(f"restarter: done={restarter.done()}", file=sys.stderr)
        restarter.cancel()
        await close(db)
        table.drop()


@pytest.mark.parametrize("kind", KINDS)
async def test_network_cut_under_load(front, kind, tokens):
    require_server(server_of(kind))
    proxy = proxy_for(kind)
    db = database(front, via(proxy, url_of(kind)), pool_size=8)
    table = tokens(kind)
    ledger = Ledger()
    # the first cut once every worker is connected: the pool replaces each of them
    cut = await cut_under_load(proxy, db, table, ledger, 4000,
                               ready=lambda: db.stats()["connected"] == 8)
    recovery = await recovers(db)
    figures = ledger.check(table.tokens())
    # the cuts hit live connections, and the pool replaced them
    assert sum(cut) >= 5 and db.stats()["connects"] > 8, (cut, db.stats()["connects"])
    report("F12 cut under load", kind=kind, connections_cut=sum(cut), recovery_s=round(recovery, 2),
           **figures)
    await close(db)
    proxy.close()


async def test_blackhole_ends_calls_at_their_timeout(front, tokens):
    kind = "postgresql"
    require_server(kind)
    proxy = proxy_for(kind)
    db = tuned(front, cancel_grace=0.5)(
        with_query(via(proxy, URLS[kind]), connect_timeout=1), pool_size=4, statement_timeout=0.5)
    table = tokens(kind)
    await ev(db.runQuery("select 1"))
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
    await close(db)
    proxy.close()


def counted_connects(monkeypatch):
    """Every pool's connects, recorded as (pool, whether it may retry once): the real
    ``Pool._connect``, instrumented; a test counts its own Database's by identity."""
    made: list[tuple[Any, bool]] = []
    real = adb.pool.Pool._connect

    def connect(pool, retry):
        made.append((pool, retry))
        return real(pool, retry)
    monkeypatch.setattr(adb.pool.Pool, "_connect", connect)
    return made


@pytest.mark.parametrize("kind", KINDS)
async def test_deaf_server_fails_fast(front, kind, monkeypatch):
    """A server that accepts and never answers: the pool's first connect makes one
    attempt and one immediate retry, and every later one a single attempt once the
    backoff allows it (never a retry per worker); a call meanwhile fails at once."""
    require_server(server_of(kind))
    proxy = proxy_for(kind)
    proxy.deaf(True)
    made = counted_connects(monkeypatch)
    start = time.monotonic()
    db = database(front, with_query(via(proxy, url_of(kind)), connect_timeout=1), pool_size=2)
    try:
        def retries():
            """Of this pool's connects, how many could retry at once: its first only."""
            return [retry for pool, retry in made if pool is db._engine.pool].count(True)

        with pytest.raises(ServerUnavailable):
            await ev(db.runQuery("select 1"))
        first = time.monotonic() - start
        # the other worker met the backoff, or (on a slow machine) made a single
        # attempt of its own once the backoff (0.1 s) had passed
        assert retries() == 1
        with pytest.raises(ServerUnavailable):  # meanwhile: an answer without waiting
            await ev(db.runQuery("select 1"))
        elapsed = time.monotonic() - start
        assert retries() == 1
        # times only bound a hang: psycopg 3 raises a connect_timeout under 2 s to 2 s
        # (as libpq documents), psycopg2 and PyMySQL take 1 s as given; the second
        # call's answer needs at most one attempt or a probe of 0.2 s
        assert first < 30 and elapsed - first < 10, (first, elapsed)
        proxy.deaf(False)
        recovery = await recovers(db)
        report("F15 deaf server", kind=kind, failed_within_s=round(elapsed, 2),
               recovery_s=round(recovery, 2))
    finally:
        await close(db)
        proxy.close()


async def test_refused_server_backs_off_and_recovers(front):
    kind = "postgresql"
    require_server(kind)
    proxy = proxy_for(kind)
    proxy.refuse(True)
    db = database(front, via(proxy, URLS[kind]), pool_size=4)
    started = time.monotonic()
    failures = 0
    while failures < 100:  # a number of calls, not of seconds: a slow machine makes fewer
        t = time.monotonic()
        with pytest.raises(ServerUnavailable) as info:
            await ev(db.runQuery("select 1"))
        # fast: never a wait for the backoff (up to 10 s) nor for a connect
        assert time.monotonic() - t < 1.0 and info.value.may_have_run is False
        failures += 1
        await asyncio.sleep(0.02)
    attempts = db.stats()["connect_failures"]
    # backoff: attempts grow with the log of the time the calls took, not with the calls
    assert attempts < failures / 4, (attempts, time.monotonic() - started)
    proxy.refuse(False)
    recovery = await recovers(db)
    report("F7 server down", calls=failures, connect_attempts=attempts, recovery_s=round(recovery, 2))
    await close(db)
    proxy.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_cancel_running_query(front, kind):
    """A query the server is running (seen in its own view) cancelled by the
    caller: the caller gets its answer at once, the server stops the query well
    before it would have ended (30 s), and the pool serves on."""
    name = unique(f"adb-f19-{kind}")
    db = database(front, url_for(kind, name), pool_size=2, name=name)
    marker = f"adb-f19-{uuid.uuid4().hex[:8]}"  # this test's query, not another's
    sleep = (f"select pg_sleep(30) /* {marker} */" if server_of(kind) == "postgresql"
             else f"select sleep(30) /* {marker} */")
    with adb.sync.Database(URLS[server_of(kind)], pool_size=1) as admin:
        def running():
            if server_of(kind) == "postgresql":
                return admin.runQueryValue("select count(*) from pg_stat_activity where "
                                           "query = %s and state = 'active'", (sleep,))
            return admin.runQueryValue("select count(*) from information_schema.processlist "
                                       "where info = %s", (sleep,))
        query = asyncio.ensure_future(ev(db.runQuery(sleep)))
        await until(lambda: running() == 1 or query.done(), "the sleep to run on the server")
        start = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(query, 0.1)
        cancelled_in = time.monotonic() - start
        assert cancelled_in < 3.0  # not the 30 s of the sleep, nor its cancel's round trip
        await until(lambda: running() == 0, "the cancelled sleep to end on the server", limit=20)
    echoes = await gather_calls(db.runQuery("select %s", (i,)) for i in range(1000))
    assert echoes == [[(i,)] for i in range(1000)]
    report("F19 cancel running", kind=kind, cancelled_in_s=round(cancelled_in, 2))
    await close(db)


@pytest.mark.parametrize("kind", ["postgresql", "psycopg", "mysql", "sqlite"])
async def test_statement_timeout_cancels_on_the_server(front, kind, tmp_path):
    if kind == "sqlite":
        url, slow = f"sqlite:///{tmp_path}/slow.db", (
            "with recursive c(x) as (select 1 union all select x + 1 from c) "
            "select count(*) from c")
    else:
        url = url_for(kind, f"adb-st-{kind}")
        slow = long_select(kind)
    db = database(front, url, pool_size=1, statement_timeout=0.3)
    assert await ev(db.runQuery("select 1")) == [(1,)]  # connected: the time below is the query's
    start = time.monotonic()
    with pytest.raises(StatementTimeout) as info:
        await ev(db.runQuery(slow))
    # cancelled on the server long before the sleep's end, and (may_have_run False)
    # before the cancel grace (2 s) would have cut the connection; slack for a loaded machine
    assert time.monotonic() - start < 3.0
    assert info.value.may_have_run is False
    assert await ev(db.runQuery("select 1", statement_timeout=5)) == [(1,)]
    await close(db)


@pytest.mark.parametrize("kind", ["postgresql", "psycopg", "mysql"])
async def test_a_cancel_whose_side_connection_is_refused_is_sent_again(front, kind):
    """The cancel of a call past its statement_timeout goes out on a side connection
    (psycopg2's pg_cancel_backend, PostgreSQL's cancel request, MySQL's KILL QUERY).
    When the server's address refuses that connection once, the cancel is sent
    again: the statement ends cancelled on the server (``may_have_run`` False), not
    left running until the cancel grace (30 s here) cuts its connection, after
    which the server would run it on (and, for a write, commit it)."""
    proxy = proxy_for(kind)
    name = unique(f"adb-refused-cancel-{kind}")
    slow = long_select(kind)
    db = tuned(front, cancel_grace=30)(via(proxy, url_for(kind, name)), pool_size=1, name=name,
                                       statement_timeout=0.3)
    try:
        assert await ev(db.runQuery("select 1")) == [(1,)]  # its own connection is made
        proxy.refuse_next(1)  # the next connection to the server's address: the cancel's
        with pytest.raises(StatementTimeout) as info:
            await ev(db.runQuery(slow))
        assert proxy.refused == 1
        assert info.value.may_have_run is False, info.value
        assert "cancelled on the server" in str(info.value)
        assert await ev(db.runQuery("select 1", statement_timeout=5)) == [(1,)]
    finally:
        await close(db)
        proxy.close()


async def test_max_lifetime_rotates_connections_without_errors(front):
    kind = "postgresql"
    db = database(front, url_for(kind, "adb-f17"), pool_size=2, max_lifetime=0.3)
    pids: set[int] = set()
    end = time.monotonic() + 30  # calls go on until connections have been rotated
    while len(pids) <= 4 or db.stats()["recycled"] < 2:
        assert time.monotonic() < end, (pids, db.stats())
        rows = await gather_calls(db.runQuery("select pg_backend_pid()") for _ in range(10))
        pids.update(r[0][0] for r in rows)
        await asyncio.sleep(0.05)
    assert db.stats()["errors"] == 0
    report("F17 max_lifetime", backends_seen=len(pids), recycled=db.stats()["recycled"])
    await close(db)


async def test_max_idle_closes_unused_connections(front):
    name = unique("adb-idle")
    db = database(front, url_for("postgresql", name), pool_size=3, max_idle=0.2)
    await gather_calls(db.runQuery("select 1") for _ in range(6))
    # each idle connection closed: by the pool's count and by the server's
    await until(lambda: db.stats()["connected"] == 0, "the idle connections to close")
    with adb.sync.Database(URLS["postgresql"], pool_size=1) as admin:
        await until(lambda: admin.runQueryValue("select count(*) from pg_stat_activity "
                                                "where application_name = %s", (name,)) == 0,
                    "the server to see the idle connections closed")
    assert await ev(db.runQuery("select 1")) == [(1,)]
    await close(db)


async def test_backpressure_wait_keeps_a_burst_in_bounded_memory(tmp_path):
    from benchmarks.burst import burst
    calls = 300_000
    seconds, _, grown_mb = await burst(f"sqlite:///{tmp_path}/burst.db", calls, 1000, 4)
    assert grown_mb < 50, grown_mb
    report("F23 burst, wait mode", calls=calls, seconds=round(seconds, 1),
           rss_growth_mb=round(grown_mb, 1))
    raising = adb.Database("sqlite://", max_queued=10, on_full="raise")
    tx = await ev(raising.beginTransaction())  # the only worker is pinned: nothing drains
    pending = [raising.runQuery("select 1") for _ in range(10)]
    with pytest.raises(QueueFull, match="max_queued=10"):
        raising.runQuery("select 1")
    await ev(tx.rollback())
    assert await gather_calls(pending) == [[(1,)]] * 10
    await close(raising)


async def test_close_under_load_settles_everything(front, tokens):
    kind = "postgresql"
    db = database(front, url_for(kind, "adb-f25"), pool_size=4)
    table = tokens(kind)
    threads_before = threading.active_count()
    txs = [await ev(db.beginTransaction()) for _ in range(3)]
    for tx in txs:
        await ev(tx.runOperation(table.insert_sql(), ("tx", 0)))
    pending = [db.runOperation(table.insert_sql(), (f"c{i}", i)) for i in range(2000)]
    start = time.monotonic()
    await ev(db.close(timeout=0.2))
    results = await asyncio.gather(*(ev(call) for call in pending), return_exceptions=True)
    elapsed = time.monotonic() - start
    ok = [r for r in results if r == 1]
    closed = [r for r in results if isinstance(r, PoolClosed)]
    # settled: the accepted calls ran, the rest failed at the close's timeout, and
    # nothing waited for the 2,000 inserts to run one by one (slack for a loaded machine)
    assert len(ok) + len(closed) == 2000 and elapsed < 10
    assert all(tx.state is adb.TxState.FAILED for tx in txs)
    present = table.tokens()
    assert "tx" not in present and len(present) == len(ok)
    # the worker threads have ended (joined by close()); the watchdog ends right after
    await until(lambda: threading.active_count() <= threads_before, "the pool's threads to end")
    await close(db)  # idempotent
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
async def test_slow_network_costs_time_not_correctness(front, kind, tokens):
    require_server(server_of(kind))
    proxy = proxy_for(kind)
    db = database(front, via(proxy, url_of(kind)), pool_size=8)
    table = tokens(kind)
    await ev(db.runQuery("select 1"))
    proxy.delay(0.03)  # 30 ms on every chunk, both ways
    ledger = Ledger()
    start = time.monotonic()
    await fire(db, table, 300, ledger)
    elapsed = time.monotonic() - start
    figures = ledger.check(table.tokens())
    assert figures["ok"] == 300  # slower, never wrong
    report("F14 delay", kind=kind, seconds=round(elapsed, 2), **figures)
    await close(db)
    proxy.close()


async def test_a_killed_pipeline_leaves_at_most_its_depth_in_doubt(front, tokens):
    """Pipelines (on by default on MariaDB) widen what a lost connection leaves in
    doubt: every statement sent whose answer was not read. Answers read before the
    break settle their calls, and a pipeline holds at most PIPELINE_DEPTH calls, so
    one connection killed mid-burst leaves at most that many calls
    ``ConnectionLost(may_have_run=True)`` (docs/failures.md). The burst goes on
    until calls in flight have met the kill."""
    kind = "mysql"
    require_server(server_of(kind))
    depth = adb.options.PIPELINE_DEPTH
    db = database(front, url_of(kind), pool_size=10, name="adb-f-pipeline-doubt")
    assert db.stats()["pool_size"] == 10
    table = tokens(kind)
    await ev(db.runQuery("select 1"))
    assert db._engine.driver.pipeline_depth == depth
    ledger = Ledger()
    killed = []

    def kill_until_met():
        """Kill every connection once the burst is well under way, with every worker
        connected; again (up to five times) while no call in flight met a kill: one
        that lands between statements is only a reconnect (seen once on trio, in
        CI), and there is nothing in doubt to count."""
        for _ in range(5):
            deadline, floor = time.monotonic() + 60, len(ledger.ok) + 3000
            while len(ledger.ok) < floor or len(db._engine.pool.connections) < 10:
                if time.monotonic() > deadline:
                    killed.append((0, len(ledger.ok)))  # fails below, saying so
                    return
                time.sleep(0.005)
            killed.append((kill_all(db, kind), len(ledger.ok)))
            met = time.monotonic() + 5
            while ledger.failed() == 0 and time.monotonic() < met:
                time.sleep(0.01)
            if ledger.failed() > 0:
                return
        killed.append((0, len(ledger.ok)))  # five kills met nothing: fails below

    timer = threading.Thread(target=kill_until_met)
    timer.start()
    try:
        await load_until(db, table, ledger, lambda: not timer.is_alive() and (
            ledger.failed() > 0 or killed[-1][0] == 0), 2000,
            what="the kill, met by calls in flight", limit=SEEN_LIMIT * 2)
        timer.join()
        figures = ledger.check(table.tokens())
        connections = [count for count, _ in killed]
        assert connections and all(count == 10 for count in connections), killed
        # every worker's connection, killed mid-burst, each kill at most depth in doubt
        assert figures["ambiguous"] <= sum(connections) * depth, (figures, killed)
        assert figures["ok"] > 0
        report("pipeline kill", kind=kind, connections_killed=sum(connections),
               kills=len(killed), depth=depth, **figures)
    finally:
        timer.join()
        await close(db)
