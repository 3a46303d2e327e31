"""The txMySQL role: a pure-Python async protocol client driven from Twisted.

txMySQL itself is Python 2 only and unpublished, so its living successors fill
its row: on MariaDB, aiomysql driven from Twisted's asyncio reactor (each call a
Deferred); on PostgreSQL, txpostgres (psycopg2's async mode on Twisted).
"""

import contextlib

from .common import Calls


@contextlib.asynccontextmanager
async def open_role(spec, world, min_size):
    opener = _aiomysql_on_twisted if spec.kind == "mysql" else _txpostgres
    async with opener(spec, world, min_size) as calls:
        yield calls


@contextlib.asynccontextmanager
async def _aiomysql_on_twisted(spec, world, min_size):
    import asyncio

    from twisted.internet import defer

    from .asyncio_drivers import aiomysql_execute, aiomysql_pool

    def deferred(coroutine):
        return defer.Deferred.fromFuture(asyncio.ensure_future(coroutine))
    pool = await deferred(aiomysql_pool(spec, min_size))
    try:
        yield Calls(
            execute=lambda sql, params=None: deferred(aiomysql_execute(pool, sql, params)),
            query=lambda sql, params=None: deferred(aiomysql_execute(pool, sql, params, True)),
            world=world, paramstyle="format")
    finally:
        pool.close()
        await deferred(pool.wait_closed())


@contextlib.asynccontextmanager
async def _txpostgres(spec, world, min_size):
    from psycopg2.extensions import make_dsn
    from txpostgres import txpostgres
    pool = txpostgres.ConnectionPool(None, make_dsn(**spec.connect_kwargs()),
                                     min=spec.pool_size if min_size is None else min_size)
    await pool.start()
    try:
        yield Calls(execute=pool.runOperation, query=pool.runQuery, world=world,
                    paramstyle="format")
    finally:
        pool.close()
