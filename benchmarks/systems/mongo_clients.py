"""MongoDB clients: PyMongo blocking, Motor (asyncio and Tornado), PyMongo's native
``AsyncMongoClient``, and two ways of putting the blocking client on threads for a
loop: ``run_in_executor`` (one future and one loop wake-up per call, what Motor
does inside) and a runner that hands results back in batches with adb's
``BatchedHandback`` (one wake-up per batch).

Each ``open_*`` opener yields ``MongoCalls``. The thread-backed systems use
``THREADS`` threads, the size of Motor's own executor, so that only the hand-off
differs between them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import queue
import threading
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from adb.handback import BatchedHandback

from .. import mongo
from ..worlds import Done, World
from .common import Document, MongoCalls, RunSpec

#: a pymongo ``Database`` (blocking), or Motor's or ``AsyncMongoClient``'s
MongoDatabase = Any
#: ``run(fn, *args)``: how a thread-backed system hands one blocking call over
Runner = Callable[..., Awaitable[Any]]

#: Motor's executor size (``MOTOR_MAX_WORKERS``, else five per CPU); the executor
#: and batched systems use as many threads
THREADS = int(os.environ.get("MOTOR_MAX_WORKERS") or (os.cpu_count() or 1) * 5)


class Blocking:
    """The four calls on a blocking pymongo ``Database``."""

    def __init__(self, db: MongoDatabase) -> None:
        self.db = db

    def insert(self, collection: str, document: Document) -> Any:
        return self.db[collection].insert_one(document).inserted_id

    def find_one(self, collection: str, filter_: Document) -> Optional[Document]:
        return self.db[collection].find_one(filter_)

    def find_all(self, collection: str, filter_: Document) -> list[Document]:
        return list(self.db[collection].find(filter_))

    def ping(self) -> Any:
        return self.db.command("ping")


def _on(world: World, ops: Blocking, run: Runner) -> MongoCalls:
    """MongoCalls that hand each of ``ops``' calls to ``run(fn, *args)``."""
    return MongoCalls(insert=lambda c, d: run(ops.insert, c, d),
                      find_one=lambda c, f: run(ops.find_one, c, f),
                      find_all=lambda c, f: run(ops.find_all, c, f),
                      ping=lambda: run(ops.ping), world=world)


@contextlib.asynccontextmanager
async def open_pymongo(spec: RunSpec, world: World,
                       min_size: Optional[int]) -> AsyncIterator[MongoCalls]:
    """PyMongo called directly: the blocking world's caller threads share one
    client (thread-safe, with its own connection pool)."""
    with mongo.client(spec.url, maxPoolSize=max(100, spec.pool_size)) as client:
        yield _on(world, Blocking(mongo.database(client, spec.url)),
                  lambda fn, *args: Done(fn(*args)))


@contextlib.asynccontextmanager
async def open_executor(spec: RunSpec, world: World,
                        min_size: Optional[int]) -> AsyncIterator[MongoCalls]:
    """PyMongo through ``loop.run_in_executor`` on THREADS threads."""
    loop = asyncio.get_running_loop()
    with mongo.client(spec.url) as client, \
            concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        yield _on(world, Blocking(mongo.database(client, spec.url)),
                  lambda fn, *args: loop.run_in_executor(pool, fn, *args))


@contextlib.asynccontextmanager
async def open_batched(spec: RunSpec, world: World,
                       min_size: Optional[int]) -> AsyncIterator[MongoCalls]:
    """PyMongo on THREADS threads whose results reach the loop in batches."""
    runner = BatchedRunner(asyncio.get_running_loop(), THREADS)
    try:
        with mongo.client(spec.url) as client:
            calls = _on(world, Blocking(mongo.database(client, spec.url)), runner.submit)
            yield dataclasses.replace(calls, stats=runner.stats)
    finally:
        runner.close()


@contextlib.asynccontextmanager
async def open_motor(spec: RunSpec, world: World,
                     min_size: Optional[int]) -> AsyncIterator[MongoCalls]:
    """Motor: its asyncio client, or its Tornado one in the Tornado world."""
    client = mongo.client(spec.url, _motor_client(world.name))
    try:
        yield _awaiting(world, mongo.database(client, spec.url))
    finally:
        client.close()


@contextlib.asynccontextmanager
async def open_async_client(spec: RunSpec, world: World,
                            min_size: Optional[int]) -> AsyncIterator[MongoCalls]:
    """PyMongo's native asyncio client (GA in PyMongo 4.13), no threads."""
    from pymongo import AsyncMongoClient
    client = mongo.client(spec.url, AsyncMongoClient)
    try:
        yield _awaiting(world, mongo.database(client, spec.url))
    finally:
        await client.close()


def _motor_client(world_name: str) -> Any:
    """Motor's client class for a world: MotorClient on Tornado's, else
    AsyncIOMotorClient."""
    if world_name == "tornado":
        from motor.motor_tornado import MotorClient
        return MotorClient
    from motor.motor_asyncio import AsyncIOMotorClient
    return AsyncIOMotorClient


def _awaiting(world: World, db: MongoDatabase) -> MongoCalls:
    """MongoCalls over an async driver's database (Motor's or PyMongo's)."""
    async def insert(collection: str, document: Document) -> Any:
        return (await db[collection].insert_one(document)).inserted_id

    async def find_all(collection: str, filter_: Document) -> list[Document]:
        return await db[collection].find(filter_).to_list(None)
    return MongoCalls(insert=insert, find_one=lambda c, f: db[c].find_one(f),
                      find_all=find_all, ping=lambda: db.command("ping"), world=world)


class BatchedRunner:
    """Run blocking callables on worker threads; settle their asyncio futures on
    the loop through adb's ``BatchedHandback``: the first result after a drain
    wakes the loop, the ones that arrive before it runs ride along, and while
    calls are queued the loop drains on a 1 ms timer instead of being woken."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int) -> None:
        self.loop = loop
        self.jobs = queue.SimpleQueue[Optional[tuple["asyncio.Future[Any]", Callable[..., Any],
                                                     tuple[Any, ...]]]]()
        # adb's asyncio front-end settles its futures the same way (imported here: the
        # A/B's older source trees have no AsyncioFrontEnd, and never run this system)
        from adb.asyncio import AsyncioFrontEnd
        self.handback = BatchedHandback(loop.call_soon_threadsafe, AsyncioFrontEnd.settle,
                                        later=loop.call_later, busy=self._busy)
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(threads)]
        for thread in self.threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        future = self.loop.create_future()
        self.jobs.put((future, fn, args))
        return future

    def _busy(self) -> bool:
        return not self.jobs.empty()

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            future, fn, args = job
            try:
                value, ok = fn(*args), True
            except BaseException as exc:  # the caller's future carries it
                value, ok = exc, False
            self.handback(future, ok, value)

    def stats(self) -> dict[str, Any]:
        h = self.handback
        return {"wakeups": h.wakeups, "polls": h.polls, "largest_batch": h.largest_batch}

    def close(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)
        for thread in self.threads:
            thread.join()
        self.handback.stop()
