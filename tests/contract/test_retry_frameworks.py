"""Savepoints and runTransaction with each framework's own tooling: Twisted trial
TestCases with inlineCallbacks (Deferred-returning savepoints, a function that
returns a Deferred), and tornado.testing's gen_test (async with, coroutines).
The opposite-order deadlock is made on the real servers here too."""

import tempfile
import uuid
from typing import TYPE_CHECKING, Any

from tornado import gen
from tornado.testing import AsyncTestCase, gen_test
from twisted.internet import defer
from twisted.trial import unittest

import adb
import adb.tornado
import adb.twisted

from ..conftest import URLS, require_server


def server(kind):
    """The URL and placeholder of ``kind`` (a fresh SQLite file for "sqlite")."""
    if kind == "sqlite":
        return f"sqlite:///{tempfile.mkdtemp()}/fw.db", "?"
    require_server(kind)
    return URLS[kind], "%s"


if TYPE_CHECKING:
    _TrialBase = unittest.TestCase
else:
    _TrialBase = object


class TrialTests(_TrialBase):
    """Mixed into one trial TestCase per server below."""

    kind: str

    def setUp(self):
        self.url, self.p = server(self.kind)
        self.db = adb.twisted.Database(self.url, pool_size=4)
        self.table = "adb_fw_" + uuid.uuid4().hex[:10]
        return self.db.runOperation(
            f"create table {self.table} (k int primary key, a int not null, b int not null)")

    @defer.inlineCallbacks
    def tearDown(self):  # type: ignore[override]
        yield self.db.runOperation(f"drop table {self.table}")
        yield self.db.close()

    def add(self, tx, key):
        return tx.runOperation(f"insert into {self.table} values ({self.p}, 0, 0)", (key,))

    @defer.inlineCallbacks
    def test_savepoints_by_hand_return_deferreds(self):
        tx = yield self.db.beginTransaction()
        yield self.add(tx, 1)
        savepoint = yield tx.beginSavepoint()
        self.assertIsInstance(savepoint, adb.Savepoint)
        yield self.add(tx, 2)
        yield savepoint.rollback()
        kept = yield tx.beginSavepoint()
        yield self.add(tx, 3)
        yield tx.releaseSavepoint(kept)
        yield tx.commit()
        rows = yield self.db.runQuery(f"select k from {self.table} order by k")
        self.assertEqual(rows, [(1,), (3,)])

    @defer.inlineCallbacks
    def test_run_transaction_takes_a_function_returning_a_deferred(self):
        @defer.inlineCallbacks
        def insert(tx, key):
            yield self.add(tx, key)
            rows = yield tx.runQuery(f"select count(*) from {self.table}")
            return rows[0][0]

        count = yield self.db.runTransaction(insert, 1)
        self.assertEqual(count, 1)
        plain = yield self.db.runTransaction(lambda tx: "a value")
        self.assertEqual(plain, "a value")


class DeadlockTrialTests(TrialTests):
    """On the servers (SQLite transactions take the write lock at begin: they
    queue, they never deadlock)."""

    @defer.inlineCallbacks
    def test_a_deadlock_victim_runs_again(self):
        yield self.add(self.db, 1)
        yield self.add(self.db, 2)
        both: list[Any] = [defer.Deferred(), defer.Deferred()]
        runs = []

        @defer.inlineCallbacks
        def cross(tx, column, mine, first, second):
            runs.append(column)
            yield tx.runOperation(f"update {self.table} set {column} = {column} + 1 "
                                  f"where k = {first}")
            if len(runs) <= 2:
                both[mine].callback(None)
                yield both[1 - mine]
            yield tx.runOperation(f"update {self.table} set {column} = {column} + 1 "
                                  f"where k = {second}")
            return column

        done = yield defer.gatherResults([
            self.db.runTransaction(cross, "a", 0, 1, 2, retries=5),
            self.db.runTransaction(cross, "b", 1, 2, 1, retries=5)])
        self.assertEqual(done, ["a", "b"])
        rows = yield self.db.runQuery(f"select k, a, b from {self.table} order by k")
        self.assertEqual([tuple(row) for row in rows], [(1, 1, 1), (2, 1, 1)])
        self.assertEqual(self.db.stats()["transaction_retries"], len(runs) - 2)


class PostgreSQLTrialTest(DeadlockTrialTests, unittest.TestCase):
    kind = "postgresql"


class MySQLTrialTest(DeadlockTrialTests, unittest.TestCase):
    kind = "mysql"


class SQLiteTrialTest(TrialTests, unittest.TestCase):
    kind = "sqlite"


class TornadoTests(AsyncTestCase):
    """runTransaction and savepoints from gen_test coroutines."""

    kind = "postgresql"

    def open(self, kind):
        url, self.p = server(kind)
        self.table = "adb_fw_" + uuid.uuid4().hex[:10]
        return adb.tornado.Database(url, pool_size=4, ioloop=self.io_loop)

    async def deadlock(self, kind):
        db = self.open(kind)
        table = self.table
        await db.runOperation(f"create table {table} (k int primary key, a int, b int)")
        await db.runMany(f"insert into {table} values ({self.p}, 0, 0)", [(1,), (2,)])
        both = [gen.Future(), gen.Future()]  # type: ignore[var-annotated]
        runs = []

        async def cross(tx, column, mine, first, second):
            runs.append(column)
            await tx.runOperation(f"update {table} set {column} = {column} + 1 where k = {first}")
            if len(runs) <= 2:
                both[mine].set_result(None)
                await both[1 - mine]
            async with tx.savepoint():
                await tx.runOperation(
                    f"update {table} set {column} = {column} + 1 where k = {second}")
            return column

        done = await gen.multi([db.runTransaction(cross, "a", 0, 1, 2, retries=5),
                                db.runTransaction(cross, "b", 1, 2, 1, retries=5)])
        self.assertEqual(done, ["a", "b"])
        rows = await db.runQuery(f"select k, a, b from {table} order by k")
        self.assertEqual([tuple(row) for row in rows], [(1, 1, 1), (2, 1, 1)])
        self.assertEqual(db.stats()["transaction_retries"], len(runs) - 2)
        await db.runOperation(f"drop table {table}")
        await db.close()

    @gen_test(timeout=30)
    async def test_a_deadlock_victim_runs_again_on_postgresql(self):
        await self.deadlock("postgresql")

    @gen_test(timeout=30)
    async def test_a_deadlock_victim_runs_again_on_mariadb(self):
        await self.deadlock("mysql")
