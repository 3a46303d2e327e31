"""runTransaction and Database(retries=N), with real transient failures made here:
two concurrent SERIALIZABLE transactions on PostgreSQL, opposite-order updates
deadlocking on PostgreSQL and MariaDB, lock waits timing out, a locked SQLite
file, a backend killed inside a transaction and during its commit. Every retried
transaction's effects must appear exactly once, on every front-end."""

import asyncio
import sqlite3
import sys
import threading
import time
from typing import Any

import pytest

import adb
import adb.sync
from adb.errors import ConnectionLost, InterfaceError, ServerUnavailable, TransactionError

from ..conftest import ALL_FRONTS, ev, fronts_fixture
from ..idioms import Meeting, as_fn, front_of, run_transaction

#: the core contract: every front-end, adb.trio included
front = fronts_fixture(ALL_FRONTS)

SERVERS = ["postgresql", "psycopg", "mysql"]


async def counters(db, keys=(1, 2)):
    """A table ``<table>_c`` of counters (k, a, b), a row per key, all at 0."""
    name = db.table + "_c"
    await ev(db.runOperation(f"drop table if exists {name}"))
    await ev(db.runOperation(f"create table {name} (k int primary key, a int not null, "
                             "b int not null)"))
    for key in keys:
        await ev(db.runOperation(db.target.sql(f"insert into {name} values (%s, 0, 0)"), (key,)))
    return name


async def rows(db, sql):
    return [tuple(row) for row in await ev(db.runQuery(sql))]


def bump(db, tx, table, column, key):
    return tx.runOperation(db.target.sql(f"update {table} set {column} = {column} + 1 "
                                         "where k = %s"), (key,))


#: seconds between looks at ``innodb_trx``: more than the 0.1 s without a read after which
#: InnoDB refreshes it (``lock_wait_seen``)
LOOK_EVERY = 0.25


async def lock_wait_seen(url, session, waiting):
    """Wait until MariaDB shows the session ``session`` (a connection id) waiting for a
    lock; fail at once, with what ended it, if the call meant to wait (``waiting``)
    ended first, and after 60 s with what the server showed.

    InnoDB serves ``innodb_trx`` from a copy it refreshes only once nobody has read
    it for 0.1 s (``CACHE_MIN_IDLE_TIME_US``, so that joined views agree): a look
    every few milliseconds would read the first copy for ever, which the test before
    may have left, showing its sessions and never this one's wait. The looks come
    LOOK_EVERY apart."""
    side = adb.sync.Database(url, pool_size=1)
    query = ("select trx_mysql_thread_id, trx_state, trx_query "
             "from information_schema.innodb_trx")
    try:
        began = time.monotonic()
        deadline, polls, slowest = began + 60, 0, 0.0
        shown: list[tuple[Any, ...]] = []
        while True:
            if waiting.done():  # what the server showed last, should its error come first
                try:
                    await waiting
                except Exception as exc:
                    raise AssertionError(
                        f"the call meant to wait for the lock failed after "
                        f"{time.monotonic() - began:.1f} s, {polls} looks at the server "
                        f"(the slowest {slowest:.1f} s), which showed {shown} last") from exc
                raise AssertionError("the call meant to wait for the lock ended first")
            asked = time.monotonic()
            shown = [tuple(row) for row in await asyncio.to_thread(side.runQuery, query)]
            polls, slowest = polls + 1, max(slowest, time.monotonic() - asked)
            if (session, "LOCK WAIT") in [row[:2] for row in shown]:
                return
            if time.monotonic() >= deadline:
                sessions = await asyncio.to_thread(
                    side.runQuery, "select id, command, state, info "
                    "from information_schema.processlist order by id")
                raise AssertionError(
                    f"session {session} never waited for the lock; the server shows {shown} "
                    f"in innodb_trx, and these sessions: {[tuple(row) for row in sessions]}")
            await asyncio.sleep(LOOK_EVERY)
    finally:
        side.close()


def killer_sql(kind):
    return ("select pg_terminate_backend(%s)" if kind == "postgresql" else "kill %s",
            "select pg_backend_pid()" if kind == "postgresql" else "select connection_id()")


def kill(url, kind, pid):
    side = adb.sync.Database(url, pool_size=1)
    try:
        side.runOperation(killer_sql(kind)[0], (pid,))
    finally:
        side.close()


# -- runTransaction: transient failures made by two transactions ------------------------------

@pytest.mark.parametrize("target", SERVERS, indirect=True)
async def test_opposite_order_updates_deadlock_and_the_victim_runs_again(db):
    table = await counters(db)
    meeting = Meeting(db)
    runs = []

    def body(tx, column, first, second):
        runs.append(column)
        yield bump(db, tx, table, column, first)
        yield meeting.wait()  # both hold their first row: each now waits for the other's
        yield bump(db, tx, table, column, second)
        return column

    fn = as_fn(db, body)
    results = await asyncio.gather(run_transaction(db, fn, "a", 1, 2, retries=5),
                                   run_transaction(db, fn, "b", 2, 1, retries=5))
    assert list(results) == ["a", "b"]
    assert await rows(db, f"select k, a, b from {table} order by k") == [(1, 1, 1), (2, 1, 1)]
    assert len(runs) >= 3 and db.stats()["transaction_retries"] == len(runs) - 2


@pytest.mark.parametrize("target", ["postgresql", "psycopg"], indirect=True)
async def test_concurrent_serializable_transactions_conflict_and_one_runs_again(db):
    """Write skew: each reads how many rows there are, then adds one saying so.
    SERIALIZABLE refuses one of them (40001); run again, it sees the other's row."""
    meeting = Meeting(db)
    runs = []

    def body(tx, key):
        runs.append(key)
        yield tx.runOperation("set transaction isolation level serializable")
        ((seen,),) = yield tx.runQuery(f"select count(*) from {db.table}")
        yield meeting.wait()
        yield tx.runOperation(f"insert into {db.table} values (%s, %s)", (key, str(seen)))
        return seen

    fn = as_fn(db, body)
    seen = await asyncio.gather(run_transaction(db, fn, 1, retries=5),
                                run_transaction(db, fn, 2, retries=5))
    assert sorted(seen) == [0, 1]
    assert sorted(await rows(db, f"select data from {db.table}")) == [("0",), ("1",)]
    # one of them ran again; more than once when its retry began before the other's
    # commit (a loaded machine: seen in the interpreter matrix, 4 and 5 runs), as the
    # test above allows: each run beyond the first two is one counted retry
    assert len(runs) >= 3 and db.stats()["transaction_retries"] == len(runs) - 2


@pytest.mark.parametrize("target", SERVERS, indirect=True)
async def test_a_connection_lost_inside_the_transaction_runs_it_again(db):
    """Nothing of an uncommitted transaction survives its connection: run again."""
    table = await counters(db, keys=(1,))
    kind, runs = db.target.kind, []

    def body(tx):
        runs.append(1)
        ((pid,),) = yield tx.runQuery(killer_sql(kind)[1])
        yield bump(db, tx, table, "a", 1)
        if len(runs) == 1:
            kill(db.target.url, kind, pid)
        yield bump(db, tx, table, "b", 1)
        return len(runs)

    assert await run_transaction(db, as_fn(db, body), retries=2) == 2
    assert await rows(db, f"select k, a, b from {table}") == [(1, 1, 1)]
    assert db.stats()["transaction_retries"] == 1


@pytest.mark.parametrize("target", ["postgresql", "psycopg"], indirect=True)
async def test_a_commit_whose_connection_breaks_is_never_run_again(db):
    """A deferred trigger makes the COMMIT take seconds (ten, far more than the
    killer needs to see it: the kill ends it); the backend is killed during it. The outcome is unknown: ConnectionLost(may_have_run=True), raised,
    fn run once."""
    slow = db.table + "_slow"
    await ev(db.runOperation(f"create or replace function {slow}() returns trigger "
                             "language plpgsql as $$ begin perform pg_sleep(10); "
                             "return null; end $$"))
    await ev(db.runOperation(f"create constraint trigger {slow} after insert on {db.table} "
                             f"deferrable initially deferred for each row execute function "
                             f"{slow}()"))
    runs, url = [], db.target.url

    def kill_during_commit(pid):
        side = adb.sync.Database(url, pool_size=1)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if side.runQuery("select 1 from pg_stat_activity where pid = %s and "
                                 "state = 'active' and query ilike 'commit%%'", (pid,)):
                    side.runOperation("select pg_terminate_backend(%s)", (pid,))
                    return
                time.sleep(0.05)
        finally:
            side.close()

    def body(tx):
        runs.append(1)
        ((pid,),) = yield tx.runQuery("select pg_backend_pid()")
        yield tx.runOperation(f"insert into {db.table} values (1, 'x')")
        threading.Thread(target=kill_during_commit, args=(pid,), daemon=True).start()

    try:
        with pytest.raises(ConnectionLost) as raised:
            await run_transaction(db, as_fn(db, body), retries=5)
        assert raised.value.may_have_run and "may or may not have committed" in str(raised.value)
        if sys.version_info >= (3, 11):
            assert any("did not run it again" in note for note in raised.value.__notes__)
        assert runs == [1] and db.stats()["transaction_retries"] == 0
    finally:
        await ev(db.runOperation(f"drop table if exists {db.table}"))
        await ev(db.runOperation(f"drop function if exists {slow}()"))


@pytest.mark.parametrize("target", ["mysql"], indirect=True)
async def test_a_deadlock_victim_on_mariadb_cannot_commit_what_is_left(db):
    """InnoDB rolls the victim's whole transaction back but keeps its session: a
    statement after the deadlock would run outside it. adb refuses it, and the
    commit, so no part of the transaction is committed."""
    table = await counters(db)
    one, two = await ev(db.beginTransaction()), await ev(db.beginTransaction())
    [(session,)] = await ev(one.runQuery("select connection_id()"))
    [(other,)] = await ev(two.runQuery("select connection_id()"))
    assert session != other, "two open transactions were given one connection"
    # one's wait must outlast the look below (60 s), so a wait the look missed fails
    # naming what the server showed, not with one's lock wait timeout (50 s by default)
    await ev(one.runOperation("set session innodb_lock_wait_timeout = 120"))
    await ev(bump(db, one, table, "a", 1))
    await ev(bump(db, two, table, "b", 2))
    if front_of(db) == "sync":  # waits for two's lock: in a thread of its own
        waiting = asyncio.ensure_future(asyncio.to_thread(bump, db, one, table, "a", 2))
    else:
        waiting = asyncio.ensure_future(ev(bump(db, one, table, "a", 2)))
    # one waits for two's lock on the server before two asks for one's: two is
    # then the transaction that closes the cycle, the victim
    await lock_wait_seen(db.target.url, session, waiting)
    with pytest.raises(db.dbapi.OperationalError) as raised:
        await ev(bump(db, two, table, "b", 1))  # the deadlock: two is the victim
    assert raised.value.args[0] == 1213
    await waiting
    with pytest.raises(TransactionError, match="rolled this transaction back"):
        await ev(bump(db, two, table, "b", 2))
    with pytest.raises(TransactionError, match="rolled back, not committed"):
        await ev(two.commit())
    await ev(one.commit())
    assert await rows(db, f"select k, a, b from {table} order by k") == [(1, 1, 0), (2, 1, 0)]


# -- runTransaction: what it does not retry, and its arguments ---------------------------------

async def test_other_errors_are_raised_at_once_and_the_transaction_rolled_back(db):
    runs = []

    def body(tx):
        runs.append(1)
        yield tx.runOperation(db.target.sql(f"insert into {db.table} values (%s, %s)"), (1, "a"))
        yield tx.runOperation(db.target.sql(f"insert into {db.table} values (%s, %s)"), (1, "b"))

    with pytest.raises(db.dbapi.IntegrityError):
        await run_transaction(db, as_fn(db, body), retries=3)
    assert runs == [1] and await rows(db, f"select * from {db.table}") == []
    assert db.stats()["pinned"] == 0 and db.stats()["transaction_retries"] == 0


async def test_it_returns_what_fn_returns_with_its_arguments(db):
    def body(tx, key, data="?"):
        yield tx.runOperation(db.target.sql(f"insert into {db.table} values (%s, %s)"),
                              (key, data))
        return (key, data)

    assert await run_transaction(db, as_fn(db, body), 7, data="seven") == (7, "seven")
    assert await rows(db, f"select userid, data from {db.table}") == [(7, "seven")]


async def test_bad_arguments_fail_at_the_call(db):
    with pytest.raises(TypeError, match="needs a callable"):
        db.runTransaction("not a function")
    with pytest.raises(InterfaceError, match="retries must be a whole number"):
        db.runTransaction(lambda tx: None, retries=-1)
    with pytest.raises(InterfaceError, match="retries must be a whole number"):
        ALL_FRONTS[front_of(db) if front_of(db) != "asyncio" else "asyncio"](
            db.target.url, retries="3")


async def test_the_front_ends_kind_of_function_is_required(db):
    """asyncio/Tornado and trio need a coroutine function; adb.sync a plain one."""
    front = front_of(db)
    if front == "sync":
        async def coroutine(tx):
            return 1
        with pytest.raises(TypeError, match="plain function"):
            await run_transaction(db, coroutine)
    elif front in ("asyncio", "trio"):
        with pytest.raises(TypeError, match="coroutine function"):
            await run_transaction(db, lambda tx: 1)
    else:  # Twisted: a value or a Deferred
        assert await run_transaction(db, lambda tx: 1) == 1
    assert db.stats()["pinned"] == 0


# -- SQLite: a locked file ----------------------------------------------------------------------

def when(condition, then, limit=20.0):
    """Call ``then()`` once ``condition()`` holds (polled), or after ``limit`` s
    anyway, so that nothing the test holds is held for good."""
    deadline = time.monotonic() + limit
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    then()


def lock_sqlite(path, release_when=lambda: False):
    """Hold the write lock of the SQLite file at ``path`` until ``release_when()``
    holds (polled in a thread; 20 s at most); the function that releases it at once
    (again: nothing)."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("begin immediate")
    lock, released = threading.Lock(), threading.Event()

    def release():
        with lock:
            if not released.is_set():
                released.set()
                holder.execute("commit")
                holder.close()
    threading.Thread(target=when, args=(lambda: released.is_set() or release_when(), release),
                     daemon=True).start()
    return release


async def sqlite_db(front, tmp_path, **kwargs):
    """A Database whose SQLite file waits for no lock (``timeout=0``); the file is
    made first, already in WAL mode, so opening the workers meets no lock."""
    path = tmp_path / "locked.db"
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("pragma journal_mode=wal")
    setup.execute("create table t (k int primary key)")
    setup.close()
    return ALL_FRONTS[front](f"sqlite:///{path}?timeout=0", pool_size=2, **kwargs), str(path)


async def test_a_transaction_refused_by_a_locked_sqlite_file_runs_again(front, tmp_path):
    db, path = await sqlite_db(front, tmp_path)
    try:
        def body(tx):
            yield tx.runOperation("insert into t values (1)")
            return "in"
        lock_sqlite(path, lambda: db.stats()["transaction_retries"] >= 1)
        assert await run_transaction(db, as_fn(db, body), retries=30) == "in"
        assert await ev(db.runQuery("select k from t")) == [(1,)]
        assert db.stats()["transaction_retries"] >= 1
    finally:
        await ev(db.close())


async def test_a_standalone_call_refused_by_a_locked_sqlite_file_runs_again(front, tmp_path):
    db, path = await sqlite_db(front, tmp_path, retries=30)
    try:
        lock_sqlite(path, lambda: db.stats()["retries"] >= 1)
        assert await ev(db.runOperation("insert into t values (1)")) == 1
        assert await ev(db.runMany("insert into t values (?)", [(2,), (3,)])) == 2
        assert await ev(db.runQuery("select count(*) from t")) == [(3,)]
        assert db.stats()["retries"] >= 1
    finally:
        await ev(db.close())


async def test_when_retries_run_out_the_last_error_names_the_attempts(front, tmp_path):
    db, path = await sqlite_db(front, tmp_path, retries=2)
    try:
        before = db.stats()["retries"]  # opening a second connection may have met a lock
        release = lock_sqlite(path)  # until released below
        with pytest.raises(sqlite3.OperationalError, match="locked") as raised:
            await ev(db.runOperation("insert into t values (1)"))
        assert getattr(raised.value, "adb_attempts", None) == 3 and db.stats()["retries"] - before == 2
        if sys.version_info >= (3, 11):
            assert "retries=2 ran out" in raised.value.__notes__[0]

        def body(tx):
            yield tx.runOperation("insert into t values (1)")
        with pytest.raises(sqlite3.OperationalError, match="locked") as raised:
            await run_transaction(db, as_fn(db, body), retries=1)
        assert getattr(raised.value, "adb_attempts", None) == 2 and db.stats()["transaction_retries"] == 1
    finally:
        release()
        await ev(db.close())


# -- Database(retries=N) on the servers: a lock wait that times out ---------------------------

LOCK_WAIT = {"postgresql": "set lock_timeout = '100ms'",
             "mysql": "set session innodb_lock_wait_timeout = 1"}


@pytest.mark.parametrize("target", SERVERS, indirect=True)
async def test_a_standalone_call_whose_lock_wait_timed_out_runs_again(front, target, table_name):
    statement = LOCK_WAIT[target.kind]

    def short_lock_waits(conn):
        cursor = conn.cursor()
        cursor.execute(statement)
        cursor.close()

    db = ALL_FRONTS[front](target.url, pool_size=2, retries=20, on_connect=short_lock_waits)
    db.target, db.table = target, table_name
    holder = adb.sync.Database(target.url, pool_size=1)
    try:
        table = await counters(db, keys=(1,))
        tx = holder.beginTransaction()
        holder.runOperation(f"update {table} set b = b + 1 where k = 1", tx=tx)
        # the holder commits once the call's lock wait has timed out and been retried
        release = threading.Thread(target=when, args=(
            lambda: db.stats()["retries"] >= 1, tx.commit), daemon=True)
        release.start()
        assert await ev(db.runOperation(f"update {table} set a = a + 1 where k = 1")) == 1
        release.join(20)
        assert await rows(db, f"select k, a, b from {table}") == [(1, 1, 1)]
        assert db.stats()["retries"] >= 1
        await ev(db.runOperation(f"drop table {table}"))
    finally:
        holder.close()
        await ev(db.close())


async def test_no_connection_to_be_had_is_retried_then_raised_with_the_attempts(front):
    db = ALL_FRONTS[front]("postgresql://root@127.0.0.1:1/test", pool_size=1, retries=2)
    try:
        started = time.monotonic()
        with pytest.raises(ServerUnavailable) as raised:
            await ev(db.runQuery("select 1"))
        assert getattr(raised.value, "adb_attempts", None) == 3 and db.stats()["retries"] == 2
        assert time.monotonic() - started >= 0.1  # it waited for the connect backoff
    finally:
        await ev(db.close())


async def test_errors_that_are_not_transient_are_not_retried(db):
    """A duplicate key is the caller's to handle: raised at once, never run again."""
    retrying = ALL_FRONTS[front_of(db) if front_of(db) != "asyncio" else "asyncio"](
        db.target.url, pool_size=1, retries=5)
    try:
        insert = db.target.sql(f"insert into {db.table} values (%s, %s)")
        assert await ev(retrying.runOperation(insert, (1, "a"))) == 1
        with pytest.raises(retrying.dbapi.IntegrityError):
            await ev(retrying.runOperation(insert, (1, "b")))
        assert retrying.stats()["retries"] == 0
    finally:
        await ev(retrying.close())
