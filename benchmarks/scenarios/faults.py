"""Scenario ``faults``: what breaks async database pools, run against adb and its peers.

Six fault programs (``PROGRAMS``), each bounded by ``--fault_seconds`` and
``--fault_calls``, run against each system of ``ROSTER`` (adb on asyncio and on
Tornado, asyncpg's pool, psycopg_pool, aiomysql's pool, SQLAlchemy's asyncio
engine, Twisted's adbapi) in a fresh process each (``python -m
benchmarks.scenarios.faults REQUEST``). Every run counts, checked against the
server rather than taken from the client:

- calls that never settled (still pending ``--settle_seconds`` after the program);
- calls settled twice or with a wrong result (an echo that came back with another
  call's value; a row whose call said it did not run; half a transaction);
- rows lost (a call reported OK, its unique token absent) or written twice;
- connections leaked (the pool's own sessions still on the server after ``close()``)
  and transactions left open (its sessions idle in a transaction once the calls
  settled);
- next callers poisoned (a statement that should have worked failed, or returned
  another call's result);
- seconds until the pool served again (five echoes in a row) after the fault.

A pool is told apart on the server by a name of its own: PostgreSQL's
``application_name``, on MariaDB a user made for the run (dropped after it); only
its sessions are killed or counted. The server restart of program 4 happens on a
private server (``benchmarks.privateserver``), never the shared one; half-open
connections (program 3) go through the loopback proxy (``benchmarks.faultproxy``).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import contextlib
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit
from typing import Any, Awaitable, Callable, Coroutine, Iterator, Optional

from .. import privateserver
from ..faultproxy import FaultProxy
from ..report import Field, Summary, save
from ..systems import FAULT_SYSTEMS, System
from ..systems.common import Figures, Options
from ..systems.fault_pools import Boom, FaultPool, Target
from .base import Scenario, WrongResult

#: the fault programs, in order: name and what it does
PROGRAMS = {
    "cancel-storm": "1. calls under asyncio.wait_for with timeouts shorter than their "
                    "statements, a quarter in transactions, beside callers without timeouts",
    "cancel-tx": "2. the caller's task cancelled between a transaction's statements or at its commit",
    "half-open": "3. the server side stops answering without closing (proxy black hole), "
                 "then resumes; again, then the connections are cut",
    "kills-restart": "4. the pool's backends killed every 100 ms under load, then the "
                     "(private) server restarted under load",
    "second-loop": "5. the pool used after its loop closed and another replaced it, and "
                   "from a second thread's loop",
    "open-tx": "6. an exception inside the transaction block, caught outside it (or, every "
               "other time, raised with an explicit BEGIN open on a connection of the pool); "
               "the next caller's statement",
}
#: the counts that must be zero for adb, and what the report calls them
COUNTS = ("unsettled", "twice_or_wrong", "lost", "doubled", "leaked", "open_tx", "poisoned")
FIELDS: tuple[Field, ...] = (
    ("recovery_s", "serving again, s", "{:.2f}"),
    ("unsettled", "unsettled", "{:.0f}"), ("twice_or_wrong", "twice/wrong", "{:.0f}"),
    ("lost", "lost", "{:.0f}"), ("doubled", "doubled", "{:.0f}"),
    ("leaked", "leaked", "{:.0f}"), ("open_tx", "open tx", "{:.0f}"),
    ("poisoned", "poisoned", "{:.0f}"), ("refused", "refused", "{:.0f}"),
    ("calls", "calls", "{:.0f}"))


#: why a system cannot express a program: (system, program) -> reason
NOT_EXPRESSIBLE = {
    ("adbapi", "second-loop"): "adbapi's pool belongs to the one reactor a process runs "
                               "(a reactor cannot be restarted or run twice)",
}


SERVERS = ("postgresql", "mysql")
ROSTER = FAULT_SYSTEMS


# -- the ledger: what every call said, checked against the server ----------------------


class Ledger:
    """Outcomes of one run's calls: tokens reported written, not run, or maybe run;
    transactions (their tokens all present or all absent); echoes and failures."""

    def __init__(self) -> None:
        self.ok: set[str] = set()
        self.not_run: set[str] = set()
        self.maybe: set[str] = set()
        self.transactions: list[tuple[list[str], bool]] = []  # (tokens, committed)
        self.rolled_back: set[str] = set()  # tokens of blocks that raised (must be absent)
        self.calls = self.wrong = self.poisoned = self.refused = self.twice = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.pending: set[asyncio.Future[Any]] = set()

    def failed(self, token: Optional[str], exc: BaseException) -> None:
        """A call that raised: its token did not run (adb's may_have_run False) or may have."""
        self.errors[type(exc).__name__] += 1
        if token is not None:
            (self.not_run if getattr(exc, "may_have_run", True) is False else self.maybe).add(token)

    def check(self, present: list[str]) -> dict[str, int]:
        """Lost, doubled and wrong rows, from the tokens found in the table."""
        counts = collections.Counter(present)
        doubled = sum(1 for n in counts.values() if n > 1)
        lost = len(self.ok - set(counts))
        wrong = len((self.not_run | self.rolled_back) & set(counts))
        for tokens, committed in self.transactions:
            found = [t in counts for t in tokens]
            if any(found) and not all(found):
                wrong += 1  # half a transaction
            elif committed and not all(found):
                lost += len(tokens)
        return {"lost": lost, "doubled": doubled, "wrong_rows": wrong}


class Run:
    """One program's run of one pool: its SQL, its ledger, and the server-side checks."""

    def __init__(self, pool: FaultPool, kind: str, table: str, options: Options) -> None:
        self.pool, self.kind, self.table, self.options = pool, kind, table, options
        self.ledger = Ledger()
        self.seconds = float(options.get("fault_seconds") or 2.0)
        self.max_calls = int(options.get("fault_calls") or 1000)
        self.serials = iter(range(10**9))
        self.served = True  # False: this loop is one the pool never served (program 5)

    # -- SQL ---------------------------------------------------------------------------
    def insert_sql(self) -> str:
        return f"insert into {self.table} (token, n) values (%s, %s)"

    def slow_insert_sql(self) -> str:
        if self.kind == "postgresql":
            return f"insert into {self.table} (token, n) select %s, 1 from pg_sleep(%s)"
        return f"insert into {self.table} (token, n) select %s, sleep(%s)"

    def echo_sql(self) -> str:
        return "select cast(%s as text)" if self.kind == "postgresql" else "select cast(%s as char)"

    def fault(self, background: bool) -> None:
        """A failed call: poison where it should have been served (``background``),
        or, where this loop was never served at all (program 5), a refusal."""
        if background and self.served:
            self.ledger.poisoned += 1
        elif background:
            self.ledger.refused += 1

    def token(self, prefix: str) -> str:
        return f"{prefix}{next(self.serials)}"

    # -- calls -------------------------------------------------------------------------
    def spawn(self, coroutine: Awaitable[Any]) -> asyncio.Future[Any]:
        """A call as a task the ledger watches until it settles."""
        task = asyncio.ensure_future(coroutine)
        self.ledger.pending.add(task)
        task.add_done_callback(self.ledger.pending.discard)
        return task

    async def bounded(self, call: Awaitable[Any], timeout: Optional[float]) -> Any:
        """``call``'s result; past ``timeout`` the caller gives up (TimeoutError) and
        the call is cancelled, left for ``settle`` to count if it never ends (unlike
        ``wait_for``, which would wait for a cancellation that never completes)."""
        if timeout is None:
            return await call
        task = self.spawn(call)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            raise asyncio.TimeoutError()
        return task.result()

    async def insert(self, prefix: str, timeout: Optional[float] = None,
                     background: bool = False) -> bool:
        """One token insert (under ``wait_for`` when ``timeout``); True if it succeeded.
        ``background``: a caller that should never fail (its failure poisons)."""
        token = self.token(prefix)
        self.ledger.calls += 1
        try:
            await self.bounded(self.pool.execute(self.insert_sql(), (token, 0)), timeout)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and _cancelling():
                self.ledger.maybe.add(token)
                raise
            self.ledger.failed(token, exc)
            self.fault(background)
            return False
        self.ledger.ok.add(token)
        return True

    async def echo(self, timeout: Optional[float] = None, background: bool = False) -> bool:
        """``select 'value'``: another value back is a wrong result."""
        value = self.token("e")
        self.ledger.calls += 1
        try:
            rows = await self.bounded(self.pool.fetch(self.echo_sql(), (value,)), timeout)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and _cancelling():
                raise
            self.ledger.failed(None, exc)
            self.fault(background)
            return False
        if rows != [(value,)]:
            self.ledger.wrong += 1
            self.fault(background)
            return False
        return True

    async def transaction(self, prefix: str, steps: int, slow: float = 0.0, gap: float = 0.0,
                          fail: bool = False) -> Optional[BaseException]:
        """A transaction of ``steps`` token inserts (the last one sleeping ``slow``
        seconds on the server); recorded committed, or all-or-nothing."""
        tokens = [self.token(prefix) for _ in range(steps)]
        sql: list[tuple[str, tuple[Any, ...]]] = [(self.insert_sql(), (t, 0)) for t in tokens]
        if slow:
            sql[-1] = (self.slow_insert_sql(), (tokens[-1], slow))
        self.ledger.calls += 1
        try:
            await self.pool.transaction(sql, gap, fail)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, Boom):
                self.ledger.rolled_back.update(tokens)
            else:
                self.ledger.errors[type(exc).__name__] += 1
                self.ledger.transactions.append((tokens, False))
            return exc
        self.ledger.transactions.append((tokens, True))
        return None

    async def released_open(self, prefix: str) -> Optional[BaseException]:
        """A token insert after an explicit BEGIN, ``Boom`` raised with the
        transaction open (``FaultPool.release_open``): the token must never appear."""
        token = self.token(prefix)
        self.ledger.calls += 1
        try:
            await self.pool.release_open([(self.insert_sql(), (token, 0))])
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, Boom):
                self.ledger.rolled_back.add(token)
            else:
                self.ledger.failed(token, exc)
            return exc
        return None

    # -- after the fault ---------------------------------------------------------------
    async def recovery(self, within: float = 10.0) -> float:
        """Seconds until five echoes in a row succeed (``within`` if they never do,
        which poisons)."""
        start = time.monotonic()
        streak = 0
        while streak < 5:
            if time.monotonic() - start > within:
                self.fault(True)
                return within
            ok = await self.echo(timeout=2.0)
            streak = streak + 1 if ok else 0
            if not ok:
                await asyncio.sleep(0.05)
        return time.monotonic() - start

    async def probes(self, count: int = 10) -> None:
        """The next callers, once the pool serves again: each must succeed."""
        async def one() -> None:
            await self.insert("p", timeout=5.0, background=True)
            await self.echo(timeout=5.0, background=True)
        await asyncio.gather(*(one() for _ in range(count)))

    async def settle(self, within: float) -> int:
        """Wait up to ``within`` s for every call; the number still pending."""
        pending = set(self.ledger.pending)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=within)
        for task in pending:
            task.cancel()
        return len(pending)


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not a call under wait_for)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0 if hasattr(task, "cancelling") else False


async def _until(seconds: float, body: Callable[[], Awaitable[Any]], run: Run) -> None:
    """``body()`` again and again until ``seconds`` pass or the run's calls run out."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and run.ledger.calls < run.max_calls:
        await body()


async def _beside(run: Run, fault: Awaitable[Any], callers: int) -> Any:
    """``fault`` while ``callers`` background callers (no timeout) insert and echo."""
    stop = asyncio.Event()

    async def caller() -> None:
        while not stop.is_set():
            await run.insert("b", background=True)
            await run.echo(background=True)
    tasks = [run.spawn(caller()) for _ in range(callers)]
    try:
        return await fault
    finally:
        stop.set()
        await asyncio.wait(tasks, timeout=30)


# -- the programs -----------------------------------------------------------------------


async def cancel_storm(run: Run, context: "Context") -> float:
    """Program 1: waves of calls under ``wait_for`` with timeouts shorter than their
    statements (a quarter of them transactions) beside callers without timeouts."""
    flight = asyncio.Semaphore(4 * context.pool_size)

    async def one() -> None:
        try:
            slow = random.uniform(0.02, 0.08)
            timeout = random.uniform(0.002, slow * 0.8)
            if random.random() < 0.25:
                try:
                    await asyncio.wait_for(run.transaction("x", 2, slow=slow), timeout)
                except asyncio.TimeoutError:
                    pass  # the transaction recorded itself (all or nothing)
            else:
                token = run.token("s")
                run.ledger.calls += 1
                try:
                    await asyncio.wait_for(run.pool.execute(run.slow_insert_sql(), (token, slow)),
                                           timeout)
                    run.ledger.ok.add(token)
                except (Exception, asyncio.CancelledError) as exc:
                    if isinstance(exc, asyncio.CancelledError) and _cancelling():
                        raise
                    run.ledger.failed(token, exc)
        finally:
            flight.release()

    async def storm() -> None:
        end = time.monotonic() + run.seconds
        while time.monotonic() < end and run.ledger.calls < run.max_calls:
            await flight.acquire()
            run.spawn(one())
    await _beside(run, storm(), callers=2)
    await run.settle(context.settle_seconds)
    return await run.recovery()


async def cancel_tx(run: Run, context: "Context") -> float:
    """Program 2: transactions (two inserts, a pause between them) whose task is
    cancelled after 0-12 ms: before, between or during statements, or at commit."""
    async def one() -> None:
        task = run.spawn(run.transaction("c", 2, gap=random.uniform(0, 0.004)))
        await asyncio.sleep(random.uniform(0, 0.012))
        task.cancel()
        await asyncio.wait([task], timeout=context.settle_seconds)

    async def loop() -> None:
        await _until(run.seconds, one, run)
    await _beside(run, asyncio.gather(*(loop() for _ in range(context.pool_size))), callers=2)
    await run.settle(context.settle_seconds)
    return await run.recovery()


async def _load(run: Run, stop: asyncio.Event, callers: int, timeout: float) -> None:
    """Callers inserting and echoing under ``wait_for(timeout)`` until ``stop``:
    the load a fault hits (their failures are the fault's, not poison)."""
    async def caller() -> None:
        while not stop.is_set():
            if not await run.insert("l", timeout=timeout):
                await asyncio.sleep(0.02)
            await run.echo(timeout=timeout)
    for _ in range(callers):
        run.spawn(caller())


async def half_open(run: Run, context: "Context") -> float:
    """Program 3: the proxy goes black (sockets open, nothing forwarded) for
    ``--fault_seconds``, then forwards again; then black again, then cuts."""
    proxy = context.proxy
    assert proxy is not None
    stop = asyncio.Event()
    await _load(run, stop, 2 * context.pool_size, timeout=1.0)
    await asyncio.sleep(0.3)
    proxy.blackhole(True)
    await asyncio.sleep(run.seconds)
    proxy.blackhole(False)
    first = await run.recovery()
    proxy.blackhole(True)
    await asyncio.sleep(run.seconds)
    proxy.cut()
    proxy.blackhole(False)
    second = await run.recovery()
    stop.set()
    await run.settle(context.settle_seconds)
    return max(first, second)


async def kills_restart(run: Run, context: "Context") -> float:
    """Program 4: the pool's own backends killed every 100 ms under load for
    ``--fault_seconds``, then the private server restarted under load."""
    assert context.private is not None
    stop = asyncio.Event()
    await _load(run, stop, 2 * context.pool_size, timeout=5.0)
    end = time.monotonic() + run.seconds
    with context.admin() as killer:
        while time.monotonic() < end:
            await asyncio.sleep(0.1)
            await asyncio.get_running_loop().run_in_executor(None, killer.kill, context.app)
    first = await run.recovery()
    await asyncio.get_running_loop().run_in_executor(None, privateserver.restart,
                                                     context.private)
    second = await run.recovery()
    stop.set()
    await run.settle(context.settle_seconds)
    return max(first, second)


async def open_tx(run: Run, context: "Context") -> float:
    """Program 6: an insert in the system's transaction block, then an exception
    raised inside the block and caught outside; at once the next caller's insert
    and echo (a transaction left open would swallow them)."""
    async def one() -> None:
        if next(turns) % 2:
            exc = await run.transaction("o", 1, fail=True)
        else:
            exc = await run.released_open("q")
        if not isinstance(exc, Boom):
            run.ledger.poisoned += 1
        await run.insert("n", background=True)
        await run.echo(background=True)
    turns = iter(range(10**9))

    async def loop() -> None:
        await _until(run.seconds, one, run)
    await asyncio.gather(*(loop() for _ in range(context.pool_size)))
    await run.settle(context.settle_seconds)
    return await run.recovery()


#: the programs that run on one loop: program -> its coroutine
ON_ONE_LOOP: dict[str, Callable[[Run, "Context"], Awaitable[float]]] = {
    "cancel-storm": cancel_storm, "cancel-tx": cancel_tx, "half-open": half_open,
    "kills-restart": kills_restart, "open-tx": open_tx,
}


# -- the server side: sessions, transactions and rows, seen from a connection of its own --


class Admin:
    """A plain driver connection to the server (never through the proxy), as root:
    it counts, kills and reads only the sessions and rows of one run."""

    def __init__(self, url: str) -> None:
        target = Target.of(url, "", 1)
        self.kind = target.kind
        if self.kind == "postgresql":
            import psycopg2
            self.conn: Any = psycopg2.connect(host=target.host, port=target.port,
                                              user=target.user, dbname=target.database,
                                              password=target.password or None)
            self.conn.autocommit = True
        else:
            import pymysql
            self.conn = pymysql.connect(host=target.host, port=target.port, user=target.user,
                                        password=target.password, database=target.database,
                                        autocommit=True)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()
        cur.execute(sql, params)
        found = list(cur.fetchall()) if cur.description else []
        cur.close()
        return found

    def _own(self) -> str:
        """The condition that picks one run's sessions (its application_name or user)."""
        if self.kind == "postgresql":
            return "application_name = %s and pid <> pg_backend_pid()"
        return "user = %s and id <> connection_id()"

    def sessions(self, app: str) -> int:
        view = "pg_stat_activity" if self.kind == "postgresql" else "information_schema.processlist"
        return int(self.rows(f"select count(*) from {view} where {self._own()}", (app,))[0][0])

    def open_transactions(self, app: str) -> int:
        if self.kind == "postgresql":
            sql = (f"select count(*) from pg_stat_activity where {self._own()} "
                   "and state like 'idle in transaction%%'")
        else:
            sql = ("select count(*) from information_schema.innodb_trx t join "
                   "information_schema.processlist p on p.id = t.trx_mysql_thread_id "
                   "where p.user = %s and p.command = 'Sleep'")
        return int(self.rows(sql, (app,))[0][0])

    def kill(self, app: str) -> int:
        """Kill every session of the run (and only those); how many."""
        if self.kind == "postgresql":
            return len(self.rows("select pg_terminate_backend(pid) from pg_stat_activity "
                                 f"where {self._own()}", (app,)))
        ids = [r[0] for r in self.rows(
            f"select id from information_schema.processlist where {self._own()}", (app,))]
        for thread_id in ids:
            with contextlib.suppress(Exception):  # gone meanwhile
                self.rows("kill connection %s", (thread_id,))
        return len(ids)

    def close(self) -> None:
        self.conn.close()


class Context:
    """What a child run knows: the request, and the proxy or private server it uses."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.system: System = FAULT_SYSTEMS[request["system"]]
        self.program: str = request["program"]
        self.kind: str = request["kind"]
        self.app: str = request["app"]
        self.pool_size: int = request["pool_size"]
        self.options: Options = request["options"]
        self.settle_seconds = float(self.options.get("settle_seconds") or 10.0)
        self.admin_url: str = request["admin_url"]
        self.pool_url: str = request["pool_url"]
        self.private = (privateserver.Private(**request["private"])
                        if request.get("private") else None)
        self.proxy: Optional[FaultProxy] = None
        if self.program == "half-open":
            target = Target.of(self.pool_url, self.app, 1)
            self.proxy = FaultProxy(target.host, target.port)
            self.pool_url = with_address(self.pool_url, "127.0.0.1", self.proxy.port)

    @contextlib.contextmanager
    def admin(self) -> Iterator[Admin]:
        admin = Admin(self.admin_url)
        try:
            yield admin
        finally:
            admin.close()

    def target(self) -> Target:
        return Target.of(self.pool_url, self.app, self.pool_size)


def with_address(url: str, host: str, port: int) -> str:
    """``url`` pointing at ``host:port`` instead (the proxy)."""
    parts = urlsplit(url)
    auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{auth}{host}:{port}"))


def run_loop(main: Awaitable[Any]) -> Any:
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


def _count_double_settles(ledger: Ledger) -> None:
    """Count, on the running loop, every 'settled twice' the loop reports."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if type(exc).__name__ in ("InvalidStateError", "AlreadyCalledError"):
            ledger.twice += 1
        elif previous is not None:
            previous(loop, context)
    loop.set_exception_handler(handler)


async def _finish(run: Run, context: Context, recovery: float) -> Figures:
    """The next callers, then the checks: pending calls, open transactions, the
    pool closed, its sessions left."""
    await run.probes()
    unsettled = await run.settle(context.settle_seconds)
    await asyncio.sleep(0.5)
    loop = asyncio.get_running_loop()
    with context.admin() as admin:
        open_tx = await loop.run_in_executor(None, admin.open_transactions, context.app)
        try:
            await run.bounded(run.pool.close(), context.settle_seconds)
        except Exception:  # a close that hangs or fails: it never settled
            unsettled += 1
        leaked = await _sessions_left(admin, context.app)
        present = [r[0] for r in admin.rows(f"select token from {run.table}")]
    return _figures(run, context, present, unsettled=unsettled, open_tx=open_tx,
                    leaked=leaked, recovery=recovery)


async def _sessions_left(admin: Admin, app: str, within: float = 3.0) -> int:
    """The run's sessions still on the server, once the server had ``within`` s to
    notice closed sockets."""
    end = time.monotonic() + within
    while True:
        left = admin.sessions(app)
        if left == 0 or time.monotonic() > end:
            return left
        await asyncio.sleep(0.2)


def _figures(run: Run, context: Context, present: list[str], **found: Any) -> Figures:
    ledger = run.ledger
    rows = ledger.check(present)
    return {"program": context.program, "version": context.system.version() or "?",
            "calls": ledger.calls, "ok": len(ledger.ok), "maybe": len(ledger.maybe),
            "not_run": len(ledger.not_run), "unsettled": found["unsettled"],
            "twice_or_wrong": ledger.twice + ledger.wrong + rows["wrong_rows"],
            "lost": rows["lost"], "doubled": rows["doubled"], "leaked": found["leaked"],
            "open_tx": found["open_tx"], "poisoned": ledger.poisoned,
            "refused": ledger.refused, "recovery_s": round(found["recovery"], 3),
            "errors": dict(ledger.errors)}


async def on_one_loop(context: Context, table: str) -> Figures:
    """Open the pool, run the program, check everything."""
    pool = await context.system.open_pool(context.target())
    run = Run(pool, context.kind, table, context.options)
    _count_double_settles(run.ledger)
    recovery = await ON_ONE_LOOP[context.program](run, context)
    return await _finish(run, context, recovery)


def second_loop(context: Context, table: str) -> Figures:
    """Program 5: the pool opened and used on one loop (``asyncio.run``, which
    closes it); used again on the next ``asyncio.run``'s loop; then, while that loop
    runs calls of its own, from a second thread's loop too."""
    holder: dict[str, Run] = {}
    calls = max(5, min(50, context.options.get("fault_calls") or 50))

    async def first() -> None:
        pool = await context.system.open_pool(context.target())
        run = holder["run"] = Run(pool, context.kind, table, context.options)
        for _ in range(5):
            await run.insert("f", timeout=5.0, background=True)
            await run.echo(timeout=5.0, background=True)

    async def foreign(run: Run, prefix: str) -> None:
        """``calls`` callers at once (a loop that cannot serve costs one timeout, not
        one per call), each an insert then an echo; failures are refusals."""
        async def one() -> None:
            inserted = await run.insert(prefix, timeout=2.0)
            echoed = await run.echo(timeout=2.0)
            run.ledger.refused += (not inserted) + (not echoed)  # after the awaits: no lost update
        await asyncio.gather(*(one() for _ in range(calls)))

    async def elsewhere(run: Run) -> None:
        await foreign(run, "t")

    async def second() -> Figures:
        run = holder["run"]
        _count_double_settles(run.ledger)
        await foreign(run, "r")  # the loop replaced
        # a pool that never served this loop is refusing it, not poisoning its callers
        run.served = run.ledger.refused < 2 * calls
        thread = threading.Thread(target=lambda: run_loop(elsewhere(run)), daemon=True)
        thread.start()
        async def own() -> None:  # this loop's own callers, meanwhile
            await run.insert("m", timeout=5.0, background=True)
            await run.echo(timeout=5.0, background=True)
        await asyncio.gather(*(own() for _ in range(calls)))
        await asyncio.get_running_loop().run_in_executor(None, thread.join,
                                                         context.settle_seconds + 10)
        stuck = thread.is_alive()
        figures = await _finish(run, context, await run.recovery())
        figures["unsettled"] += stuck
        return figures
    run_loop(first())
    figures: Figures = run_loop(second())
    return figures


def on_reactor(body: Callable[[], Coroutine[Any, Any, Figures]]) -> Figures:
    """``body()`` on Twisted's asyncio reactor, which adbapi's pool needs running."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    from twisted.internet import asyncioreactor
    asyncioreactor.install(loop)
    from twisted.internet import defer
    from twisted.internet import reactor as installed
    reactor: Any = installed
    outcome: dict[str, Any] = {}

    def start() -> None:
        deferred: defer.Deferred[Figures] = defer.Deferred.fromFuture(loop.create_task(body()))

        def done(result: Any) -> None:
            outcome["result"] = result
            reactor.stop()
        deferred.addBoth(done)
    reactor.callWhenRunning(start)
    reactor.run()
    result = outcome.get("result")
    if not isinstance(result, dict):
        raise getattr(result, "value", RuntimeError(f"the run ended with {result!r}"))
    return result


def run_child(request: dict[str, Any]) -> Figures:
    """One (system, program, server) run, in this fresh process."""
    context = Context(request)
    table = "adb_faults_" + uuid.uuid4().hex[:10]
    with context.admin() as admin:
        admin.rows(f"create table {table} (token varchar(60), n int)")
    try:
        if context.program == "second-loop":
            return second_loop(context, table)
        if context.system.world_for(context.kind).startswith("twisted"):
            return on_reactor(lambda: on_one_loop(context, table))
        figures: Figures = run_loop(on_one_loop(context, table))
        return figures
    finally:
        with context.admin() as admin:
            admin.kill(context.app)  # what the pool leaked (counted already) would hold its locks
            admin.rows(f"drop table if exists {table}")


# -- the parent: one child per run, a private server per kind, a user per MariaDB run ----

_PRIVATE: dict[str, privateserver.Private] = {}
#: the child process: one run, its figures as a JSON line
CHILD = "import sys; from {module} import main; main(sys.argv[1:])"


def _private(kind: str) -> privateserver.Private:
    """This process's private ``kind`` server, made on first use, removed at exit."""
    if kind not in _PRIVATE:
        server = _PRIVATE[kind] = privateserver.create(kind)
        atexit.register(privateserver.remove, server)
    return _PRIVATE[kind]


@contextlib.contextmanager
def _own_user(server_url: str, app: str) -> Iterator[str]:
    """On MariaDB, a user made for the run (``app``, no password; its sessions are
    the run's); the URL the pool uses. PostgreSQL needs none: application_name."""
    target = Target.of(server_url, app, 1)
    if target.kind != "mysql":
        yield server_url
        return
    admin = Admin(server_url)
    try:
        admin.rows(f"create user '{app}'@'%%'")
        admin.rows(f"grant all on `{target.database}`.* to '{app}'@'%%'")
        yield server_url.replace(f"//{target.user}", f"//{app}", 1).split("?")[0]
    finally:
        with contextlib.suppress(Exception):
            admin.rows(f"drop user '{app}'@'%%'")
        admin.close()


def launch(name: str, url: str, pool_size: int, options: Options,
           progress: Optional[Callable[[int], None]]) -> Figures:
    """Run ``options['program']`` against system ``name`` in a child process."""
    program = options["program"]
    kind = Target.of(url, "", 1).kind
    reason = NOT_EXPRESSIBLE.get((name, program))
    if reason:
        return {"program": program, "na": reason}
    app = f"adbf_{name.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    private = _private(kind) if program == "kills-restart" else None
    server_url = private.url if private else url
    seconds = float(options.get("fault_seconds") or 2.0)
    limit = 6 * seconds + 4 * float(options.get("settle_seconds") or 10) + 120
    with _own_user(server_url, app) as pool_url:
        request = {"system": name, "program": program, "kind": kind, "app": app,
                   "pool_size": pool_size, "options": options, "admin_url": server_url,
                   "pool_url": pool_url, "private": private.as_dict() if private else None}
        try:
            done = subprocess.run([sys.executable, "-c", CHILD.format(module=__name__),
                                   json.dumps(request)],
                                  capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"hung: the run did not end within {limit:.0f} s") from None
    if progress is not None:
        progress(1)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit status {done.returncode}")
    figures: Figures = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def prepare(url: str, rows: int) -> None:
    """Nothing: each run makes (and drops) its own table."""


def verify(url: str, rows: int, figures: Optional[Figures]) -> None:
    """A run must bring every count (its child checked them against the server)."""
    if figures is None or figures.get("na"):
        return
    missing = [key for key in COUNTS if key not in figures]
    if missing:
        raise WrongResult(f"the run did not report {', '.join(missing)}")


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--fault_programs", default=",".join(PROGRAMS),
                       help=f"which fault programs ({', '.join(PROGRAMS)}; default: all)")
    group.add_argument("--fault_seconds", type=float, default=2.0,
                       help="seconds each fault lasts (its load, its black hole, its kills)")
    group.add_argument("--fault_calls", type=int, default=2000,
                       help="at most this many calls per program (the storm's budget)")
    group.add_argument("--settle_seconds", type=float, default=10.0,
                       help="how long a call may take to settle before it counts as never settled")


def variants(options: Options) -> list[tuple[str, Options]]:
    """One variant per fault program."""
    names = [n.strip() for n in str(options.get("fault_programs") or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown or not names:
        raise ValueError(f"--fault_programs: unknown {', '.join(unknown) or '(none)'}; "
                         f"these exist: {', '.join(PROGRAMS)}")
    return [(n, {"program": n}) for n in names]


def variant_unavailable(system: System, kind: str, options: Options) -> Optional[str]:
    """n/a, with why: a program a system has no way to express, or a private server
    this machine cannot make."""
    program = options.get("program", "")
    reason = NOT_EXPRESSIBLE.get((system.name, program))
    if reason:
        return f"n/a: {reason}"
    if program == "kills-restart":
        return privateserver.unavailable(kind)
    return None


def plot(path: str, summary: Summary, title: str, options: Options) -> None:
    """A grid, systems by programs: each cell the sum of the counts that should be
    zero (unsettled, twice/wrong, lost, doubled, leaked, open tx, poisoned)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    programs = [p for p in PROGRAMS if any(e.get("variant") == p for e in summary.values())]
    systems = list(dict.fromkeys(e["system"] for e in summary.values()))
    grid: list[list[float]] = []
    fig, ax = plt.subplots(figsize=(1.6 * len(programs) + 3, 0.5 * len(systems) + 1.6))
    for y, system in enumerate(systems):
        grid.append([])
        for x, program in enumerate(programs):
            entry = next((e for e in summary.values()
                          if e["system"] == system and e.get("variant") == program), None)
            bad = None if entry is None or "lost" not in entry else sum(
                entry[k]["max"] for k in COUNTS)
            grid[-1].append(-1 if bad is None else min(bad, 100))
            ax.text(x, y, "n/a" if bad is None else f"{bad:.0f}", ha="center", va="center",
                    fontsize=9)
    import numpy
    colours = matplotlib.colormaps["RdYlGn_r"].with_extremes(bad="#d0d0d0")  # n/a: grey
    ax.imshow(numpy.ma.masked_less(grid, 0), cmap=colours, vmin=0, vmax=20, aspect="auto")
    ax.set_xticks(range(len(programs)), programs, rotation=20)
    ax.set_yticks(range(len(systems)), systems)
    ax.set_title("calls unsettled + twice/wrong + rows lost + doubled + sessions leaked + "
                 "open tx + poisoned\n(max over rounds; 0 is right)", fontsize=9)
    save(fig, path, title)


def tools() -> dict[str, Any]:
    """The version of every system's library."""
    return {name: system.version() for name, system in ROSTER.items()}


SCENARIO = Scenario(
    name="faults", seed="issue 38",
    description="six fault programs (cancellation, half-open connections, kills and a "
                "restart, a second event loop, a transaction left open) against adb and "
                "the async pools users pick; every count checked on the server",
    prepare=prepare, verify=verify, launch=launch, roster=ROSTER, kinds=SERVERS,
    default_pool_sizes=(4,), baselines=(), add_arguments=add_arguments, variants=variants,
    variant_unavailable=variant_unavailable, progress_total=lambda rows, options: 1,
    fields=FIELDS, plot=plot, tools=tools, rows_are="fault programs")


def main(argv: list[str]) -> None:
    """The child: one run (``argv[0]``, the request as JSON), its figures printed as
    one JSON line; then out at once, so that threads a broken pool left hanging
    cannot keep the process alive."""
    import os
    figures = run_child(json.loads(argv[0]))
    print(json.dumps(figures), flush=True)
    os._exit(0)
