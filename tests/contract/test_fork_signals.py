"""What a deployment must be able to trust: close() in a forked child returns at
once on every front-end and leaves the parent's connections alone; Ctrl-C during a
blocking call cancels its statement on the server; a drop-in pool a program let go
of is collected with its threads."""

import asyncio
import gc
import os
import signal
import threading
import time
import uuid
import warnings
from typing import Any
import weakref

import pytest
from twisted.python.failure import Failure

import adb
import adb.sync
import adb.tornado
import adb.twisted

from ..conftest import URLS, loop_reactor, require_server


def _in_child(body, limit=10.0):
    """Run ``body()`` in a forked child; its exit status (0: it returned), the child
    killed and the test failed if it has not exited within ``limit`` seconds."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            body()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not exit within {limit} s")


def _until(condition, what, limit=20.0):
    """Poll ``condition()`` until it holds; fail after ``limit`` s, naming ``what``."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _backends(app):
    """How many PostgreSQL backends run under application_name ``app``."""
    with adb.sync.Database(URLS["postgresql"], pool_size=1) as admin:
        return admin.runQueryValue(
            "select count(*) from pg_stat_activity where application_name = %s", (app,))


@pytest.mark.parametrize("front", ["sync", "asyncio", "tornado", "twisted", "adbapi"])
def test_close_in_a_forked_child_returns_at_once_and_leaves_the_parents_connections(front):
    """A Database made before fork (gunicorn --preload, multiprocessing's fork): close()
    in the child returns at once, and says nothing on the parent's sockets: the
    parent's connections stay open and serve on, none reconnected."""
    require_server("postgresql")
    app = f"adb-fork-{uuid.uuid4().hex[:10]}"
    url = f"{URLS['postgresql']}?application_name={app}"
    if front == "adbapi":
        _adbapi_child_close(app)
        return
    db = adb.sync.Database(url, pool_size=2)  # the parent's own, to check with
    if front == "sync":
        closing = db
    else:
        closing = None
    try:
        assert db.runQueryValue("select 1") == 1
        _until(lambda: db.stats()["connected"] == 2, "both connections open")
        if front == "sync":
            def child():
                assert closing is not None
                started = time.monotonic()
                closing.close()
                assert time.monotonic() - started < 5  # a hang is killed at 10 s
                assert closing.closed
        else:
            made = {"asyncio": adb.Database, "tornado": adb.tornado.Database,
                    "twisted": None}[front]
            other = _made_before_fork(front, made, url)

            def child():
                started = time.monotonic()
                if front == "twisted":
                    fired: list[object] = []
                    other.close().addCallback(fired.append)
                    assert fired == [None]
                else:
                    asyncio.run(other.close())
                assert time.monotonic() - started < 5  # a hang is killed at 10 s
                assert other.closed
        closed, resolve = (db, _same) if front == "sync" else (other, _resolver(front, other))
        before = _pids(closed, resolve)
        assert _in_child(child) == 0
        # each connection the child closed answers with its backend of before: the
        # server reads a goodbye sent on a shared socket before this statement
        assert _pids(closed, resolve) == before
        assert closed.stats()["reconnects"] == 0
        assert db.runQueryValue("select 1") == 1
        assert db.stats()["reconnects"] == 0
        assert _backends(app) == (2 if front == "sync" else 4)
    finally:
        db.close()
        if front != "sync":
            _close_other(front, other)


_others: dict[int, Any] = {}


def _pids(db, resolve):
    """The backend pid of each connection of ``db`` (a pool of two), sorted: each
    worker pinned by a transaction of its own answers on its connection (a
    connection whose backend has gone fails here). ``resolve`` gives the value of
    one of ``db``'s calls."""
    txs = [resolve(db.beginTransaction()) for _ in range(2)]
    try:
        return sorted(resolve(db.runQueryValue("select pg_backend_pid()", tx=tx)) for tx in txs)
    finally:
        for tx in txs:
            resolve(db.rollbackTransaction(tx))


def _same(value):
    return value


def _resolver(front, other):
    """``resolve`` for ``_pids`` on a Database made by ``_made_before_fork``."""
    if front != "twisted":
        return _others[id(other)].run_until_complete

    def resolve(deferred):  # it fires in a worker thread: the reactor never runs
        done, box = threading.Event(), []
        deferred.addBoth(lambda result: (box.append(result), done.set()))
        assert done.wait(20), "a call of the Twisted Database never fired"
        if isinstance(box[0], Failure):
            box[0].raiseException()
        return box[0]
    return resolve


def _made_before_fork(front, made, url):
    """A Database of ``front``, connected, whose pool the child inherits."""
    if front == "twisted":
        other = adb.twisted.Database(url, pool_size=2, reactor=_Reactor())
        other.runQueryValue("select 1")  # Deferreds fire on a reactor we never run
        _until(lambda: other.stats()["connected"] == 2, "both connections open")
        return other

    async def connect():
        database = made(url, pool_size=2)
        await database.runQueryValue("select 1")
        return database
    loop = asyncio.new_event_loop()
    other = loop.run_until_complete(connect())
    _others[id(other)] = loop
    return other


def _close_other(front, other):
    if front == "twisted":
        other._engine.close_blocking()
        return
    loop = _others.pop(id(other))
    loop.run_until_complete(other.close())
    loop.close()


class _Reactor:
    """Enough of a reactor for a Database whose Deferreds nobody waits for."""

    def callFromThread(self, fn, *args):
        fn(*args)

    def callLater(self, seconds, fn, *args):
        timer = threading.Timer(seconds, fn, args)
        timer.daemon = True
        timer.start()
        return timer


def _adbapi_pids(pool, loop):
    """``_pids`` for the drop-in: two interactions that meet at a barrier, so each
    runs on a connection of its own, run on the reactor's loop."""
    barrier = threading.Barrier(2, timeout=20)

    def pid(cursor):
        barrier.wait()
        cursor.execute("select pg_backend_pid()")
        return cursor.fetchone()[0]
    both = [pool.runInteraction(pid).asFuture(loop) for _ in range(2)]
    return sorted(loop.run_until_complete(asyncio.wait_for(asyncio.gather(*both), 30)))


def _adbapi_child_close(app):
    """The drop-in: a started pool, finalClose() (what the reactor's shutdown and
    close() run) in a forked child."""
    from twisted.internet.asyncioreactor import AsyncioSelectorReactor
    loop = asyncio.new_event_loop()
    reactor = AsyncioSelectorReactor(loop)
    pool = adb.twisted.ConnectionPool("psycopg2", host="127.0.0.1", user="root", dbname="test",
                                      application_name=app, cp_min=2, cp_max=2,
                                      cp_reactor=reactor)
    try:
        pool.start()
        _until(lambda: pool.stats()["connected"] == 2, "both connections open")

        def child():
            started = time.monotonic()
            pool.close()
            assert time.monotonic() - started < 5  # a hang is killed at 10 s
        before = _adbapi_pids(pool, loop)
        assert _in_child(child) == 0
        assert _adbapi_pids(pool, loop) == before  # see _pids
        assert _backends(app) == 2
        assert pool.stats()["reconnects"] == 0
    finally:
        pool.close()
        reactor.removeReader(reactor.waker)
        reactor.waker.connectionLost(None)
        loop.close()


def test_the_embedded_file_outlives_a_forked_child_that_exits():
    """A forked child's exit (its atexit handlers run: a gunicorn worker's) removes
    no file of its parent's embedded default."""
    db = adb.sync.Database()
    try:
        path = db.runQueryValue("select file from pragma_database_list where name = 'main'")
        assert path is not None and os.path.exists(path)

        def child():
            import weakref
            getattr(weakref.finalize, "_exitfunc")()  # what the child's interpreter exit runs
        assert _in_child(child) == 0
        assert os.path.exists(path)
        assert db.runQueryValue("select 1") == 1
    finally:
        db.close()
    assert not os.path.exists(path)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_ctrl_c_during_a_blocking_call_cancels_its_statement(kind):
    """KeyboardInterrupt in the waiting thread gives the call up as an asyncio
    cancellation does: the watchdog cancels it on the server, so the next call on a
    pool of one runs at once instead of after the sleep."""
    require_server(kind)
    marker = f"adb_ctrl_c_{uuid.uuid4().hex[:10]}"
    sleep = "select pg_sleep(10)" if kind == "postgresql" else "select sleep(10)"
    db = adb.sync.Database(URLS[kind], pool_size=1)
    main = threading.main_thread().ident
    # Ctrl-C's own handler, whatever an earlier test (a reactor) installed
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        db.runQueryValue("select 1")
        # Ctrl-C once the server runs the statement (its own view), not after a
        # guess at how long getting there takes
        interrupt = threading.Thread(target=_when_running, daemon=True, args=(
            kind, marker, lambda: signal.pthread_kill(main, signal.SIGINT)))
        interrupt.start()
        with pytest.raises(KeyboardInterrupt):
            db.runQuery(f"{sleep} /* {marker} */")
        interrupt.join(20)
        started = time.monotonic()
        assert db.runQueryValue("select 1") == 1
        assert time.monotonic() - started < 5  # not after the rest of the 10 s sleep
        assert _running(kind, marker) == 0
    finally:
        signal.signal(signal.SIGINT, handler)
        db.close()


def _running(kind, marker, admin=None):
    """How many statements marked ``marker`` the server runs (asked on ``admin``,
    else on a Database of its own)."""
    if admin is None:
        with adb.sync.Database(URLS[kind], pool_size=1) as own:
            return _running(kind, marker, own)
    if kind == "postgresql":
        return admin.runQueryValue(
            "select count(*) from pg_stat_activity where query like %s and pid <> "
            "pg_backend_pid()", (f"%/* {marker} */%",))
    return admin.runQueryValue(
        "select count(*) from information_schema.processlist where info like %s "
        "and id <> connection_id()", (f"%/* {marker} */%",))


def _when_running(kind, marker, then, limit=20.0):
    """Call ``then()`` once the server runs a statement marked ``marker``; never if
    it has not within ``limit`` s (the call then ends uninterrupted: the test fails)."""
    with adb.sync.Database(URLS[kind], pool_size=1) as admin:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if _running(kind, marker, admin):
                then()
                return
            time.sleep(0.01)


def _started_pool_on_a_dropped_reactor():
    """A started drop-in pool on a reactor of its own, both let go of."""
    from twisted.internet.asyncioreactor import AsyncioSelectorReactor
    loop = asyncio.new_event_loop()
    reactor = AsyncioSelectorReactor(loop)
    pool = adb.twisted.ConnectionPool("psycopg2", host="127.0.0.1", user="root", dbname="test",
                                      cp_min=1, cp_max=3, cp_reactor=reactor)
    pool.start()
    reactor.removeReader(reactor.waker)
    reactor.waker.connectionLost(None)
    loop.close()
    return weakref.ref(pool)


def test_an_unreferenced_dropin_pool_is_collected_with_its_threads():
    """Started drop-in pools on a reactor the program let go of: collected, their
    threads ended, as adbapi's are (its ThreadPool's threads hold no pool); each
    warns that it was never closed."""
    require_server("postgresql")
    before = threading.active_count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pools = [_started_pool_on_a_dropped_reactor() for _ in range(5)]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            gc.collect()
            alive = sum(ref() is not None for ref in pools)  # this test's pools only
            if alive == 0 and threading.active_count() <= before:
                break
            time.sleep(0.1)
    assert alive == 0
    assert threading.active_count() <= before
    assert sum("unclosed" in str(w.message) for w in caught) == 5


def test_a_dropped_database_stops_its_threads_and_removes_its_file():
    """The adb.Database family: dropped unclosed, it warns, its threads end and the
    embedded default's file is gone."""
    before = threading.active_count()
    db = adb.sync.Database(pool_size=2)
    path = db.runQueryValue("select file from pragma_database_list where name = 'main'")
    assert path is not None and os.path.exists(path)
    with pytest.warns(ResourceWarning, match="unclosed"):
        del db
        gc.collect()
    deadline = time.monotonic() + 20
    while (threading.active_count() > before or os.path.exists(path)) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before
    assert not os.path.exists(path)
