"""Twisted: adb's ConnectionPool and stock adbapi, on the default or asyncio
reactor (the system's world says which). Each opener yields the pool's Calls."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncContextManager, AsyncIterator, Iterator, Optional

from ..worlds import World
from .adb_fronts import AUTOBATCH
from .common import Calls, Connection, RunSpec, sqlite_settings

#: an adbapi-shaped ConnectionPool: Twisted's own or adb's drop-in
Pool = Any


def _pool(spec: RunSpec, pool_class: Any, min_size: Optional[int], **pool_kw: Any) -> Pool:
    kwargs = spec.connect_kwargs()
    if spec.driver == "sqlite3":
        kwargs["check_same_thread"] = False
    size = spec.pool_size
    return pool_class(spec.driver, cp_min=size if min_size is None else min_size, cp_max=size,
                      **pool_kw, **kwargs)


@contextlib.contextmanager
def _opened(pool: Pool, world: World, spec: RunSpec, **extra: Any) -> Iterator[Calls]:
    try:
        yield Calls(execute=pool.runOperation, query=pool.runQuery, world=world,
                    paramstyle=spec.paramstyle(), stats=getattr(pool, "stats", None), **extra)
    finally:
        pool.close()


@contextlib.asynccontextmanager
async def open_adb(spec: RunSpec, world: World, min_size: Optional[int],
                   **options: Any) -> AsyncIterator[Calls]:
    """adb's adbapi drop-in, with its runMany (adbapi has none). No ``transaction``:
    the drop-in runs a transaction as ``runInteraction(blocking_function)``, which a
    scenario written over awaited calls cannot be. ``options``: its ``cp_`` keywords."""
    from adb.twisted import ConnectionPool
    if spec.kind == "sqlite":  # the drop-in connects as adbapi does: the same settings
        options.setdefault("cp_openfun", sqlite_settings)
    pool = _pool(spec, ConnectionPool, min_size, **options)
    with _opened(pool, world, spec, many=pool.runMany) as calls:
        yield calls


def open_adb_autobatch(spec: RunSpec, world: World,
                       min_size: Optional[int]) -> AsyncContextManager[Calls]:
    """The drop-in with group commit (``cp_autobatch``)."""
    return open_adb(spec, world, min_size, cp_autobatch=AUTOBATCH)


@contextlib.asynccontextmanager
async def open_adbapi(spec: RunSpec, world: World, min_size: Optional[int]) -> AsyncIterator[Calls]:
    from twisted.enterprise.adbapi import ConnectionPool
    extra = {"cp_openfun": sqlite_settings} if spec.kind == "sqlite" else {}
    with _opened(_pool(spec, ConnectionPool, min_size, **extra), world, spec) as calls:
        yield calls


@contextlib.asynccontextmanager
async def open_adbapi_autocommit(spec: RunSpec, world: World,
                                 min_size: Optional[int]) -> AsyncIterator[Calls]:
    """adbapi tuned as adb runs: the driver in autocommit, set by ``cp_openfun``."""
    from twisted.enterprise.adbapi import ConnectionPool

    def autocommit(conn: Connection) -> None:
        if spec.driver == "pymysql":
            conn.autocommit(True)
        else:
            conn.autocommit = True
    with _opened(_pool(spec, ConnectionPool, min_size, cp_openfun=autocommit), world,
                 spec) as calls:
        yield calls
