"""asyncio-native drivers (asyncpg, aiopg, psycopg 3's async pool, aiomysql) and
asyncio's own answer for a blocking driver (``loop.run_in_executor``).

Each gets a pool of pool_size connections in autocommit (one round trip per
insert, as adb). Per system, one ``open_*`` context manager gives the pool as an
``execute(query, params=None, fetch=False)`` function returning an awaitable; the
two scenarios are written once on top of it.
"""

import asyncio
import contextlib
import threading
import time

from ..scenarios import parallel_insert as pi
from ..scenarios import sequential as seq


def _parallel(spec, opener):
    """Seed 000 on any driver: warm the pool, then gather every insert at once."""
    async def main():
        async with opener(spec, spec.pool_size) as execute:
            sql = pi.statement(spec.paramstyle())
            await asyncio.gather(*(execute("select 1") for _ in range(spec.pool_size * 2)))
            start = time.perf_counter()
            done = await asyncio.gather(*(execute(sql, p) for p in pi.params(spec.rows)))
            return {"seconds": time.perf_counter() - start, "ok_calls": len(done)}
    return asyncio.run(main())


def _sequential(spec, opener):
    """Seed 001 on any driver: one caller, inserts then selects, one at a time."""
    async def main():
        async with opener(spec, 1) as execute:
            style = spec.paramstyle()
            insert, select = seq.statement(style), seq.select_statement(style)
            return await seq.run_async(spec.rows, lambda p: execute(insert, p),
                                       lambda key: execute(select, (key,), True))
    return asyncio.run(main())


def _dsn(spec):
    from psycopg2.extensions import make_dsn
    return make_dsn(**spec.connect_kwargs())


@contextlib.asynccontextmanager
async def open_asyncpg(spec, min_size):
    import asyncpg
    pool = await asyncpg.create_pool(min_size=min_size, max_size=spec.pool_size,
                                     **spec.connect_kwargs())

    def execute(query, params=(), fetch=False):
        query = _dollar_placeholders(query)
        return pool.fetch(query, *params) if fetch else pool.execute(query, *params)
    try:
        yield execute
    finally:
        await pool.close()


def _dollar_placeholders(query):
    """``%s`` placeholders numbered as asyncpg wants them: ``$1, $2, ...``."""
    parts = query.split("%s")
    return "".join(part + (f"${i}" if i < len(parts) else "")
                   for i, part in enumerate(parts, 1))


@contextlib.asynccontextmanager
async def open_aiopg(spec, min_size):
    import aiopg
    pool = await aiopg.create_pool(_dsn(spec), minsize=min_size, maxsize=spec.pool_size)

    async def execute(query, params=None, fetch=False):
        async with pool.acquire() as conn:
            async with conn.cursor() as cur:
                await cur.execute(query, params)
                if fetch:
                    return await cur.fetchall()
    try:
        yield execute
    finally:
        pool.close()
        await pool.wait_closed()


@contextlib.asynccontextmanager
async def open_psycopg3(spec, min_size):
    from psycopg_pool import AsyncConnectionPool
    pool = AsyncConnectionPool(_dsn(spec), min_size=min_size, max_size=spec.pool_size,
                               kwargs={"autocommit": True}, open=False)
    await pool.open(wait=True)

    async def execute(query, params=None, fetch=False):
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            if fetch:
                return await cur.fetchall()
    try:
        yield execute
    finally:
        await pool.close()


def aiomysql_pool(spec, min_size=None):
    import aiomysql
    kw = spec.connect_kwargs()
    kw["db"] = kw.pop("database", None)
    kw.setdefault("port", 3306)
    return aiomysql.create_pool(minsize=spec.pool_size if min_size is None else min_size,
                                maxsize=spec.pool_size, autocommit=True, **kw)


async def aiomysql_execute(pool, query, params=None, fetch=False):
    async with pool.acquire() as conn:
        async with conn.cursor() as cur:
            await cur.execute(query, params)
            if fetch:
                return await cur.fetchall()


@contextlib.asynccontextmanager
async def open_aiomysql(spec, min_size):
    pool = await aiomysql_pool(spec, min_size)
    try:
        yield lambda query, params=None, fetch=False: aiomysql_execute(pool, query, params, fetch)
    finally:
        pool.close()
        await pool.wait_closed()


@contextlib.asynccontextmanager
async def open_executor(spec, min_size):
    """What you would write without adb: ``loop.run_in_executor`` on a
    ``ThreadPoolExecutor`` of pool_size threads, each opening its own connection
    on first use. One concurrent future and one loop wake-up per call (Motor's
    design): the floor for the cost of handing a blocking call to a thread."""
    from concurrent.futures import ThreadPoolExecutor

    from .common import connect
    local, opened = threading.local(), []

    def run(query, params, fetch):
        cursor = getattr(local, "cursor", None)
        if cursor is None:
            opened.append(connect(spec))
            cursor = local.cursor = opened[-1].cursor()
        if params is None:
            cursor.execute(query)
        else:
            cursor.execute(query, params)
        return cursor.fetchall() if fetch else cursor.rowcount
    loop = asyncio.get_running_loop()
    try:
        with ThreadPoolExecutor(spec.pool_size) as executor:
            yield lambda query, params=None, fetch=False: loop.run_in_executor(
                executor, run, query, params, fetch)
    finally:
        for conn in opened:
            conn.close()


def executor_run(spec):
    return _parallel(spec, open_executor)


def executor_run_sequential(spec):
    return _sequential(spec, open_executor)


def asyncpg_run(spec):
    return _parallel(spec, open_asyncpg)


def aiopg_run(spec):
    return _parallel(spec, open_aiopg)


def psycopg3_run(spec):
    return _parallel(spec, open_psycopg3)


def aiomysql_run(spec):
    return _parallel(spec, open_aiomysql)


def asyncpg_run_sequential(spec):
    return _sequential(spec, open_asyncpg)


def aiopg_run_sequential(spec):
    return _sequential(spec, open_aiopg)


def psycopg3_run_sequential(spec):
    return _sequential(spec, open_psycopg3)


def aiomysql_run_sequential(spec):
    return _sequential(spec, open_aiomysql)
