"""asyncio-native drivers: asyncpg, aiopg, psycopg 3's async pool, aiomysql.

Each gets a pool of pool_size connections in autocommit (one round trip per
insert, as adb) and all N inserts are gathered at once.
"""

import asyncio
import time

from ..scenarios import parallel_insert as pi


def _timed_gather(warm, insert, rows):
    async def main():
        await asyncio.gather(*(warm() for _ in range(rows["pool"] * 2)))
        start = time.perf_counter()
        done = await asyncio.gather(*(insert(p) for p in pi.params(rows["n"])))
        return {"seconds": time.perf_counter() - start, "ok_calls": len(done)}
    return main()


def asyncpg_run(spec):
    import asyncpg

    async def main():
        kw = spec.connect_kwargs()
        pool = await asyncpg.create_pool(min_size=spec.pool_size, max_size=spec.pool_size, **kw)
        sql = pi.statement("format").replace("%s", "$1", 1).replace("%s", "$2", 1)
        try:
            return await _timed_gather(lambda: pool.fetchval("select 1"),
                                       lambda p: pool.execute(sql, *p),
                                       {"pool": spec.pool_size, "n": spec.rows})
        finally:
            await pool.close()
    return asyncio.run(main())


def _dsn(spec):
    from psycopg2.extensions import make_dsn
    return make_dsn(**spec.connect_kwargs())


def aiopg_run(spec):
    import aiopg

    async def main():
        pool = await aiopg.create_pool(_dsn(spec), minsize=spec.pool_size, maxsize=spec.pool_size)
        sql = pi.statement("format")

        async def execute(query, params=None):
            async with pool.acquire() as conn:
                async with conn.cursor() as cur:
                    await cur.execute(query, params)
        try:
            return await _timed_gather(lambda: execute("select 1"), lambda p: execute(sql, p),
                                       {"pool": spec.pool_size, "n": spec.rows})
        finally:
            pool.close()
            await pool.wait_closed()
    return asyncio.run(main())


def psycopg3_run(spec):
    from psycopg_pool import AsyncConnectionPool

    async def main():
        pool = AsyncConnectionPool(_dsn(spec), min_size=spec.pool_size, max_size=spec.pool_size,
                                   kwargs={"autocommit": True}, open=False)
        await pool.open(wait=True)
        sql = pi.statement("format")

        async def execute(query, params=None):
            async with pool.connection() as conn:
                await conn.execute(query, params)
        try:
            return await _timed_gather(lambda: execute("select 1"), lambda p: execute(sql, p),
                                       {"pool": spec.pool_size, "n": spec.rows})
        finally:
            await pool.close()
    return asyncio.run(main())


def aiomysql_pool(spec):
    import aiomysql
    kw = spec.connect_kwargs()
    kw["db"] = kw.pop("database", None)
    kw.setdefault("port", 3306)
    return aiomysql.create_pool(minsize=spec.pool_size, maxsize=spec.pool_size,
                                autocommit=True, **kw)


async def aiomysql_execute(pool, query, params=None):
    async with pool.acquire() as conn:
        async with conn.cursor() as cur:
            await cur.execute(query, params)


def aiomysql_run(spec):
    async def main():
        pool = await aiomysql_pool(spec)
        sql = pi.statement("format")
        try:
            return await _timed_gather(lambda: aiomysql_execute(pool, "select 1"),
                                       lambda p: aiomysql_execute(pool, sql, p),
                                       {"pool": spec.pool_size, "n": spec.rows})
        finally:
            pool.close()
            await pool.wait_closed()
    return asyncio.run(main())
