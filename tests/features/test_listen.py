"""LISTEN/NOTIFY on both PostgreSQL drivers and every front-end, against the real server.

Each test makes its own Database and its own channels (uuid), so tests running
at the same time on the same server never hear each other; the only backend a
test terminates is the one its own listener reports in ``stats()``.
"""

import asyncio
import gc
import threading
import time
import uuid
import warnings
from typing import Any

import pytest
import pytest_asyncio
from tornado.testing import AsyncTestCase, gen_test
from twisted.internet.defer import Deferred

import adb
import adb.frontend
import adb.listen
import adb.listener
import adb.sync
import adb.tornado
import adb.twisted
from adb import InterfaceError, Notification, NotificationGap

from ..conftest import FRONTS, URLS, close, ev, psycopg_url, require_server


def server_channels(conn: Any) -> list[str]:
    """What the server says ``conn`` LISTENs on."""
    cursor = conn.cursor()
    try:
        cursor.execute("select pg_listening_channels() order by 1")
        return [row[0] for row in cursor.fetchall()]
    finally:
        cursor.close()


def listening_channels(db: Any) -> Any:
    """The server's own word on what ``db``'s listening connection LISTENs on
    (``pg_listening_channels()``, asked by its listening thread): what ``db``'s calls
    give on its front-end. Through adb's privates: no public call asks the hub for
    arbitrary work, and only a test needs this."""
    engine = db._engine
    hub = engine.hub()
    frontend = engine.frontend
    future = frontend.new_future()
    hub.router.ask(adb.listen.Ask(server_channels,
                                  lambda ok, value: frontend.settle(future, ok, value), False))
    hub.wake()
    return frontend.returned(future, None, None, engine.calls)

PG_URLS = {"psycopg2": lambda: URLS["postgresql"], "psycopg": psycopg_url}


def note(item: Any) -> Notification:
    """``item``, which must be a notification (not a gap, not the end)."""
    assert type(item) is Notification, item
    return item


def channel(tag="c"):
    return f"adb_{tag}_{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=list(PG_URLS))
def pg(request):
    require_server("postgresql")
    return PG_URLS[request.param]()


@pytest_asyncio.fixture
async def ldb(front, pg):
    db = FRONTS[front](pg, pool_size=2)
    db.front = front
    yield db
    if not db.closed:
        await close(db)


# -- one way to drive a listener on every front-end ---------------------------------------

async def ready(listener):
    if isinstance(listener, adb.SyncListener):
        return listener.ready(10)
    return await ev(listener.ready())


async def take(listener, timeout=10.0):
    """The next item; raises TimeoutError if none comes within ``timeout``."""
    if isinstance(listener, adb.SyncListener):
        item = await asyncio.to_thread(listener.get, timeout)
        if item is None and not listener.closed:
            raise TimeoutError
        return item
    if isinstance(listener, adb.twisted.Listener):
        return await asyncio.wait_for(ev(listener.get()), timeout)
    try:
        return await asyncio.wait_for(listener.__anext__(), timeout)
    except StopAsyncIteration:
        return None


async def nothing_within(listener, seconds):
    try:
        item = await take(listener, seconds)
    except (TimeoutError, asyncio.TimeoutError):
        return True
    raise AssertionError(f"expected nothing, got {item!r}")


async def rest(listener):
    """Every item left once the listener has ended (iteration must stop)."""
    if isinstance(listener, adb.SyncListener):
        return await asyncio.wait_for(asyncio.to_thread(list, listener), 10)
    if isinstance(listener, adb.twisted.Listener):
        async def drain():
            return [item async for item in listener]
        return await asyncio.wait_for(ev(Deferred.fromCoroutine(drain())), 10)
    return await asyncio.wait_for(_alist(listener), 10)


async def _alist(listener):
    return [item async for item in listener]


async def close_listener(listener):
    if isinstance(listener, adb.SyncListener):
        listener.close()
    elif isinstance(listener, adb.twisted.Listener):
        await ev(listener.close())
    else:
        await listener.aclose()


async def wait_stats(db, key, value, timeout=10.0):
    deadline = time.monotonic() + timeout
    while db.stats()["listen"][key] != value:
        assert time.monotonic() < deadline, (key, value, db.stats()["listen"])
        await asyncio.sleep(0.01)


# -- the core cases, every front-end x both drivers ------------------------------------

async def test_receives_on_several_channels_in_order(ldb):
    a, b = channel("a"), channel("b")
    listener = await ready(ldb.listen(a, b))
    assert sorted(ldb.stats()["listen"]["channels"]) == sorted([a, b])
    sent = [(a, "1"), (b, "2"), (a, "3 with 'quotes' and é"), (b, ""), (a, "5")]
    for ch, payload in sent:
        assert await ev(ldb.notify(ch, payload)) is None
    got = [await take(listener) for _ in sent]
    assert [(n.channel, n.payload) for n in got] == sent
    assert all(type(n) is Notification and isinstance(n.pid, int) and n.pid > 0 for n in got)
    assert ldb.stats()["listen"]["delivered"] == len(sent)
    await close_listener(listener)


async def test_channel_names_are_quoted(ldb):
    odd = 'Mixed "Case"; drop ' + uuid.uuid4().hex[:8]
    listener = await ready(ldb.listen(odd))
    assert await ev(listening_channels(ldb)) == [odd]
    await ev(ldb.notify(odd, "x"))
    item = await take(listener)
    assert (item.channel, item.payload) == (odd, "x")
    await close_listener(listener)


async def test_several_listeners_each_get_every_notification(ldb):
    ch = channel()
    listeners = [await ready(ldb.listen(ch)) for _ in range(3)]
    assert ldb.stats()["listen"]["listeners"] == 3
    assert ldb.stats()["listen"]["channels"] == [ch]  # one LISTEN for the three
    for i in range(4):
        await ev(ldb.notify(ch, str(i)))
    for listener in listeners:
        assert [(await take(listener)).payload for _ in range(4)] == ["0", "1", "2", "3"]
    for listener in listeners:
        await close_listener(listener)


async def test_channel_unlistened_when_its_last_listener_closes(ldb):
    shared, own = channel("s"), channel("o")
    first = await ready(ldb.listen(shared, own))
    second = await ready(ldb.listen(shared))
    assert await ev(listening_channels(ldb)) == sorted([shared, own])
    await close_listener(first)
    assert first.closed
    assert await ev(listening_channels(ldb)) == [shared]  # the server's own word
    assert ldb.stats()["listen"]["channels"] == [shared]
    assert ldb.stats()["listen"]["listeners"] == 1
    await ev(ldb.notify(own, "nobody"))
    await ev(ldb.notify(shared, "still"))
    assert (await take(second)).payload == "still"
    assert await rest(first) == []  # closed: its iteration has ended
    await close_listener(second)
    assert await ev(listening_channels(ldb)) == []
    assert ldb.stats()["listen"]["channels"] == []


async def test_notify_in_a_transaction_is_delivered_at_commit_only(ldb):
    ch = channel()
    listener = await ready(ldb.listen(ch))
    tx = await ev(ldb.beginTransaction())
    await ev(ldb.notify(ch, "committed", tx))
    assert await nothing_within(listener, 0.3)
    await ev(ldb.commitTransaction(tx))
    assert (await take(listener)).payload == "committed"
    tx = await ev(ldb.beginTransaction())
    await ev(ldb.notify(ch, "rolled back", tx))
    await ev(ldb.rollbackTransaction(tx))
    await ev(ldb.notify(ch, "after"))
    assert (await take(listener)).payload == "after"
    await close_listener(listener)


async def test_killed_backend_gap_then_resumes_without_duplicates(ldb, pg):
    ch = channel("kill")
    listener = await ready(ldb.listen(ch))
    pid = ldb.stats()["listen"]["backend_pid"]
    assert isinstance(pid, int)
    stop = threading.Event()
    sender = adb.sync.Database(pg, pool_size=1)

    def send():
        i = 0
        while not stop.is_set():
            sender.notify(ch, str(i))
            i += 1
            time.sleep(0.003)

    thread = threading.Thread(target=send)
    thread.start()
    try:
        numbers: list[int] = []
        gaps: list[NotificationGap] = []
        gap_at = -1  # how many numbers had arrived when the gap came
        after_gap = 0
        deadline = time.monotonic() + 30
        while after_gap < 20:
            assert time.monotonic() < deadline, (numbers[-5:], gaps)
            item = await take(listener)
            if type(item) is NotificationGap:
                gaps.append(item)
                gap_at = len(numbers)
            else:
                numbers.append(int(item.payload))
                if gaps:
                    after_gap += 1
            if len(numbers) == 20 and not gaps:
                killed = sender.runQuery("select pg_terminate_backend(%s)", (pid,))
                assert killed == [(True,)]
    finally:
        stop.set()
        thread.join()
        sender.close()
    assert gaps == [NotificationGap("reconnect", None)]
    assert numbers == sorted(set(numbers)), "a notification was delivered twice or out of order"
    before, after = numbers[:gap_at], numbers[gap_at:]
    # never silence: numbers are missing only where the gap stands
    assert before == list(range(before[0], before[-1] + 1))
    assert after == list(range(after[0], after[-1] + 1))
    assert after[0] > before[-1]
    stats = ldb.stats()["listen"]
    assert stats["reconnects"] == 1
    assert stats["backend_pid"] not in (None, pid)
    assert stats["channels"] == [ch]
    await close_listener(listener)


async def test_slow_listener_gets_a_gap_with_the_exact_count(ldb):
    ch = channel("slow")
    listener = await ready(ldb.listen(ch, max_queued=5))
    await ev(ldb.runQuery("select pg_notify(%s, g::text) from generate_series(1, 20) g", (ch,)))
    await wait_stats(ldb, "dropped", 15)
    assert ldb.stats()["listen"]["delivered"] == 5
    got = [await take(listener) for _ in range(6)]
    assert got[:5] == [(ch, str(i), got[0].pid) for i in range(1, 6)]
    assert got[5] == NotificationGap("overflow", 15)
    await ev(ldb.notify(ch, "21"))
    assert (await take(listener)).payload == "21"  # room again: nothing else lost
    await close_listener(listener)


async def test_close_ends_every_listener_after_what_was_queued(ldb):
    a, b = channel("a"), channel("b")
    first = await ready(ldb.listen(a))
    second = await ready(ldb.listen(a, b))
    await ev(ldb.notify(a, "1"))
    await ev(ldb.notify(b, "2"))
    await wait_stats(ldb, "delivered", 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await asyncio.wait_for(close(ldb), 15)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert [n.payload for n in await rest(first)] == ["1"]
    assert [n.payload for n in await rest(second)] == ["1", "2"]
    assert first.closed and second.closed
    stats = ldb.stats()["listen"]
    assert stats["state"] == "stopped" and stats["backend_pid"] is None
    with pytest.raises(adb.PoolClosed):
        ldb.listen(a)
    await close_listener(first)  # closing after the Database closed: nothing to do


async def test_close_while_a_listener_is_starting_does_not_hang(ldb):
    listener = ldb.listen(channel())  # not awaited (but on adb.sync): LISTEN may be on its way
    await asyncio.wait_for(close(ldb), 15)
    try:
        assert await ready(listener) is listener  # a closed listener is past waiting
    except adb.PoolClosed:
        pass  # the thread ended before it LISTENed: ready() says why
    assert listener.closed
    assert await rest(listener) == []
    assert ldb.stats()["listen"]["state"] == "stopped"


async def test_listeners_before_ready_wait_for_it(ldb):
    ch = channel()
    listener = ldb.listen(ch)
    if ldb.front == "sync":  # adb.sync's listen returns once LISTENed
        assert listener.state is adb.listener.ListenerState.READY
        assert await ev(listening_channels(ldb)) == [ch]
        return
    pending = asyncio.ensure_future(take(listener))
    assert ldb.stats()["listen"]["listeners"] == 1
    assert (await ev(listener.ready())) is listener
    await ev(ldb.notify(ch, "after ready"))
    assert (await pending).payload == "after ready"
    await close_listener(listener)


async def test_a_burst_wakes_the_loop_a_few_times_not_once_per_notification(pg):
    db = adb.Database(pg, pool_size=1)
    ch = channel("burst")
    listener = await db.listen(ch).ready()
    hub = db._engine.hub()
    sink = hub.sink
    assert isinstance(sink, adb.frontend.BatchedSink)
    wakeups: list[int] = []
    call_soon = sink._call_soon

    def counted(fn: Any) -> object:
        wakeups.append(1)
        return call_soon(fn)
    sink._call_soon = counted
    await db.runQuery("select pg_notify(%s, g::text) from generate_series(1, 2000) g", (ch,))
    got = [note(await asyncio.wait_for(listener.__anext__(), 10)).payload for _ in range(2000)]
    assert got == [str(i) for i in range(1, 2001)]
    assert 1 <= len(wakeups) <= 100, len(wakeups)
    print("wake-ups for 2000 notifications:", len(wakeups))
    await db.close()


# -- what only some front-ends have ---------------------------------------------------

async def test_async_with_and_async_for(pg):
    db = adb.Database(pg, pool_size=2)
    ch = channel()
    async with db.listen(ch) as listener:
        assert db.stats()["listen"]["channels"] == [ch]
        for i in range(3):
            await db.notify(ch, str(i))
        got = []
        async for item in listener:
            got.append(note(item).payload)
            if len(got) == 3:
                break
    assert got == ["0", "1", "2"]
    assert listener.closed
    assert await listening_channels(db) == []
    await db.close()


async def test_twisted_async_for_in_a_coroutine(pg):
    from ..conftest import twisted_database
    db = twisted_database(pg, pool_size=2)
    ch = channel()

    async def consume():
        listener = await db.listen(ch).ready()
        for i in range(3):
            await db.notify(ch, str(i))
        got = []
        async for item in listener:
            got.append(note(item).payload)
            if len(got) == 3:
                break
        await listener.aclose()
        return got

    assert await ev(Deferred.fromCoroutine(consume())) == ["0", "1", "2"]
    await ev(db.close())


def test_sync_iterator_and_get_with_timeout(pg):
    ch = channel()
    with adb.sync.Database(pg, pool_size=2) as db:
        with db.listen(ch) as listener:
            assert db.stats()["listen"]["channels"] == [ch]  # LISTENed on return
            start = time.monotonic()
            assert listener.get(0.2) is None and not listener.closed
            assert time.monotonic() - start >= 0.19
            db.notify(ch, "a")
            db.notify(ch, "b")
            assert note(next(listener)).payload == "a"
            assert note(listener.get(5)).payload == "b"
        assert listener.closed
        assert listener.get(0.01) is None
        assert list(listener) == []


# -- refusals ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mysql", "sqlite"])
async def test_other_servers_refuse_clearly(front, kind, tmp_path):
    if kind == "mysql":
        require_server("mysql")
        url, server = URLS["mysql"], "MariaDB/MySQL"
    else:
        url, server = f"sqlite:///{tmp_path}/l.db", "SQLite"
    db = FRONTS[front](url, pool_size=1)
    try:
        with pytest.raises(InterfaceError, match=f"{server} has no LISTEN/NOTIFY"):
            db.listen("orders")
        with pytest.raises(InterfaceError, match=f"{server} has no LISTEN/NOTIFY"):
            db.notify("orders", "x")
        assert db.stats()["listen"]["listeners"] == 0
    finally:
        await close(db)


async def test_bad_input_is_refused_before_anything_runs(ldb):
    cases: list[tuple[tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
        ((), {}, InterfaceError, "at least one channel"),
        ((1,), {}, TypeError, "must be a str, not int"),
        (("",), {}, InterfaceError, "must not be empty"),
        (("x" * 64,), {}, InterfaceError, "63 bytes"),
        (("é" * 32,), {}, InterfaceError, "63 bytes"),
        (("a\x00b",), {}, InterfaceError, "NUL"),
        (("ok",), {"max_queued": 0}, InterfaceError, "max_queued must be a positive integer"),
        (("ok",), {"max_queued": True}, InterfaceError, "max_queued"),
        (("ok",), {"max_queued": "10"}, InterfaceError, "max_queued"),
    ]
    for args, kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            ldb.listen(*args, **kwargs)
    with pytest.raises(TypeError, match="payload must be a str, not bytes"):
        ldb.notify("ok", b"x")
    with pytest.raises(InterfaceError, match="63 bytes"):
        ldb.notify("y" * 64, "x")
    with pytest.raises(TypeError, match="not NoneType"):
        ldb.notify(None, "x")
    assert ldb.stats()["listen"]["listeners"] == 0
    assert "password" not in repr(ldb.stats()["listen"])


# -- Tornado's own tooling ----------------------------------------------------------------

class TornadoListenTests(AsyncTestCase):
    """The core cases with tornado.testing, on both drivers."""

    def urls(self):
        require_server("postgresql")
        return list(PG_URLS.values())

    @gen_test(timeout=30)
    async def test_receive_several_listeners_and_close(self):
        for make_url in self.urls():
            db = adb.tornado.Database(make_url(), ioloop=self.io_loop, pool_size=2)
            a, b = channel("a"), channel("b")
            one = await db.listen(a, b).ready()
            two = await db.listen(a).ready()
            await db.notify(a, "1")
            await db.notify(b, "2")
            got = [note(await one.__anext__()), note(await one.__anext__())]
            self.assertEqual([(n.channel, n.payload) for n in got], [(a, "1"), (b, "2")])
            self.assertEqual(note(await two.__anext__()).payload, "1")
            await one.aclose()
            self.assertEqual(await listening_channels(db), [a])
            await db.notify(a, "3")
            while db.stats()["listen"]["delivered"] < 4:
                await asyncio.sleep(0.01)
            await db.close()
            self.assertEqual([note(n).payload async for n in two], ["3"])

    @gen_test(timeout=30)
    async def test_notify_in_transaction_and_overflow(self):
        for make_url in self.urls():
            db = adb.tornado.Database(make_url(), ioloop=self.io_loop, pool_size=2)
            ch = channel()
            listener = await db.listen(ch, max_queued=2).ready()
            async with db.transaction() as tx:
                await db.notify(ch, "in tx", tx)
            await db.runQuery("select pg_notify(%s, g::text) from generate_series(1, 4) g",
                              (ch,))
            while db.stats()["listen"]["dropped"] < 3:
                await asyncio.sleep(0.01)
            got = [await listener.__anext__() for _ in range(3)]
            self.assertEqual([note(n).payload for n in got[:2]], ["in tx", "1"])
            self.assertEqual(got[2], NotificationGap("overflow", 3))
            await db.close()


async def test_unreachable_server_fails_ready_and_closes_quickly(front):
    db = FRONTS[front]("postgresql://root:Cx-canary@127.0.0.1:1/test", pool_size=1)
    try:
        if front == "sync":
            with pytest.raises(adb.ServerUnavailable) as raised:
                db.listen(channel())
        else:
            listener = db.listen(channel())
            with pytest.raises(adb.ServerUnavailable) as raised:
                await asyncio.wait_for(ev(listener.ready()), 10)
            assert not listener.closed  # it keeps waiting for the connection
        assert "127.0.0.1:1" in str(raised.value)
        assert "Cx-canary" not in str(raised.value) + repr(db.stats())
        assert db.stats()["listen"]["state"] == "backing off"
    finally:
        start = time.monotonic()
        await asyncio.wait_for(close(db), 10)
        assert time.monotonic() - start < 2
