"""The txMySQL role: a pure-Python async protocol client driven from Twisted.

txMySQL itself is Python 2 only and unpublished, so its living successors fill
its row: on MariaDB, aiomysql driven from Twisted's asyncio reactor (each call a
Deferred); on PostgreSQL, txpostgres (psycopg2's async mode on Twisted).
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Awaitable, Optional

from ..worlds import World
from .asyncio_drivers import aiomysql_execute, aiomysql_pool
from .common import Calls, RunSpec


@contextlib.asynccontextmanager
async def open_role(spec: RunSpec, world: World, min_size: Optional[int]) -> AsyncIterator[Calls]:
    opener = _aiomysql_on_twisted if spec.kind == "mysql" else _txpostgres
    async with opener(spec, world, min_size) as calls:
        yield calls


@contextlib.asynccontextmanager
async def _aiomysql_on_twisted(spec: RunSpec, world: World,
                               min_size: Optional[int]) -> AsyncIterator[Calls]:
    import asyncio

    from twisted.internet import defer

    def deferred(awaitable: Awaitable[Any]) -> defer.Deferred[Any]:
        return defer.Deferred.fromFuture(asyncio.ensure_future(awaitable))
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
async def _txpostgres(spec: RunSpec, world: World, min_size: Optional[int]) -> AsyncIterator[Calls]:
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
