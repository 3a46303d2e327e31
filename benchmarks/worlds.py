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


class Channel:
    """A queue from producer threads into a world, holding at most ``capacity``
    items (None: unbounded). ``put`` is called from a thread and blocks while the
    channel is full; ``get`` is awaited in the world. ``deliver(item)`` is the
    world's thread-safe way to hand one item over; ``receive()`` awaits one."""

    def __init__(self, capacity, deliver, receive):
        self.slots = threading.Semaphore(capacity) if capacity else None
        self._deliver, self._receive = deliver, receive

    def put(self, item):
        if self.slots is not None:
            self.slots.acquire()
        self._deliver(item)

    async def get(self):
        item = await self._receive()
        if self.slots is not None:
            self.slots.release()
        return item


def start_thread(target, *args):
    """Run ``target(*args)`` in a daemon OS thread (a producer feeding a channel)."""
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


class AsyncioWorld:
    name = "asyncio"
    has_loop = True
    start_thread = staticmethod(start_thread)

    def run(self, main):
        return asyncio.run(main())

    @staticmethod
    def map(fn, items):
        return asyncio.gather(*(fn(item) for item in items))

    @staticmethod
    def spawn(awaitable):
        return asyncio.ensure_future(awaitable)

    @staticmethod
    def pause():
        """Let the loop run what is ready (a spawned call's first step) before
        the caller goes on computing."""
        return asyncio.sleep(0)

    @staticmethod
    def channel(capacity=None):
        loop, inbox = asyncio.get_running_loop(), asyncio.Queue()
        return Channel(capacity, lambda item: loop.call_soon_threadsafe(inbox.put_nowait, item),
                       inbox.get)


class TornadoWorld(AsyncioWorld):
    """Tornado's IOLoop, which runs on asyncio: its futures are asyncio's."""

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

    has_loop = True
    start_thread = staticmethod(start_thread)

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

    @staticmethod
    def spawn(awaitable):
        from twisted.internet import defer
        return defer.ensureDeferred(awaitable)

    @staticmethod
    def pause():
        from twisted.internet import reactor, task
        return task.deferLater(reactor, 0, lambda: None)

    @staticmethod
    def channel(capacity=None):
        from twisted.internet import defer, reactor
        inbox = defer.DeferredQueue()
        return Channel(capacity, lambda item: reactor.callFromThread(inbox.put, item), inbox.get)


class BlockingWorld:
    """Plain threads: ``map`` runs the calls from ``threads`` caller threads."""

    name = "blocking"
    has_loop = False
    start_thread = staticmethod(start_thread)

    def __init__(self, threads):
        self.threads = threads

    @staticmethod
    def spawn(awaitable):
        """Nothing to overlap with: a blocking call has finished when it returns."""
        return awaitable

    @staticmethod
    def pause():
        return Done(None)

    @staticmethod
    def channel(capacity=None):
        inbox = queue.Queue()
        return Channel(capacity, inbox.put, lambda: Done(inbox.get()))

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
                    results[index] = _finished(fn(item))
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


class GeventWorld(BlockingWorld):
    """gevent: the blocking world's calls, made cooperative by monkey-patching
    (``patch()``, which the child runs before anything else is imported). Its
    ``map`` is the blocking world's: patched, its ``threads`` callers are greenlets,
    each keeping its own connection."""

    name = "gevent"

    @staticmethod
    def channel(capacity=None):
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
    def start_thread(target, *args):
        """A real thread from gevent's pool: ``threading`` is patched to greenlets."""
        import gevent
        return gevent.get_hub().threadpool.spawn(target, *args)

    @staticmethod
    def patch(driver):
        """Make the stdlib and the driver cooperative; first thing in the process."""
        from gevent import monkey
        monkey.patch_all()
        if driver == "psycopg2":
            from psycogreen.gevent import patch_psycopg
            patch_psycopg()


def _finished(value):
    return drive(value) if asyncio.iscoroutine(value) else _settled(value)


def _settled(value):
    return value.value if isinstance(value, Done) else value


def install_asyncio_reactor():
    from twisted.internet import asyncioreactor
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    asyncioreactor.install(loop)


def world(name, threads):
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
