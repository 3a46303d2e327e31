"""Savepoints on every front-end and driver: tx.savepoint() as a context manager
(async with; with on adb.sync; async with in a Twisted coroutine), the explicit
beginSavepoint/release/rollback, adb.savepoint(cursor) inside runInteraction,
nesting, and the errors misuse gets."""

import pytest

import adb
from adb.errors import TransactionError

from ..conftest import ALL_FRONTS, ev, fronts_fixture, in_front
from ..idioms import front_of

#: the core contract: every front-end, adb.trio included
front = fronts_fixture(ALL_FRONTS)


def insert(db, tx, key):
    return tx.runOperation(db.target.sql(f"insert into {db.table} values (%s, %s)"), (key, "x"))


async def keys(db):
    return [row[0] for row in await ev(db.runQuery(f"select userid from {db.table} order by 1"))]


async def run_async_body(db, body):
    """An ``async def`` body awaited on asyncio/Tornado, run by Deferred.fromCoroutine
    on Twisted (where ``async with tx.savepoint()`` awaits Deferreds)."""
    return await in_front(db, body())


async def test_an_error_in_the_block_undoes_it_and_the_transaction_goes_on(db):
    """A real server error inside the block (a duplicate key, which on PostgreSQL
    aborts the whole transaction until the rollback to the savepoint)."""
    tx = await ev(db.beginTransaction())
    await ev(insert(db, tx, 1))
    if front_of(db) == "sync":
        with pytest.raises(db.dbapi.IntegrityError):
            with tx.savepoint() as sp:
                insert(db, tx, 2)
                insert(db, tx, 1)
    else:
        async def body():
            async with tx.savepoint() as sp:
                await insert(db, tx, 2)
                await insert(db, tx, 1)
        with pytest.raises(db.dbapi.IntegrityError):
            await run_async_body(db, body)
        sp = tx.savepoints.open[-1] if tx.savepoints.open else None
        assert sp is None
    await ev(insert(db, tx, 3))
    await ev(tx.commit())
    assert await keys(db) == [1, 3]


async def test_a_block_that_ends_normally_is_kept(db):
    tx = await ev(db.beginTransaction())
    if front_of(db) == "sync":
        with tx.savepoint() as sp:
            insert(db, tx, 1)
    else:
        async def body():
            async with tx.savepoint() as sp:
                await insert(db, tx, 1)
            return sp
        sp = await run_async_body(db, body)
    assert sp.state is adb.SavepointState.RELEASED
    await ev(tx.commit())
    assert await keys(db) == [1]


async def test_savepoints_nest(db):
    """An inner block that raises is undone; its outer block goes on and is kept;
    an outer block that raises undoes its inner, already released, block too."""
    tx = await ev(db.beginTransaction())
    if front_of(db) == "sync":
        with tx.savepoint():
            insert(db, tx, 1)
            with pytest.raises(ValueError):
                with tx.savepoint():
                    insert(db, tx, 2)
                    raise ValueError("inner")
            insert(db, tx, 3)
        with pytest.raises(KeyError):
            with tx.savepoint():
                insert(db, tx, 4)
                with tx.savepoint():
                    insert(db, tx, 5)
                raise KeyError("outer")
    else:
        async def body():
            async with tx.savepoint():
                await insert(db, tx, 1)
                with pytest.raises(ValueError):
                    async with tx.savepoint():
                        await insert(db, tx, 2)
                        raise ValueError("inner")
                await insert(db, tx, 3)
            with pytest.raises(KeyError):
                async with tx.savepoint():
                    await insert(db, tx, 4)
                    async with tx.savepoint():
                        await insert(db, tx, 5)
                    raise KeyError("outer")
        await run_async_body(db, body)
    await ev(tx.commit())
    assert await keys(db) == [1, 3]


async def test_begin_release_and_rollback_by_hand(db):
    """The explicit form (Deferreds on Twisted, futures on asyncio, values on
    adb.sync): on the savepoint and on the transaction handle."""
    tx = await ev(db.beginTransaction())
    first = await ev(tx.beginSavepoint())
    assert isinstance(first, adb.Savepoint) and first.active
    await ev(insert(db, tx, 1))
    await ev(first.rollback())
    assert first.state is adb.SavepointState.ROLLED_BACK
    second = await ev(tx.beginSavepoint())
    await ev(insert(db, tx, 2))
    inner = await ev(tx.beginSavepoint())
    await ev(insert(db, tx, 3))
    await ev(tx.releaseSavepoint(second))  # releases inner with it
    assert inner.state is adb.SavepointState.RELEASED
    third = await ev(tx.beginSavepoint())
    await ev(insert(db, tx, 4))
    await ev(tx.rollbackSavepoint(third))
    await ev(tx.commit())
    assert await keys(db) == [2, 3]


async def test_misuse_gets_a_transaction_error_before_anything_runs(db):
    tx = await ev(db.beginTransaction())
    sp = await ev(tx.beginSavepoint())
    inner = await ev(tx.beginSavepoint())
    await ev(sp.release())
    with pytest.raises(TransactionError, match="already ended"):
        sp.release()
    with pytest.raises(TransactionError, match="already ended"):
        inner.rollback()  # ended with its outer savepoint
    with pytest.raises(TransactionError, match="not a savepoint"):
        tx.rollbackSavepoint("adb_sp_1")
    if db.target.kind == "sqlite":  # one write transaction at a time: the other one after
        await ev(tx.commit())
    other = await ev(db.beginTransaction())
    foreign = await ev(other.beginSavepoint())
    if db.target.kind != "sqlite":
        with pytest.raises(TransactionError, match="not a savepoint of transaction"):
            tx.releaseSavepoint(foreign)
        await ev(tx.commit())
    await ev(other.rollback())
    with pytest.raises(TransactionError, match="finished"):
        tx.savepoint()
    with pytest.raises(TransactionError, match="finished"):
        tx.beginSavepoint()
    with pytest.raises(TransactionError, match="finished"):
        foreign.release()
    assert db.stats()["pinned"] == 0


async def test_savepoints_inside_run_interaction(db):
    """``with adb.savepoint(cursor)`` in the function runInteraction runs (in its
    worker thread): the block that raises is undone, the rest commits."""
    p = db.target.p

    def work(cursor, base):
        insert = f"insert into {db.table} values ({p}, 'x')"
        cursor.execute(insert, (base + 1,))
        try:
            with adb.savepoint(cursor):
                cursor.execute(insert, (base + 2,))
                cursor.execute(insert, (base + 1,))
        except db.dbapi.IntegrityError:
            pass
        with adb.savepoint(cursor):
            cursor.execute(insert, (base + 3,))
        return "done"

    assert await ev(db.runInteraction(work, 0)) == "done"
    assert await keys(db) == [1, 3]
    tx = await ev(db.beginTransaction())
    assert await ev(tx.runInteraction(work, 10)) == "done"  # also inside a transaction
    assert await ev(tx.runQuery(f"select count(*) from {db.table}")) == [(4,)]
    await ev(tx.rollback())
    assert await keys(db) == [1, 3]


async def test_a_cursor_savepoint_outside_run_interaction_is_refused(db):
    with pytest.raises(TransactionError, match="only inside the function runInteraction"):
        with adb.savepoint(object()):
            pass
