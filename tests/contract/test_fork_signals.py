"""What a deployment must be able to trust: close() in a forked child returns at
once on every front-end and leaves the parent's connections alone; Ctrl-C during a
blocking call cancels its statement on the server; a drop-in pool a program let go
of is collected with its threads."""

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from typing import Any
import weakref
from pathlib import Path

import pytest
from twisted.python.failure import Failure

import adb
import adb.sync
import adb.tornado
import adb.twisted

from ..conftest import (CTRL_C, URLS, loop_reactor, psycopg_url, require_server, target_url)
from ..faults.test_faults import proxy_for, via


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

        def fired(result: Any) -> None:
            box.append(result)
            done.set()
        deferred.addBoth(fired)
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


#: forks made while the program's other threads begin and end transactions and streams
CHURN_FORKS = 40


@pytest.mark.timeout(600)
def test_children_forked_amid_transactions_and_streams_exit():
    """Each child forked while other threads make and let go of transaction and stream
    handles exits through the interpreter's exit (tests/contract/fork_churn_app.py).
    On the free-threaded build, adb's drop callbacks in ``weakref.finalize``'s shared
    registry left children hung at exit, about one fork in ten beside a CPU hog: a
    dict lock a fork caught held (docs/failures.md, the fork finding). Each fork waits
    until the threads have ended more transactions since the last one, so every fork
    lands in their churn; the program kills and counts a child that has not exited
    within a minute."""
    require_server("postgresql")
    result = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning",
         str(Path(__file__).with_name("fork_churn_app.py")), psycopg_url(), str(CHURN_FORKS)],
        capture_output=True, text=True, timeout=560)
    assert result.returncode == 0, result.stderr[-3000:]
    forks, hung, transactions = (int(word) for word in result.stdout.split()[1::2])
    assert (forks, hung) == (CHURN_FORKS, 0), result.stdout
    assert transactions >= 3 * CHURN_FORKS, result.stdout  # the churn ran at every fork

@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_ctrl_c_during_a_blocking_call_cancels_its_statement(kind, caplog):
    """KeyboardInterrupt in the waiting thread gives the call up and cancels it on
    the server from that thread before the interrupt goes on, so the next call on
    a pool of one runs at once instead of after the sleep."""
    require_server(kind)
    marker = f"adb_ctrl_c_{uuid.uuid4().hex[:10]}"
    sleep = "select pg_sleep(10)" if kind == "postgresql" else "select sleep(10)"
    db = adb.sync.Database(URLS[kind], pool_size=1)
    main = threading.get_ident()  # the main thread, where Ctrl-C's handler runs
    # Ctrl-C's own handler, whatever an earlier test (a reactor) installed
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        db.runQueryValue("select 1")
        # Ctrl-C once the server runs the statement (its own view), not after a
        # guess at how long getting there takes
        interrupt = threading.Thread(target=_when_running, daemon=True, args=(
            kind, marker, lambda: signal.pthread_kill(main, signal.SIGINT)))
        interrupt.start()
        with caplog.at_level(logging.INFO, logger="adb"):
            with pytest.raises(KeyboardInterrupt):
                db.runQuery(f"{sleep} /* {marker} */")
        interrupt.join(20)
        # sent by the interrupted thread itself, before the interrupt went on
        assert [r.threadName for r in caplog.records
                if "its caller was interrupted" in r.getMessage()] == ["MainThread"]
        started = time.monotonic()
        assert db.runQueryValue("select 1") == 1
        assert time.monotonic() - started < 5  # not after the rest of the 10 s sleep
        assert _running(kind, marker) == 0
    finally:
        signal.signal(signal.SIGINT, handler)
        db.close()


def _running(kind, marker, admin=None):
    """How many statements marked ``marker`` the server runs (asked on ``admin``,
    else on a Database of its own). PostgreSQL shows a backend's last statement when it
    is idle too, and for a moment while it exits: only an active one runs."""
    if admin is None:
        with adb.sync.Database(URLS[kind], pool_size=1) as own:
            return _running(kind, marker, own)
    if kind == "postgresql":
        return admin.runQueryValue(
            "select count(*) from pg_stat_activity where query like %s and state = 'active' "
            "and pid <> pg_backend_pid()", (f"%/* {marker} */%",))
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


# -- a real process: Ctrl-C, SIGTERM and the interpreter's exit without close() ---------

ROOT = Path(__file__).resolve().parents[2]
#: seconds: the statement sleeps far longer, so a statement left running is caught
SLEEP = 60
#: seconds within which the statement must be gone from the server once the process
#: exited (the cancel went out before it did; the server ends it at once)
GONE_WITHIN = 10.0
BOUND = 30.0  # seconds any other wait here may take: never a hang

#: what each front-end's script runs: STATEMENT in a Database that is never closed
SCRIPTS = {
    "sync": """
import adb.sync
db = adb.sync.Database(URL, pool_size=1)
db.runOperation(STATEMENT)
""",
    "asyncio": """
import asyncio
import adb
async def main():
    db = adb.Database(URL, pool_size=1)
    await db.runOperation(STATEMENT)
asyncio.run(main())
""",
    "tornado": """
from tornado.ioloop import IOLoop
import adb.tornado
async def main():
    db = adb.tornado.Database(URL, pool_size=1)
    await db.runOperation(STATEMENT)
IOLoop.current().run_sync(main)
""",
    # os._exit as the interrupt goes on: no exit handler runs, so what cancels the
    # statement is what adb.sync did in the interrupted thread before re-raising
    "sync, no exit handlers": """
import os
import adb.sync
db = adb.sync.Database(URL, pool_size=1)
try:
    db.runOperation(STATEMENT)
except KeyboardInterrupt:
    os.write(2, b"KeyboardInterrupt")
    os._exit(130)
""",
    # SIGTERM turned into SystemExit, as servers and careful scripts do
    "sync, SIGTERM raising SystemExit": """
import signal, sys
import adb.sync
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
db = adb.sync.Database(URL, pool_size=1)
db.runOperation(STATEMENT)
""",
    # no signal: the main thread ends while a thread of the script's runs the statement
    "interpreter exit": """
import sys, threading
import adb.sync
db = adb.sync.Database(URL, pool_size=1)
threading.Thread(target=db.runOperation, args=(STATEMENT,), daemon=True).start()
sys.stdin.readline()  # the test says when the server shows the statement running
""",
}
DRIVERS = {"psycopg2": "postgresql", "psycopg": "postgresql", "pymysql": "mysql",
           "mysqldb": "mysql"}
#: each driver's name among conftest's targets (and the endings' sites)
TARGET_OF = {"psycopg2": "postgresql", "psycopg": "psycopg", "pymysql": "mysql",
             "mysqldb": "mysqldb"}
#: a script logs adb's lines (the cancel it sent, or why it could not) with the time
#: and thread, for the test's message when its statement ran on or left a row
LOG = ("import logging; logging.basicConfig(level=logging.INFO, "
       "format='%(relativeCreated)d ms %(threadName)s %(levelname)s %(message)s')\n")


class Script:
    """A Python process running one of SCRIPTS on one driver: its INSERT ... SELECT
    sleeps SLEEP seconds on the server, marked with a comment the server's view
    shows; a table of its own, read by the test."""

    def __init__(self, front, driver, proxy=None):
        self.kind = DRIVERS[driver]
        require_server(self.kind)
        self.url = target_url(TARGET_OF[driver])
        if proxy is not None:  # a FaultProxy between the script and the server
            self.url = via(proxy, self.url)
        self.table = f"adb_exit_{uuid.uuid4().hex[:10]}"
        self.marker = f"/* {self.table} */"
        sleep = f"pg_sleep({SLEEP})" if self.kind == "postgresql" else f"sleep({SLEEP})"
        statement = f"insert into {self.table} select 1 from (select {sleep}) s {self.marker}"
        self.admin = adb.sync.Database(URLS[self.kind], pool_size=1)
        self.admin.runOperation(f"create table {self.table} (k int)")
        code = (CTRL_C + LOG + f"URL = {self.url!r}\nSTATEMENT = {statement!r}\n"
                + SCRIPTS[front])
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)

    def running(self):
        """How many server sessions run the script's statement now."""
        if self.kind == "postgresql":
            sql = ("select count(*) from pg_stat_activity where query like %s "
                   "and state = 'active' and pid <> pg_backend_pid()")
        else:
            sql = ("select count(*) from information_schema.processlist where info like %s "
                   "and id <> connection_id()")
        return self.admin.runQueryValue(sql, (f"%{self.marker}%",))

    def wait_running(self):
        """Until the server shows the statement running (the script died: fail)."""
        deadline = time.monotonic() + BOUND
        while not self.running():
            if self.process.poll() is not None:
                pytest.fail(f"the script exited early: {self.exited()}")
            assert time.monotonic() < deadline, "the statement never showed on the server"
            time.sleep(0.02)

    def exited(self, say=None):
        """Wait for the process to exit (``say``: first write that to its stdin); its
        stderr."""
        try:
            _, err = self.process.communicate(say, timeout=BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the script did not exit within {BOUND} s")
        return err.decode()

    def gone_within(self, seconds):
        """True once the server no longer runs the statement, False after ``seconds``."""
        deadline = time.monotonic() + seconds
        while self.running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def rows(self):
        return self.admin.runQueryValue(f"select count(*) from {self.table}")

    def clean_up(self):
        """Whatever happened: no process, no statement left sleeping, no table."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.kind == "postgresql":
            self.admin.runQuery("select pg_terminate_backend(pid) from pg_stat_activity "
                                "where query like %s and pid <> pg_backend_pid()",
                                (f"%{self.marker}%",))
        else:
            for (session,) in self.admin.runQuery(
                    "select id from information_schema.processlist where info like %s "
                    "and id <> connection_id()", (f"%{self.marker}%",)):
                self.admin.runOperation(f"kill {int(session)}")
        self.admin.runOperation(f"drop table if exists {self.table}")
        self.admin.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize("front", ["sync", "sync, no exit handlers", "asyncio", "tornado"])
def test_ctrl_c_in_a_script_leaves_no_statement_to_commit(front, driver):
    """A script that never closes its Database gets a real SIGINT while its INSERT
    runs on the server (PostgreSQL and MariaDB run a statement on after its client
    is gone, and commit it): it dies of KeyboardInterrupt, the statement is gone
    from the server at once, and its row never appears. adb.sync cancels from the
    interrupted thread before the KeyboardInterrupt goes on (so even a process
    that ends with os._exit then, running no exit handler, leaves nothing);
    asyncio.run and Tornado's IOLoop cancel the call's task, and the exit handler
    cancels what still runs."""
    script = Script(front, driver)
    try:
        script.wait_running()
        script.process.send_signal(signal.SIGINT)
        err = script.exited()
        assert "KeyboardInterrupt" in err, err
        assert script.gone_within(GONE_WITHIN), \
            f"the statement still ran on the server {GONE_WITHIN} s after the script died:\n{err}"
        assert script.rows() == 0, f"the script's row was written; it said:\n{err}"
    finally:
        script.clean_up()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("driver", list(DRIVERS))
def test_ctrl_c_cancels_even_when_the_first_side_connection_is_refused(driver):
    """Ctrl-C in a plain script whose server's address refuses the next connection
    (the cancel's side connection: a connection limit reached, a reset): the cancel
    is sent again from the interrupted thread, so the statement still ends at once
    and writes nothing. Sent once, it would run on after the script died (and
    commit: MariaDB ends a SLEEP() whose client is gone and goes on)."""
    proxy = proxy_for(DRIVERS[driver])
    script = Script("sync", driver, proxy=proxy)
    try:
        script.wait_running()
        proxy.refuse_next(1)
        script.process.send_signal(signal.SIGINT)
        err = script.exited()
        assert "KeyboardInterrupt" in err, err
        assert proxy.refused == 1, err
        assert "try 1 of 3" in err, err
        assert script.gone_within(GONE_WITHIN), err
        assert script.rows() == 0, err
    finally:
        script.clean_up()
        proxy.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("driver", list(DRIVERS))
def test_sigterm_raising_system_exit_leaves_no_statement_to_commit(driver):
    """SIGTERM whose handler raises SystemExit (gunicorn's, uvicorn's, a careful
    script's): the same as Ctrl-C."""
    script = Script("sync, SIGTERM raising SystemExit", driver)
    try:
        script.wait_running()
        script.process.send_signal(signal.SIGTERM)
        err = script.exited()
        assert script.process.returncode == 143, err
        assert script.gone_within(GONE_WITHIN), err
        assert script.rows() == 0, err
    finally:
        script.clean_up()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("driver", list(DRIVERS))
def test_interpreter_exit_cancels_what_a_database_still_runs(driver):
    """No signal, no close(): the script's main thread ends while a daemon thread of
    its own waits for a running INSERT. At exit, adb cancels it on the server: gone
    at once, no row (without that, the statement would run its course and commit)."""
    script = Script("interpreter exit", driver)
    try:
        script.wait_running()
        err = script.exited(say=b"exit\n")
        assert script.process.returncode == 0, err
        assert script.gone_within(GONE_WITHIN), err
        assert script.rows() == 0, err
    finally:
        script.clean_up()


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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["postgresql", "psycopg"])
def test_a_forked_child_interrupted_in_a_call_cancels_nothing_of_its_parent(kind):
    """A child forked (from a signal handler) while the main thread waited on a call
    inherits that wait; interrupted there (its handler raises SystemExit), it gives
    the call up, but the call is the parent's, on the parent's session: no cancel
    may go out (one did, with the parent's key: the parent's statement failed with
    QueryCanceled; found by the endings checker). The parent's call returns."""
    url = psycopg_url() if kind == "psycopg" else URLS["postgresql"]
    require_server("postgresql")
    marker = f"adb_fork_wait_{uuid.uuid4().hex[:10]}"
    db = adb.sync.Database(url, pool_size=1)
    children = []

    def fork_and_leave(signum, frame):
        pid = os.fork()
        if pid == 0:  # the child: leave through the interrupted wait
            raise SystemExit(0)
        children.append(pid)

    handler = signal.signal(signal.SIGUSR1, fork_and_leave)
    main = threading.get_ident()
    try:
        db.runQueryValue("select 1")
        poke = threading.Thread(target=_when_running, daemon=True, args=(
            "postgresql", marker, lambda: signal.pthread_kill(main, signal.SIGUSR1)))
        poke.start()
        try:
            rows = db.runQuery(f"select 7 from pg_sleep(3) /* {marker} */")
        except SystemExit:  # the child, leaving as its handler said
            os._exit(0)
        poke.join(20)
        assert rows == [(7,)]  # not QueryCanceled: the child sent no cancel
        assert children, "the signal never came: the statement was not seen running"
        _, status = os.waitpid(children[0], 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        signal.signal(signal.SIGUSR1, handler)
        db.close()


#: a unit of batched calls (autobatch) in flight when the program exits without
#: close(): the one worker is held (runInteraction waits on an Event) until every
#: call is queued, so the next job it takes heads a unit of all of them
UNIT_SCRIPTS = {
    "asyncio": """
import asyncio, sys, threading
import adb
async def main():
    db = adb.Database(URL, pool_size=1, autobatch=UNIT)
    release = threading.Event()
    first = db.runInteraction(lambda cursor: release.wait(30))
    calls = [db.runOperation(STATEMENT, (f"u{n}", n)) for n in range(UNIT)]
    release.set()
    await first
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    # returns with the unit's calls unanswered: the program exits, no close()
asyncio.run(main())
""",
    "tornado": """
import sys, threading
from tornado.ioloop import IOLoop
import adb.tornado
async def main():
    db = adb.tornado.Database(URL, pool_size=1, autobatch=UNIT)
    release = threading.Event()
    first = db.runInteraction(lambda cursor: release.wait(30))
    calls = [db.runOperation(STATEMENT, (f"u{n}", n)) for n in range(UNIT)]
    release.set()
    await first
    await IOLoop.current().run_in_executor(None, sys.stdin.readline)
IOLoop.current().run_sync(main)
""",
}
UNIT = 4


class UnitScript(Script):
    """A program whose UNIT inserts, one unit on its one worker, wait at a gate the
    test holds when it exits without close(). The gate is the endings checker's
    (``tests/endings/site.py``): a row the test holds locked, which each insert
    reads in share mode, so a cancel ends the insert on both servers (a killed
    ``GET_LOCK``, ``tests/gates.py``'s gate on MariaDB, returns NULL and lets its
    statement go on). The table's name is in the inserts' text, which the server's
    view shows."""

    def __init__(self, front, driver, tmp_path):
        from ..endings.site import Site
        self.kind = DRIVERS[driver]
        require_server(self.kind)
        self.site = Site(TARGET_OF[driver], str(tmp_path))
        self.site.create()
        self.site.close_gate()
        self.admin = self.site.admin
        self.table = self.marker = self.site.table
        statement = self.site.insert_sql()
        code = (CTRL_C + f"URL = {self.site.url!r}\nSTATEMENT = {statement!r}\nUNIT = {UNIT}\n"
                + UNIT_SCRIPTS[front])
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)

    def wait_running(self):
        """Until the server shows the unit's first insert waiting at the gate."""
        if self.site.wait_running(1, BOUND) < 1:
            pytest.fail(f"the unit never showed on the server: {self.process.poll()}")

    def clean_up(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.site.drop()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize("front", list(UNIT_SCRIPTS))
def test_interpreter_exit_cancels_a_unit_of_batched_calls(front, driver, tmp_path):
    """A unit of autobatch'ed inserts waits at the test's gate when its program exits
    without close(). The exit handler cancels it on the server as it does a single
    call, and nothing of it may run on: the worker, given the unit's cancel, ran
    each of its calls again alone (a unit that fails is rerun call by call), and
    a statement sent as the process went away stayed on the server and committed
    once the gate opened (found by the endings checker: Tornado on psycopg 3 with
    autobatch=16, the drop-in on MariaDB). With the gate still closed the server
    must run none of them; after it opens, no row."""
    script = UnitScript(front, driver, tmp_path)
    try:
        script.wait_running()
        err = script.exited(say=b"exit\n")
        assert script.process.returncode == 0, err
        assert script.site.wait_quiet(GONE_WITHIN) is None  # the gate still closed
        script.site.open_gate()
        assert script.site.tokens() == []
    finally:
        script.clean_up()
