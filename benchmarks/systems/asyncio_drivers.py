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


async def _sequential(spec, insert, select):
    from ..scenarios import sequential as seq
    start = time.perf_counter()
    for p in seq.params(spec.rows):
        await insert(p)
    middle = time.perf_counter()
    for i in range(spec.rows):
        await select(i)
    return seq.figures(middle - start, time.perf_counter() - middle, spec.rows)


def asyncpg_run_sequential(spec):
    import asyncpg

    from ..scenarios import sequential as seq

    async def main():
        pool = await asyncpg.create_pool(min_size=1, max_size=spec.pool_size, **spec.connect_kwargs())
        insert = seq.statement("format").replace("%s", "$1", 1).replace("%s", "$2", 1)
        select = seq.select_statement("format").replace("%s", "$1")
        try:
            return await _sequential(spec, lambda p: pool.execute(insert, *p),
                                     lambda i: pool.fetch(select, i))
        finally:
            await pool.close()
    return asyncio.run(main())


def aiopg_run_sequential(spec):
    import aiopg

    from ..scenarios import sequential as seq

    async def main():
        pool = await aiopg.create_pool(_dsn(spec), minsize=1, maxsize=spec.pool_size)

        async def run(query, params, fetch):
            async with pool.acquire() as conn:
                async with conn.cursor() as cur:
                    await cur.execute(query, params)
                    if fetch:
                        await cur.fetchall()
        try:
            return await _sequential(
                spec, lambda p: run(seq.statement("format"), p, False),
                lambda i: run(seq.select_statement("format"), (i,), True))
        finally:
            pool.close()
            await pool.wait_closed()
    return asyncio.run(main())


def psycopg3_run_sequential(spec):
    from psycopg_pool import AsyncConnectionPool

    from ..scenarios import sequential as seq

    async def main():
        pool = AsyncConnectionPool(_dsn(spec), min_size=1, max_size=spec.pool_size,
                                   kwargs={"autocommit": True}, open=False)
        await pool.open(wait=True)

        async def run(query, params, fetch):
            async with pool.connection() as conn:
                cur = await conn.execute(query, params)
                if fetch:
                    await cur.fetchall()
        try:
            return await _sequential(
                spec, lambda p: run(seq.statement("format"), p, False),
                lambda i: run(seq.select_statement("format"), (i,), True))
        finally:
            await pool.close()
    return asyncio.run(main())


def aiomysql_run_sequential(spec):
    from ..scenarios import sequential as seq

    async def main():
        pool = await aiomysql_pool(spec)

        async def select(i):
            async with pool.acquire() as conn:
                async with conn.cursor() as cur:
                    await cur.execute(seq.select_statement("format"), (i,))
                    await cur.fetchall()
        try:
            return await _sequential(
                spec, lambda p: aiomysql_execute(pool, seq.statement("format"), p), select)
        finally:
            pool.close()
            await pool.wait_closed()
    return asyncio.run(main())
