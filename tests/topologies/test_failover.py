"""Failover through multi-host URLs: a crashed PostgreSQL primary whose synchronous
standby is promoted, under a load of inserts (MariaDB's, a killed Galera node, is
in tests/topologies/test_galera_faults.py); host lists passing over a host that refuses or,
on Galera, one cut off from its cluster.

Invariant L of tests/faults/ledger.py holds across the failover: every insert reported OK
is on the new primary exactly once, every one reported "did not run"
(``ServerUnavailable``, ``may_have_run=False``) is absent, the ambiguous ones
(``ConnectionLost``, ``may_have_run=True``) at most once. New calls reach the new
primary within ``FAILOVER_BOUND`` seconds of the crash.
"""

import asyncio
import json
import time

import pytest

import adb
import adb.sync

from ..conftest import URLS, require_server
from ..faults.ledger import Ledger
from . import galera
from .pgpair import PgPair, require_pair_tools

#: seconds from the crash to the first insert the promoted standby acknowledges
FAILOVER_BOUND = 10.0


def report(name, **figures):
    print(json.dumps({"failover": name, **figures}))


@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg"])
async def test_postgresql_primary_crash_and_promotion_under_load(scheme):
    require_pair_tools()
    pair = PgPair().start()
    try:
        db = adb.Database(pair.url(scheme), pool_size=4)
        await db.runOperation("create table tokens (token text, n int)")
        figures = await _failover_under_load(db, pair)
        rows = adb.sync.Database(f"postgresql://root@127.0.0.1:{pair.standby_port}/postgres",
                                 pool_size=1)
        try:
            assert rows.runQuery("select pg_is_in_recovery()") == [(False,)]
            present = [r[0] for r in rows.runQuery("select token from tokens")]
        finally:
            rows.close()
        figures.update(figures.pop("ledger").check(present))
        assert figures["ok_after"] > 0 and figures["ok_before"] > 0, figures
        assert figures["failover_s"] < FAILOVER_BOUND, figures
        report("postgresql crash + promote", scheme=scheme, **figures)
        await db.close()
    finally:
        pair.close()


async def _failover_under_load(db, pair, writers=4):
    """Insert tokens from ``writers`` loops; crash the primary, promote the standby,
    and go on until a second of inserts has reached it. Returns the figures:
    ``failover_s`` runs from the crash to the first acknowledged insert of those
    sent once the primary was down (inserts it had acknowledged before it went
    down are ``ok_before``)."""
    loop = asyncio.get_running_loop()
    ledger, crash = Ledger(), {}
    first_ok_after: list[float] = []
    counts = {"ok_before": 0, "ok_after": 0}
    stop = asyncio.Event()

    async def writer(w):
        i = 0
        while not stop.is_set():
            token, i = f"w{w}-{i}", i + 1
            start, after_crash = loop.time(), "down" in crash
            try:
                outcome = await db.runOperation("insert into tokens values (%s, %s)", (token, i))
            except Exception as exc:
                outcome = exc
            ledger.record(token, outcome, loop.time() - start)
            if isinstance(outcome, BaseException):
                await asyncio.sleep(0.02)
            elif after_crash:
                counts["ok_after"] += 1
                if not first_ok_after:
                    first_ok_after.append(loop.time())
            else:
                counts["ok_before"] += 1

    async def fail_over():
        try:
            deadline = loop.time() + 30
            while counts["ok_before"] < 50:  # the load under way on the primary
                assert loop.time() < deadline, "the primary acknowledged no 50 inserts in 30 s"
                await asyncio.sleep(0.02)
            crash["at"] = loop.time()
            await loop.run_in_executor(None, pair.crash_primary)
            crash["down"] = loop.time()
            await loop.run_in_executor(None, pair.promote)
            crash["promoted"] = loop.time()
            deadline = loop.time() + FAILOVER_BOUND + 5
            while not first_ok_after and loop.time() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # a second of inserts on the new primary
        finally:
            stop.set()  # the writers end however this ends

    await asyncio.gather(fail_over(), *(writer(w) for w in range(writers)))
    failover = (first_ok_after[0] if first_ok_after else float("inf")) - crash["at"]
    return {"ledger": ledger, "failover_s": round(failover, 2),
            "crash_s": round(crash["down"] - crash["at"], 2),
            "promote_s": round(crash["promoted"] - crash["down"], 2),
            **counts}


@pytest.mark.parametrize("kind, url", [
    ("postgresql", "postgresql://root@127.0.0.1:1,{host}:{port}/test"),
    ("postgresql", "postgresql+psycopg://root@127.0.0.1:1,{host}:{port}/test"),
    ("mysql", "mysql://root@127.0.0.1:1,{host}:{port}/test"),
])
def test_a_host_list_skips_a_host_that_refuses(kind, url):
    require_server(kind)
    server = adb.url.parse_url(URLS[kind]).kwargs
    db = adb.sync.Database(url.format(**server), pool_size=1)
    try:
        port = "inet_server_port()" if kind == "postgresql" else "@@port"
        assert db.runQuery(f"select {port}") == [(server["port"],)]
        assert "127.0.0.1:1," in repr(db)
    finally:
        db.close()


def test_a_host_list_that_all_refuse_names_every_host():
    db = adb.sync.Database("mysql://root:secretpw@127.0.0.1:1,127.0.0.1:2/test", pool_size=1)
    try:
        with pytest.raises(adb.ServerUnavailable, match="127.0.0.1:1: .*127.0.0.1:2: ") as info:
            db.runQuery("select 1")
        assert "secretpw" not in str(info.value)
    finally:
        db.close()


def test_mysql_read_write_attrs_pass_over_a_read_only_server():
    require_server("mysql")
    server = adb.url.parse_url(URLS["mysql"]).kwargs
    url = "mysql://root@{host}:{port}/test?target_session_attrs=read-only".format(**server)
    db = adb.sync.Database(url, pool_size=1)
    try:
        with pytest.raises(adb.ServerUnavailable, match="read-write, not read-only"):
            db.runQuery("select 1")
    finally:
        db.close()


def test_a_host_list_passes_over_a_galera_node_cut_off_from_its_cluster():
    """Node 1, isolated from the others (``gmcast.isolate=1``), still accepts
    connections but has lost quorum (``wsrep_ready=OFF``, errors 1047): a multi-host
    URL that lists it first goes on to node 2, with or without
    ``target_session_attrs``."""
    galera.require_galera()
    isolate = "set global wsrep_provider_options = 'gmcast.isolate={}'"
    node1 = galera.connect(1)
    try:
        node1.cursor().execute(isolate.format(1))
        assert galera.wait_until(lambda: (galera.status(1) or {}).get("wsrep_ready") == "OFF",
                                 galera.EVICT_TIMEOUT)
        for query in ("", "?target_session_attrs=read-write"):
            db = adb.sync.Database(galera.MULTI_HOST_URL + query, pool_size=1)
            try:
                assert db.runQuery("select @@port") == [(galera.port(2),)]
            finally:
                db.close()
    finally:
        node1.cursor().execute(isolate.format(0))
        node1.close()
        assert galera.wait_until(galera.cluster_ready, galera.REJOIN_TIMEOUT), \
            "node 1 did not rejoin the cluster"
