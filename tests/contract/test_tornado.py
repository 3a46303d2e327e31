"""The Tornado front-end with Tornado's own test tooling (tornado.testing)."""

import json
import tempfile
import uuid
from typing import TYPE_CHECKING

from tornado import gen, web
from tornado.testing import AsyncHTTPTestCase, AsyncTestCase, gen_test

import adb
import adb.tornado
from adb.errors import TransactionError

from ..conftest import URLS, require_server


class CountHandler(web.RequestHandler):
    """async def handler: one insert, then the count."""

    async def post(self):
        db = self.application.settings["db"]
        table = self.application.settings["table"]
        p = self.application.settings["p"]
        userid = int(self.get_argument("id"))
        await db.runOperation(f"insert into {table} (userid, data) values ({p}, {p})",
                              (userid, "web"))
        rows = await db.runQuery(f"select count(*) from {table}")
        self.write({"count": rows[0][0]})


class LegacyHandler(web.RequestHandler):
    """@gen.coroutine handler yielding adb futures, as 2011-era Tornado code does."""

    @gen.coroutine
    def get(self):
        db = self.application.settings["db"]
        table = self.application.settings["table"]
        rows = yield db.runQuery(f"select userid from {table} order by userid", row_factory="dict")
        self.write({"rows": rows})


if TYPE_CHECKING:
    # for mypy the mixin is the AsyncHTTPTestCase it is mixed into; at run time it
    # stays a plain class, so it is not collected (or run) on its own
    _HandlerTestsBase = AsyncHTTPTestCase
else:
    _HandlerTestsBase = object


class HandlerTests(_HandlerTestsBase):
    """Mixed into one AsyncHTTPTestCase per database below."""

    kind: str  # each test case below names its database

    def url(self):
        return URLS.get(self.kind) or f"sqlite:///{self.tmpdir}/tornado.db"

    def setUp(self):
        if self.kind != "sqlite":
            require_server(self.kind)
        import tempfile
        self.tmpdir = tempfile.mkdtemp()
        self.table = "adb_w_" + uuid.uuid4().hex[:10]
        super().setUp()
        self.db = adb.tornado.Database(self.url(), ioloop=self.io_loop, pool_size=4)
        self.io_loop.run_sync(lambda: self.db.runOperation(
            f"create table {self.table} (userid int primary key, data varchar(20))"))
        self._app.settings.update(db=self.db, table=self.table,
                                  p="?" if self.kind == "sqlite" else "%s")

    def tearDown(self):
        self.io_loop.run_sync(lambda: self.db.runOperation(f"drop table {self.table}"))
        self.io_loop.run_sync(self.db.close)
        super().tearDown()

    def get_app(self):
        return web.Application([("/count", CountHandler), ("/legacy", LegacyHandler)])

    def test_async_handler_inserts_and_counts(self):
        for i in range(5):
            response = self.fetch(f"/count?id={i}", method="POST", body="")
            self.assertEqual(response.code, 200)
            self.assertEqual(json.loads(response.body), {"count": i + 1})

    def test_gen_coroutine_handler(self):
        self.fetch("/count?id=7", method="POST", body="")
        response = self.fetch("/legacy")
        self.assertEqual(json.loads(response.body), {"rows": [{"userid": 7}]})

    def test_duplicate_key_gives_500_and_pool_serves_on(self):
        self.assertEqual(self.fetch("/count?id=1", method="POST", body="").code, 200)
        self.assertEqual(self.fetch("/count?id=1", method="POST", body="").code, 500)
        self.assertEqual(json.loads(self.fetch("/count?id=2", method="POST", body="").body),
                         {"count": 2})


class PostgreSQLHandlerTest(HandlerTests, AsyncHTTPTestCase):
    kind = "postgresql"


class MySQLHandlerTest(HandlerTests, AsyncHTTPTestCase):
    kind = "mysql"


class SQLiteHandlerTest(HandlerTests, AsyncHTTPTestCase):
    kind = "sqlite"


class IOLoopBindingTest(AsyncTestCase):
    def test_binds_to_the_ioloop_of_its_first_call(self):
        db = adb.tornado.Database("sqlite://")
        self.assertIsNone(db.ioloop)  # made before any loop runs it: not bound yet
        self.assertEqual(self.io_loop.run_sync(lambda: db.runQuery("select 1")), [(1,)])
        self.assertIs(db.ioloop, self.io_loop)
        self.io_loop.run_sync(db.close)

    @gen_test
    async def test_parallel_calls_from_a_gen_test(self):
        db = adb.tornado.Database("sqlite://", ioloop=self.io_loop)
        results = await gen.multi([db.runQuery("select ?", (i,)) for i in range(50)])
        self.assertEqual(results, [[(i,)] for i in range(50)])
        await db.close()

    @gen_test
    def test_transaction_from_gen_coroutine(self):
        db = adb.tornado.Database("sqlite://", ioloop=self.io_loop)
        yield db.runOperation("create table t (a int)")
        tx = yield db.beginTransaction()
        yield db.runOperation("insert into t values (?)", (1,), tx)
        yield db.commitTransaction(tx)
        rows = yield db.runQuery("select a from t")
        self.assertEqual(rows, [(1,)])
        yield db.close()

    @gen_test
    def test_a_block_close_rolled_back_raises_on_exit(self):
        """close() from another coroutine on the IOLoop while a block is inside its
        transaction: the block's exit raises the close's TransactionError, and a
        runTransaction whose function returns normally after that fails too."""
        path = f"{tempfile.mkdtemp()}/endings.db"
        db = adb.tornado.Database(f"sqlite:///{path}", ioloop=self.io_loop)
        yield db.runOperation("create table t (a int)")
        closing = []

        async def block():
            async with db.transaction() as tx:
                await tx.runOperation("insert into t values (1)")
                closing.append(gen.convert_yielded(db.close()))  # runs as its own task
                while tx.state is not adb.TxState.FAILED:
                    await gen.sleep(0.002)
        with self.assertRaisesRegex(TransactionError, "because the Database was closed"):
            yield block()
        yield closing[0]
        db = adb.tornado.Database(f"sqlite:///{path}", ioloop=self.io_loop)

        async def fn(tx):
            await tx.runOperation("insert into t values (2)")
            closing.append(gen.convert_yielded(db.close()))
            while tx.state is not adb.TxState.FAILED:
                await gen.sleep(0.002)
            return "value"
        with self.assertRaisesRegex(TransactionError, "because the Database was closed"):
            yield db.runTransaction(fn)
        yield closing[1]
        check = adb.tornado.Database(f"sqlite:///{path}", ioloop=self.io_loop)
        self.assertEqual((yield check.runQuery("select count(*) from t")), [(0,)])
        yield check.close()
