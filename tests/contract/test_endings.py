"""Endings: a call that returned success took effect, one that failed did not.

Here, for work in a transaction that something else than its owner ended: a
transaction block (``async with``/``with db.transaction()``) and ``runTransaction``
exit normally only if their own commit succeeded. A transaction that ``close()``
rolled back, or whose connection was lost, makes them raise TransactionError
naming what ended it; a transaction the block ended itself (its own commit or
rollback) leaves it alone. A ``runInteraction`` whose function returns normally
after its connection broke fails. Every front-end (asyncio, Tornado, adb.sync,
Twisted) on every database (``db``, conftest.py).

Each close lands inside the block by force, not by timing: the block tells a closer
(another task, or thread) to close, then waits until its transaction shows FAILED
before it leaves.
"""

import asyncio
import threading
import time
from typing import Any, Optional

import pytest
from twisted.internet import task

import adb
import adb.twisted
from adb.errors import TransactionError
from adb.txrecord import EndedBy

from ..conftest import URLS, blocking, ev, in_front
from ..idioms import as_fn, run_transaction

BOUND = 20.0  # seconds within which each wait here must end: never a hang
CLOSED = "rolled back because the Database was closed"


def ins(db):
    return db.target.sql(f"insert into {db.table} (userid, data) values (%s, %s)")


def rows_after(db):
    """The table's userids, read by a Database of the test's own (``db`` is closed)."""
    with adb.sync.Database(db.target.url, pool_size=1) as reader:
        return reader.runQuery(f"select userid from {db.table} order by userid")


def wait_until(condition, what):
    """Block until ``condition()``; fail loudly after BOUND seconds."""
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def pause(db):
    """Something a coroutine on ``db``'s front-end awaits to let others run."""
    if isinstance(db, adb.twisted.Database):
        return task.deferLater(db.reactor, 0.002, lambda: None)
    return asyncio.sleep(0.002)


async def until(db, condition, what):
    """Await (in ``db``'s idiom) until ``condition()``; fail after BOUND seconds."""
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pause(db)


async def drive(db, coroutine):
    """Run a coroutine that awaits ``db``'s futures, where they can be awaited."""
    return await in_front(db, coroutine)


class Closer:
    """Closes ``db`` when told: from a thread of its own on adb.sync (its close
    blocks), else from a task of its own on the test's loop."""

    def __init__(self, db):
        self.db = db
        self.told = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.task: Optional[asyncio.Future[None]] = None
        if blocking(db):
            self.thread = threading.Thread(target=self._close_when_told, daemon=True)
            self.thread.start()
        else:
            self.loop = asyncio.get_running_loop()
            self.asked = asyncio.Event()
            self.task = asyncio.ensure_future(self._aclose_when_told())

    def tell(self):
        """Close now (from any thread: a worker's, running an interaction)."""
        self.told.set()
        if not blocking(self.db):
            self.loop.call_soon_threadsafe(self.asked.set)

    def _close_when_told(self):
        self.told.wait(BOUND)
        self.db.close()

    async def _aclose_when_told(self):
        await asyncio.wait_for(self.asked.wait(), BOUND)
        await ev(self.db.close())

    async def finished(self):
        if self.thread is not None:
            await asyncio.to_thread(self.thread.join, BOUND)
            assert not self.thread.is_alive(), "close() did not return"
        if self.task is not None:
            await asyncio.wait_for(self.task, BOUND)


def closed_under(tx):
    return tx.state is adb.TxState.FAILED


async def test_a_block_whose_transaction_close_rolled_back_raises_on_exit(db):
    """Insert in a block, close() from elsewhere, leave the block normally: the exit
    raises the TransactionError a commit there would raise, and the row is not there."""
    closer = Closer(db)
    if blocking(db):
        with pytest.raises(TransactionError, match=CLOSED):
            with db.transaction() as tx:
                tx.runOperation(ins(db), (1, "in the block"))
                closer.tell()
                wait_until(lambda: closed_under(tx), "the close to roll the block back")
    else:
        handles = []

        async def block():
            async with db.transaction() as tx:
                handles.append(tx)
                await tx.runOperation(ins(db), (1, "in the block"))
                closer.tell()
                await until(db, lambda: closed_under(tx), "the close to roll the block back")
        with pytest.raises(TransactionError, match=CLOSED):
            await drive(db, block())
        tx = handles[0]
    await closer.finished()
    assert tx._record.ended_by is EndedBy.CLOSE
    assert rows_after(db) == []


@pytest.mark.parametrize("own_end, state, left", [
    ("commit", adb.TxState.COMMITTED, [(1,)]), ("rollback", adb.TxState.ROLLED_BACK, [])])
async def test_a_block_that_ended_itself_exits_normally_after_a_close(db, own_end, state, left):
    """The block's own explicit commit or rollback (then a close, still inside) leaves
    the exit alone: the transaction ended as its owner said, and nothing more is said."""
    closer = Closer(db)
    if blocking(db):
        with db.transaction() as tx:
            tx.runOperation(ins(db), (1, own_end))
            getattr(tx, own_end)()
            closer.tell()
            wait_until(lambda: db.closed, "the close to begin")
    else:
        async def block():
            async with db.transaction() as tx:
                await tx.runOperation(ins(db), (1, own_end))
                await getattr(tx, own_end)()
                closer.tell()
                await until(db, lambda: db.closed, "the close to begin")
            return tx
        tx = await drive(db, block())
    await closer.finished()
    assert tx.state is state
    assert rows_after(db) == left


async def test_run_transaction_whose_transaction_close_rolled_back_fails(db):
    """runTransaction's function returns normally after a close rolled its
    transaction back: the call fails with that TransactionError, not with the
    function's value, and it is not run again."""
    closer = Closer(db)
    runs = []

    def body(tx):
        runs.append(tx)
        yield tx.runOperation(ins(db), (1, "in runTransaction"))
        closer.tell()
        if blocking(db):
            wait_until(lambda: closed_under(tx), "the close to roll it back")
        else:
            yield until(db, lambda: closed_under(tx), "the close to roll it back")
        return "the function's value"

    with pytest.raises(TransactionError, match=CLOSED):
        await run_transaction(db, as_fn(db, body))
    await closer.finished()
    assert len(runs) == 1
    assert rows_after(db) == []


# -- a lost connection ------------------------------------------------------------------


#: the servers, whose connections can be lost (an embedded database has none)
SERVERS = pytest.mark.parametrize("target", ["postgresql", "psycopg", "mysql"], indirect=True)


def _killable(db):
    assert db.target.kind != "sqlite", "an embedded database has no connection to lose"


class LockHeld:
    """A lock the test holds on the server (``pg_advisory_lock``, ``GET_LOCK``), and a
    statement of ``db``'s that waits on it, marked with ``db.table`` in a comment;
    ``kill_when_blocked()`` starts a thread that ends that statement's session
    (``pg_terminate_backend``, ``KILL``) once the server shows it waiting."""

    def __init__(self, db):
        self.db = db
        self.kind = db.target.kind
        self.marker = f"/* {db.table} */"
        self.name = db.table if self.kind == "mysql" else abs(hash(db.table)) % 2_000_000_000
        self.sql = db.target.sql("select pg_advisory_lock(%s)" if self.kind == "postgresql"
                                 else "select get_lock(%s, 60)")
        self.holder = adb.sync.Database(URLS[self.kind], pool_size=1)
        self.held = self.holder.beginTransaction()
        self.held.runQuery(self.sql, (self.name,))
        self.killer = None

    def waiting_statement(self):
        return self.sql + " " + self.marker, (self.name,)

    def kill_when_blocked(self):
        self.killer = threading.Thread(target=self._kill_when_blocked, daemon=True)
        self.killer.start()

    def _kill_when_blocked(self):
        with adb.sync.Database(URLS[self.kind], pool_size=1) as admin:
            if self.kind == "postgresql":
                find = ("select pid from pg_stat_activity where query like %s and state = "
                        "'active' and wait_event = 'advisory' and pid <> pg_backend_pid()")
            else:
                find = ("select id from information_schema.processlist where info like %s "
                        "and id <> connection_id()")
            found: list[Any] = []

            def blocked():
                found[:] = admin.runQuery(find, (f"%{self.marker}%",))
                return bool(found)
            wait_until(blocked, "the statement to wait on the lock")
            for (session,) in found:
                if self.kind == "postgresql":
                    admin.runQuery("select pg_terminate_backend(%s)", (session,))
                else:
                    admin.runOperation(f"kill {int(session)}")

    def release(self):
        if self.killer is not None:
            self.killer.join(BOUND)
        self.held.rollback()
        self.holder.close()


@SERVERS
async def test_a_block_whose_connection_was_lost_raises_on_exit(db):
    """The block's statement fails with ConnectionLost (its session killed on the
    server while it waits on a lock the test holds), the block catches that and
    leaves normally: the exit raises TransactionError (lost), nothing committed."""
    _killable(db)
    lock = LockHeld(db)
    try:
        if blocking(db):
            with pytest.raises(TransactionError, match="lost its connection"):
                with db.transaction() as tx:
                    tx.runOperation(ins(db), (1, "lost"))
                    lock.kill_when_blocked()
                    with pytest.raises(adb.ConnectionLost):
                        tx.runQuery(*lock.waiting_statement())
        else:
            async def block():
                async with db.transaction() as tx:
                    await tx.runOperation(ins(db), (1, "lost"))
                    lock.kill_when_blocked()
                    with pytest.raises(adb.ConnectionLost):
                        await tx.runQuery(*lock.waiting_statement())
            with pytest.raises(TransactionError, match="lost its connection"):
                await drive(db, block())
    finally:
        lock.release()
    assert await ev(db.runQuery(f"select userid from {db.table}")) == []


@SERVERS
async def test_run_interaction_whose_connection_was_lost_fails(db):
    """runInteraction's function meets a lost connection, swallows the error and
    returns normally: the call fails (the commit cannot have happened), not
    succeeds, and nothing is in the table."""
    _killable(db)
    lock = LockHeld(db)
    seen = []

    def interaction(cursor):
        cursor.execute(ins(db), (1, "lost"))
        lock.kill_when_blocked()
        try:
            cursor.execute(*lock.waiting_statement())
        except db.dbapi.Error as exc:  # the connection is gone; carry on regardless
            seen.append(exc)
        return "the function's value"

    try:
        if blocking(db):
            with pytest.raises(Exception) as failed:
                db.runInteraction(interaction)
        else:
            with pytest.raises(Exception) as failed:
                await ev(db.runInteraction(interaction))
    finally:
        lock.release()
    assert seen, "the statement did not fail under the kill"
    assert isinstance(failed.value, (adb.ConnectionLost, db.dbapi.Error)), failed.value
    assert await ev(db.runQuery(f"select userid from {db.table}")) == []


async def test_run_interaction_during_close_runs_to_its_commit(db):
    """close() while runInteraction's function runs: a running call is waited for,
    so the call succeeds and its row is there (success means committed)."""
    closer = Closer(db)
    closing = threading.Event()

    def interaction(cursor):
        cursor.execute(ins(db), (1, "during close"))
        closer.tell()
        wait_until(lambda: db.closed, "the close to begin")
        closing.set()
        return "done"

    if blocking(db):
        assert db.runInteraction(interaction) == "done"
    else:
        assert await ev(db.runInteraction(interaction)) == "done"
    await closer.finished()
    assert closing.is_set()
    assert rows_after(db) == [(1,)]


async def test_run_interaction_past_an_error_succeeds_only_if_it_committed(db):
    """runInteraction's function inserts, meets an error, catches it and returns.
    PostgreSQL has aborted the transaction (its COMMIT would roll back without a
    word): the call fails with TransactionError and no row is there. MariaDB and
    SQLite keep the transaction going: the call succeeds, and its row is there."""
    def interaction(cursor):
        cursor.execute(ins(db), (1, "before the error"))
        try:
            cursor.execute(ins(db), (1, "a duplicate key"))
        except db.dbapi.IntegrityError:
            pass
        return "went on"

    aborts = db.target.kind == "postgresql"
    if blocking(db):
        call = asyncio.to_thread(db.runInteraction, interaction)
    else:
        call = ev(db.runInteraction(interaction))
    if aborts:
        with pytest.raises(TransactionError, match="rolled back, not committed"):
            await call
    else:
        assert await call == "went on"
    rows = await ev(db.runQuery(f"select userid from {db.table}"))
    assert rows == ([] if aborts else [(1,)])

