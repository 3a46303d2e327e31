"""Twisted's adbapi and adb's drop-in, side by side: the same script, the same record.

Each scenario below drives a ``ConnectionPool`` the way applications drive
``twisted.enterprise.adbapi``'s (the attributes they read, what the function given to
``runWithConnection``/``runInteraction`` sees of the driver connection's transaction
state, commits and rollbacks it makes itself, errors and their PEP 249 classes,
reconnects, the ``Connection``/``Transaction`` wrappers, subclass overrides, the
factory hooks, the thread pool's counts and work, calls after close and cancelled
calls) and writes what it sees into a plain record. The test runs it once on Twisted's
``adbapi.ConnectionPool`` and once on ``adb.twisted.ConnectionPool``, on sqlite3,
psycopg2 on PostgreSQL and PyMySQL on MariaDB, and asserts the two records are equal.

Both pools run on a Twisted reactor driven by the test's own asyncio loop
(``conftest.loop_reactor``); each side gets a fresh table of its own.

Where adb differs on purpose (``docs/adbapi.md``, "What differs": ``cp_max`` threads
started, a broken connection replaced even without ``cp_reconnect``), the scenarios
record only what an application can rely on (``min <= len(threads) <= max``, the
outcome of the next call only with ``cp_reconnect``). A scenario on which the two
may differ is listed in ``EXPECTED_DIFFERENCES`` (none today: every one agrees), where
it runs as a strict xfail; one that starts agreeing fails the run until its entry is
removed.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

import pytest
from twisted._threads import AlreadyQuit
from twisted.enterprise import adbapi

import adb.twisted

from ..conftest import ev, loop_reactor, require_server, server_kwargs

SIDES: dict[str, Any] = {"adbapi": adbapi.ConnectionPool, "adb": adb.twisted.ConnectionPool}
KINDS = {"sqlite": "sqlite3", "postgresql": "psycopg2", "mysql": "pymysql"}
PEP249 = ("IntegrityError", "ProgrammingError", "OperationalError", "InterfaceError",
          "DataError", "NotSupportedError", "InternalError", "DatabaseError", "Error")


class ScenarioError(Exception):
    """What a scenario's own function raises to make the pool roll back."""


@dataclass
class Env:
    """One database for one side of one scenario: the pool's connect arguments, a
    table of its own, a side connection of the test's to look from outside."""

    kind: str
    tmp_path: Any
    side: str = "adbapi"
    table: str = field(default_factory=lambda: "adb_diff_" + uuid.uuid4().hex[:10])
    opened: list[Any] = field(default_factory=list)  # connections cp_openfun saw
    seen: list[dict[str, Any]] = field(default_factory=list)  # what worker functions saw
    hits: list[str] = field(default_factory=list)  # what a scenario's subclass noted
    reactor: Any = None

    @property
    def dbapi_name(self) -> str:
        return KINDS[self.kind]

    @property
    def dbapi(self) -> Any:
        return __import__(self.dbapi_name)

    @property
    def p(self) -> str:
        return "?" if self.kind == "sqlite" else "%s"

    def connkw(self) -> dict[str, Any]:
        if self.kind == "sqlite":
            return {"database": str(self.tmp_path / "diff.db"), "check_same_thread": False}
        return server_kwargs(self.kind)

    def unreachable_connkw(self) -> dict[str, Any]:
        if self.kind == "sqlite":
            return {"database": str(self.tmp_path / "no" / "such" / "dir.db"),
                    "check_same_thread": False}
        return {**server_kwargs(self.kind), "port": 1, "connect_timeout": 2}

    def pool(self, cls: Optional[type] = None, **cp: Any) -> Any:
        """A pool of this side (or of ``cls``, a subclass of it) on this database,
        started: by default one worker, one connection, cp_openfun recording."""
        from_cls = cls or SIDES[self.side]
        kw = {"cp_min": 1, "cp_max": 1, "cp_openfun": self.opened.append, **cp}
        pool = from_cls(self.dbapi_name, cp_reactor=self.reactor, **self.connkw(), **kw)
        pool.start()
        return pool

    # -- the test's own connection, outside the pool ----------------------------------

    def side_connection(self) -> Any:
        if self.kind == "sqlite":
            return sqlite3.connect(self.connkw()["database"], isolation_level=None,
                                   check_same_thread=False)
        if self.kind == "mysql":
            return self.dbapi.connect(**self.connkw(), autocommit=True)
        conn = self.dbapi.connect(**self.connkw())
        conn.autocommit = True
        return conn

    def outside(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        conn = self.side_connection()
        try:
            cursor = conn.cursor()
            cursor.execute(sql.replace("%s", self.p), params)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
        finally:
            conn.close()

    def create_table(self) -> None:
        self.outside(f"create table {self.table} (k integer, v varchar(20))")

    def drop_table(self) -> None:
        self.outside(f"drop table if exists {self.table}")

    def keys(self) -> list[Any]:
        """The table's keys as seen from outside the pool (committed rows only)."""
        return sorted(row[0] for row in self.outside(f"select k from {self.table}"))

    def insert(self, k: int) -> str:
        return f"insert into {self.table} (k, v) values ({k}, 'v{k}')"

    # -- what a function run by the pool sees of a driver connection --------------------

    def state(self, conn: Any) -> dict[str, Any]:
        """The transaction state of a DB-API connection (or of a wrapper passing
        attributes through to one), in the driver's own terms."""
        if self.kind == "sqlite":
            return {"in_transaction": conn.in_transaction,
                    "isolation_level": conn.isolation_level}
        if self.kind == "postgresql":
            return {"status": conn.status, "transaction_status": conn.get_transaction_status(),
                    "autocommit": conn.autocommit, "isolation_level": conn.isolation_level}
        from pymysql.constants.SERVER_STATUS import SERVER_STATUS_IN_TRANS
        return {"autocommit": conn.get_autocommit(),
                "in_transaction": bool(conn.server_status & SERVER_STATUS_IN_TRANS)}

    def error(self, exc: BaseException) -> str:
        """An exception as an application catches it: the most specific PEP 249
        class of the driver it is an instance of, else its own class name."""
        for name in PEP249:
            if isinstance(exc, getattr(self.dbapi, name)):
                return f"{self.dbapi_name}.{name}"
        return type(exc).__name__


class Record(dict[str, Any]):
    """A scenario's record: each step's value, or what it raised."""

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            self[name] = value = fn()
            return value
        except Exception as exc:
            self[name] = {"raised": self.env.error(exc)}
            return None

    async def call(self, name: str, d: Any) -> Any:
        """Awaits a Deferred (or what ``d()`` returns); records its value, or the
        error it failed with, and what a ``worker`` function saw meanwhile."""
        try:
            value = await ev(d() if callable(d) else d)
            self[name] = value
            return value
        except Exception as exc:
            self[name] = {"raised": self.env.error(exc)}
            return None
        finally:
            if self.env.seen:
                self[name + ": the function saw"] = self.env.seen.pop()


def worker(record_steps: Callable[..., Any]) -> Callable[..., Any]:
    """A function for runWithConnection/runInteraction that records what it sees
    (steps that raise are recorded, not propagated) for ``Record.call``; it returns
    "done", or raises what ``record_steps`` itself raises."""
    def run(conn_or_trans: Any, env: Env, *args: Any) -> str:
        seen = Record(env)
        try:
            record_steps(seen, conn_or_trans, env, *args)
        finally:
            env.seen.append(dict(seen))
        return "done"
    return run


def query(pool: Any, sql: str) -> Any:
    """``runQuery`` with the rows as a list: the type of what runQuery fires with is
    compared once, in ``results_and_errors`` (PyMySQL's fetchall() gives a tuple)."""
    return pool.runQuery(sql).addCallback(list)


def execute(cursor: Any, sql: str) -> None:
    cursor.execute(sql)


#: the prefix of a record's step that says whether the interleaving a scenario forces
#: (by a wait on what the server or the pool shows) came about: True on both sides,
#: or the test fails, whatever the rest of the records say
FORCED = "forced: "


async def until(condition: Callable[[], Any], limit: float = 10.0) -> bool:
    """Poll ``condition()`` on the loop until it is true (True) or ``limit`` seconds
    have passed (False): a wait for what a side does in its own time, whose
    outcome the record then holds, the same on both sides or not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def raises(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except Exception:
        return True
    return False


# -- the scenarios ---------------------------------------------------------------------
#
# A scenario is ``async def name(r, pool, env)``: it records into ``r`` what it sees of
# ``pool``, a started pool of ``env.side`` on ``env``'s database (one worker, one
# connection, cp_openfun recording, plus the ``cp`` options ``@scenario`` names, of the
# class ``subclass(base)`` makes where it names one). With ``own_pool``, ``pool`` is
# None and the scenario builds what it needs.

Scenario = Callable[[Record, Any, Env], Awaitable[None]]


@dataclass
class Spec:
    fn: Scenario
    kinds: tuple[str, ...]
    cp: dict[str, Any]
    subclass: Optional[Callable[[type, Env], type]] = None
    own_pool: bool = False


SCENARIOS: dict[str, Spec] = {}


def scenario(*kinds: str, subclass: Optional[Callable[[type, Env], type]] = None,
             own_pool: bool = False, **cp: Any) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[fn.__name__] = Spec(fn, kinds or tuple(KINDS), cp, subclass, own_pool)
        return fn
    return register


@scenario(own_pool=True)
async def attributes(r: Record, _: Any, env: Env) -> None:
    """What applications read of a pool: the cp_* values, dbapi, connargs/connkw,
    threadpool metrics (Synapse's gauges), threadID(), connections, running."""
    cls = SIDES[env.side]
    pool = cls(env.dbapi_name, cp_reactor=env.reactor, cp_min=1, cp_max=3, cp_name="diff",
               cp_noisy=False, cp_good_sql="select 2", **env.connkw())

    def tp() -> Any:
        return pool.threadpool

    try:
        for name in ("min", "max", "name", "noisy", "reconnect", "good_sql", "openfun",
                     "running", "connargs", "connkw"):
            r[name] = getattr(pool, name)  # (adbapi has them all)
        r.step("dbapi", lambda: pool.dbapi is env.dbapi)
        r.step("dbapiName", lambda: pool.dbapiName)
        r.step("connections", lambda: dict(pool.connections))
        r.step("threadID()", lambda: pool.threadID() == threading.get_ident())
        r.step("has factories", lambda: [hasattr(pool, "connectionFactory"),
                                         hasattr(pool, "transactionFactory")])
        r.step("threadpool before start", lambda: {
            "min": tp().min, "max": tp().max, "name": tp().name, "started": tp().started,
            "joined": tp().joined, "threads": len(tp().threads), "workers": tp().workers,
            "working": len(tp().working), "waiters": type(tp().waiters).__name__,
            "q.qsize()": tp().q.qsize()})
        pool.start()
        r.step("running after start", lambda: pool.running)
        r.step("threadpool after start", lambda: {
            "started": tp().started, "min..max threads": tp().min <= len(tp().threads) <= tp().max,
            "min..max workers": tp().min <= tp().workers <= tp().max,
            "working": len(tp().working), "waiters + working = workers":
                len(tp().waiters) + len(tp().working) == tp().workers, "q.qsize()": tp().q.qsize()})

        @worker
        def inside(seen: Record, conn: Any, env: Env) -> None:
            seen.step("threadID is this thread", lambda: pool.threadID() == threading.get_ident())
            seen.step("connections[threadID()] is the driver's",
                      lambda: type(pool.connections[pool.threadID()]).__module__.split(".")[0])
            seen.step("working", lambda: len(pool.threadpool.working))
        await r.call("a call", pool.runWithConnection(inside, env))
        await until(lambda: not tp().working)  # the worker back to idle, in its own time
        r.step("working after", lambda: len(tp().working))
        r.step("connections after: min..max", lambda: 1 <= len(pool.connections) <= pool.max)
    finally:
        pool.close()
    r.step("after close", lambda: {"running": pool.running, "started": tp().started,
                                   "joined": tp().joined, "connections": len(pool.connections)})


@scenario()
async def threadpool_work(r: Record, pool: Any, env: Env) -> None:
    """Work given to ``threadpool`` itself (callInThreadWithCallback, callInThread):
    it runs in a pool thread, where ``connect()`` is that thread's connection."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def work(a: int, b: int = 0) -> Any:
        conn = pool.connect()
        cursor = conn.cursor()
        cursor.execute("select 1")
        rows = [tuple(row) for row in cursor.fetchall()]
        cursor.close()
        return [a + b, rows, pool.connections.get(pool.threadID()) is conn]

    def on_result(ok: bool, result: Any) -> None:  # in the pool's thread
        loop.call_soon_threadsafe(done.set_result, [ok, result if ok else type(result.value).__name__])

    pool.threadpool.callInThreadWithCallback(on_result, work, 1, b=2)
    r["callInThreadWithCallback"] = await asyncio.wait_for(done, 10)
    failed: asyncio.Future[Any] = loop.create_future()
    pool.threadpool.callInThreadWithCallback(
        lambda ok, result: loop.call_soon_threadsafe(failed.set_result, [ok, result.value.args]),
        lambda: 1 / 0)
    r["failing work"] = (await asyncio.wait_for(failed, 10))[0]
    ran: asyncio.Future[Any] = loop.create_future()
    pool.threadpool.callInThread(lambda: loop.call_soon_threadsafe(ran.set_result, "ran"))
    r["callInThread"] = await asyncio.wait_for(ran, 10)


@scenario()
async def after_close(r: Record, pool: Any, env: Env) -> None:
    """Calls made once the pool is closed (applications shutting down make some), and
    after a ``start()`` made then (a test suite's second ``setUp`` with one pool per
    class): none runs or succeeds, and ``start()`` raises ``AlreadyQuit``, the pool
    staying closed. Where they differ on purpose (docs/adbapi.md): adbapi's calls
    never fire (after that start(), they raise AlreadyQuit), the drop-in's fail at
    once with PoolClosed (``test_dropin_endings.py`` checks that)."""
    await r.call("before", query(pool, "select 1"))
    pool.close()
    succeeded: list[str] = []
    _calls_after_close(pool, env, "", succeeded)
    try:
        pool.start()
        r["start() after close()"] = "started"
    except AlreadyQuit:
        r["start() after close()"] = "AlreadyQuit"
    r["running after start()"] = pool.running
    _calls_after_close(pool, env, " after start()", succeeded)
    await asyncio.sleep(0.3)
    r["succeeded"] = sorted(succeeded)
    r.step("rows", env.keys)
    r["running"] = pool.running


def _calls_after_close(pool: Any, env: Env, when: str, succeeded: list[str]) -> None:
    """Make each call; the name of each whose Deferred succeeds goes in ``succeeded``
    (what one that fails, raises or never fires gives is each side's own)."""
    for name, call in (("runQuery", lambda: pool.runQuery("select 1")),
                       ("runOperation", lambda: pool.runOperation(env.insert(1))),
                       ("runInteraction", lambda: pool.runInteraction(lambda trans: "i")),
                       ("runWithConnection", lambda: pool.runWithConnection(lambda conn: "w"))):
        try:
            d = call()
        except Exception:
            continue
        d.addCallbacks(lambda _, name=name: succeeded.append(name + when), lambda _: None)


@scenario(own_pool=True)
async def before_start(r: Record, _: Any, env: Env) -> None:
    """Calls made before ``start()`` (before the reactor runs) wait for it."""
    cls = SIDES[env.side]
    pool = cls(env.dbapi_name, cp_reactor=env.reactor, cp_min=1, cp_max=2, **env.connkw())
    try:
        early = pool.runOperation(env.insert(1))
        await asyncio.sleep(0.3)
        r["fired before start"] = early.called
        r["rows before start"] = env.keys()
        pool.start()
        await r.call("after start", early)
        r.step("rows", env.keys)
    finally:
        pool.close()


@scenario()
async def cancelled_calls(r: Record, pool: Any, env: Env) -> None:
    """A Deferred cancelled by its caller, the call queued behind a busy worker or
    running: the caller gets CancelledError, the work still runs and commits."""
    started, release = threading.Event(), threading.Event()

    def slow_insert(trans: Any, k: int) -> None:
        trans.execute(env.insert(k))
        started.set()
        release.wait(30)  # held until both calls are cancelled

    busy = pool.runInteraction(slow_insert, 1)  # the only worker: running when cancelled
    queued = pool.runOperation(env.insert(2))   # waits for it
    r[FORCED + "running when cancelled"] = await until(started.is_set)
    busy.cancel()
    queued.cancel()
    release.set()
    await r.call("running, cancelled", busy)
    await r.call("queued, cancelled", queued)
    await until(lambda: len(env.keys()) == 2)  # both ran and committed, in their own time
    r.step("rows", env.keys)
    await r.call("then", query(pool, "select 1"))


@scenario()
async def openfun(r: Record, pool: Any, env: Env) -> None:
    """cp_openfun gets the driver's connection as the driver made it."""
    await r.call("query", query(pool, "select 1"))
    r.step("calls", lambda: len(env.opened))
    r.step("driver", lambda: type(env.opened[0]).__module__.split(".")[0])
    r.step("state", lambda: env.state(env.opened[0]))


@worker
def first_statement(seen: Record, conn: Any, env: Env, k: int, trans: Any = None) -> None:
    """The connection's state before and after the function's first statement, and
    whether that statement is visible from another connection before the pool
    commits: runWithConnection's ``conn`` (a cursor of its own), or runInteraction's
    ``trans`` and its ``connection`` (``on_transaction``)."""
    seen.step("before", lambda: env.state(conn))
    cursor = conn.cursor() if trans is None else trans
    seen.step("insert", lambda: execute(cursor, env.insert(k)))
    seen.step("after insert", lambda: env.state(conn))
    seen.step("visible outside", env.keys)
    if trans is None:
        cursor.close()


def on_transaction(trans: Any, env: Env, k: int) -> Any:
    return first_statement(trans.connection, env, k, trans)


@scenario()
async def transaction_state(r: Record, pool: Any, env: Env) -> None:
    """What runWithConnection's and runInteraction's functions see of the driver
    connection's transaction."""
    await r.call("runWithConnection", pool.runWithConnection(first_statement, env, 1))
    r.step("committed", env.keys)
    await r.call("runInteraction", pool.runInteraction(on_transaction, env, 2))
    r.step("committed after both", env.keys)
    await r.call("runQuery", query(pool, f"select k from {env.table} order by k"))


@worker
def end_then_more(seen: Record, conn: Any, env: Env, end: str, then_raise: bool) -> None:
    """The function ends the transaction itself (``end``: commit or rollback), then
    writes again, and returns or raises."""
    cursor = conn.cursor()
    seen.step("insert 1", lambda: execute(cursor, env.insert(1)))
    seen.step(end, getattr(conn, end))
    seen.step(f"after {end}", lambda: env.state(conn))
    seen.step(f"visible after {end}", env.keys)
    seen.step("insert 2", lambda: execute(cursor, env.insert(2)))
    seen.step("after insert 2", lambda: env.state(conn))
    seen.step("visible before return", env.keys)
    cursor.close()
    if then_raise:
        raise ScenarioError(f"after its own {end}")


async def ends_itself(r: Record, pool: Any, env: Env, end: str, then_raise: bool) -> None:
    await r.call("runWithConnection", pool.runWithConnection(end_then_more, env, end, then_raise))
    r.step("rows", env.keys)
    await r.call("then", query(pool, "select 1"))


@scenario()
async def function_commits(r: Record, pool: Any, env: Env) -> None:
    """The function commits itself, writes more and returns: the pool commits the
    rest (adbapi's conn.commit() after the function)."""
    await ends_itself(r, pool, env, "commit", then_raise=False)


@scenario()
async def function_commits_then_raises(r: Record, pool: Any, env: Env) -> None:
    """The function commits itself, writes more, raises: what it committed stays,
    the rest is rolled back."""
    await ends_itself(r, pool, env, "commit", then_raise=True)


@scenario()
async def function_rolls_back(r: Record, pool: Any, env: Env) -> None:
    """The function rolls back itself, writes again and returns: only the second
    write is committed, and only when the pool commits."""
    await ends_itself(r, pool, env, "rollback", then_raise=False)


@scenario()
async def interaction_commits_its_connection(r: Record, pool: Any, env: Env) -> None:
    """runInteraction's function commits through its cursor's connection, writes
    more and raises: the first write stays."""
    def commit_then_raise(trans: Any) -> None:
        trans.execute(env.insert(1))
        trans.connection.commit()
        trans.execute(env.insert(2))
        raise ScenarioError("after its own commit")

    await r.call("runInteraction", pool.runInteraction(commit_then_raise))
    r.step("rows", env.keys)


@scenario()
async def results_and_errors(r: Record, pool: Any, env: Env) -> None:
    """What each call fires with, and the PEP 249 class of each failure (bad SQL),
    with the pool usable after."""
    def bad_interaction(trans: Any) -> None:
        trans.execute(env.insert(1))
        trans.execute("select * from no_such_table_here")

    def bad_with_connection(conn: Any) -> None:
        conn.cursor().execute("select * from no_such_table_here")

    def raising(trans: Any) -> None:
        raise ScenarioError("rolled back")

    await r.call("runOperation", pool.runOperation(env.insert(1)))
    rows = await r.call("runQuery", pool.runQuery(f"select k, v from {env.table}"))
    r.step("runQuery type", lambda: [type(rows).__name__, type(rows[0]).__name__])
    await r.call("runInteraction value", pool.runInteraction(lambda trans, a, b=0: (a, b), 1, b=2))
    await r.call("runWithConnection value", pool.runWithConnection(
        lambda conn, a, b=0: (a, b), 3, b=4))
    await r.call("bad runQuery", pool.runQuery("select * from no_such_table_here"))
    await r.call("bad runOperation", pool.runOperation("deletexxx from no_such_table_here"))
    await r.call("bad runInteraction", pool.runInteraction(bad_interaction))
    await r.call("bad runWithConnection", pool.runWithConnection(bad_with_connection))
    await r.call("raising runInteraction", pool.runInteraction(raising))
    r.step("rows", env.keys)
    await r.call("then", query(pool, "select 1"))


async def failing_query(r: Record, name: str, pool: Any, env: Env, sql: str = "select 1") -> None:
    """Records how a query fails: its PEP 249 class and whether it is an
    OperationalError of the driver (what adbapi users catch)."""
    try:
        await ev(pool.runQuery(sql))
        r[name] = "ok"
    except Exception as exc:
        r[name] = {"raised": env.error(exc),
                   "OperationalError": isinstance(exc, env.dbapi.OperationalError)}


@scenario(own_pool=True)
async def unreachable(r: Record, _: Any, env: Env) -> None:
    """A pool whose connections cannot be made: it builds and starts, and each call
    fails with the driver's OperationalError."""
    cls = SIDES[env.side]
    pool = r.step("construct", lambda: cls(env.dbapi_name, cp_reactor=env.reactor, cp_min=1,
                                           cp_max=1, **env.unreachable_connkw()))
    if pool is None:
        return
    r["construct"] = "ok"
    try:
        r.step("start", lambda: pool.start() or "ok")
        await failing_query(r, "runQuery", pool, env)
        await failing_query(r, "runQuery again", pool, env)
    finally:
        pool.close()


def backend_id_sql(env: Env) -> str:
    return "select pg_backend_pid()" if env.kind == "postgresql" else "select connection_id()"


def kill_sql(env: Env) -> str:
    return "select pg_terminate_backend(%s)" if env.kind == "postgresql" else "kill %s"


def sleep_sql(env: Env) -> str:
    """A query long enough to be certainly running when the kill comes."""
    return "select pg_sleep(30)" if env.kind == "postgresql" else "select sleep(30)"


def sessions_sql(env: Env, sleeping: bool) -> str:
    """How many sessions of id %s the server lists (running ``sleep_sql``, if ``sleeping``)."""
    if env.kind == "postgresql":
        return ("select count(*) from pg_stat_activity where pid = %s" +
                " and state = 'active' and query like 'select pg_sleep%%'" * sleeping)
    return ("select count(*) from information_schema.processlist where id = %s" +
            " and info like 'select sleep%%'" * sleeping)


async def kill_connection(pool: Any, env: Env, under_a_call: Optional[Record] = None) -> None:
    """The server ends the pool's (only) connection: while it is idle, or under a
    long query whose failure is recorded in ``under_a_call`` as "lost call". The
    kill comes once the server shows the query running, and (idle) the scenario goes
    on once the server no longer lists the session."""
    backend = (await ev(pool.runQuery(backend_id_sql(env))))[0][0]
    running = None
    if under_a_call is not None:
        running = asyncio.ensure_future(
            failing_query(under_a_call, "lost call", pool, env, sleep_sql(env)))
        under_a_call[FORCED + "running when killed"] = await until(
            lambda: env.outside(sessions_sql(env, True), (backend,)) == [(1,)], 30)
    env.outside(kill_sql(env), (backend,))
    if running is not None:
        await running
    else:
        await until(lambda: env.outside(sessions_sql(env, False), (backend,)) == [(0,)], 30)


@scenario("postgresql", "mysql")
async def connection_lost(r: Record, pool: Any, env: Env) -> None:
    """The server ends the connection under a running call (without cp_reconnect;
    the call after is not recorded: adbapi keeps the dead connection, adb does not)."""
    await kill_connection(pool, env, under_a_call=r)


@scenario("postgresql", "mysql", cp_reconnect=True)
async def connection_lost_cp_reconnect(r: Record, pool: Any, env: Env) -> None:
    """The same with cp_reconnect: the call fails, the next one reconnects."""
    await kill_connection(pool, env, under_a_call=r)
    await r.call("next call", query(pool, "select 1"))


@scenario(cp_reconnect=True)
async def closed_by_hand_cp_reconnect(r: Record, pool: Any, env: Env) -> None:
    """Twisted's ReconnectTestBase: the connection closed by hand through
    ``connections``; with cp_reconnect the pool reconnects (on MySQL after one
    failure, as ``early_reconnect`` says)."""
    await r.call("before", query(pool, "select 1"))
    r.step("close by hand", lambda: list(pool.connections.values())[0].close())
    try:  # adbapi: at once on sqlite3 and psycopg2, after one failed call on PyMySQL
        await ev(pool.runQuery("select 1"))
        r["first after: ok or a driver error"] = True
    except Exception as exc:
        r["first after: ok or a driver error"] = isinstance(exc, env.dbapi.Error)
    await r.call("second after", query(pool, "select 1"))
    r.step("openfun calls", lambda: len(env.opened))


@scenario(cp_reconnect=True)
async def closed_in_run_with_connection_cp_reconnect(r: Record, pool: Any, env: Env) -> None:
    """A runWithConnection function closes the driver's connection after a query that
    succeeded (which, on adb, vouches for the connection: the next call would skip
    the driver's closed check): the call ends as adbapi's does, and with cp_reconnect
    the next one runs on a new connection."""
    await r.call("before", query(pool, "select 1"))

    def close_it(conn: Any) -> None:
        conn._connection.close()
    try:
        await ev(pool.runWithConnection(close_it))
        r["runWithConnection: ok or a driver error"] = True
    except Exception as exc:
        r["runWithConnection: ok or a driver error"] = isinstance(exc, env.dbapi.Error)
    try:  # as closed_by_hand: at once, or (PyMySQL) after one failed call
        await ev(pool.runQuery("select 1"))
        r["first after: ok or a driver error"] = True
    except Exception as exc:
        r["first after: ok or a driver error"] = isinstance(exc, env.dbapi.Error)
    await r.call("second after", query(pool, "select 1"))


@scenario()
async def connection_reconnect(r: Record, pool: Any, env: Env) -> None:
    """``conn.reconnect()`` in runWithConnection (Synapse's txn limit and closed
    connection check): a new driver connection for this thread, openfun run on it."""
    @worker
    def reconnect(seen: Record, conn: Any, env: Env) -> None:
        before = pool.connections.get(pool.threadID())
        seen.step("reconnect", lambda: conn.reconnect())
        after = pool.connections.get(pool.threadID())
        seen.step("new connection", lambda: after is not None and after is not before)
        seen.step("works", lambda: execute(conn.cursor(), "select 1"))
        seen.step("openfun calls", lambda: len(env.opened))

    await r.call("runWithConnection", pool.runWithConnection(reconnect, env))
    await r.call("then", query(pool, "select 1"))


@scenario()
async def transaction_wrapper(r: Record, pool: Any, env: Env) -> None:
    """adbapi's Transaction: reopen(), reconnect() then reopen(), and close() inside
    the interaction (adbapi then fails closing it again)."""
    @worker
    def use_wrapper(seen: Record, trans: Any, env: Env) -> None:
        seen.step("has", lambda: [hasattr(trans, n) for n in ("reopen", "reconnect", "close")])
        seen.step("execute", lambda: execute(trans, "select 1"))
        seen.step("reopen", trans.reopen)
        seen.step("fetch after reopen", lambda: [tuple(row) for row in (
            trans.execute("select 2"), trans.fetchall())[1]])
        seen.step("reconnect", trans.reconnect)
        seen.step("reopen after reconnect", trans.reopen)
        seen.step("fetch after reconnect", lambda: [tuple(row) for row in (
            trans.execute("select 3"), trans.fetchall())[1]])
        seen.step("openfun calls", lambda: len(env.opened))

    await r.call("runInteraction", pool.runInteraction(use_wrapper, env))
    await r.call("close inside", pool.runInteraction(lambda trans: trans.close()))
    await r.call("then", query(pool, "select 1"))


def overriding(base: type, env: Env) -> type:
    """A subclass overriding the four underscore methods; each call of them is
    noted in ``env.hits``."""
    class Overriding(base):
        def _runInteraction(self, interaction: Any, *args: Any, **kw: Any) -> Any:
            env.hits.append("_runInteraction")
            return super()._runInteraction(interaction, *args, **kw)

        def _runWithConnection(self, func: Any, *args: Any, **kw: Any) -> Any:
            env.hits.append("_runWithConnection")
            return super()._runWithConnection(func, *args, **kw)

        def _runQuery(self, trans: Any, *args: Any, **kw: Any) -> Any:
            env.hits.append("_runQuery")
            return ["from _runQuery", [tuple(row) for row in super()._runQuery(trans, *args, **kw)]]

        def _runOperation(self, trans: Any, *args: Any, **kw: Any) -> Any:
            env.hits.append("_runOperation")
            return super()._runOperation(trans, *args, **kw)
    return Overriding


@scenario(subclass=overriding)
async def subclass_overrides(r: Record, pool: Any, env: Env) -> None:
    """Which underscore methods each public call goes through, and that their
    results are what the call fires with."""
    for name, call in (("runQuery", lambda: query(pool, "select 1")),
                       ("runOperation", lambda: pool.runOperation(env.insert(1))),
                       ("runInteraction", lambda: pool.runInteraction(lambda t: "i")),
                       ("runWithConnection", lambda: pool.runWithConnection(lambda c: "w"))):
        env.hits.clear()
        await r.call(name, call)
        r[name + " went through"] = sorted(env.hits)


def retrying(base: type, env: Env) -> type:
    """cowrie's ReconnectingConnectionPool: _runInteraction catches the driver's
    OperationalError, drops this thread's connection with
    ``disconnect(connections.get(threadID()))`` and runs the interaction again."""
    operational = env.dbapi.OperationalError

    class Retrying(base):
        def _runInteraction(self, interaction: Any, *args: Any, **kw: Any) -> Any:
            env.hits.append("_runInteraction")
            try:
                return super()._runInteraction(interaction, *args, **kw)
            except operational:  # (adb may have replaced the connection before: no retry)
                self.disconnect(self.connections.get(self.threadID()))
                return super()._runInteraction(interaction, *args, **kw)
    return Retrying


@scenario("postgresql", "mysql", subclass=retrying)
async def retrying_subclass(r: Record, pool: Any, env: Env) -> None:
    """The server ends the idle connection; the subclass's retry (or adb's
    replacing it first) keeps the next calls working."""
    await kill_connection(pool, env)
    await r.call("after the kill", query(pool, "select 1"))
    await r.call("then", query(pool, "select 1"))
    r["went through _runInteraction"] = len(env.hits)


def with_factories(base: type, env: Env) -> type:
    """connectionFactory/transactionFactory wrapping the base's, noting each use in
    ``env.hits`` (a base without them fails here: the scenario records that)."""
    class Conn(base.connectionFactory):  # type: ignore[name-defined]
        def __init__(self, pool: Any) -> None:
            env.hits.append("connection" + (" for this pool" if isinstance(pool, base) else ""))
            super().__init__(pool)

    class Trans(base.transactionFactory):  # type: ignore[name-defined]
        def __init__(self, pool: Any, connection: Any) -> None:
            env.hits.append("transaction on " + type(connection).__name__)
            super().__init__(pool, connection)

    class WithFactories(base):
        connectionFactory = Conn
        transactionFactory = Trans
    return WithFactories


@scenario(subclass=with_factories)
async def factories(r: Record, pool: Any, env: Env) -> None:
    """What the factories are called with, and that the function gets what they made."""
    await r.call("runInteraction got", pool.runInteraction(lambda t: type(t).__name__))
    r["made"] = list(env.hits)
    env.hits.clear()
    await r.call("runWithConnection got", pool.runWithConnection(lambda c: type(c).__name__))
    r["made then"] = list(env.hits)


@scenario()
async def connect_disconnect(r: Record, pool: Any, env: Env) -> None:
    """connect()/disconnect() from a thread of the application's own."""
    await ev(pool.runQuery("select 1"))
    opened_before = len(env.opened)

    def in_thread() -> dict[str, Any]:
        seen = Record(env)
        first = seen.step("connect", lambda: type(pool.connect()).__module__.split(".")[0])
        if first is None:
            return dict(seen)
        conn = pool.connections.get(threading.get_ident())
        seen.step("in connections", lambda: conn is not None)
        seen.step("connect again: same", lambda: pool.connect() is conn)
        seen.step("openfun calls", lambda: len(env.opened) - opened_before)
        seen.step("state", lambda: env.state(conn))
        seen.step("works", lambda: execute(conn.cursor(), "select 1"))
        seen.step("disconnect of another raises", lambda: raises(lambda: pool.disconnect(object())))
        seen.step("disconnect", lambda: pool.disconnect(conn))
        seen.step("gone", lambda: threading.get_ident() not in pool.connections)
        return dict(seen)

    r["in a thread"] = await asyncio.to_thread(in_thread)


@scenario("postgresql")
async def session_settings_in_function(r: Record, pool: Any, env: Env) -> None:
    """Synapse's runWithConnection(db_autocommit=True, isolation_level=...):
    set_session/set_isolation_level on the connection before its first statement,
    restored after."""
    @worker
    def settings(seen: Record, conn: Any, env: Env) -> None:
        from psycopg2 import extensions
        seen.step("set_session autocommit", lambda: conn.set_session(autocommit=True))
        seen.step("insert", lambda: execute(conn.cursor(), env.insert(1)))
        seen.step("visible at once", env.keys)
        seen.step("set_session back", lambda: conn.set_session(autocommit=False))
        seen.step("set isolation", lambda: conn.set_isolation_level(
            extensions.ISOLATION_LEVEL_REPEATABLE_READ))
        cursor = conn.cursor()
        seen.step("isolation", lambda: (cursor.execute("show transaction_isolation"),
                                        cursor.fetchall()[0][0])[1])
        seen.step("set isolation back", lambda: conn.set_isolation_level(
            extensions.ISOLATION_LEVEL_READ_COMMITTED))

    await r.call("runWithConnection", pool.runWithConnection(settings, env))
    r.step("rows", env.keys)


@scenario("mysql")
async def autocommit_in_function(r: Record, pool: Any, env: Env) -> None:
    """PyMySQL's autocommit switched on and off by the function itself."""
    @worker
    def toggle(seen: Record, conn: Any, env: Env) -> None:
        seen.step("autocommit on", lambda: conn.autocommit(True))
        seen.step("insert", lambda: execute(conn.cursor(), env.insert(1)))
        seen.step("visible at once", env.keys)
        seen.step("autocommit off", lambda: conn.autocommit(False))
        seen.step("insert 2", lambda: execute(conn.cursor(), env.insert(2)))
        seen.step("visible before return", env.keys)

    await r.call("runWithConnection", pool.runWithConnection(toggle, env))
    r.step("rows", env.keys)


# -- where the records may differ ------------------------------------------------------

#: scenario name, or (scenario, kind) -> why the records differ (each such difference
#: is in docs/adbapi.md, "What differs"); remove an entry once its scenario agrees
EXPECTED_DIFFERENCES: dict[Any, str] = {}


def cases() -> list[Any]:
    params = []
    for name, spec in SCENARIOS.items():
        for kind in spec.kinds:
            reason = EXPECTED_DIFFERENCES.get((name, kind)) or EXPECTED_DIFFERENCES.get(name)
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            params.append(pytest.param(name, kind, marks=marks, id=f"{name}-{kind}"))
    return params


async def run_side(name: str, env: Env) -> dict[str, Any]:
    """One scenario on one side: its record (or, where the scenario itself broke,
    what it recorded until then and what broke it)."""
    spec = SCENARIOS[name]
    r = Record(env)
    env.create_table()
    pool = None
    try:
        if not spec.own_pool:
            pool = env.pool(spec.subclass(SIDES[env.side], env) if spec.subclass else None,
                            **spec.cp)
        await asyncio.wait_for(spec.fn(r, pool, env), 60)
    except Exception as exc:  # part of the record
        r["scenario raised"] = env.error(exc)
    finally:
        if pool is not None and pool.running:  # (adbapi's second close() raises AlreadyQuit)
            pool.close()
        env.drop_table()
    return dict(r)


@pytest.mark.parametrize("name, kind", cases())
async def test_adbapi_and_adb_agree(name: str, kind: str, tmp_path: Any) -> None:
    if kind != "sqlite":
        require_server(kind)
    records = {}
    for side in SIDES:  # one after the other, on the same database, each its own table
        env = Env(kind, tmp_path, side, reactor=loop_reactor())
        records[side] = dict(await run_side(name, env))
    unforced = {side: [k for k, v in record.items() if k.startswith(FORCED) and v is not True]
                for side, record in records.items()}
    assert unforced == {side: [] for side in records}, "a scenario's interleaving never came"
    assert differences(records["adbapi"], records["adb"]) == {}


def differences(stock: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """Each step whose records differ: {step: {"adbapi": ..., "adb": ...}}."""
    return {key: {"adbapi": stock.get(key, "(no such step)"), "adb": ours.get(key, "(no such step)")}
            for key in [*stock, *(key for key in ours if key not in stock)]
            if stock.get(key, "(no such step)") != ours.get(key, "(no such step)")}


def test_every_scenario_runs_on_every_driver_it_names() -> None:
    assert set(SCENARIOS) >= {key if isinstance(key, str) else key[0]
                              for key in EXPECTED_DIFFERENCES}
    assert all(set(spec.kinds) <= set(KINDS) for spec in SCENARIOS.values())
