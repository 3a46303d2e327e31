"""adb through its asyncio, Tornado and sync front-ends: one opener each.

An opener is ``open_x(spec, world, min_size)``, an async context manager that
yields the system's ``Calls``; adb opens all pool_size connections at start
whatever ``min_size`` says.
"""

import contextlib
import importlib

from .common import Calls, Unit


def _calls(db, world, settle=None):
    """The Database's calls, its own methods where they return futures (nothing
    added per call); ``settle`` makes the sync front-end's plain values awaitable
    (``Done``)."""
    def call(method):
        if settle is None:
            return method
        return lambda *args, **kwargs: settle(method(*args, **kwargs))
    settled = settle or (lambda value: value)

    @contextlib.asynccontextmanager
    async def unit():
        tx = await settled(db.beginTransaction())
        committed = False
        try:
            yield Unit(lambda sql, params=None: settled(db.runOperation(sql, params, tx)),
                       lambda sql, params=None: settled(db.runQuery(sql, params, tx)),
                       lambda sql, seq: settled(db.runMany(sql, seq, tx)))
            await settled(db.commitTransaction(tx))
            committed = True
        finally:
            if not committed:
                await settled(db.rollbackTransaction(tx))
    return Calls(execute=call(db.runOperation), query=call(db.runQuery), world=world,
                 paramstyle=db.paramstyle, stats=db.stats, many=call(db.runMany), unit=unit)


def _awaitable_front_end(module, **options):
    """The opener of the front-end in ``module`` whose calls return futures;
    ``options`` go to its Database."""
    @contextlib.asynccontextmanager
    async def opener(spec, world, min_size):
        db = importlib.import_module(module).Database(spec.url, pool_size=spec.pool_size,
                                                      **options)
        try:
            yield _calls(db, world)
        finally:
            await db.close()
    return opener


#: group commit's batch size in the ``-autobatch`` systems (the issue's and the docs' 64)
AUTOBATCH = 64

open_asyncio = _awaitable_front_end("adb")
open_tornado = _awaitable_front_end("adb.tornado")
open_asyncio_autobatch = _awaitable_front_end("adb", autobatch=AUTOBATCH)
open_tornado_autobatch = _awaitable_front_end("adb.tornado", autobatch=AUTOBATCH)


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
