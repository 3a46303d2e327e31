"""Worlds: where a system's calls run, and how a scenario runs there.

A scenario is one ``async def run(calls, spec)``; a world runs that coroutine and
gives it ``map(fn, items)``: call ``fn(item)`` for every item, as concurrently as
the world allows, and wait for all the results. In an event-loop world that is
one gather over every call at once; in the blocking world it is ``pool_size``
threads taking the items in turn, each call a plain blocking call.

More that a scenario may ask of a world: ``spawn(awaitable)`` starts a call now
and returns what to await later (so the loop can work while it runs), ``pause()``
lets the world run what is ready (the spawned call's first step), and
``channel(capacity)`` is a queue from a producer thread into the world (a
``Channel``): the producer blocks while it is full, the world awaits ``get()``;
``start_thread(target)`` runs a producer in a real OS thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import (Any, Awaitable, Callable, Coroutine, Generator, Generic, Iterable, Optional,
                    Protocol, TypeVar, cast)

T = TypeVar("T")
Item = TypeVar("Item")
#: a scenario's ``main``: what ``World.run`` runs
Main = Callable[[], Coroutine[Any, Any, T]]


class Done(Generic[T]):
    """An awaitable that is already settled: what a blocking call gives a scenario."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, T]:
        return self.value
        yield  # makes this a generator: it returns the value without suspending


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine whose every await is already settled (the blocking world)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return cast(T, stop.value)
    coroutine.close()
    raise RuntimeError("a blocking-world scenario awaited something that was not settled")


class Channel:
    """A queue from producer threads into a world, holding at most ``capacity``
    items (None: unbounded). ``put`` is called from a thread and blocks while the
    channel is full; ``get`` is awaited in the world. ``deliver(item)`` is the
    world's thread-safe way to hand one item over; ``receive()`` awaits one."""

    def __init__(self, capacity: Optional[int], deliver: Callable[[Any], object],
                 receive: Callable[[], Awaitable[Any]]) -> None:
        self.slots = threading.Semaphore(capacity) if capacity else None
        self._deliver, self._receive = deliver, receive

    def put(self, item: Any) -> None:
        if self.slots is not None:
            self.slots.acquire()
        self._deliver(item)

    async def get(self) -> Any:
        item = await self._receive()
        if self.slots is not None:
            self.slots.release()
        return item


def start_thread(target: Callable[..., object], *args: Any) -> object:
    """Run ``target(*args)`` in a daemon OS thread (a producer feeding a channel)."""
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


class World(Protocol):
    """What every world gives a scenario (the module's docstring says what each does)."""

    name: str

    def run(self, main: Main[T]) -> T: ...

    def map(self, fn: Callable[[Item], Awaitable[T]],
            items: Iterable[Item]) -> Awaitable[list[T]]: ...

    def spawn(self, awaitable: Awaitable[T]) -> Awaitable[T]: ...

    def pause(self) -> Awaitable[None]: ...

    def channel(self, capacity: Optional[int] = None) -> Channel: ...

    def start_thread(self, target: Callable[..., object], *args: Any) -> object: ...


class AsyncioWorld:
    """An asyncio loop: ``map`` is one gather over every call at once."""

    name = "asyncio"
    start_thread = staticmethod(start_thread)

    def run(self, main: Main[T]) -> T:
        return asyncio.run(main())

    @staticmethod
    def map(fn: Callable[[Item], Awaitable[T]], items: Iterable[Item]) -> Awaitable[list[T]]:
        return asyncio.gather(*(fn(item) for item in items))

    @staticmethod
    def spawn(awaitable: Awaitable[T]) -> Awaitable[T]:
        return asyncio.ensure_future(awaitable)

    @staticmethod
    def pause() -> Awaitable[None]:
        """Let the loop run what is ready (a spawned call's first step) before
        the caller goes on computing."""
        return asyncio.sleep(0)

    @staticmethod
    def channel(capacity: Optional[int] = None) -> Channel:
        loop, inbox = asyncio.get_running_loop(), asyncio.Queue[Any]()
        return Channel(capacity, lambda item: loop.call_soon_threadsafe(inbox.put_nowait, item),
                       inbox.get)


class TornadoWorld(AsyncioWorld):
    """Tornado's IOLoop, which runs on asyncio: its futures are asyncio's."""

    name = "tornado"

    def run(self, main: Main[T]) -> T:
        from tornado.ioloop import IOLoop
        return cast(T, IOLoop.current().run_sync(main))

    @staticmethod
    def map(fn: Callable[[Item], Awaitable[T]], items: Iterable[Item]) -> Awaitable[list[T]]:
        from tornado import gen
        return cast("Awaitable[list[T]]", gen.multi([fn(item) for item in items]))


class TwistedWorld:
    """A Twisted reactor, the default one or asyncio's; once per process (the
    harness runs each system in a fresh one)."""

    start_thread = staticmethod(start_thread)

    def __init__(self, reactor: str = "default") -> None:
        self.name = "twisted" if reactor == "default" else f"twisted-{reactor}"
        self.reactor = reactor

    def run(self, main: Main[T]) -> T:
        if self.reactor == "asyncio":
            install_asyncio_reactor()
        from twisted.internet import defer
        reactor = the_reactor()
        result: dict[str, Any] = {}

        def start() -> None:
            d = defer.ensureDeferred(main())
            d.addCallbacks(lambda value: result.update(value=value),
                           lambda failure: result.update(error=failure))
            d.addBoth(lambda _: reactor.stop())
        reactor.callWhenRunning(start)
        reactor.run()
        if "error" in result:
            result["error"].raiseException()
        return cast(T, result["value"])

    @staticmethod
    def map(fn: Callable[[Item], Awaitable[T]], items: Iterable[Item]) -> Awaitable[list[T]]:
        from twisted.internet import defer
        return defer.gatherResults([defer.ensureDeferred(awaited(fn(item))) for item in items],
                                   consumeErrors=True)

    @staticmethod
    def spawn(awaitable: Awaitable[T]) -> Awaitable[T]:
        from twisted.internet import defer
        return defer.ensureDeferred(awaited(awaitable))

    @staticmethod
    def pause() -> Awaitable[None]:
        from twisted.internet import task
        return task.deferLater(the_reactor(), 0, lambda: None)

    @staticmethod
    def channel(capacity: Optional[int] = None) -> Channel:
        from twisted.internet import defer
        reactor, inbox = the_reactor(), defer.DeferredQueue[Any]()
        return Channel(capacity, lambda item: reactor.callFromThread(inbox.put, item), inbox.get)


class BlockingWorld:
    """Plain threads: ``map`` runs the calls from ``threads`` caller threads."""

    name = "blocking"
    start_thread = staticmethod(start_thread)

    def __init__(self, threads: int) -> None:
        self.threads = threads

    @staticmethod
    def spawn(awaitable: Awaitable[T]) -> Awaitable[T]:
        """Nothing to overlap with: a blocking call has finished when it returns."""
        return awaitable

    @staticmethod
    def pause() -> Awaitable[None]:
        return Done(None)

    @staticmethod
    def channel(capacity: Optional[int] = None) -> Channel:
        inbox = queue.Queue[Any]()
        return Channel(capacity, inbox.put, lambda: Done(inbox.get()))

    def run(self, main: Main[T]) -> T:
        return drive(main())

    def map(self, fn: Callable[[Item], Awaitable[T]], items: Iterable[Item]) -> Awaitable[list[T]]:
        """Every item's call from ``threads`` caller threads taking the items in
        turn; the first error, if any, raised once they have all stopped."""
        jobs = queue.SimpleQueue[tuple[int, Item]]()
        todo = list(items)
        for index, item in enumerate(todo):
            jobs.put((index, item))
        results: list[Any] = [None] * len(todo)
        errors: list[BaseException] = []

        def caller() -> None:
            try:
                while True:
                    try:
                        index, item = jobs.get_nowait()
                    except queue.Empty:
                        return
                    results[index] = _finished(fn(item))
            except BaseException as exc:  # re-raised after the join
                errors.append(exc)
        callers = [threading.Thread(target=caller) for _ in range(min(self.threads, len(todo)))]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join()
        if errors:
            raise errors[0]
        return Done(results)


class GeventWorld(BlockingWorld):
    """gevent: the blocking world's calls, made cooperative by monkey-patching
    (``patch()``, which the child runs before anything else is imported). Its
    ``map`` is the blocking world's: patched, its ``threads`` callers are greenlets,
    each keeping its own connection."""

    name = "gevent"

    @staticmethod
    def channel(capacity: Optional[int] = None) -> Channel:
        """Fed from a real OS thread: items cross into the hub's loop thread-safely;
        unbounded (a gevent semaphore cannot be waited on from an OS thread)."""
        import gevent
        from gevent.queue import Queue
        if capacity:
            raise ValueError("a gevent channel is unbounded")
        hub, inbox = gevent.get_hub(), Queue()
        return Channel(None, lambda item: hub.loop.run_callback_threadsafe(inbox.put, item),
                       lambda: Done(inbox.get()))

    @staticmethod
    def start_thread(target: Callable[..., object], *args: Any) -> object:
        """A real thread from gevent's pool: ``threading`` is patched to greenlets."""
        import gevent
        return gevent.get_hub().threadpool.spawn(target, *args)

    @staticmethod
    def patch(driver: str) -> None:
        """Make the stdlib and the driver cooperative; first thing in the process."""
        from gevent import monkey
        monkey.patch_all()
        if driver == "psycopg2":
            from psycogreen.gevent import patch_psycopg
            patch_psycopg()


def _finished(value: Awaitable[T]) -> T:
    """What a blocking world's call gave: a coroutine driven to its end, or a
    ``Done``'s value."""
    if asyncio.iscoroutine(value):
        return cast(T, drive(value))
    return cast(T, value.value if isinstance(value, Done) else value)


async def awaited(awaitable: Awaitable[T]) -> T:
    """``awaitable`` as a coroutine: what Twisted's ``ensureDeferred`` takes."""
    return await awaitable


def the_reactor() -> Any:
    """Twisted's global reactor: Any, because which one (default or asyncio's) is
    installed at run time, and the module attribute is typed as a bare module."""
    from twisted.internet import reactor
    return reactor


def install_asyncio_reactor() -> None:
    from twisted.internet import asyncioreactor
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    asyncioreactor.install(loop)


def run_loop(main: Awaitable[T]) -> T:
    """``asyncio.run`` that gives up on tasks a broken pool left hanging: they are
    cancelled and waited for 5 s at most, then the loop is closed anyway."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left, timeout=5))
        loop.close()


def on_asyncio_reactor(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``body()`` on Twisted's asyncio reactor, installed here: for a coroutine
    written for asyncio over a pool that needs the reactor running (adbapi's, in
    the faults scenario); what it raises is raised here."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    from twisted.internet import asyncioreactor
    asyncioreactor.install(loop)
    from twisted.internet import defer
    from twisted.python.failure import Failure
    reactor = the_reactor()
    outcome: dict[str, Any] = {}

    def start() -> None:
        deferred: defer.Deferred[T] = defer.Deferred.fromFuture(loop.create_task(body()))

        def done(result: Any) -> None:
            outcome["result"] = result
            reactor.stop()
        deferred.addBoth(done)
    reactor.callWhenRunning(start)
    reactor.run()
    if "result" not in outcome:
        raise RuntimeError("the reactor stopped before the run ended")
    result = outcome["result"]
    if isinstance(result, Failure):
        result.raiseException()
    return cast(T, result)


def world(name: str, threads: int) -> World:
    """The world called ``name`` (``asyncio``, ``tornado``, ``twisted``,
    ``twisted-asyncio``, ``blocking``, ``gevent``); ``threads`` is the blocking
    world's callers (greenlets in gevent's)."""
    if name == "asyncio":
        return AsyncioWorld()
    if name == "tornado":
        return TornadoWorld()
    if name == "twisted":
        return TwistedWorld()
    if name == "twisted-asyncio":
        return TwistedWorld("asyncio")
    if name == "blocking":
        return BlockingWorld(threads)
    if name == "gevent":
        return GeventWorld(threads)
    raise ValueError(f"unknown world {name!r}")
