"""Worlds: where a system's calls run, and how a scenario runs there.

A scenario is one ``async def run(calls, spec)``; a world runs that coroutine and
gives it ``map(fn, items)``: call ``fn(item)`` for every item, as concurrently as
the world allows, and wait for all the results. In an event-loop world that is
one gather over every call at once; in the blocking world it is ``pool_size``
threads taking the items in turn, each call a plain blocking call.
"""

import asyncio
import queue
import threading


class Done:
    """An awaitable that is already settled: what a blocking call gives a scenario."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __await__(self):
        return self.value
        yield  # makes this a generator: it returns the value without suspending


def drive(coroutine):
    """Run a coroutine whose every await is already settled (the blocking world)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise RuntimeError("a blocking-world scenario awaited something that was not settled")


class AsyncioWorld:
    name = "asyncio"

    def run(self, main):
        return asyncio.run(main())

    @staticmethod
    def map(fn, items):
        return asyncio.gather(*(fn(item) for item in items))


class TornadoWorld:
    name = "tornado"

    def run(self, main):
        from tornado.ioloop import IOLoop
        return IOLoop.current().run_sync(main)

    @staticmethod
    def map(fn, items):
        from tornado import gen
        return gen.multi([fn(item) for item in items])


class TwistedWorld:
    """A Twisted reactor, the default one or asyncio's; once per process (the
    harness runs each system in a fresh one)."""

    def __init__(self, reactor="default"):
        self.name = "twisted" if reactor == "default" else f"twisted-{reactor}"
        self.reactor = reactor

    def run(self, main):
        if self.reactor == "asyncio":
            install_asyncio_reactor()
        from twisted.internet import defer, reactor
        result = {}

        def start():
            d = defer.ensureDeferred(main())
            d.addCallbacks(lambda value: result.update(value=value),
                           lambda failure: result.update(error=failure))
            d.addBoth(lambda _: reactor.stop())
        reactor.callWhenRunning(start)
        reactor.run()
        if "error" in result:
            result["error"].raiseException()
        return result["value"]

    @staticmethod
    def map(fn, items):
        from twisted.internet import defer
        return defer.gatherResults([defer.ensureDeferred(fn(item)) for item in items],
                                   consumeErrors=True)


class BlockingWorld:
    """Plain threads: ``map`` runs the calls from ``threads`` caller threads."""

    name = "blocking"

    def __init__(self, threads):
        self.threads = threads

    def run(self, main):
        return drive(main())

    def map(self, fn, items):
        jobs = queue.SimpleQueue()
        items = list(items)
        for index, item in enumerate(items):
            jobs.put((index, item))
        results = [None] * len(items)
        errors = []

        def caller():
            try:
                while True:
                    try:
                        index, item = jobs.get_nowait()
                    except queue.Empty:
                        return
                    value = fn(item)
                    results[index] = drive(value) if asyncio.iscoroutine(value) \
                        else _settled(value)
            except BaseException as exc:  # re-raised after the join
                errors.append(exc)
        callers = [threading.Thread(target=caller) for _ in range(min(self.threads, len(items)))]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join()
        if errors:
            raise errors[0]
        return Done(results)


def _settled(value):
    return value.value if isinstance(value, Done) else value


def install_asyncio_reactor():
    from twisted.internet import asyncioreactor
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    asyncioreactor.install(loop)


def world(name, threads):
    """The world called ``name`` (``asyncio``, ``tornado``, ``twisted``,
    ``twisted-asyncio``, ``blocking``); ``threads`` is the blocking world's callers."""
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
    raise ValueError(f"unknown world {name!r}")
