"""How work ends on the adbapi drop-in, with Twisted's trial: no call is left unsettled,
and an interaction that returns normally succeeds only if it committed.

- ``start()`` after ``close()`` raises, as stock adbapi's does (Twisted's
  ``AlreadyQuit``; adb's is a ``PoolClosed`` too) and the pool stays closed; every
  call made on the closed pool then, or without that ``start()``, fails at once
  with ``PoolClosed`` (stock adbapi's Deferreds never fire there). That is what a
  test suite with one pool per class (``start()`` in ``setUp``, ``close()`` in
  ``tearDown``) meets in its second test.
- ``runInteraction`` during ``close()`` runs to its commit (a running call is waited
  for); one whose connection broke under it, though its function swallowed the
  error and returned, fails.

On sqlite3, psycopg2 on PostgreSQL and PyMySQL on MariaDB.
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from typing import TYPE_CHECKING, Any

from twisted._threads import AlreadyQuit
from twisted.internet import defer, reactor, threads
from twisted.trial import unittest

import adb.twisted
from adb.errors import PoolClosed

from ..conftest import require_server, server_kwargs

BOUND = 10  # seconds: a Deferred that has not fired by then never will

if TYPE_CHECKING:
    _Base = unittest.TestCase
else:
    _Base = object


class EndingsTests(_Base):
    """Mixed into one TestCase per driver below."""

    driver: str
    kind: str

    def setUp(self) -> None:
        if self.kind == "sqlite":
            self.connkw: dict[str, Any] = {
                "database": os.path.join(tempfile.mkdtemp(), "endings.db"),
                "check_same_thread": False}
        else:
            require_server(self.kind)
            self.connkw = server_kwargs(self.kind)
        self.table = "adb_end_" + uuid.uuid4().hex[:10]
        self.outside(f"create table {self.table} (k integer)")
        self.pools: list[Any] = []

    def tearDown(self) -> None:
        for pool in self.pools:
            pool.close()
        self.outside(f"drop table {self.table}")

    def pool(self, **cp: Any) -> Any:
        pool = adb.twisted.ConnectionPool(self.driver, cp_min=1, cp_max=2, **self.connkw, **cp)
        self.pools.append(pool)
        return pool

    def outside(self, sql: str) -> list[Any]:
        """Run ``sql`` on a connection of the test's own, committed; its rows."""
        dbapi = __import__(self.driver)
        conn = dbapi.connect(**self.connkw)
        try:
            cursor = conn.cursor()
            cursor.execute(sql)
            rows = list(cursor.fetchall()) if cursor.description else []
            conn.commit()
            return rows
        finally:
            conn.close()

    def keys(self) -> list[Any]:
        return sorted(row[0] for row in self.outside(f"select k from {self.table}"))

    def insert(self, k: int) -> str:
        return f"insert into {self.table} (k) values ({k})"

    def calls(self, pool: Any) -> dict[str, defer.Deferred[Any]]:
        return {"runQuery": pool.runQuery("select 1"),
                "runOperation": pool.runOperation(self.insert(1)),
                "runInteraction": pool.runInteraction(lambda trans: trans.execute(self.insert(2))),
                "runWithConnection": pool.runWithConnection(lambda conn: "ran")}

    @defer.inlineCallbacks
    def assert_failed_at_once(self, calls: dict[str, defer.Deferred[Any]]) -> Any:
        """Each Deferred had already failed with PoolClosed when its call returned."""
        self.assertEqual([name for name, d in calls.items() if not d.called], [])
        for d in calls.values():
            yield self.assertFailure(d, PoolClosed)
        self.assertEqual(self.keys(), [])

    # -- calls on a closed pool -------------------------------------------------------

    @defer.inlineCallbacks
    def test_start_after_close_raises_as_stock_adbapi_does(self) -> Any:
        """The test suite's second setUp: start() raises AlreadyQuit (and PoolClosed),
        ``running`` stays False, the pool does not restart."""
        pool = self.pool()
        pool.start()
        self.assertEqual(list((yield pool.runQuery("select 1"))), [(1,)])
        pool.close()
        with self.assertRaises(AlreadyQuit) as raised:
            pool.start()
        self.assertIsInstance(raised.exception, PoolClosed)
        self.assertFalse(pool.running)
        self.assertFalse(pool.threadpool.started)

    @defer.inlineCallbacks
    def test_calls_after_start_after_close_fail_at_once(self) -> Any:
        """After that start(), runQuery, runOperation, runInteraction and
        runWithConnection fail at once with PoolClosed: none is left unfired."""
        pool = self.pool()
        pool.start()
        yield pool.runQuery("select 1")
        pool.close()
        self.assertRaises(AlreadyQuit, pool.start)
        yield self.assert_failed_at_once(self.calls(pool))

    @defer.inlineCallbacks
    def test_calls_after_close_fail_at_once(self) -> Any:
        """Without a start() after it, the same: each call fails at once."""
        pool = self.pool()
        pool.start()
        yield pool.runQuery("select 1")
        pool.close()
        yield self.assert_failed_at_once(self.calls(pool))

    @defer.inlineCallbacks
    def test_work_given_to_the_closed_threadpool_fails(self) -> Any:
        """deferToThreadPool on the closed pool's ``threadpool``: its Deferred fails
        with PoolClosed, and the work never runs."""
        pool = self.pool()
        pool.start()
        yield pool.runQuery("select 1")
        pool.close()
        ran: list[bool] = []
        d = threads.deferToThreadPool(reactor, pool.threadpool, ran.append, True)
        yield self.assertFailure(d.addTimeout(BOUND, reactor), PoolClosed)
        self.assertEqual(ran, [])

    # -- runInteraction: success means committed ------------------------------------------

    @defer.inlineCallbacks
    def test_interaction_during_close_runs_to_its_commit(self) -> Any:
        """close() from the reactor while an interaction runs: the close waits for
        it, so it commits and its Deferred succeeds."""
        pool = self.pool()
        pool.start()
        inside = threading.Event()

        def interaction(trans: Any) -> str:
            trans.execute(self.insert(1))
            inside.set()
            reactor.callFromThread(pool.close)
            while not pool.threadpool.joined:  # the close has begun
                threading.Event().wait(0.002)
            return "committed"

        self.assertEqual((yield pool.runInteraction(interaction)), "committed")
        self.assertTrue(inside.is_set())
        self.assertEqual(self.keys(), [1])

    @defer.inlineCallbacks
    def test_interaction_whose_connection_broke_fails(self) -> Any:
        """The interaction ends its own server session (and swallows the driver's
        error) and returns: its Deferred fails (nothing can have committed)."""
        pool = self.pool()
        pool.start()
        dbapi = pool.dbapi
        swallowed: list[BaseException] = []

        def interaction(trans: Any) -> str:
            trans.execute(self.insert(1))
            try:
                trans.execute("select pg_terminate_backend(pg_backend_pid())"
                              if self.kind == "postgresql" else "kill connection_id()")
                trans.fetchall()
            except dbapi.Error as exc:
                swallowed.append(exc)
            return "value"

        yield self.assertFailure(pool.runInteraction(interaction), dbapi.Error)
        self.flushLoggedErrors()  # adbapi's "Rollback failed" on the dead connection
        self.assertEqual(len(swallowed), 1)
        self.assertEqual(self.keys(), [])


    @defer.inlineCallbacks
    def test_a_connection_the_application_closed_is_replaced_before_the_next_call(self) -> Any:
        """A runWithConnection function closes the driver's connection: the call
        fails with the driver's error when it commits, as on adbapi. The next call, on
        the same worker, after a query that vouched for the connection, runs on a new
        one at once, with no error (cp_reconnect or not)."""
        pool = adb.twisted.ConnectionPool(self.driver, cp_min=1, cp_max=1, **self.connkw)
        self.pools.append(pool)
        self.assertEqual([tuple(row) for row in (yield pool.runQuery("select 1"))], [(1,)])
        yield self.assertFailure(pool.runWithConnection(lambda conn: conn._connection.close()),
                                 __import__(self.driver).Error)
        self.flushLoggedErrors()  # adbapi's "Rollback failed" on the closed connection
        self.assertEqual([tuple(row) for row in (yield pool.runQuery("select 2"))], [(2,)])
        self.assertEqual(pool._adb.stats()["connects"], 2)


class SQLite3EndingsTests(EndingsTests, unittest.TestCase):
    driver, kind = "sqlite3", "sqlite"
    #: an embedded database has no connection to lose: not collected here
    test_interaction_whose_connection_broke_fails = None  # type: ignore[assignment]


class Psycopg2EndingsTests(EndingsTests, unittest.TestCase):
    driver, kind = "psycopg2", "postgresql"


class PyMySQLEndingsTests(EndingsTests, unittest.TestCase):
    driver, kind = "pymysql", "mysql"
