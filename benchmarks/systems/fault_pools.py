"""The pools the ``faults`` scenario breaks: adb's asyncio and Tornado front-ends
and the peers users pick instead, each opened and used as its own documentation
says, behind one small interface (``FaultPool``).

Every pool is opened with a name of its own on the server (``app``): PostgreSQL's
``application_name``, or on MariaDB a user made for the run, so the scenario can
count, kill and check that pool's sessions and no one else's. Statements are
written with ``%s`` marks; a pool whose driver wants another style (asyncpg's
``$1``, SQLAlchemy's ``:p1``) gets them rewritten here. Twisted's adbapi runs on
the asyncio reactor, its Deferreds seen as futures (``Deferred.asFuture``), so
the same programs drive it; cancelling the future cancels the Deferred, which is
all adbapi offers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from typing import Any, Awaitable, Callable, Protocol, Sequence
from urllib.parse import unquote, urlsplit

#: one statement of a transaction: its SQL (``%s`` marks) and parameters
Step = tuple[str, tuple[Any, ...]]
#: rows as tuples
Rows = list[tuple[Any, ...]]


class Boom(Exception):
    """Raised inside a transaction block and caught outside it (program 6)."""


class FaultPool(Protocol):
    """What a fault program does with a pool."""

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """One statement on its own (committed)."""

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        """One query's rows."""

    async def transaction(self, steps: Sequence[Step], gap: float = 0.0,
                          fail: bool = False) -> None:
        """``steps`` in one transaction, the system's own transaction block, with
        ``gap`` seconds between statements; ``fail``: raise ``Boom`` inside the
        block after the last statement (the block must roll back)."""

    async def release_open(self, steps: Sequence[Step]) -> None:
        """``steps`` on a connection of the pool after an explicit BEGIN, with no
        transaction block: ``Boom`` is raised while the transaction is open, and the
        connection goes back (or the handle is dropped) with it open."""

    async def close(self) -> None:
        """Close the pool."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a pool connects, and its name there."""

    kind: str  # postgresql or mysql
    host: str
    port: int
    user: str
    password: str
    database: str
    app: str  # application_name (PostgreSQL), or the run's own user (MariaDB)
    pool_size: int
    connect_timeout: float = 2.0

    @classmethod
    def of(cls, url: str, app: str, pool_size: int) -> "Target":
        parts = urlsplit(url)
        kind = "postgresql" if parts.scheme.startswith("postgres") else "mysql"
        return cls(kind, parts.hostname or "127.0.0.1",
                   parts.port or (5432 if kind == "postgresql" else 3306),
                   unquote(parts.username or "root"), unquote(parts.password or ""),
                   parts.path.lstrip("/") or "test", app, pool_size)

    def url(self) -> str:
        """adb's URL: on PostgreSQL with the application_name, on MariaDB as the run's user."""
        scheme = "postgresql" if self.kind == "postgresql" else "mysql"
        auth = self.user + (f":{self.password}" if self.password else "")
        query = f"connect_timeout={int(self.connect_timeout)}"
        if self.kind == "postgresql":
            query += f"&application_name={self.app}"
        return f"{scheme}://{auth}@{self.host}:{self.port}/{self.database}?{query}"


def dollar(sql: str) -> str:
    """``%s`` marks as asyncpg's ``$1, $2...``."""
    count = iter(range(1, 1000))
    return re.sub(r"%s", lambda _: f"${next(count)}", sql)


def named(sql: str) -> str:
    """``%s`` marks as SQLAlchemy's ``:p1, :p2...``."""
    count = iter(range(1, 1000))
    return re.sub(r"%s", lambda _: f":p{next(count)}", sql)


# -- adb --------------------------------------------------------------------------------


class AdbPool:
    """adb's asyncio (or Tornado) Database: standalone calls, ``db.transaction()``."""

    def __init__(self, db: Any) -> None:
        self.db = db

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        await self.db.runOperation(sql, params)

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        return [tuple(r) for r in await self.db.runQuery(sql, params)]

    async def transaction(self, steps: Sequence[Step], gap: float = 0.0,
                          fail: bool = False) -> None:
        async with self.db.transaction() as tx:
            for i, (sql, params) in enumerate(steps):
                if i and gap:
                    await asyncio.sleep(gap)
                await tx.runOperation(sql, params)
            if fail:
                raise Boom()

    async def release_open(self, steps: Sequence[Step]) -> None:
        tx = await self.db.beginTransaction()
        for sql, params in steps:
            await self.db.runOperation(sql, params, tx)
        raise Boom()  # the handle dropped while open

    async def close(self) -> None:
        await self.db.close()


async def open_adb(target: Target, tornado: bool = False) -> FaultPool:
    if tornado:
        import adb.tornado as front
    else:
        import adb.asyncio as front  # type: ignore[no-redef]
    db = front.Database(target.url(), pool_size=target.pool_size, name=target.app)
    await db.connect()
    return AdbPool(db)


# -- asyncpg --------------------------------------------------------------------------


class AsyncpgPool:
    """asyncpg's pool: ``pool.execute``/``pool.fetch``; ``acquire()`` + ``transaction()``."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        await self.pool.execute(dollar(sql), *params)

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        return [tuple(r) for r in await self.pool.fetch(dollar(sql), *params)]

    async def transaction(self, steps: Sequence[Step], gap: float = 0.0,
                          fail: bool = False) -> None:
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                for i, (sql, params) in enumerate(steps):
                    if i and gap:
                        await asyncio.sleep(gap)
                    await conn.execute(dollar(sql), *params)
                if fail:
                    raise Boom()

    async def release_open(self, steps: Sequence[Step]) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute("begin")
            for sql, params in steps:
                await conn.execute(dollar(sql), *params)
            raise Boom()

    async def close(self) -> None:
        await self.pool.close()


async def open_asyncpg(target: Target) -> FaultPool:
    import asyncpg
    pool = await asyncpg.create_pool(
        host=target.host, port=target.port, user=target.user, password=target.password or None,
        database=target.database, min_size=target.pool_size, max_size=target.pool_size,
        timeout=target.connect_timeout, server_settings={"application_name": target.app})
    return AsyncpgPool(pool)


# -- psycopg 3 --------------------------------------------------------------------------


class PsycopgPool:
    """psycopg_pool's AsyncConnectionPool: ``pool.connection()``, ``conn.transaction()``."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(sql, params)

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return [tuple(r) for r in await cur.fetchall()]

    async def transaction(self, steps: Sequence[Step], gap: float = 0.0,
                          fail: bool = False) -> None:
        async with self.pool.connection() as conn:
            async with conn.transaction():
                for i, (sql, params) in enumerate(steps):
                    if i and gap:
                        await asyncio.sleep(gap)
                    await conn.execute(sql, params)
                if fail:
                    raise Boom()

    async def release_open(self, steps: Sequence[Step]) -> None:
        async with self.pool.connection() as conn:
            await conn.execute("begin")
            for sql, params in steps:
                await conn.execute(sql, params)
            raise Boom()

    async def close(self) -> None:
        await self.pool.close()


async def open_psycopg(target: Target) -> FaultPool:
    from psycopg_pool import AsyncConnectionPool
    conninfo = (f"host={target.host} port={target.port} user={target.user} "
                f"dbname={target.database} connect_timeout={int(target.connect_timeout)}")
    if target.password:
        conninfo += f" password={target.password}"
    # check=: the docs' way to have a broken connection replaced before it is handed out
    pool = AsyncConnectionPool(conninfo, min_size=target.pool_size, max_size=target.pool_size,
                               kwargs={"autocommit": True, "application_name": target.app},
                               check=AsyncConnectionPool.check_connection, timeout=10,
                               open=False)
    await pool.open(wait=True, timeout=30)
    return PsycopgPool(pool)


# -- aiomysql ---------------------------------------------------------------------------


class AiomysqlPool:
    """aiomysql's pool in autocommit: ``acquire()``; ``begin()``/``commit()``/``rollback()``."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        async with self.pool.acquire() as conn:
            async with conn.cursor() as cur:
                await cur.execute(sql, params)

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        async with self.pool.acquire() as conn:
            async with conn.cursor() as cur:
                await cur.execute(sql, params)
                return [tuple(r) for r in await cur.fetchall()]

    async def transaction(self, steps: Sequence[Step], gap: float = 0.0,
                          fail: bool = False) -> None:
        async with self.pool.acquire() as conn:
            await conn.begin()
            try:
                async with conn.cursor() as cur:
                    for i, (sql, params) in enumerate(steps):
                        if i and gap:
                            await asyncio.sleep(gap)
                        await cur.execute(sql, params)
                if fail:
                    raise Boom()
                await conn.commit()
            except Exception:
                await conn.rollback()
                raise

    async def release_open(self, steps: Sequence[Step]) -> None:
        async with self.pool.acquire() as conn:
            await conn.begin()
            async with conn.cursor() as cur:
                for sql, params in steps:
                    await cur.execute(sql, params)
            raise Boom()

    async def close(self) -> None:
        self.pool.close()
        await self.pool.wait_closed()


async def open_aiomysql(target: Target) -> FaultPool:
    import aiomysql
    pool = await aiomysql.create_pool(
        host=target.host, port=target.port, user=target.app, password="",
        db=target.database, minsize=target.pool_size, maxsize=target.pool_size,
        autocommit=True, connect_timeout=target.connect_timeout)
    return AiomysqlPool(pool)


# -- SQLAlchemy's asyncio engine ----------------------------------------------------------


class SqlalchemyPool:
    """SQLAlchemy's AsyncEngine: ``engine.connect()`` in AUTOCOMMIT for standalone
    statements, ``engine.begin()`` for a transaction."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.auto = engine.execution_options(isolation_level="AUTOCOMMIT")

    @staticmethod
    def _bind(sql: str, params: tuple[Any, ...]) -> tuple[Any, dict[str, Any]]:
        from sqlalchemy import text
        return text(named(sql)), {f"p{i}": v for i, v in enumerate(params, 1)}

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        async with self.auto.connect() as conn:
            await conn.execute(*self._bind(sql, params))

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        async with self.auto.connect() as conn:
            result = await conn.execute(*self._bind(sql, params))
            return [tuple(r) for r in result.fetchall()]

    async def transaction(self, steps: Sequence[Step], gap: float = 0.0,
                          fail: bool = False) -> None:
        async with self.engine.begin() as conn:
            for i, (sql, params) in enumerate(steps):
                if i and gap:
                    await asyncio.sleep(gap)
                await conn.execute(*self._bind(sql, params))
            if fail:
                raise Boom()

    async def release_open(self, steps: Sequence[Step]) -> None:
        async with self.engine.connect() as conn:  # autobegin: a transaction, never committed
            for sql, params in steps:
                await conn.execute(*self._bind(sql, params))
            raise Boom()

    async def close(self) -> None:
        await self.engine.dispose()


async def open_sqlalchemy(target: Target) -> FaultPool:
    from sqlalchemy.ext.asyncio import create_async_engine
    if target.kind == "postgresql":
        url = f"postgresql+asyncpg://{target.user}@{target.host}:{target.port}/{target.database}"
        args: dict[str, Any] = {"server_settings": {"application_name": target.app},
                                "timeout": target.connect_timeout}
    else:
        url = f"mysql+aiomysql://{target.app}@{target.host}:{target.port}/{target.database}"
        args = {"connect_timeout": target.connect_timeout}
    # pool_pre_ping: the docs' answer to connections that died in the pool
    engine = create_async_engine(url, pool_size=target.pool_size, max_overflow=0,
                                 pool_pre_ping=True, pool_timeout=10, connect_args=args)
    async with engine.connect() as conn:  # the first connection, as the others open lazily
        from sqlalchemy import text
        await conn.execute(text("select 1"))
    return SqlalchemyPool(engine)


# -- Twisted adbapi -----------------------------------------------------------------------


class AdbapiPool:
    """Twisted's adbapi.ConnectionPool on the asyncio reactor: ``runOperation``,
    ``runQuery``, ``runInteraction`` (a function run in one transaction on a thread)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def _future(self, deferred: Any) -> Awaitable[Any]:
        future: Awaitable[Any] = deferred.asFuture(asyncio.get_running_loop())
        return future

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        await self._future(self.pool.runOperation(sql, params))

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        return [tuple(r) for r in await self._future(self.pool.runQuery(sql, params))]

    async def transaction(self, steps: Sequence[Step], gap: float = 0.0,
                          fail: bool = False) -> None:
        def interaction(cursor: Any) -> None:
            for i, (sql, params) in enumerate(steps):
                if i and gap:
                    time.sleep(gap)  # on adbapi's thread, as a slow interaction would
                cursor.execute(sql, params)
            if fail:
                raise Boom()
        await self._future(self.pool.runInteraction(interaction))

    async def release_open(self, steps: Sequence[Step]) -> None:
        def on_connection(conn: Any) -> None:  # runWithConnection: adbapi's own connection API
            cursor = conn.cursor()
            for sql, params in steps:
                cursor.execute(sql, params)
            raise Boom()
        await self._future(self.pool.runWithConnection(on_connection))

    async def close(self) -> None:
        self.pool.close()


async def open_adbapi(target: Target) -> FaultPool:
    from twisted.enterprise import adbapi
    kwargs: dict[str, Any] = {"host": target.host, "port": target.port,
                              "connect_timeout": int(target.connect_timeout)}
    if target.kind == "postgresql":
        driver = "psycopg2"
        kwargs.update(user=target.user, dbname=target.database, application_name=target.app)
    else:
        driver = "pymysql"
        kwargs.update(user=target.app, database=target.database)
    pool = adbapi.ConnectionPool(driver, cp_min=target.pool_size, cp_max=target.pool_size,
                                 cp_reconnect=True, cp_noisy=False, **kwargs)

    probe = AdbapiPool(pool)
    await probe.fetch("select 1")
    return probe


#: ``open(target)``: a system's pool for the faults scenario (``System.fault_opener``)
FaultOpener = Callable[[Target], Awaitable[FaultPool]]


async def open_adb_tornado(target: Target) -> FaultPool:
    return await open_adb(target, tornado=True)
