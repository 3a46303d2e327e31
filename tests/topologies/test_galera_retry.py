"""Certification conflicts on the Galera cluster, on every front-end.

Two transactions changing the same row through two nodes: whichever the cluster
orders first commits; the other is aborted, by certification at its commit or by
the applier of the first ("brute-force abort") while it waits, and its client gets
MySQL error 1213, the deadlock error, as the driver's own ``OperationalError``.
``runTransaction`` and ``Database(retries=N)`` run such a loser again, its effects
then counted once. The idioms are tests/features/test_retry.py's (tests/idioms.py).
"""

import asyncio
import threading
import time

import pytest

import adb.sync
from adb.errors import TransactionError

from ..conftest import FRONTS, close, ev
from ..idioms import Meeting, as_fn, run_transaction
from . import galera

#: MySQL's ER_LOCK_DEADLOCK: what a certification conflict is reported as
DEADLOCK = 1213
#: seconds the standalone statement of the retries= test holds its row on node 2;
#: the conflicting commit through node 1 comes once node 2 shows it running
HOLD = 1.0


class Counters:
    """A table of counters (k, a, b), one row at 0, made through node 1 and
    dropped at the end; ``table`` is its name."""

    def __init__(self, table_name):
        self.table = table_name + "_c"
        with adb.sync.Database(galera.url(1), pool_size=1) as admin:
            admin.runOperation(f"create table {self.table} (k int primary key, a int not null, "
                               "b int not null)")
            admin.runOperation(f"insert into {self.table} values (1, 0, 0)")
        for node in galera.NODES:  # else an update through a node that lags matches no row
            applied_on(node, self.table)

    def read(self):
        """The row, as every node has it once it applied everything (wsrep_sync_wait)."""
        seen = set()
        for node in galera.NODES:
            with adb.sync.Database(galera.url(node, galera.SYNC_WAIT), pool_size=1) as reader:
                seen.add(tuple(reader.runQuery(f"select k, a, b from {self.table}")[0]))
        assert len(seen) == 1, f"the nodes disagree: {seen}"
        return seen.pop()

    def drop(self):
        with adb.sync.Database(galera.url(1), pool_size=1) as admin:
            admin.runOperation(f"drop table if exists {self.table}")


@pytest.fixture
def counters(table_name):
    galera.require_galera()
    made = Counters(table_name)
    yield made
    made.drop()


@pytest.fixture
async def pair(front):
    """Two Databases of ``front``: one on node 1, one on node 2."""
    galera.require_galera()
    databases = [FRONTS[front](galera.url(node), pool_size=2) for node in (1, 2)]
    yield databases
    for database in databases:
        await close(database)


def bump(tx, table, column):
    """Add one to ``column`` of row 1, in ``tx``."""
    return tx.runOperation(f"update {table} set {column} = {column} + 1 where k = 1")


def applied_on(node, table):
    """Return once ``node`` has applied every write the cluster committed so far."""
    with adb.sync.Database(galera.url(node, galera.SYNC_WAIT), pool_size=1) as reader:
        reader.runQuery(f"select count(*) from {table}")


async def test_the_loser_gets_the_drivers_deadlock_error_and_cannot_commit(pair, counters):
    """A transaction on node 2 holds the row; a commit through node 1 changes it.
    Node 2's applier aborts the waiting transaction: its next statement fails with
    1213 (pymysql's OperationalError), adb refuses what would follow outside it,
    and its commit; a second loser meets 1213 at its very commit."""
    one, two = pair
    table = counters.table
    loser = await ev(two.beginTransaction())
    await ev(bump(loser, table, "a"))
    assert await ev(one.runOperation(f"update {table} set b = b + 1 where k = 1")) == 1
    await asyncio.to_thread(applied_on, 2, table)
    with pytest.raises(two.dbapi.OperationalError) as raised:
        await ev(bump(loser, table, "a"))
    assert raised.value.args[0] == DEADLOCK
    with pytest.raises(TransactionError, match="rolled this transaction back"):
        await ev(bump(loser, table, "a"))
    with pytest.raises(TransactionError, match="rolled back, not committed"):
        await ev(loser.commit())

    at_commit = await ev(two.beginTransaction())
    await ev(bump(at_commit, table, "a"))
    assert await ev(one.runOperation(f"update {table} set b = b + 1 where k = 1")) == 1
    await asyncio.to_thread(applied_on, 2, table)
    with pytest.raises(two.dbapi.OperationalError) as raised:
        await ev(at_commit.commit())
    assert raised.value.args[0] == DEADLOCK
    assert at_commit.state is adb.TxState.ROLLED_BACK
    assert await asyncio.to_thread(counters.read) == (1, 0, 2)
    assert await ev(two.runQuery("select 1")) == [(1,)]  # the worker serves on
    assert two.stats()["pinned"] == 0


async def test_run_transaction_runs_the_certification_loser_again(pair, counters):
    """Both bump the same counter through different nodes and commit at once: one
    is certified first, the other aborted and run again; the counter counts two."""
    one, two = pair
    table = counters.table
    meeting = Meeting(one)
    runs = []

    def body(tx, name):
        runs.append(name)
        yield bump(tx, table, "a")
        yield meeting.wait()  # both hold their change of the row: now both commit
        return name

    results = await asyncio.gather(run_transaction(one, as_fn(one, body), "one", retries=5),
                                   run_transaction(two, as_fn(two, body), "two", retries=5))
    assert list(results) == ["one", "two"]
    assert await asyncio.to_thread(counters.read) == (1, 2, 0)
    retries = one.stats()["transaction_retries"] + two.stats()["transaction_retries"]
    assert len(runs) == 3 and retries == 1, (runs, retries)


async def test_without_retries_run_transaction_raises_the_conflict(pair, counters):
    one, two = pair
    table = counters.table
    meeting = Meeting(one)

    def body(tx):
        yield bump(tx, table, "a")
        yield meeting.wait()

    outcomes = await asyncio.gather(run_transaction(one, as_fn(one, body), retries=0),
                                    run_transaction(two, as_fn(two, body), retries=0),
                                    return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], one.dbapi.OperationalError), outcomes
    assert errors[0].args[0] == DEADLOCK
    assert await asyncio.to_thread(counters.read) == (1, 1, 0)


def no_server_retry(conn):
    """Galera runs an autocommit statement aborted by a conflict once more by
    itself (wsrep_retry_autocommit=1): off here, so adb's retries are what is seen."""
    with conn.cursor() as cursor:
        cursor.execute("set session wsrep_retry_autocommit = 0")


class ConflictingCommit(threading.Thread):
    """A transaction through node 1 that changes row 1 and commits once node 2's
    processlist shows the standalone UPDATE holding that row (in its sleep): the
    conflict comes while the row is held, however slow the machine. ``at``: when
    the commit was sent; ``error``: what went wrong, if anything."""

    def __init__(self, table):
        super().__init__()
        self.table, self.at, self.error = table, None, None
        self.start()

    def run(self):
        try:
            with adb.sync.Database(galera.url(1), pool_size=1) as writer:
                with writer.transaction() as tx:
                    tx.runOperation(f"update {self.table} set b = b + 1 where k = 1")
                    self.wait_for_the_hold()
                    self.at = time.monotonic()
        except Exception as exc:  # for the test's thread
            self.error = exc

    def wait_for_the_hold(self):
        galera.until_running(2, f"update {self.table} set a = a + 1%", "the UPDATE")

    def join_ok(self):
        """Wait for the commit; its time (fails with what went wrong)."""
        self.join()
        if self.error is not None:
            raise self.error
        return self.at


async def test_retries_runs_a_standalone_call_aborted_by_a_conflict_again(front, counters):
    """A standalone UPDATE on node 2 holds the row for HOLD seconds; a commit
    through node 1 meanwhile aborts it (1213). ``retries=`` runs it again."""
    table = counters.table
    db = FRONTS[front](galera.url(2), pool_size=1, retries=3, on_connect=no_server_retry)
    try:
        assert await ev(db.runQuery("select @@wsrep_retry_autocommit")) == [(0,)]
        conflict = ConflictingCommit(table)
        started = time.monotonic()
        assert await ev(db.runOperation(f"update {table} set a = a + 1 "
                                        f"where k = 1 and sleep({HOLD}) = 0")) == 1
        ended = time.monotonic()
        committed_at = await asyncio.to_thread(conflict.join_ok)
        assert await asyncio.to_thread(counters.read) == (1, 1, 1)
        # aborted by the commit, then run again: a whole hold after it
        assert db.stats()["retries"] == 1 and ended >= committed_at + HOLD
    finally:
        await close(db)


async def test_without_retries_the_standalone_call_fails_with_1213(counters):
    db = adb.Database(galera.url(2), pool_size=1, on_connect=no_server_retry)
    try:
        conflict = ConflictingCommit(counters.table)
        with pytest.raises(db.dbapi.OperationalError) as raised:
            await db.runOperation(f"update {counters.table} set a = a + 1 "
                                  f"where k = 1 and sleep({HOLD}) = 0")
        assert raised.value.args[0] == DEADLOCK
        await asyncio.to_thread(conflict.join_ok)
        assert await asyncio.to_thread(counters.read) == (1, 0, 1)
    finally:
        await db.close()


async def test_galera_itself_runs_an_aborted_autocommit_statement_once_more(counters):
    """With the server's default wsrep_retry_autocommit=1, the same conflict never
    reaches the client: the node ran the statement again (it took two holds)."""
    db = adb.Database(galera.url(2), pool_size=1)
    try:
        assert await db.runQuery("select @@wsrep_retry_autocommit") == [(1,)]
        conflict = ConflictingCommit(counters.table)
        assert await db.runOperation(f"update {counters.table} set a = a + 1 "
                                     f"where k = 1 and sleep({HOLD}) = 0") == 1
        ended = time.monotonic()
        committed_at = await asyncio.to_thread(conflict.join_ok)
        assert await asyncio.to_thread(counters.read) == (1, 1, 1)
        assert db.stats()["retries"] == 0 and ended >= committed_at + HOLD
    finally:
        await db.close()
