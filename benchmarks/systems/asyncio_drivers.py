"""asyncio-native drivers (asyncpg, aiopg, psycopg 3's async pool, aiomysql) and
asyncio's own answer for a blocking driver (``loop.run_in_executor``).

Each gets a pool of pool_size connections (``min_size`` of them opened at start)
in autocommit: one round trip per insert, as adb. Each ``open_*`` opener yields
the pool's ``Calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Optional, Sequence

from ..worlds import World
from .common import Calls, Connection, CopyIn, Many, Rows, RunSpec, Stream, connect

#: ``execute(query, params=None, fetch=False)``: a statement's rows (fetch) or status
Execute = Callable[[str, Any, bool], Awaitable[Any]]
#: an asyncio driver's pool (asyncpg's, aiopg's, aiomysql's): untyped modules
DriverPool = Any


def _calls(world: World, execute: Execute, paramstyle: str = "format",
           many: Optional[Many] = None, stream: Optional[Stream] = None,
           copy_in: Optional[CopyIn] = None) -> Calls:
    """Calls over one ``execute(query, params=None, fetch=False)`` function."""
    return Calls(execute=lambda query, params=None: execute(query, params, False),
                 query=lambda query, params=None: execute(query, params, True),
                 world=world, paramstyle=paramstyle, many=many, stream=stream,
                 copy_in=copy_in)


def _dsn(spec: RunSpec) -> str:
    from psycopg2.extensions import make_dsn
    return make_dsn(**spec.connect_kwargs())


@contextlib.asynccontextmanager
async def open_asyncpg(spec: RunSpec, world: World,
                       min_size: Optional[int]) -> AsyncIterator[Calls]:
    import asyncpg
    pool = await asyncpg.create_pool(min_size=min_size or spec.pool_size, max_size=spec.pool_size,
                                     **spec.connect_kwargs())

    def execute(query: str, params: Any = None, fetch: bool = False) -> Awaitable[Any]:
        query = _dollar_placeholders(query)
        params = params or ()
        return pool.fetch(query, *params) if fetch else pool.execute(query, *params)
    try:
        yield _calls(world, execute, many=lambda query, seq: pool.executemany(
            _dollar_placeholders(query), seq), stream=functools.partial(_asyncpg_stream, pool),
                     copy_in=functools.partial(_asyncpg_copy, pool))
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def _asyncpg_stream(pool: DriverPool, query: str, batch: int,
                          batches: bool) -> AsyncIterator[Rows]:
    """asyncpg's cursor (it needs a transaction): ``async for`` over it with
    ``prefetch=batch``, or its ``fetch(batch)``."""
    async with pool.acquire() as conn:
        async with conn.transaction():
            if batches:
                yield _fetched(await conn.cursor(query), "fetch", batch)
            else:
                yield conn.cursor(query, prefetch=batch)


async def _asyncpg_copy(pool: DriverPool, table: str, columns: Sequence[str],
                        rows: Sequence[tuple[Any, ...]]) -> int:
    """``copy_records_to_table``: COPY in asyncpg's binary format; the count from its
    status (``COPY n``)."""
    async with pool.acquire() as conn:
        status = await conn.copy_records_to_table(table, records=rows, columns=list(columns))
    return int(status.split()[-1])


def _dollar_placeholders(query: str) -> str:
    """``%s`` placeholders numbered as asyncpg wants them: ``$1, $2, ...``."""
    parts = query.split("%s")
    return "".join(part + (f"${i}" if i < len(parts) else "")
                   for i, part in enumerate(parts, 1))


@contextlib.asynccontextmanager
async def open_aiopg(spec: RunSpec, world: World, min_size: Optional[int]) -> AsyncIterator[Calls]:
    import aiopg
    pool = await aiopg.create_pool(_dsn(spec), minsize=min_size or spec.pool_size,
                                   maxsize=spec.pool_size)

    async def execute(query: str, params: Any = None, fetch: bool = False) -> Any:
        async with pool.acquire() as conn:
            async with conn.cursor() as cur:
                await cur.execute(query, params)
                if fetch:
                    return await cur.fetchall()
        return None
    try:
        yield _calls(world, execute)
    finally:
        pool.close()
        await pool.wait_closed()


@contextlib.asynccontextmanager
async def open_psycopg3(spec: RunSpec, world: World,
                        min_size: Optional[int]) -> AsyncIterator[Calls]:
    from psycopg_pool import AsyncConnectionPool
    pool = AsyncConnectionPool(_dsn(spec), min_size=min_size or spec.pool_size,
                               max_size=spec.pool_size,
                               kwargs={"autocommit": True}, open=False)
    await pool.open(wait=True)

    async def execute(query: str, params: Any = None, fetch: bool = False) -> Any:
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            if fetch:
                return await cur.fetchall()
        return None
    try:
        yield _calls(world, execute, stream=functools.partial(_psycopg3_stream, pool),
                     copy_in=functools.partial(_psycopg3_copy, pool))
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def _psycopg3_stream(pool: DriverPool, query: str, batch: int,
                           batches: bool) -> AsyncIterator[Rows]:
    """psycopg 3's async server-side cursor (a named cursor, in a transaction):
    ``async for`` over it, ``batch`` rows per fetch (its ``itersize``), or its
    ``fetchmany(batch)``."""
    async with pool.connection() as conn:
        async with conn.transaction():
            async with conn.cursor(name="bulk_stream") as cur:
                cur.itersize = batch
                await cur.execute(query)
                yield _fetched(cur, "fetchmany", batch) if batches else cur


async def _psycopg3_copy(pool: DriverPool, table: str, columns: Sequence[str],
                         rows: Sequence[tuple[Any, ...]]) -> int:
    """``cursor.copy(COPY ... FROM STDIN)`` and ``write_row`` per row, as psycopg 3's
    documentation shows it."""
    async with pool.connection() as conn:
        async with conn.cursor() as cur:
            async with cur.copy(f"copy {table} ({', '.join(columns)}) from stdin") as copy:
                for row in rows:
                    await copy.write_row(row)
            return int(cur.rowcount)


def aiomysql_pool(spec: RunSpec, min_size: Optional[int] = None) -> Awaitable[DriverPool]:
    import aiomysql
    kw = spec.connect_kwargs()
    kw["db"] = kw.pop("database", None)
    kw.setdefault("port", 3306)
    return aiomysql.create_pool(minsize=spec.pool_size if min_size is None else min_size,
                                maxsize=spec.pool_size, autocommit=True, **kw)


async def aiomysql_many(pool: DriverPool, query: str, seq_of_params: Iterable[Any]) -> Any:
    async with pool.acquire() as conn:
        async with conn.cursor() as cur:
            return await cur.executemany(query, seq_of_params)


async def aiomysql_execute(pool: DriverPool, query: str, params: Any = None,
                           fetch: bool = False) -> Any:
    async with pool.acquire() as conn:
        async with conn.cursor() as cur:
            await cur.execute(query, params)
            if fetch:
                return await cur.fetchall()
    return None


@contextlib.asynccontextmanager
async def _aiomysql_stream(pool: DriverPool, query: str, batch: int,
                           batches: bool) -> AsyncIterator[Rows]:
    """aiomysql's unbuffered ``SSCursor``, ``fetchmany(batch)`` at a time, its rows
    one by one (its own ``async for`` would await a ``fetchone`` per row) or as
    they come."""
    import aiomysql
    async with pool.acquire() as conn:
        async with conn.cursor(aiomysql.SSCursor) as cur:
            await cur.execute(query)
            fetched = _fetched(cur, "fetchmany", batch)
            yield fetched if batches else _each(fetched)


async def _fetched(cursor: Any, method: str, batch: int) -> AsyncIterator[list[Any]]:
    """An async cursor's batches: ``await cursor.<method>(batch)`` until it gives
    none ([] or, from aiomysql's SSCursor, ())."""
    fetch = getattr(cursor, method)
    while rows := await fetch(batch):
        yield rows


async def _each(batches: AsyncIterator[list[Any]]) -> AsyncIterator[Any]:
    """The rows of a stream of batches, one by one."""
    async for rows in batches:
        for row in rows:
            yield row


@contextlib.asynccontextmanager
async def open_aiomysql(spec: RunSpec, world: World,
                        min_size: Optional[int]) -> AsyncIterator[Calls]:
    pool = await aiomysql_pool(spec, min_size)
    try:
        yield _calls(world, functools.partial(aiomysql_execute, pool),
                     many=functools.partial(aiomysql_many, pool),
                     stream=functools.partial(_aiomysql_stream, pool))
    finally:
        pool.close()
        await pool.wait_closed()


@contextlib.asynccontextmanager
async def open_executor(spec: RunSpec, world: World,
                        min_size: Optional[int]) -> AsyncIterator[Calls]:
    """What you would write without adb: ``loop.run_in_executor`` on a
    ``ThreadPoolExecutor`` of pool_size threads, each opening its own connection
    on first use. One concurrent future and one loop wake-up per call (Motor's
    design): the floor for the cost of handing a blocking call to a thread."""
    from concurrent.futures import ThreadPoolExecutor
    local, opened = threading.local(), list[Connection]()

    def run(query: str, params: Any, fetch: bool) -> Any:
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
            def submit(query: str, params: Any, fetch: bool) -> Awaitable[Any]:
                return loop.run_in_executor(executor, run, query, params, fetch)
            yield _calls(world, submit, spec.paramstyle())
    finally:
        for conn in opened:
            conn.close()
