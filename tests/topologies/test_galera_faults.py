"""A Galera node killed under load (``kill -9`` of its mariadbd), in the style of
tests/faults/test_faults.py: every call's outcome goes into a Ledger (tests/faults/ledger.py)
and is checked against the rows on every node: nothing reported OK is lost, none
doubled, nothing reported "did not run" is there.

- Load through all three nodes, one killed: its in-flight calls end with
  ``ConnectionLost(may_have_run=True)``, later ones with ``ServerUnavailable``
  (did not run); the two survivors' calls keep succeeding; once the node is back
  its Database serves again.
- Failover with a multi-host URL (``mysql://...:3307,...:3308,...:3309/test``):
  the node the pool is on is killed; in-flight calls end with ConnectionLost, new
  calls reach the next host. The time from the kill to the first write
  acknowledged by a survivor is measured (ADB_GALERA_FAILOVER_RUNS=5 runs it five
  times and prints median, min and max; docs/galera.md has the figures).

Each test restarts the killed node and waits until all three are Synced again, so
the tests after it find the cluster whole.
"""

import asyncio
import json
import os
import statistics
import time
import uuid

import pytest

import adb
import adb.sync
from adb.errors import ConnectionLost, ServerUnavailable

from ..faults.ledger import Ledger, recovers, until
from . import galera

#: callers per Database, each inserting one token after another, and its workers
CALLERS, POOL = 8, 4
#: inserts each load has had acknowledged before the kill (the load is under way),
#: and the seconds the failover test's reader gives the next host to answer
BEFORE_KILL, AFTER_KILL = 20, 4.0
#: the bound on a failover: from the kill to the first write a survivor acknowledged
FAILOVER_BOUND = 6.0
#: how often the failover test's reader asks which node answers
PROBE_EVERY = 0.01
#: a caller whose call failed waits this long before the next one (a down server
#: answers at once: without a pause it would fail thousands of calls a second)
PAUSE_AFTER_ERROR = 0.05
#: how many failover runs ``test_failover_with_a_multi_host_url`` makes
FAILOVER_RUNS = int(os.environ.get("ADB_GALERA_FAILOVER_RUNS", "1"))


def report(name, **figures):
    print(json.dumps({"fault": name, **figures}))


class Tokens:
    """A token table made through node 1: an auto-increment primary key (Galera
    wants one on every table) and a token column with no unique index, so a
    doubled insert would show."""

    def __init__(self):
        self.name = "adb_galera_" + uuid.uuid4().hex[:8]
        with adb.sync.Database(galera.url(1), pool_size=1) as admin:
            admin.runOperation(f"create table {self.name} (id bigint auto_increment primary key, "
                               "token varchar(40) not null, n int)")

    def insert_sql(self):
        return f"insert into {self.name} (token, n) values (%s, %s)"

    def tokens_on(self, node):
        """Every token on ``node``, once it applied all the cluster committed."""
        with adb.sync.Database(galera.url(node, galera.SYNC_WAIT), pool_size=1) as reader:
            return sorted(row[0] for row in reader.runQuery(f"select token from {self.name}"))

    def drop(self):
        with adb.sync.Database(galera.url(1), pool_size=1) as admin:
            admin.runOperation(f"drop table if exists {self.name}")


@pytest.fixture
def tokens():
    galera.require_galera()
    table = Tokens()
    yield table
    if not galera.cluster_ready():
        galera.restart_nodes()
    table.drop()


@pytest.fixture
def cluster_restored():
    """Whatever a test kills, all three nodes are Synced again after it."""
    yield
    if not galera.cluster_ready():
        galera.restart_nodes()


class Load:
    """CALLERS callers inserting tokens through ``db`` until ``stop()``; every
    outcome in ``ledger``, with the time it settled (``settled``)."""

    def __init__(self, db, table, ledger, prefix):
        self.db, self.table, self.ledger, self.prefix = db, table, ledger, prefix
        self.running = True
        self.settled = []  # (monotonic time it settled, time it started, outcome)
        self.tasks = [asyncio.ensure_future(self.caller(i)) for i in range(CALLERS)]

    async def caller(self, index):
        n = 0
        while self.running:
            token = f"{self.prefix}{index}-{n}"
            n += 1
            started = time.monotonic()
            try:
                outcome = await self.db.runOperation(self.table.insert_sql(), (token, n))
            except Exception as exc:
                outcome = exc
            now = time.monotonic()
            self.ledger.record(token, outcome, now - started)
            self.settled.append((now, started, outcome))
            if isinstance(outcome, BaseException):
                await asyncio.sleep(PAUSE_AFTER_ERROR)

    async def stop(self):
        self.running = False
        await asyncio.gather(*self.tasks)

    def oks(self):
        return sum(not isinstance(o, BaseException) for _, _, o in self.settled)

    def errors(self, kind=BaseException):
        return [o for _, _, o in self.settled if isinstance(o, kind)]

    def first_ok_after(self, moment):
        """When the first call started after ``moment`` settled OK (None if none did)."""
        return min((t for t, started, o in self.settled
                    if started > moment and not isinstance(o, BaseException)), default=None)

    def longest_after(self, moment):
        """The longest a call settled after ``moment`` took: the stall it met."""
        return max((t - started for t, started, _ in self.settled if t > moment), default=0.0)


def check_everywhere(table, ledger, nodes=galera.NODES):
    """The ledger against the tokens of each node in ``nodes``: each node holds the
    same rows, and they satisfy the ledger."""
    seen = {node: table.tokens_on(node) for node in nodes}
    first = seen[nodes[0]]
    assert all(found == first for found in seen.values()), \
        {node: len(found) for node, found in seen.items()}
    return ledger.check(first)


#: the marker of the statement the killed node is running when it dies
HELD = "adb_galera_held"


async def test_a_node_killed_under_load_through_all_three(tokens, cluster_restored):
    victim = 2
    dbs = {node: adb.Database(galera.url(node), pool_size=POOL, name=f"galera-node{node}")
           for node in galera.NODES}
    ledgers = {node: Ledger() for node in galera.NODES}
    try:
        await asyncio.gather(*(db.runQuery("select 1") for db in dbs.values()))
        loads = {node: Load(dbs[node], tokens, ledgers[node], f"n{node}-")
                 for node in galera.NODES}
        await until(lambda: all(load.oks() >= BEFORE_KILL for load in loads.values()),
                    f"{BEFORE_KILL} inserts through each node")
        opened = dbs[victim].stats()["connects"]  # a pool warms only some workers up front
        # a call the node is running when it dies, seen on the node itself: the load's
        # own calls may all be between statements at that instant
        held = asyncio.ensure_future(dbs[victim].runQuery(f"select /* {HELD} */ sleep(60)"))
        await asyncio.to_thread(galera.until_running, victim, f"%{HELD}%", "the held sleep")
        killed_at = time.monotonic()
        galera.kill_node(victim)
        # the load goes on until the survivors have evicted the node (their commits
        # wait for that) and each has acknowledged an insert sent after it, and the
        # killed node's callers have been refused
        await asyncio.to_thread(galera.wait_gone, victim)
        evicted_at = time.monotonic()
        killed = loads[victim]
        survivors = [n for n in galera.NODES if n != victim]
        await until(lambda: killed.errors(ServerUnavailable) and all(
            loads[n].first_ok_after(evicted_at) is not None for n in survivors),
            "an insert through each survivor after the eviction, a call refused on the killed node")
        for load in loads.values():
            await load.stop()

        with pytest.raises(ConnectionLost) as broken:
            await held
        assert broken.value.may_have_run and not isinstance(broken.value, ServerUnavailable)
        lost = killed.errors(ConnectionLost)
        in_flight = [e for e in lost if not isinstance(e, ServerUnavailable)]
        assert all(e.may_have_run for e in in_flight), lost[:3]
        # only calls sent before the kill: one per worker one by one, and with PyMySQL's
        # pipelines (on by default) every call a worker had sent, at most one per caller
        assert len(in_flight) <= CALLERS
        refused = killed.errors(ServerUnavailable)
        assert refused and not any(e.may_have_run for e in refused)
        assert killed.errors() == lost  # nothing but ConnectionLost and ServerUnavailable
        for node in survivors:  # the survivors' callers saw no error at all
            assert loads[node].errors() == [], (node, loads[node].errors()[:3])
            assert loads[node].first_ok_after(killed_at) is not None
        stall = max(loads[n].longest_after(killed_at) for n in survivors)

        figures = check_everywhere(tokens, merged(ledgers), tuple(survivors))
        back = await asyncio.to_thread(galera.restart_nodes)
        recovery = await recovers(dbs[victim])  # the pool on the killed node's URL serves again
        assert dbs[victim].stats()["connects"] > opened  # through new connections
        check_everywhere(tokens, merged(ledgers))  # the node back has the same rows
        report("galera: node killed under load", victim=victim,
               in_flight_lost=len(in_flight), refused=len(refused),
               survivors_longest_call_s=round(stall, 2),
               restart_to_synced_s=round(back, 1), recovery_s=round(recovery, 2), **figures)
    finally:
        for db in dbs.values():
            await db.close()


def merged(ledgers):
    """One Ledger of several (tokens are unique across them)."""
    total = Ledger()
    for ledger in ledgers.values():
        total.ok |= ledger.ok
        total.not_run |= ledger.not_run
        total.ambiguous |= ledger.ambiguous
        total.unexpected += ledger.unexpected
        total.settle_max = max(total.settle_max, ledger.settle_max)
    return total


async def first_answer_from(db, port, since, within):
    """When ``db`` first answered ``select @@port`` with ``port``, polling every
    PROBE_EVERY seconds from ``since`` (None if not ``within`` seconds)."""
    while time.monotonic() < since + within:
        try:
            if await db.runQuery("select @@port") == [(port,)]:
                return time.monotonic()
        except ConnectionLost:
            pass
        await asyncio.sleep(PROBE_EVERY)
    return None


async def failover_once(run):
    """One failover: a pool on the multi-host URL (so on node 1), load, node 1
    killed, load goes on through the next host. The seconds from the kill to the
    first write a survivor acknowledged (the cluster must first evict the dead
    node), and to the first read answered by the next host (adb's reconnect alone,
    through a pool of one beside the load), and the ledger's figures."""
    db = adb.Database(galera.MULTI_HOST_URL, pool_size=POOL, name="galera-multi")
    probe = adb.Database(galera.MULTI_HOST_URL, pool_size=1, name="galera-probe")
    ledger = Ledger()
    tokens = Tokens()
    try:
        assert await db.runQuery("select @@port") == [(galera.port(1),)]
        assert await probe.runQuery("select @@port") == [(galera.port(1),)]
        load = Load(db, tokens, ledger, f"f{run}-")
        await until(lambda: load.oks() >= BEFORE_KILL, f"{BEFORE_KILL} inserts through node 1")
        killed_at = time.monotonic()
        galera.kill_node(1)
        read_at = await first_answer_from(probe, galera.port(2), killed_at, AFTER_KILL)
        # the load goes on until a survivor acknowledged an insert sent after the kill
        # (once the cluster evicted node 1), past FAILOVER_BOUND if need be: the bound
        # is checked on the figure, below
        await until(lambda: load.first_ok_after(killed_at) is not None,
                    "an insert acknowledged by a survivor", galera.EVICT_TIMEOUT + 15)
        await load.stop()
        assert read_at is not None, "no read answered by the next host"

        lost = load.errors(ConnectionLost)
        in_flight = [e for e in lost if not isinstance(e, ServerUnavailable)]
        assert in_flight and all(e.may_have_run for e in in_flight), lost[:3]
        assert len(in_flight) <= CALLERS and load.errors() == in_flight, load.errors()[:3]
        # (no ServerUnavailable: each reconnect found the next host of the list)
        first_ok = load.first_ok_after(killed_at)
        assert first_ok is not None, "no call succeeded through a survivor"
        assert await ports_answering(db) == {galera.port(2)}  # the next host of the list
        figures = check_everywhere(tokens, ledger, (2, 3))
        await asyncio.to_thread(galera.restart_nodes)
        check_everywhere(tokens, ledger)  # node 1 is back with the same rows
        assert await ports_answering(db) == {galera.port(2)}  # no failback: the workers stay
        return {"failover_s": round(first_ok - killed_at, 3),
                "first_read_s": round(read_at - killed_at, 3), "in_flight_lost": len(in_flight),
                "refused": len(lost) - len(in_flight), **figures}
    finally:
        await db.close()
        await probe.close()
        if not galera.cluster_ready():
            await asyncio.to_thread(galera.restart_nodes)
        tokens.drop()


async def ports_answering(db, calls=16):
    """The ports of the nodes answering ``calls`` reads at once through ``db``."""
    answers = await asyncio.gather(*(db.runQuery("select @@port") for _ in range(calls)))
    return {rows[0][0] for rows in answers}


async def test_failover_with_a_multi_host_url(cluster_restored):
    galera.require_galera()
    runs = [await failover_once(run) for run in range(FAILOVER_RUNS)]
    for figures in runs:
        report("galera: multi-host failover", **figures)
        assert figures["failover_s"] < FAILOVER_BOUND
    summary = {}
    for figure in ("failover_s", "first_read_s"):
        times = [figures[figure] for figures in runs]
        summary[figure] = {"median": statistics.median(times), "min": min(times),
                           "max": max(times)}
    report("galera: multi-host failover, summary", runs=len(runs), **summary)
