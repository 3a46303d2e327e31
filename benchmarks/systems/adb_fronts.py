"""adb through its asyncio, Tornado and sync front-ends: one opener each.

An opener is ``open_x(spec, world, min_size)``, an async context manager that
yields the system's ``Calls``; adb opens all pool_size connections at start
whatever ``min_size`` says.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from ..worlds import Done, World
from .common import Calls, Opener, Rows, RunSpec, Stream, TxCalls

#: an adb Database of any front-end: its methods return futures, Deferreds or values
AnyDatabase = Any
#: what makes a front-end's result awaitable: nothing for the awaitable front-ends,
#: ``Done`` for the sync one
Settle = Callable[[Any], Awaitable[Any]]


def _as_is(value: Awaitable[Any]) -> Awaitable[Any]:
    return value


def _calls(db: AnyDatabase, world: World, settle: Optional[Settle] = None) -> Calls:
    """The Database's calls, its own methods where they return futures (nothing
    added per call); ``settle`` makes the sync front-end's plain values awaitable
    (``Done``)."""
    def call(method: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        if settle is None:
            return method
        return lambda *args, **kwargs: settle(method(*args, **kwargs))
    return Calls(execute=call(db.runOperation), query=call(db.runQuery), world=world,
                 paramstyle=db.paramstyle, stats=db.stats, many=call(db.runMany),
                 transaction=lambda: _transaction(db, settle or _as_is),
                 stream=_stream(db, blocking=settle is not None),
                 copy_in=lambda table, columns, rows: call(db.copy_in)(table, rows,
                                                                      columns=columns))


def _stream(db: AnyDatabase, blocking: bool) -> Stream:
    """``db.stream(sql, batch=batch)``, its rows or its ``fetch()`` batches. On the
    awaitable front-ends the stream is its own async context manager, handed over
    as it is for its rows; the sync front-end's is a plain one, entered here."""
    if blocking:
        @contextlib.asynccontextmanager
        async def entered(sql: str, batch: int, batches: bool) -> AsyncIterator[Rows]:
            with db.stream(sql, batch=batch) as rows:
                yield iter(rows.fetch, []) if batches else rows
        return entered

    @contextlib.asynccontextmanager
    async def fetched(sql: str, batch: int, batches: bool) -> AsyncIterator[Rows]:
        async with db.stream(sql, batch=batch) as rows:
            yield _fetches(rows)

    return lambda sql, batch, batches: (fetched(sql, batch, batches) if batches
                                        else db.stream(sql, batch=batch))


async def _fetches(stream: Any) -> AsyncIterator[list[Any]]:
    """A stream's batches: ``await fetch()`` until it gives []."""
    while rows := await stream.fetch():
        yield rows


@contextlib.asynccontextmanager
async def _transaction(db: AnyDatabase, settled: Settle) -> AsyncIterator[TxCalls]:
    """beginTransaction, the calls on it, commitTransaction (rollbackTransaction if
    the block fails)."""
    tx = await settled(db.beginTransaction())
    committed = False
    try:
        yield TxCalls(lambda sql, params=None: settled(db.runOperation(sql, params, tx)),
                      lambda sql, params=None: settled(db.runQuery(sql, params, tx)),
                      lambda sql, seq: settled(db.runMany(sql, seq, tx)))
        await settled(db.commitTransaction(tx))
        committed = True
    finally:
        if not committed:
            await settled(db.rollbackTransaction(tx))


def _awaitable_front_end(module: str, **options: Any) -> Opener:
    """The opener of the front-end in ``module`` whose calls return futures;
    ``options`` go to its Database."""
    @contextlib.asynccontextmanager
    async def opener(spec: RunSpec, world: World, min_size: Optional[int]) -> AsyncIterator[Calls]:
        front_end: Any = importlib.import_module(module)
        db = front_end.Database(spec.url, pool_size=spec.pool_size, **options)
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
#: adb's own API on Twisted (``adb.twisted.Database``, its methods giving Deferreds,
#: which the Twisted world awaits), beside the adbapi drop-in of ``twisted_pools``
open_twisted = _awaitable_front_end("adb.twisted")


@contextlib.asynccontextmanager
async def open_sync(spec: RunSpec, world: World, min_size: Optional[int]) -> AsyncIterator[Calls]:
    """The sync front-end, called from the blocking world's pool_size threads."""
    import adb.sync
    db = adb.sync.Database(spec.url, pool_size=spec.pool_size)
    try:
        yield _calls(db, world, Done)
    finally:
        db.close()
