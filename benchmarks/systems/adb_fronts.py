"""adb through its asyncio, Tornado and sync front-ends: one opener each.

An opener is ``open_x(spec, world, min_size)``, an async context manager that
yields the system's ``Calls``; adb opens all pool_size connections at start
whatever ``min_size`` says.
"""

import contextlib

from .common import Calls, Unit


def _calls(db, world, settle=lambda value: value):
    """The Database's calls; ``settle`` makes the sync front-end's plain values
    awaitable (``Done``)."""
    def call(method):
        return lambda *args, **kwargs: settle(method(*args, **kwargs))

    @contextlib.asynccontextmanager
    async def unit():
        tx = await settle(db.beginTransaction())
        committed = False
        try:
            yield Unit(lambda sql, params=None: settle(db.runOperation(sql, params, tx)),
                       lambda sql, params=None: settle(db.runQuery(sql, params, tx)),
                       lambda sql, seq: settle(db.runMany(sql, seq, tx)))
            await settle(db.commitTransaction(tx))
            committed = True
        finally:
            if not committed:
                await settle(db.rollbackTransaction(tx))
    return Calls(execute=call(db.runOperation), query=call(db.runQuery), world=world,
                 paramstyle=db.paramstyle, stats=db.stats, many=call(db.runMany), unit=unit)


@contextlib.asynccontextmanager
async def open_asyncio(spec, world, min_size):
    import adb
    db = adb.Database(spec.url, pool_size=spec.pool_size)
    try:
        yield _calls(db, world)
    finally:
        await db.close()


@contextlib.asynccontextmanager
async def open_tornado(spec, world, min_size):
    import adb.tornado
    db = adb.tornado.Database(spec.url, pool_size=spec.pool_size)
    try:
        yield _calls(db, world)
    finally:
        await db.close()


@contextlib.asynccontextmanager
async def open_sync(spec, world, min_size):
    """The sync front-end, called from the blocking world's pool_size threads."""
    import adb.sync

    from ..worlds import Done
    db = adb.sync.Database(spec.url, pool_size=spec.pool_size)
    try:
        yield _calls(db, world, Done)
    finally:
        db.close()
