"""Checked by mypy (tests/project/test_typing.py), never run: what each front-end's
methods return, as its users' type checkers see it."""

import asyncio
from typing import Any, Optional, Sequence, Union

from twisted.internet.defer import Deferred
from typing_extensions import assert_type

import adb
import adb.asyncio
import adb.sync
import adb.tornado
import adb.twisted
from adb import Transaction


def count(cursor: Any) -> int:
    return 1


async def move(tx: Transaction, amount: int) -> str:
    await tx.runOperation("update t set n = n + %s", (amount,))
    return "moved"


def move_blocking(tx: Transaction, amount: int) -> str:
    tx.runOperation("update t set n = n + %s", (amount,))
    with tx.savepoint() as savepoint:
        assert_type(savepoint, adb.Savepoint)
    return "moved"


async def on_asyncio(db: adb.Database, tdb: adb.tornado.Database) -> None:
    assert_type(db.runQuery("select 1"), "asyncio.Future[list[Any]]")
    assert_type(await db.runOperation("delete from t"), int)
    assert_type(await db.runMany("insert into t values (%s)", [(1,), (2,)]), int)
    assert_type(await db.runInteraction(count), int)
    assert_type(await db.connect(), None)
    assert_type(await db.runQueryRow("select 1"), Optional[Any])
    assert_type(await db.runQueryValue("select 1", replica=True), Optional[Any])
    tx = await db.beginTransaction(isolation="serializable", read_only=True)
    assert_type(tx, adb.asyncio.Transaction)
    assert_type(await tx.runQuery("select 1"), list[Any])
    assert_type(await tx.runOperation("delete from t"), int)
    assert_type(await tx.runQueryValue("select 1"), Optional[Any])
    assert_type(await tx.runInteraction(count), int)
    assert_type(await db.commitTransaction(tx), None)
    assert_type(await tdb.runQuery("select 1"), list[Any])
    assert_type(await db.runQuery("select 1", replica=True), list[Any])
    assert_type(await db.beginTransaction(replica=True), adb.asyncio.Transaction)
    async with db.transaction(replica=True) as reading:
        assert_type(reading, adb.asyncio.Transaction)
    async with tdb.transaction(isolation="repeatable read") as writing:
        assert_type(await writing.runQueryRow("select 1"), Optional[Any])
        assert_type(await writing.commit(), None)
    await db.wait_for_room()
    async for row in db.stream("select 1"):
        assert_type(row, Any)
    assert_type(await db.stream("select 1").fetch(), list[Any])
    assert_type(await db.copy_in("t", [(1,)]), int)
    assert_type(await db.runTransaction(move, 5, retries=2), str)
    async with tx.savepoint() as savepoint:
        assert_type(savepoint, adb.Savepoint)
    listener = await db.listen("orders", max_queued=100).ready()
    assert_type(listener, adb.Listener)
    async for item in listener:
        assert_type(item, Union[adb.Notification, adb.NotificationGap])
    assert_type(await db.notify("orders", "1"), None)
    await listener.aclose()
    await db.close()


def on_sync(db: adb.sync.Database) -> None:
    assert_type(db.runQuery("select 1"), list[Any])
    assert_type(db.runOperation(("insert into t values (%s)", (1,))), int)
    assert_type(db.runInteraction(count), int)
    assert_type(db.connect(), None)
    assert_type(db.runQueryValue("select 1"), Optional[Any])
    assert_type(db.beginTransaction(), adb.sync.Transaction)
    with db.transaction(read_only=True, isolation="serializable") as tx:
        assert_type(tx, adb.sync.Transaction)
        assert_type(tx.runQuery("select 1"), list[Any])
        assert_type(tx.runOperation("delete from t"), int)
        assert_type(tx.beginSavepoint(), adb.Savepoint)
    assert_type(db.runQuery("select 1", replica=True), list[Any])
    assert_type(db.stream("select 1", replica=True).fetch(), list[Any])
    assert_type(db.replicas, tuple[Any, ...])
    assert_type(db.copy_in("t", [(1,)]), int)
    assert_type(db.runTransaction(move_blocking, 5), str)
    with db.listen("orders") as listener:
        assert_type(listener.get(1.0), Optional[Union[adb.Notification, adb.NotificationGap]])
        for item in listener:
            if isinstance(item, adb.Notification):
                assert_type(item.channel, str)
    assert_type(db.notify("orders", "1"), None)
    assert_type(db.close(), None)


def on_twisted(db: adb.twisted.Database, pool: adb.twisted.ConnectionPool) -> None:
    assert_type(db.runQuery("select 1"), "Deferred[list[Any]]")
    assert_type(db.runQuery("select 1", replica=True), "Deferred[list[Any]]")
    assert_type(db.connect(), "Deferred[None]")
    assert_type(db.runQueryRow("select 1"), "Deferred[Optional[Any]]")
    assert_type(db.beginTransaction(replica=True), "Deferred[adb.twisted.Transaction]")
    with db.transaction() as tx:  # (Twisted code uses async with; the type is the same)
        assert_type(tx, adb.twisted.Transaction)
        assert_type(tx.runQuery("select 1"), "Deferred[list[Any]]")
        assert_type(tx.rollback(), "Deferred[None]")
    assert_type(db.runInteraction(count), "Deferred[int]")
    assert_type(db.stream("select 1").fetch(), "Deferred[list[Any]]")
    assert_type(db.copy_in("t", [(1,)]), "Deferred[int]")
    listener = db.listen("orders")
    assert_type(listener.ready(), "Deferred[adb.twisted.Listener]")
    assert_type(listener.get(), "Deferred[Optional[Union[adb.Notification, adb.NotificationGap]]]")
    assert_type(db.notify("orders", "1"), "Deferred[None]")
    assert_type(db.close(), "Deferred[None]")
    assert_type(pool.runQuery("select 1"), "Deferred[Sequence[Any]]")
    assert_type(pool.runOperation("delete from t"), "Deferred[None]")


_ = (asyncio, Deferred)
