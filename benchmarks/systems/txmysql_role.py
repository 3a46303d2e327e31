"""The txMySQL role: a pure-Python async protocol client driven from Twisted.

txMySQL itself is Python 2 only and unpublished, so its living successors fill
its row: on MariaDB, aiomysql driven from Twisted's asyncio reactor (each call a
Deferred); on PostgreSQL, txpostgres (psycopg2's async mode on Twisted).
"""

import time

from ..scenarios import parallel_insert as pi
from .twisted_pools import run_reactor


def run(spec):
    if spec.kind == "mysql":
        return _aiomysql_on_twisted(spec)
    return _txpostgres(spec)


def _aiomysql_on_twisted(spec):
    import asyncio

    from twisted.internet import asyncioreactor
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    asyncioreactor.install(loop)
    from twisted.internet import defer

    from .asyncio_drivers import aiomysql_execute, aiomysql_pool

    def call(pool, query, params=None):
        return defer.Deferred.fromFuture(asyncio.ensure_future(aiomysql_execute(pool, query, params)))

    async def main():
        pool = await defer.Deferred.fromFuture(asyncio.ensure_future(aiomysql_pool(spec)))
        sql = pi.statement("format")
        try:
            await defer.gatherResults([call(pool, "select 1") for _ in range(spec.pool_size * 2)])
            start = time.perf_counter()
            done = await defer.gatherResults([call(pool, sql, p) for p in pi.params(spec.rows)])
            return {"seconds": time.perf_counter() - start, "ok_calls": len(done),
                    "stand_in": "aiomysql on Twisted's asyncio reactor"}
        finally:
            pool.close()
            await defer.Deferred.fromFuture(asyncio.ensure_future(pool.wait_closed()))
    return run_reactor(main)


def _txpostgres(spec):
    from psycopg2.extensions import make_dsn
    from twisted.internet import defer
    from txpostgres import txpostgres

    async def main():
        pool = txpostgres.ConnectionPool(None, make_dsn(**spec.connect_kwargs()),
                                         min=spec.pool_size)
        await pool.start()
        sql = pi.statement("format")
        try:
            await defer.gatherResults([pool.runQuery("select 1") for _ in range(spec.pool_size * 2)])
            start = time.perf_counter()
            done = await defer.gatherResults([pool.runOperation(sql, p) for p in pi.params(spec.rows)])
            return {"seconds": time.perf_counter() - start, "ok_calls": len(done),
                    "stand_in": "txpostgres"}
        finally:
            pool.close()
    return run_reactor(main)
