"""The Twisted front-end with Twisted's own tooling (trial TestCases, Deferreds).

Runs on whichever reactor is installed: pytest runs it on the default reactor;
tests/contract/test_twisted_reactors.py runs this module again under trial on the asyncio
reactor.
"""

import os
import tempfile
import uuid
from typing import TYPE_CHECKING, Any

from twisted.enterprise import adbapi
from twisted.internet import defer, reactor, task
from twisted.test.test_adbapi import EventReactor
from twisted.trial import unittest

import adb.twisted
from adb.errors import PoolClosed, PoolTimeout, TransactionError

from ..conftest import URLS, require_server, server_kwargs
from ..idioms import hold_workers


class CountingReactor:
    """The real reactor, counting callFromThread (the hand-back's wake-ups)."""

    def __init__(self):
        self.calls_from_thread = 0

    def callFromThread(self, fn, *args):
        self.calls_from_thread += 1
        reactor.callFromThread(fn, *args)

    def __getattr__(self, name):
        return getattr(reactor, name)


if TYPE_CHECKING:
    # for mypy the mixin is the trial TestCase it is mixed into; at run time it
    # stays a plain class, so it is not collected (or run) on its own
    _DatabaseTestsBase = unittest.TestCase
else:
    _DatabaseTestsBase = object


class DatabaseTests(_DatabaseTestsBase):
    """adb's Database API on Twisted; mixed in once per database below."""

    kind: str  # each test case below names its database

    def setUp(self):
        if self.kind == "sqlite":
            self.url = f"sqlite:///{tempfile.mkdtemp()}/tw.db"
            self.p = "?"
        else:
            require_server(self.kind)
            self.url, self.p = URLS[self.kind], "%s"
        self.reactor = CountingReactor()
        self.db = adb.twisted.Database(self.url, pool_size=4, reactor=self.reactor)
        self.table = "adb_tw_" + uuid.uuid4().hex[:10]
        return self.db.runOperation(
            f"create table {self.table} (userid int primary key, data varchar(20))")

    # trial waits for a Deferred that tearDown returns; Twisted's TestCase keeps
    # pyunit's ``tearDown() -> None`` in its types
    @defer.inlineCallbacks
    def tearDown(self):  # type: ignore[override]
        if not self.db.closed:
            yield self.db.runOperation(f"drop table {self.table}")
            yield self.db.close()

    def ins(self):
        return f"insert into {self.table} (userid, data) values ({self.p}, {self.p})"

    @defer.inlineCallbacks
    def test_parallel_inserts_batched_hand_back(self):
        before = self.reactor.calls_from_thread
        n = 500
        # every worker held while the burst is queued: the reactor's first drain
        # finds calls still queued (hold_workers says why that needs a gate)
        gate, held = hold_workers(self.db, 4)
        burst = [self.db.runOperation(self.ins(), (i, str(i))) for i in range(n)]
        gate.set()
        yield defer.gatherResults(held)
        counts = yield defer.gatherResults(burst)
        self.assertEqual(counts, [1] * n)
        rows = yield self.db.runQuery(f"select count(*) from {self.table}")
        self.assertEqual(rows, [(n,)])
        wakeups = self.reactor.calls_from_thread - before
        self.assertGreater(wakeups, 0)
        self.assertLess(wakeups, n + 1)  # one callFromThread per batch, never per result
        stats = self.db.stats()
        # every drain was a worker's signal, and one signal may still be on its way: sent
        # for a result that a saturation poll settled first (a signal sets the flag that
        # keeps the other workers from signalling until its drain runs)
        self.assertIn(self.reactor.calls_from_thread - stats["wakeups"], (0, 1))
        # n calls on 4 workers saturate the pool: results came on reactor timers;
        # close() in tearDown cancels a timer still pending (trial fails a test that
        # leaves a DelayedCall behind)
        self.assertGreater(stats["polls"], 0)
        self.assertGreaterEqual(stats["settled"], n + 1)  # create table and the inserts

    @defer.inlineCallbacks
    def test_transactions_commit_and_rollback(self):
        tx = yield self.db.beginTransaction()
        yield self.db.runOperation(self.ins(), (1, "kept"), tx)
        yield self.db.commitTransaction(tx)
        tx = yield self.db.beginTransaction()
        yield tx.runOperation(self.ins(), (2, "gone"))
        yield self.db.rollbackTransaction(tx)
        with self.assertRaises(TransactionError):
            self.db.commitTransaction(tx)
        rows = yield self.db.runQuery(f"select userid from {self.table}")
        self.assertEqual(rows, [(1,)])

    def test_async_with_transaction(self):
        async def body():
            async with self.db.transaction() as tx:
                await tx.runOperation(self.ins(), (5, "ctx"))
            try:
                async with self.db.transaction() as tx:
                    await tx.runOperation(self.ins(), (6, "ctx"))
                    raise KeyError("abort")
            except KeyError:
                pass
            return await self.db.runQuery(f"select userid from {self.table}")
        d = defer.ensureDeferred(body())
        d.addCallback(self.assertEqual, [(5,)])
        return d

    @defer.inlineCallbacks
    def test_driver_error_reaches_errback_unchanged(self):
        yield self.db.runOperation(self.ins(), (1, "a"))
        d = self.db.runOperation(self.ins(), (1, "dup"))
        yield self.assertFailure(d, self.db.dbapi.IntegrityError)
        self.assertEqual((yield self.db.runMany(self.ins(), [(2, "b"), (3, "c")])), 2)
        def count(cursor):
            cursor.execute(f"select count(*) from {self.table}")
            return list(cursor.fetchall())  # PyMySQL gives a tuple of rows
        rows = yield self.db.runInteraction(count)
        self.assertEqual(rows, [(3,)])

    @defer.inlineCallbacks
    def test_cancelled_queued_call_never_runs(self):
        db = adb.twisted.Database(self.url, pool_size=1)
        tx = yield db.beginTransaction()  # the only worker is pinned
        d = db.runOperation(self.ins(), (9, "cancelled"))
        d.cancel()
        yield self.assertFailure(d, defer.CancelledError)
        yield self.assertFailure(db.runQuery("select 1", timeout=0.05), PoolTimeout)
        yield tx.rollback()
        rows = yield db.runQuery(f"select count(*) from {self.table}")
        yield db.close()
        self.assertEqual(rows, [(0,)])

    @defer.inlineCallbacks
    def test_close_settles_pending(self):
        pending = [self.db.runOperation(self.ins(), (i, "p")) for i in range(50)]
        yield self.db.runOperation(f"drop table if exists {self.table}_x")
        closing = self.db.close()
        with self.assertRaises(PoolClosed):
            self.db.runQuery("select 1")
        results = yield defer.gatherResults(pending)
        yield closing
        yield self.db.close()  # idempotent
        self.assertEqual(results, [1] * 50)
        check = adb.twisted.Database(self.url, pool_size=1)
        rows = yield check.runQuery(f"select count(*) from {self.table}")
        yield check.runOperation(f"drop table {self.table}")
        yield check.close()
        self.assertEqual(rows, [(50,)])

    @defer.inlineCallbacks
    def test_a_block_close_rolled_back_fails_on_exit(self):
        """close() from the reactor while an ``async with`` block is inside its
        transaction: the block's exit fails with the close's TransactionError, and
        runTransaction's Deferred too (its function returned normally); no row."""
        closed: list[object] = []

        async def block():
            async with self.db.transaction() as tx:
                await tx.runOperation(self.ins(), (1, "block"))
                task.deferLater(reactor, 0, lambda: closed.append(self.db.close()))
                while tx.state is not adb.TxState.FAILED:
                    await task.deferLater(reactor, 0.002, lambda: None)
        failure = yield self.assertFailure(defer.ensureDeferred(block()), TransactionError)
        self.assertIn("rolled back because the Database was closed", str(failure))
        yield closed[0]
        check = adb.twisted.Database(self.url, pool_size=1)
        rows = yield check.runQuery(f"select count(*) from {self.table}")
        yield check.runOperation(f"drop table {self.table}")
        yield check.close()
        self.assertEqual(rows, [(0,)])

    @defer.inlineCallbacks
    def test_run_transaction_close_rolled_back_fails(self):
        """runTransaction with an inlineCallbacks function that returns normally
        after a close rolled its transaction back: the Deferred fails."""
        closed: list[object] = []

        @defer.inlineCallbacks
        def fn(tx):
            yield tx.runOperation(self.ins(), (1, "runTransaction"))
            closed.append(self.db.close())
            self.assertIs(tx.state, adb.TxState.FAILED)  # close() rolls it back at once
            return "value"
        yield self.assertFailure(self.db.runTransaction(fn), TransactionError)
        yield closed[0]
        check = adb.twisted.Database(self.url, pool_size=1)
        rows = yield check.runQuery(f"select count(*) from {self.table}")
        yield check.runOperation(f"drop table {self.table}")
        yield check.close()
        self.assertEqual(rows, [(0,)])


class PostgreSQLDatabaseTests(DatabaseTests, unittest.TestCase):
    kind = "postgresql"


class MySQLDatabaseTests(DatabaseTests, unittest.TestCase):
    kind = "mysql"


class SQLiteDatabaseTests(DatabaseTests, unittest.TestCase):
    kind = "sqlite"


class ConnectionPoolTests(unittest.TestCase):
    """adbapi's observable behaviour beyond Twisted's own suite, and adb's additions."""

    def setUp(self):
        self.path = os.path.join(tempfile.mkdtemp(), "pool.db")

    def test_start_trigger_removed_by_close_before_start(self):
        fake = EventReactor(False)
        pool = adb.twisted.ConnectionPool("sqlite3", self.path, cp_reactor=fake)
        self.assertEqual(fake.triggers, [("after", "startup", pool._start)])
        pool.close()
        self.assertEqual(fake.triggers, [])

    def test_shutdown_trigger_removed_by_close_after_start(self):
        fake = EventReactor(True)
        pool = adb.twisted.ConnectionPool("sqlite3", self.path, cp_reactor=fake)
        self.assertEqual(fake.triggers, [("during", "shutdown", pool.finalClose)])
        self.assertTrue(pool.running)
        pool.close()
        self.assertEqual(fake.triggers, [])
        self.assertFalse(pool.running)

    @defer.inlineCallbacks
    def test_openfun_min_max_name_and_adb_extras(self):
        opened: list[Any] = []  # the DB-API connections the pool opened
        pool = adb.twisted.ConnectionPool("sqlite3", database=self.path, cp_min=1, cp_max=3,
                                          cp_name="named", cp_openfun=opened.append)
        pool.start()
        self.assertIsNone((yield pool.runOperation("create table t (k int primary key)")))
        self.assertEqual((yield pool.runMany("insert into t values (?)", [(1,), (2,)])), 2)
        tx = yield pool.beginTransaction()
        yield pool._adb.runOperation("insert into t values (?)", (3,), tx)
        yield pool.rollbackTransaction(tx)
        rows = yield pool.runQuery("select k from t order by k")
        stats = pool.stats()
        pool.close()
        self.assertEqual(rows, [(1,), (2,)])
        self.assertEqual(stats["pool_size"], 3)
        self.assertEqual(stats["name"], "named")
        self.assertEqual(len(opened), stats["connects"])
        self.assertGreaterEqual(len(opened), 1)

    @defer.inlineCallbacks
    def test_reconnect_reports_connection_lost(self):
        require_server("postgresql")
        parts = URLS["postgresql"]
        pool = adb.twisted.ConnectionPool("psycopg2", parts, cp_max=1, cp_reconnect=True)
        pool.start()
        pid = (yield pool.runQuery("select pg_backend_pid()"))[0][0]
        running = pool.runQuery("select pg_sleep(5)")
        yield task.deferLater(reactor, 0.3, lambda: None)
        killer = adb.twisted.Database(parts, pool_size=1)
        yield killer.runQuery("select pg_terminate_backend(%s)", (pid,))
        yield killer.close()
        failure = yield self.assertFailure(running, adbapi.ConnectionLost)
        self.assertTrue(failure.may_have_run)
        self.assertIsInstance(failure, adb.errors.ConnectionLost)
        self.assertIsInstance(failure, pool.dbapi.OperationalError)  # what adbapi raises
        # adbapi's Connection.rollback logs its failure on the dead connection, as under adbapi
        self.assertTrue(self.flushLoggedErrors(adbapi.ConnectionLost))
        self.flushLoggedErrors(pool.dbapi.InterfaceError)
        self.assertEqual((yield pool.runQuery("select 1")), [(1,)])  # reconnected
        pool.close()

    @defer.inlineCallbacks
    def test_execute_keywords_pass_through_as_in_adbapi(self):
        """runQuery/runOperation hand ``(*args, **kw)`` to ``cursor.execute``: each
        driver's own keyword (psycopg2 ``vars``, PyMySQL ``args``) works, and so does
        a call with none."""
        for driver, kind, keyword in (("psycopg2", "postgresql", "vars"),
                                      ("pymysql", "mysql", "args")):
            require_server(kind)
            pool = adb.twisted.ConnectionPool(driver, cp_max=2, **server_kwargs(kind))
            pool.start()
            table = "adb_kw_" + uuid.uuid4().hex[:10]
            try:
                yield pool.runOperation(f"create table {table} (k int, v varchar(10))")
                self.assertIsNone((yield pool.runOperation(
                    f"insert into {table} values (%s, %s)", **{keyword: (1, "kw")})))
                yield pool.runOperation(f"insert into {table} values (%s, %s)", (2, "pos"))
                rows = yield pool.runQuery(f"select v from {table} where k = %s",
                                           **{keyword: (1,)})
                self.assertEqual([tuple(r) for r in rows], [("kw",)])
                rows = yield pool.runQuery(f"select k, v from {table} order by k")
                self.assertEqual([tuple(r) for r in rows], [(1, "kw"), (2, "pos")])
            finally:
                yield pool.runOperation(f"drop table {table}")
                pool.close()

    def test_bad_driver_name_fails_at_construction(self):
        with self.assertRaises(ImportError):  # as adbapi's
            adb.twisted.ConnectionPool("no_such_module_anywhere")
        with self.assertRaises(adb.errors.InterfaceError):
            adb.twisted.ConnectionPool("")

    @defer.inlineCallbacks
    def test_unreachable_server_fails_with_the_drivers_error_and_adbs(self):
        """What adbapi users catch (the driver's OperationalError, its args) and what
        adb's users catch (ServerUnavailable: nothing ran); adb's message, naming the
        host and database of a libpq DSN string, is a note of it."""
        import psycopg2
        pool = adb.twisted.ConnectionPool(
            "psycopg2", "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=2", cp_min=0,
            cp_max=1)
        pool.start()
        try:
            error = yield self.assertFailure(pool.runQuery("select 1"), psycopg2.OperationalError)
            self.assertIsInstance(error, adb.errors.ServerUnavailable)
            self.assertFalse(error.may_have_run)
            self.assertIsInstance(error.__cause__, psycopg2.OperationalError)
            self.assertEqual(error.args, error.__cause__.args)
            self.assertIn("127.0.0.1:1/nowhere", " ".join(getattr(error, "__notes__", [])))
            self.assertIn("ServerUnavailable[psycopg2.OperationalError]", type(error).__qualname__)
        finally:
            pool.close()

    def test_cp_min_and_cp_max_are_refused_by_their_names(self):
        for kw, named in (({"cp_max": 0}, "cp_max"), ({"cp_min": -1}, "cp_min"),
                          ({"cp_max": "5"}, "cp_max")):
            with self.assertRaisesRegex(adb.errors.InterfaceError, named):
                adb.twisted.ConnectionPool("sqlite3", self.path, **kw)

    @defer.inlineCallbacks
    def test_adbs_own_calls_leave_the_connection_as_the_application_set_it(self):
        """runMany and a transaction of adb's own begin explicitly and end with the
        driver's commit, so a connection cp_openfun put in autocommit is still in
        autocommit for the next function, and one left as the driver made it is too."""
        require_server("postgresql")
        for autocommit in (True, False):
            def openfun(conn, autocommit=autocommit):
                conn.autocommit = autocommit
            pool = adb.twisted.ConnectionPool("psycopg2", cp_max=1, cp_openfun=openfun,
                                              **server_kwargs("postgresql"))
            pool.start()
            table = "adb_native_" + uuid.uuid4().hex[:10]
            try:
                yield pool.runOperation(f"create table {table} (k int)")
                self.assertEqual((yield pool.runMany(f"insert into {table} values (%s)",
                                                     [(1,), (2,)])), 2)
                tx = yield pool.beginTransaction()
                yield pool._adb.runOperation(f"insert into {table} values (%s)", (3,), tx)
                yield pool.rollbackTransaction(tx)
                seen = yield pool.runWithConnection(
                    lambda conn: (conn.autocommit, conn.get_transaction_status()))
                self.assertEqual(seen, (autocommit, 0))  # 0: TRANSACTION_STATUS_IDLE
                rows = yield pool.runQuery(f"select k from {table} order by k")
                self.assertEqual([tuple(r) for r in rows], [(1,), (2,)])
            finally:
                yield pool.runOperation(f"drop table {table}")
                pool.close()
