"""adb through its asyncio, Tornado and sync front-ends: one opener each.

An opener is ``open_x(spec, world, min_size)``, an async context manager that
yields the system's ``Calls``; adb opens all pool_size connections at start
whatever ``min_size`` says.
"""

import contextlib

from .common import Calls


def _calls(db, world, execute, query):
    return Calls(execute=execute, query=query, map=world.map, paramstyle=db.paramstyle,
                 stats=db.stats)


@contextlib.asynccontextmanager
async def open_asyncio(spec, world, min_size):
    import adb
    db = adb.Database(spec.url, pool_size=spec.pool_size)
    try:
        yield _calls(db, world, db.runOperation, db.runQuery)
    finally:
        await db.close()


@contextlib.asynccontextmanager
async def open_tornado(spec, world, min_size):
    import adb.tornado
    db = adb.tornado.Database(spec.url, pool_size=spec.pool_size)
    try:
        yield _calls(db, world, db.runOperation, db.runQuery)
    finally:
        await db.close()


@contextlib.asynccontextmanager
async def open_sync(spec, world, min_size):
    """The sync front-end, called from the blocking world's pool_size threads."""
    import adb.sync

    from ..worlds import Done
    db = adb.sync.Database(spec.url, pool_size=spec.pool_size)
    try:
        yield _calls(db, world, lambda sql, params=None: Done(db.runOperation(sql, params)),
                     lambda sql, params=None: Done(db.runQuery(sql, params)))
    finally:
        db.close()
