"""The contract of tests/contract/test_spec.py through a three-node Galera cluster, and
what a multi-primary cluster adds: writes through one node read on the others.

Every spec test is collected here again (``from ..contract.test_spec import *``) with
``target`` and ``db`` overridden: each front-end writes through its own node
(asyncio and Twisted through node 1, Tornado through node 2, adb.sync through
node 3), and ``db.target.url``, which the spec uses for "another Database sees
the rows" and for the Databases it opens itself, names the *next* node, with
``wsrep_sync_wait=1`` so its reads wait until that node has applied what the
cluster committed before them. So every spec test writes through one node and
reads back through another. The cluster is ``.ci/start-galera``'s
(docs/galera.md).
"""

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_asyncio

import adb.sync

from ..conftest import FRONTS, Target, close, ev
from . import galera
from ..contract.test_spec import *  # noqa: F401,F403  (the spec, collected again against the cluster)
from ..conftest import fronts_fixture

#: the spec's four front-ends here (the spec module's own ``front`` adds trio)
front = fronts_fixture(FRONTS)

# not about servers: collected once, by test_spec
del test_named_tuple_columns_that_are_not_identifiers  # noqa: F821

#: the node each front-end writes through: all three nodes carry writes
WRITER = {"asyncio": 1, "tornado": 2, "sync": 3, "twisted": 1}


def reader_of(node):
    """The node the spec's second look goes through: the next one."""
    return node % len(galera.NODES) + 1


@pytest.fixture
def target(front):
    """The spec's ``target``: MariaDB through the node after ``front``'s writer,
    reads waiting for the cluster (``wsrep_sync_wait=1``). Its name stays "mysql",
    which the spec's tests of driver names and error behaviour read."""
    galera.require_galera()
    return Target("mysql", galera.url(reader_of(WRITER[front]), galera.SYNC_WAIT), "mysql")


@pytest_asyncio.fixture
async def db(front, target, table_name):
    """The spec's ``db``: a pool of 4 on ``front``'s writer node, with an empty table
    (its DDL replicated to every node before it returns, as Galera's TOI does)."""
    database = FRONTS[front](galera.url(WRITER[front]), pool_size=4)
    database.target, database.table = target, table_name
    await ev(database.runOperation(f"drop table if exists {table_name}"))
    await ev(database.runOperation(
        f"create table {table_name} (userid int not null primary key, data varchar(100))"))
    yield database
    if database.closed:
        database = adb.sync.Database(galera.url(WRITER[front]), pool_size=1)
    await ev(database.runOperation(f"drop table if exists {table_name}"))
    await close(database)


# -- what Galera adds: every node sees what any node committed ----------------------------------

async def test_writes_through_every_node_are_read_on_every_node(front, table_name):
    """Inserts through all three nodes at once, each its own keys; then each node,
    waiting for the cluster (``wsrep_sync_wait``), reads all of them."""
    galera.require_galera()
    writers = {node: FRONTS[front](galera.url(node), pool_size=4) for node in galera.NODES}
    readers = {node: FRONTS[front](galera.url(node, galera.SYNC_WAIT), pool_size=1)
               for node in galera.NODES}
    try:
        await ev(writers[1].runOperation(
            f"create table {table_name} (k int primary key, node int, at_port int)"))
        sql = f"insert into {table_name} values (%s, %s, @@port)"

        def calls(node):
            return [lambda k=k: writers[node].runOperation(sql, (node * 1000 + k, node))
                    for k in range(50)]
        everything = [call for node in galera.NODES for call in calls(node)]
        if front == "sync":
            loop = asyncio.get_running_loop()
            counts = await asyncio.gather(*(loop.run_in_executor(None, c) for c in everything))
        else:
            counts = await asyncio.gather(*(ev(c()) for c in everything))
        assert counts == [1] * 150
        expected = sorted((node * 1000 + k, node, galera.port(node))
                          for node in galera.NODES for k in range(50))
        for node, reader in readers.items():
            rows = await ev(reader.runQuery(f"select k, node, at_port from {table_name} "
                                            "order by k"))
            assert [tuple(row) for row in rows] == expected, f"node{node} reads other rows"
            assert await ev(reader.runQuery("select @@port")) == [(galera.port(node),)]
    finally:
        await ev(writers[1].runOperation(f"drop table if exists {table_name}"))
        for database in [*writers.values(), *readers.values()]:
            await close(database)


async def test_auto_increment_steps_apart_on_each_node(front, table_name):
    """wsrep_auto_increment_control: each node hands out its own residue of
    auto_increment_increment (the cluster size), so inserts through different nodes
    never take the same id, and ids are not consecutive."""
    galera.require_galera()
    writers = {node: FRONTS[front](galera.url(node), pool_size=1) for node in galera.NODES}
    try:
        await ev(writers[1].runOperation(
            f"create table {table_name} (id int auto_increment primary key, node int)"))
        ids = {}
        for node, writer in writers.items():
            ((step, offset),) = await ev(writer.runQuery(
                "select @@auto_increment_increment, @@auto_increment_offset"))
            assert step == len(galera.NODES)
            await ev(writer.runMany(f"insert into {table_name} (node) values (%s)",
                                    [(node,)] * 5))
            rows = await ev(writer.runQuery(
                f"select id from {table_name} where node = %s", (node,)))
            ids[node] = [row[0] for row in rows]
            assert all(i % step == offset % step for i in ids[node]), (node, ids[node])
        assert len({i for node_ids in ids.values() for i in node_ids}) == 15
    finally:
        await ev(writers[1].runOperation(f"drop table if exists {table_name}"))
        for database in writers.values():
            await close(database)


def test_the_example_of_docs_galera_runs(tmp_path):
    """docs/galera.md's example, against the test cluster (the URLs it names)."""
    galera.require_galera()
    text = (Path(__file__).resolve().parents[2] / "docs" / "galera.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    result = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", code],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
