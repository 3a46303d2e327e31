"""adisp_compat on Tornado's IOLoop: results, errors, parallel lists, nesting."""

from tornado.ioloop import IOLoop
from tornado.testing import AsyncTestCase, gen_test

import adb.tornado
from adisp_compat import async_, process


@async_
def add_later(a, b, callback):
    IOLoop.current().call_later(0.01, callback, a + b)


@async_
def broken(callback):
    raise LookupError("from a callback-style function")


class AdispTests(AsyncTestCase):
    def setUp(self):
        super().setUp()
        self.db = adb.tornado.Database("sqlite://", ioloop=self.io_loop)

    def tearDown(self):
        self.io_loop.run_sync(self.db.close)
        super().tearDown()

    @gen_test
    async def test_yields_adb_calls_and_callback_calls(self):
        @process
        def work():
            rows = yield self.db.runQuery("select 1 + ?", (1,))
            total = yield add_later(rows[0][0], 40)
            return total
        self.assertEqual(await work(), 42)

    @gen_test
    async def test_parallel_list_and_map_keep_order(self):
        @process
        def work():
            listed = yield [self.db.runQuery("select ?", (i,)) for i in range(20)]
            mapped = yield map(self.db.runOperation, [("select ?", (i,)) for i in range(5)])
            mixed = yield (add_later(1, 1), self.db.runQuery("select 3"))
            return listed, mapped, mixed
        listed, mapped, mixed = await work()
        self.assertEqual(listed, [[(i,)] for i in range(20)])
        self.assertEqual(len(mapped), 5)
        self.assertEqual(mixed, [2, [(3,)]])

    @gen_test
    async def test_errors_are_thrown_in_at_the_yield(self):
        seen = []

        @process
        def work():
            try:
                yield self.db.runQuery("selec broken sql")
            except self.db.dbapi.OperationalError as exc:
                seen.append(type(exc).__name__)
            try:
                yield broken()
            except LookupError as exc:
                seen.append(str(exc))
            try:
                yield [self.db.runQuery("select 1"), self.db.runQuery("nonsense")]
            except self.db.dbapi.OperationalError:
                seen.append("list")
            try:
                yield 42
            except TypeError as exc:
                seen.append("type" if "yielded int" in str(exc) else str(exc))
            return "survived"
        self.assertEqual(await work(), "survived")
        self.assertEqual(seen, ["OperationalError", "from a callback-style function", "list", "type"])

    @gen_test
    async def test_uncaught_error_fails_the_process_future(self):
        @process
        def work():
            yield self.db.runQuery("nonsense")
        with self.assertRaises(self.db.dbapi.OperationalError):
            await work()

    @gen_test
    async def test_processes_nest(self):
        @process
        def inner(n):
            rows = yield self.db.runQuery("select ?", (n,))
            return rows[0][0] * 10

        @process
        def outer():
            one = yield inner(1)
            many = yield [inner(i) for i in range(3)]
            return one, many
        self.assertEqual(await outer(), (10, [0, 10, 20]))

    def test_plain_function_and_immediate_error(self):
        @process
        def not_a_generator():
            return 5

        @process
        def fails_at_once():
            raise ValueError("before any yield")
            yield  # noqa: unreachable, makes it a generator
        self.assertEqual(self.io_loop.run_sync(not_a_generator), 5)
        with self.assertRaises(ValueError):
            self.io_loop.run_sync(fails_at_once)
