"""Twisted: adb's ConnectionPool and stock adbapi, on the default or asyncio
reactor (the system's world says which). Each opener yields the pool's Calls."""

import contextlib

from .common import Calls, sqlite_settings


def _pool(spec, pool_class, min_size, **pool_kw):
    kwargs = spec.connect_kwargs()
    if spec.driver == "sqlite3":
        kwargs["check_same_thread"] = False
    size = spec.pool_size
    return pool_class(spec.driver, cp_min=size if min_size is None else min_size, cp_max=size,
                      **pool_kw, **kwargs)


@contextlib.contextmanager
def _opened(pool, world, spec, **extra):
    try:
        yield Calls(execute=pool.runOperation, query=pool.runQuery, world=world,
                    paramstyle=spec.paramstyle(), stats=getattr(pool, "stats", None), **extra)
    finally:
        pool.close()


@contextlib.asynccontextmanager
async def open_adb(spec, world, min_size, **options):
    """adb's adbapi drop-in, with its runMany (adbapi has none). No ``unit``: the
    drop-in runs a transaction as ``runInteraction(blocking_function)``, which a
    scenario written over awaited calls cannot be. ``options``: its ``cp_`` keywords."""
    from adb.twisted import ConnectionPool
    pool = _pool(spec, ConnectionPool, min_size, **options)
    with _opened(pool, world, spec, many=pool.runMany) as calls:
        yield calls


def open_adb_autobatch(spec, world, min_size):
    """The drop-in with group commit (``cp_autobatch``)."""
    from .adb_fronts import AUTOBATCH
    return open_adb(spec, world, min_size, cp_autobatch=AUTOBATCH)


@contextlib.asynccontextmanager
async def open_adbapi(spec, world, min_size):
    from twisted.enterprise.adbapi import ConnectionPool
    extra = {"cp_openfun": sqlite_settings} if spec.kind == "sqlite" else {}
    with _opened(_pool(spec, ConnectionPool, min_size, **extra), world, spec) as calls:
        yield calls


@contextlib.asynccontextmanager
async def open_adbapi_autocommit(spec, world, min_size):
    """adbapi tuned as adb runs: the driver in autocommit, set by ``cp_openfun``."""
    from twisted.enterprise.adbapi import ConnectionPool

    def autocommit(conn):
        if spec.driver == "pymysql":
            conn.autocommit(True)
        else:
            conn.autocommit = True
    with _opened(_pool(spec, ConnectionPool, min_size, cp_openfun=autocommit), world,
                 spec) as calls:
        yield calls
