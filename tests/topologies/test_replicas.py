"""Read replicas (``Database(replicas=[...])``) against a real hot standby, and
against a node of the Galera test cluster (``.ci/start-galera``).

The primary is the test PostgreSQL on 5432, the replica its streaming standby
on 5433 (``.ci/start-standby``). Which server answered is read from the server
itself (``inet_server_port()``, ``pg_is_in_recovery()``), never assumed. The
tests that stop the standby or pause its replay put it back as they found it.
"""

import asyncio
import time

import pytest

import adb
import adb.sync
from adb.errors import InterfaceError, ReplicaUnavailable, TransactionError

from ..conftest import FRONTS, URLS, close, ev, psycopg_url
from . import galera, standby

WHO = "select inet_server_port(), pg_is_in_recovery()"
PRIMARY, REPLICA = (5432, False), (standby.PORT, True)
#: the replica monitor checks every second, a down replica with backoff up to 5 s
SETTLE = 12.0


@pytest.fixture(params=["psycopg2", "psycopg"])
def urls(request):
    standby.require_standby()
    if request.param == "psycopg":
        return psycopg_url(), standby.as_psycopg(standby.URL)
    return URLS["postgresql"], standby.URL


def replica_state(db):
    return db.stats()["replicas"][0]["state"]


async def wait_state(db, state, timeout=SETTLE):
    """Wait (on the loop) until the monitor says the replica is ``state``."""
    deadline = time.monotonic() + timeout
    while replica_state(db) != state:
        assert time.monotonic() < deadline, f"replica still {replica_state(db)}, not {state}"
        await asyncio.sleep(0.05)
    return replica_state(db)


async def who(db, **kw):
    rows = await ev(db.runQuery(WHO, **kw))
    return tuple(rows[0])


async def test_replica_reads_are_served_by_the_standby_and_the_rest_by_the_primary(
        front, urls, table_name):
    primary, replica = urls
    db = FRONTS[front](primary, replicas=[replica], pool_size=2)
    try:
        await wait_state(db, "healthy")
        assert await who(db, replica=True) == REPLICA
        assert await who(db) == PRIMARY
        await ev(db.runOperation(f"create table {table_name} (n int)"))
        await ev(db.runOperation(f"insert into {table_name} values (1), (2)"))
        # the write replays on the standby, where replica reads then find it
        deadline = time.monotonic() + 10
        while await _replica_count(db, table_name) != 2:
            assert time.monotonic() < deadline, "the insert never reached the standby"
            await asyncio.sleep(0.05)
        tx = await ev(db.beginTransaction(replica=True))
        rows = await ev(db.runQuery("select inet_server_port(), "
                                    "current_setting('transaction_read_only')", tx=tx))
        assert rows == [(standby.PORT, "on")]
        await ev(db.commitTransaction(tx))
        stats = db.stats()
        assert stats["replicas"][0]["served"] >= 3
        assert stats["replicas"][0]["pool"]["name"] == f"{db.name}/replica1"
        assert stats["fallbacks"] == 0
        await ev(db.runOperation(f"drop table {table_name}"))
    finally:
        await close(db)
    assert db.replicas[0].closed


async def _replica_count(db, table):
    try:
        rows = await ev(db.runQuery(f"select count(*) from {table}", replica=True))
    except Exception as exc:  # not yet replayed: the table is not there yet
        if "does not exist" in str(exc):
            return None
        raise
    return rows[0][0]


async def test_a_stream_and_a_replica_transaction_run_on_the_standby(urls):
    primary, replica = urls
    db = adb.Database(primary, replicas=[replica], pool_size=2)
    try:
        await wait_state(db, "healthy")
        ports = [row[0] async for row in db.stream(
            "select inet_server_port() from generate_series(1, 2500)", replica=True, batch=1000)]
        assert ports == [standby.PORT] * 2500
        async with db.transaction(replica=True) as tx:
            assert await tx.runQuery(WHO) == [REPLICA]
            with pytest.raises(db.dbapi.Error, match="read-only"):
                await tx.runOperation("create table adb_never (n int)")
            await tx.rollback()
    finally:
        await db.close()


async def test_reads_move_to_the_primary_while_the_standby_is_down_and_come_back(front, urls):
    primary, replica = urls
    db = FRONTS[front](primary, replicas=[replica], pool_size=2)
    try:
        await wait_state(db, "healthy")
        assert await who(db, replica=True) == REPLICA
        standby.stop()
        try:
            await wait_state(db, "down")
            assert await who(db, replica=True) == PRIMARY
            assert db.stats()["fallbacks"] >= 1
            assert "down" in db.stats()["replicas"][0]["state"]
        finally:
            standby.start()
        await wait_state(db, "healthy")
        assert await who(db, replica=True) == REPLICA
    finally:
        await close(db)


async def test_a_replica_past_max_replica_lag_is_left_until_it_catches_up(urls, table_name):
    primary, replica = urls
    db = adb.Database(primary, replicas=[replica], max_replica_lag=1.0, pool_size=2)
    try:
        await wait_state(db, "healthy")
        await db.runOperation(f"create table {table_name} (n int)")
        standby.on_standby("select pg_wal_replay_pause()")
        try:
            await db.runOperation(f"insert into {table_name} values (1)")
            await wait_state(db, "lagging", timeout=10)
            assert db.stats()["replicas"][0]["lag"] > 1.0
            assert await who(db, replica=True) == PRIMARY
        finally:
            standby.on_standby("select pg_wal_replay_resume()")
        await wait_state(db, "healthy")
        assert await who(db, replica=True) == REPLICA
        assert await db.runQuery(f"select count(*) from {table_name}", replica=True) == [(1,)]
        await db.runOperation(f"drop table {table_name}")
    finally:
        await db.close()


def test_replica_fallback_raise_refuses_reads_while_no_replica_serves(urls):
    primary, replica = urls
    db = adb.sync.Database(primary, replicas=[replica], replica_fallback="raise", pool_size=1)
    try:
        standby.wait_until(lambda: replica_state(db) == "healthy", SETTLE, "healthy")
        standby.stop()
        try:
            standby.wait_until(lambda: replica_state(db) == "down", SETTLE, "down")
            with pytest.raises(ReplicaUnavailable, match="no replica of .* can serve") as info:
                db.runQuery(WHO, replica=True)
            assert info.value.may_have_run is False
            assert db.runQuery(WHO) == [PRIMARY]  # the primary still serves its own calls
        finally:
            standby.start()
        standby.wait_until(lambda: replica_state(db) == "healthy", SETTLE, "healthy")
        assert db.runQuery(WHO, replica=True) == [REPLICA]
    finally:
        db.close()


def test_a_replica_that_is_not_there_serves_nothing_and_names_itself():
    standby.require_standby()
    db = adb.sync.Database(URLS["postgresql"], replicas=["postgresql://root:pw@127.0.0.1:1/test"],
                           pool_size=1)
    try:
        standby.wait_until(lambda: replica_state(db) != "unchecked", 10, "a first check")
        stats = db.stats()["replicas"][0]
        assert stats["state"] == "down"
        assert "127.0.0.1:1" in stats["target"] and "pw" not in str(db.stats())
        assert db.runQuery(WHO, replica=True) == [PRIMARY]
    finally:
        db.close()


def test_bad_replica_options_are_refused_at_construction():
    with pytest.raises(InterfaceError, match="replicas must be a list"):
        adb.sync.Database("sqlite://", replicas="sqlite://")
    with pytest.raises(InterfaceError, match="max_replica_lag must be"):
        adb.sync.Database("sqlite://", replicas=["sqlite://"], max_replica_lag=-1)
    with pytest.raises(InterfaceError, match="replica_fallback must be 'primary' or 'raise'"):
        adb.sync.Database("sqlite://", replicas=["sqlite://"], replica_fallback="any")
    with pytest.raises(InterfaceError, match="not a database URL"):
        adb.sync.Database("sqlite://", replicas=["nonsense"])


def test_replica_with_tx_is_refused_and_a_foreign_handle_too(tmp_path):
    db = adb.sync.Database(f"sqlite:///{tmp_path}/p.db", replicas=[f"sqlite:///{tmp_path}/r.db"])
    other = adb.sync.Database(f"sqlite:///{tmp_path}/o.db")
    try:
        tx = db.beginTransaction()
        with pytest.raises(InterfaceError, match="replica=True with tx="):
            db.runQuery("select 1", tx=tx, replica=True)
        db.rollbackTransaction(tx)
        foreign = other.beginTransaction()
        with pytest.raises(TransactionError, match="belongs to another Database"):
            db.runQuery("select 1", tx=foreign)
        other.rollbackTransaction(foreign)
    finally:
        db.close()
        other.close()


def test_without_replicas_replica_reads_go_to_the_primary_in_a_read_only_transaction():
    standby.require_standby()
    db = adb.sync.Database(URLS["postgresql"], pool_size=1)
    try:
        assert db.replicas == ()
        tx = db.beginTransaction()
        with pytest.raises(InterfaceError, match="replica=True with tx="):
            db.runQuery("select 1", tx=tx, replica=True)
        db.rollbackTransaction(tx)
        assert db.runQuery(WHO, replica=True) == [PRIMARY]
        with db.transaction(replica=True) as tx:
            assert tx.runQuery("show transaction_read_only") == [("on",)]
    finally:
        db.close()


async def test_a_galera_node_serves_replica_reads_while_it_is_synced(front):
    """MariaDB: node 1 of the test cluster is the primary, node 2 the replica; a
    desynced node (``wsrep_desync``, as for a backup) is out until it is Synced."""
    galera.require_galera()
    db = FRONTS[front](galera.url(1), replicas=[galera.url(2)], pool_size=2)
    node2 = galera.connect(2)
    try:
        await wait_state(db, "healthy")
        assert await ev(db.runQuery("select @@port", replica=True)) == [(galera.port(2),)]
        assert await ev(db.runQuery("select @@port")) == [(galera.port(1),)]
        node2.cursor().execute("set global wsrep_desync = ON")
        try:
            await wait_state(db, "down")
            assert "Desynced" in db.stats()["replicas"][0]["error"]
            assert await ev(db.runQuery("select @@port", replica=True)) == [(galera.port(1),)]
        finally:
            node2.cursor().execute("set global wsrep_desync = OFF")
        await wait_state(db, "healthy")
        assert await ev(db.runQuery("select @@port", replica=True)) == [(galera.port(2),)]
    finally:
        node2.close()
        await close(db)
