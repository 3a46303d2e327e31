"""adb through its asyncio, Tornado and sync front-ends."""

import asyncio
import time

from ..scenarios import parallel_insert as pi
from .common import run_in_threads


def _insert_calls(spec, db):
    """The statement and the parameter list: what every other system's runner holds
    too, so that peak memory compares the libraries, not the runners."""
    return pi.statement(db.paramstyle), pi.params(spec.rows)


async def _warm(db, spec):
    """Open every connection before the clock starts."""
    await asyncio.gather(*(db.runQuery("select 1") for _ in range(spec.pool_size * 2)))


def _figures(db, start, counts):
    stats = db.stats()
    return {"seconds": time.perf_counter() - start, "ok_calls": len(counts),
            "wakeups": stats["wakeups"], "largest_batch": stats["largest_batch"]}


async def _asyncio_main(spec, make_db):
    db = make_db()
    try:
        await _warm(db, spec)
        sql, rows = _insert_calls(spec, db)
        start = time.perf_counter()
        counts = await asyncio.gather(*(db.runOperation(sql, p) for p in rows))
        return _figures(db, start, counts)
    finally:
        await db.close()


def asyncio_run(spec):
    import adb
    return asyncio.run(_asyncio_main(spec, lambda: adb.Database(spec.url, pool_size=spec.pool_size)))


def tornado_run(spec):
    from tornado import gen
    from tornado.ioloop import IOLoop

    import adb.tornado

    async def main():
        db = adb.tornado.Database(spec.url, pool_size=spec.pool_size)
        try:
            await _warm(db, spec)
            sql, rows = _insert_calls(spec, db)
            start = time.perf_counter()
            counts = await gen.multi([db.runOperation(sql, p) for p in rows])
            return _figures(db, start, counts)
        finally:
            await db.close()
    return IOLoop.current().run_sync(main)


def sync_run(spec):
    """pool_size caller threads share one sync Database, each taking the next row."""
    import itertools
    import threading

    import adb.sync
    with adb.sync.Database(spec.url, pool_size=spec.pool_size) as db:
        run_in_threads(spec.pool_size, lambda i: db.runQuery("select 1"))
        sql = pi.statement(db.paramstyle)
        rows = iter(pi.params(spec.rows))
        lock = threading.Lock()
        done = itertools.count()

        def caller(_):
            while True:
                with lock:
                    params = next(rows, None)
                if params is None:
                    return
                db.runOperation(sql, params)
                next(done)
        start = time.perf_counter()
        run_in_threads(spec.pool_size, caller)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "ok_calls": next(done)}


async def _sequential(spec, db):
    from ..scenarios import sequential as seq
    insert, select = seq.statement(db.paramstyle), seq.select_statement(db.paramstyle)
    await db.runQuery("select 1")
    return await seq.run_async(spec.rows, lambda p: db.runOperation(insert, p),
                               lambda key: db.runQuery(select, (key,)))


def asyncio_run_sequential(spec):
    import adb

    async def main():
        db = adb.Database(spec.url, pool_size=spec.pool_size)
        try:
            return await _sequential(spec, db)
        finally:
            await db.close()
    return asyncio.run(main())


def tornado_run_sequential(spec):
    from tornado.ioloop import IOLoop

    import adb.tornado

    async def main():
        db = adb.tornado.Database(spec.url, pool_size=spec.pool_size)
        try:
            return await _sequential(spec, db)
        finally:
            await db.close()
    return IOLoop.current().run_sync(main)


def sync_run_sequential(spec):
    import adb.sync

    from ..scenarios import sequential as seq
    with adb.sync.Database(spec.url, pool_size=spec.pool_size) as db:
        insert, select = seq.statement(db.paramstyle), seq.select_statement(db.paramstyle)
        db.runQuery("select 1")
        return seq.run_blocking(spec.rows, lambda p: db.runOperation(insert, p),
                                lambda key: db.runQuery(select, (key,)))
