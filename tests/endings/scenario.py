"""One example in this process: clients on one front-end, one ending, the checks.

``run(plan, ...)`` runs on the example's own event loop (``asyncio.run``): the
asyncio and Tornado front-ends on it, Twisted's (the Database and the adbapi
drop-in) on Twisted's asyncio reactor over it, and ``adb.sync`` in threads of the
clients' own. The ending fires at the plan's moment, reached by events, never by a
sleep: after the k-th acknowledged unit (the ledger's condition), or once the
server shows n statements of the work waiting at the closed gate (``Site``).
Everything the test itself blocks on (the server's view, the gate, a thread's
join) runs in a thread of its own, so the loop keeps delivering results meanwhile.

What it checks afterwards (``Outcome.findings``, empty when everything held):
every call answered within ``BOUND`` seconds of the ending, or of its issue if later
(clients that keep being answered may go on ``PROGRESS`` s in all); ``close()`` returned
within ``BOUND``; the rows agree with the ledger; nothing of the work runs on the
server (nor sits in a transaction) ``QUIET`` seconds after an ending that cancels
or closes; the Database's threads are gone after its close (or its collection);
adb logged at most ``log_bound(plan)`` lines for the ending.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import trio
import trio.lowlevel
from twisted.internet.asyncioreactor import AsyncioSelectorReactor
from twisted.internet.defer import Deferred

import adb
import adb.sync
import adb.tornado
import adb.trio
import adb.twisted
from benchmarks import privateserver

from .. import trio_guest
from ..conftest import server_kwargs_of
from .ledger import ACK, MAYBE, NOT_RUN, UNKNOWN, Ledger
from .site import DBAPI, Site, thread_ids
from .work import Env, run_async, run_sync, runner

#: seconds any answer, close or thread may take after an ending (a loaded machine's)
BOUND = 20.0
#: seconds clients that keep being answered may go on after an ending, in all
PROGRESS = 60.0
#: seconds a call past BOUND is still waited on, to tell a late answer from none
LATE = 40.0
#: seconds after an ending that cancels until nothing of it may run on the server
QUIET = 5.0
#: seconds the moment may take to come (then the ending fires anyway)
MOMENT = 10.0


@dataclass(frozen=True)
class Plan:
    """One generated example: where, what work, which ending, when."""

    front: str  # asyncio, tornado, twisted, sync, dropin
    driver: str  # sqlite, postgresql, psycopg, mysql
    ending: str
    clients: tuple[tuple[str, ...], ...]  # each client's kinds of work, in order
    pool_size: int
    pipeline: Optional[bool]
    autobatch: Optional[int]
    #: ("acks", k): after k acknowledged units; ("running", n): n statements waiting
    #: at the gate; ("hold", k): a client at the k-th transaction body's end
    moment: tuple[str, int]
    limit: float = 0.3  # the timeout= / statement_timeout= of those endings
    graceful: bool = True  # a client program that closes on its way out (adb.sync)

    def pipelined(self) -> bool:
        """Whether standalone calls may be pipelined or batched (a caller who gives
        up on one of those is not cancelled on the server, docs/usage.md)."""
        return bool(self.autobatch) or self.pipeline is True or (
            self.pipeline is None and self.driver == "mysql")


@dataclass
class Outcome:
    findings: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


class Logs(logging.Handler):
    """adb's log lines about one Database (their message starts with its name)."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.DEBUG)
        self.name_ = name + ":"
        self.lines: list[str] = []
        self.logger = logging.getLogger("adb")

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.INFO and record.getMessage().startswith(self.name_):
            self.lines.append(f"{record.levelname} {record.getMessage()[:160]}")

    def __enter__(self) -> Logs:
        self.level = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level)


def log_bound(plan: Plan, ledger: Optional[Ledger] = None) -> int:
    """The most lines adb may log for one ending: a few per worker (a cancel, a
    connection dropped or reconnected, a transaction rolled back) and per client
    (its open transaction, its abandoned one), never one per call, except the one
    INFO line per cancel that was asked for (docs/usage.md): with a
    ``statement_timeout`` or a cancellation, one per call that failed or gave up."""
    abandoned = sum(kinds.count("abandon") for kinds in plan.clients)
    cancels = 0
    if ledger is not None and plan.ending in ("statement_timeout", "cancel"):
        cancels = sum(len(u.tokens) for u in ledger.units.values()
                      if u.outcome in (NOT_RUN, MAYBE) and u.kind != "abandon")
    return 3 * plan.pool_size + 2 * len(plan.clients) + abandoned + cancels + 4


def in_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """``fn(*args)`` in a new thread; a future of the loop settled with its result."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def body() -> None:
        try:
            value, ok = fn(*args), True
        except BaseException as exc:
            value, ok = exc, False
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the example's loop has closed: nobody waits for it
            pass
    threading.Thread(target=body, daemon=True).start()
    return future


def make_db(plan: Plan, site: Site, reactor: Any) -> Any:
    """The Database (or started ConnectionPool) of the plan."""
    options: dict[str, Any] = {"pool_size": plan.pool_size, "name": site.table}
    if plan.pipeline is not None:
        options["pipeline"] = plan.pipeline
    if plan.autobatch:
        options["autobatch"] = plan.autobatch
    if plan.ending == "timeout":
        options["timeout"] = plan.limit
    if plan.ending == "statement_timeout":
        options["statement_timeout"] = plan.limit
    if plan.front == "asyncio":
        return adb.Database(site.url, **options)
    if plan.front == "tornado":
        return adb.tornado.Database(site.url, **options)
    if plan.front == "twisted":
        return adb.twisted.Database(site.url, reactor=reactor, **options)
    if plan.front == "sync":
        return adb.sync.Database(site.url, **options)
    if plan.front == "trio":  # a trio run hosted by the example's loop
        trio_guest.guest()
        return adb.trio.Database(site.url, **options)
    if site.kind == "sqlite":
        connkw: dict[str, Any] = {"database": site.url[len("sqlite:///"):],
                                  "check_same_thread": False}
    else:
        connkw = server_kwargs_of(site.admin_url)
        if plan.driver == "psycopg":  # libpq's own keyword
            connkw["dbname"] = connkw.pop("database")
        if site.kind == "postgresql":
            connkw["application_name"] = site.table
    pool = adb.twisted.ConnectionPool(
        DBAPI[plan.driver], cp_reactor=reactor, cp_min=1, cp_max=plan.pool_size,
        cp_name=site.table, cp_noisy=False, cp_autobatch=plan.autobatch, **connkw)
    pool.start()
    return pool


def engine_of(db: Any) -> Any:
    return db._adb._engine if isinstance(db, adb.twisted.ConnectionPool) else db._engine


def connections_of(db: Any) -> list[Any]:
    return list(engine_of(db).pool.connections.values())


class Clients:
    """The example's clients: one future each on the loop, and how to cancel them."""

    def __init__(self, plan: Plan, env: Env) -> None:
        self.futures: list[asyncio.Future[Any]] = []
        self.cancels: list[Callable[[], Any]] = []
        loop = asyncio.get_running_loop()
        work = runner(plan.front)
        for c, kinds in enumerate(plan.clients):
            if work is None:
                future = in_thread(run_sync, env, c, list(kinds))
                cancel: Callable[[], Any] = future.cancel
            elif plan.front in ("twisted", "dropin"):
                deferred = Deferred.fromCoroutine(run_async(env, c, list(kinds), work))
                future, cancel = deferred.asFuture(loop), deferred.cancel
            elif plan.front == "trio":  # a task of the hosted run; cancelled the trio way
                future = trio_guest.guest().run(run_async(env, c, list(kinds), work))
                cancel = future.cancel
            else:
                task = asyncio.ensure_future(run_async(env, c, list(kinds), work))
                future, cancel = task, task.cancel
            future.add_done_callback(lambda _: env.ledger.poke())
            self.futures.append(future)
            self.cancels.append(cancel)

    def done(self) -> bool:
        return all(f.done() for f in self.futures)

    async def wait(self, within: float) -> list[int]:
        """Wait up to ``within`` seconds; the indexes of the clients still going."""
        if self.futures:
            await asyncio.wait(self.futures, timeout=within)
        return [i for i, f in enumerate(self.futures) if not f.done()]

    def cancel(self) -> None:
        for cancel in self.cancels:
            cancel()


async def reach_moment(plan: Plan, env: Env, clients: Clients) -> str:
    """Wait for the plan's moment; what was seen when it came (or did not)."""
    kind, n = plan.moment
    if kind == "hold":
        await in_thread(env.ledger.wait_for, lambda: env.held or clients.done(), MOMENT)
        return "a client held at a transaction's end" if env.held else "no client held"
    if kind == "running" and env.site.gate_closed:
        seen = await in_thread(env.site.wait_running, n, MOMENT)
        return f"{seen} of {n} statements running"
    deadline = time.monotonic() + MOMENT

    def acked() -> bool:
        return env.ledger.count(ACK) >= n or clients.done() or time.monotonic() > deadline
    # the ledger's condition is notified at every answer and when a client ends
    await in_thread(env.ledger.wait_for, acked, MOMENT)
    return f"{env.ledger.count(ACK)} of {n} acknowledged"


def pauses(plan: Plan) -> Callable[[], tuple[Any, Callable[[], None]]]:
    """How a client pauses on this front-end (``Env.pause``): a future of the loop,
    a Deferred, or (adb.sync) a threading.Event; and the release, callable from any
    thread."""
    if plan.front == "sync":
        def event() -> tuple[Any, Callable[[], None]]:
            flag = threading.Event()
            return flag, flag.set
        return event
    if plan.front == "trio":  # an Event of the hosted run, set through its token
        token = trio.lowlevel.current_trio_token()

        def trio_event() -> tuple[Any, Callable[[], None]]:
            flag = trio.Event()

            def release() -> None:
                try:
                    token.run_sync_soon(flag.set)
                except trio.RunFinishedError:  # the example is over: nobody waits
                    pass
            return flag.wait(), release
        return trio_event
    loop = asyncio.get_running_loop()

    def pause() -> tuple[Any, Callable[[], None]]:
        waiter: Any = Deferred() if plan.front in ("twisted", "dropin") else loop.create_future()

        def fire() -> None:
            if isinstance(waiter, Deferred):
                if not waiter.called:
                    waiter.callback(None)
            elif not waiter.done():
                waiter.set_result(None)
        def release() -> None:
            loop.call_soon_threadsafe(fire)
        return waiter, release
    return pause


def release(env: Env) -> None:
    """Let the held client go on (after the ending has been fired)."""
    if env.release is not None:
        env.release()


def start_close(plan: Plan, db: Any) -> asyncio.Future[Any]:
    """Begin the close from a callback of the loop (as a signal handler would) or,
    on adb.sync, from another thread; a future of its end."""
    loop = asyncio.get_running_loop()
    if plan.front == "sync":
        return in_thread(db.close)
    done: asyncio.Future[Any] = loop.create_future()

    def handler() -> None:
        try:
            result = db.close()
        except BaseException as exc:
            done.set_exception(exc)
            return
        if plan.ending == "close_start":
            try:  # adbapi's own refuses to start again after its close (AlreadyQuit)
                db.start()
            except Exception as exc:  # noqa: BLE001 - what it raises is noted
                if type(exc).__name__ not in ("AlreadyQuit", "PoolQuit"):
                    done.set_exception(exc)
                    return
        if isinstance(result, Deferred):
            result = result.asFuture(loop)
        if result is None:
            done.set_result(None)
            return
        closing = trio_guest.guest().run(result) if plan.front == "trio" \
            else asyncio.ensure_future(result)

        def closed(f: asyncio.Future[Any]) -> None:
            if done.done():
                return
            error = f.exception()
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(None)
        closing.add_done_callback(closed)
    loop.call_soon(handler)
    return done


def until_closed(db: Any) -> None:
    """Wait until the close has begun (the engine refuses new calls)."""
    engine = engine_of(db)
    deadline = time.monotonic() + BOUND
    while not engine.closed and time.monotonic() < deadline:
        time.sleep(0.002)


def open_after_close(site: Site, db: Any) -> None:
    """Open the gate once the close has begun (a close waits for running calls)."""
    until_closed(db)
    site.open_gate()


async def bounded(future: Any, within: float) -> tuple[bool, Any]:
    """(True, result) if ``future`` settled within ``within`` seconds, else (False, None)."""
    try:
        return True, await asyncio.wait_for(asyncio.shield(future), within)
    except asyncio.TimeoutError:
        return False, None
    except BaseException as exc:
        return True, exc


async def fire(plan: Plan, env: Env, clients: Clients, out: Outcome,
               private: Any) -> None:
    """The ending, at the moment; what it must leave is checked here or after."""
    site, db = env.site, env.db
    if plan.ending in ("close", "close_start"):
        opener = in_thread(open_after_close, site, db) if site.gate_closed else None
        closing = start_close(plan, db)
        await in_thread(until_closed, db)
        release(env)  # the held transaction goes on to its commit, after the close began
        ok, error = await bounded(closing, BOUND)
        if not ok:
            out.findings.append(f"close() did not return within {BOUND} s")
        elif isinstance(error, BaseException):
            out.findings.append(f"close() raised {error!r}")
        if opener is not None:
            await opener
    elif plan.ending == "cancel":
        clients.cancel()
        if site.gate_closed and not plan.pipelined() and plan.front != "dropin":
            left = await in_thread(site.wait_quiet, QUIET)
            if left:
                out.findings.append(f"cancelled calls still on the server: {left}")
    elif plan.ending == "timeout":
        # the workers wait at the gate: queued calls must fail PoolTimeout (never run)
        await in_thread(env.ledger.wait_for,
                        lambda: env.ledger.count(NOT_RUN) > 0 or clients.done(),
                        plan.limit + MOMENT)
    elif plan.ending == "statement_timeout":
        env.stop.set()  # no new work: what runs now must be cancelled, gate closed
        still = await clients.wait(plan.limit + BOUND)
        if still:
            out.findings.append(f"{len(still)} client(s) still waiting past statement_timeout")
        if site.gate_closed:
            left = await in_thread(site.wait_quiet, QUIET)
            if left:
                out.findings.append(f"statements past statement_timeout still on the server: {left}")
    elif plan.ending == "kill":
        out.figures["killed"] = await in_thread(site.kill_all, thread_ids(connections_of(db)))
    elif plan.ending in ("restart", "crash"):
        mode = "fast" if plan.ending == "restart" else "immediate"
        await in_thread(privateserver.restart, private, mode)
    elif plan.ending == "drop":
        env.stop.set()
    else:
        raise AssertionError(f"not an in-process ending: {plan.ending}")
    release(env)


async def settle_clients(plan: Plan, env: Env, clients: Clients, out: Outcome) -> None:
    """Every call must be answered within BOUND of the ending (or of its issue,
    if later): on the drop-in too, where a call on a closed pool fails with PoolClosed
    (stock adbapi's is dropped, its Deferred never fired: the drop-in answers).

    The bound is per call, not per client: a client with many units left may take
    longer than BOUND in all on a loaded machine while every one of its calls is
    answered, and that is slowness, not a lost answer (up to PROGRESS in all). A
    call unanswered for BOUND since it was issued, or since the ending if it was
    issued before, is the finding; it then gets LATE more seconds, so the finding
    says whether the answer came late (a slow machine) or never (a lost answer)."""
    if env.site.gate_closed:
        await in_thread(env.site.open_gate)
    ended = time.monotonic()
    while True:
        still = await clients.wait(BOUND / 10)
        now = time.monotonic()
        stuck = [u for u in env.ledger.unsettled() if now - max(u.issued, ended) > BOUND]
        if not still or stuck or now - ended >= PROGRESS:
            break
    if not still:
        return
    if stuck:
        text = (f"{len(stuck)} call(s) waited more than {BOUND} s for their answer after "
                f"the ending ({plan.ending}): {[f'{u.kind} #{u.id}' for u in stuck][:6]}")
    else:
        text = (f"{len(still)} client(s) still going {PROGRESS} s after the ending "
                f"({plan.ending}), answered all along, waiting on "
                f"{[f'{u.kind} #{u.id}' for u in env.ledger.unsettled()][:6]}")
    text += "".join(where(clients.futures[i]) for i in still[:2])
    await clients.wait(LATE)
    if stuck:
        late = sum(u.answered is not None for u in stuck)
        text += (f"; {LATE} s later {late} of them had their answer (late), "
                 f"{len(stuck) - late} still had none (lost)")
    out.findings.append(text)
    for unit in env.ledger.unsettled():  # what the cancel makes of them is no answer
        env.ledger.force(unit, UNKNOWN)
    clients.cancel()
    await clients.wait(BOUND)


def where(future: Any, depth: int = 0) -> str:
    """Where a stuck client waits: the chain of coroutines of its asyncio task, down
    through the tasks it awaits, and what the innermost one awaits."""
    if not isinstance(future, asyncio.Task) or depth > 4:
        return f" on {future!r:.200}"
    chain: list[str] = []
    awaited: Any = future.get_coro()
    while awaited is not None and hasattr(awaited, "cr_frame"):
        frame = awaited.cr_frame
        if frame is not None:
            chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        awaited = awaited.cr_await
    inner = [f for f in gc.get_referents(awaited) if asyncio.isfuture(f)] if awaited else []
    return f"; waiting at {' -> '.join(chain)}" + (where(inner[0], depth + 1) if inner else
                                                      f" on {awaited!r:.160}")


async def close_db(plan: Plan, db: Any, out: Outcome) -> None:
    """Close what the ending left open, within BOUND."""
    if plan.front == "dropin":
        if db.running:
            db.close()
        return
    if db.closed:
        return
    if plan.front == "sync":
        ok, _ = await bounded(in_thread(db.close), BOUND)
    else:
        result = db.close()
        if plan.front == "trio":
            result = trio_guest.guest().run(result)
        ok, _ = await bounded(result.asFuture(asyncio.get_running_loop())
                              if isinstance(result, Deferred) else result, BOUND)
    if not ok:
        out.findings.append(f"the final close() did not return within {BOUND} s")


def threads_left(name: str, within: float) -> list[str]:
    """The Database's threads still alive ``within`` seconds from now."""
    deadline = time.monotonic() + within
    mine = (f"{name}-worker", f"{name}-watchdog", f"{name}-cancel", f"{name}-cut")
    while True:
        left = [t.name for t in threading.enumerate() if t.name.startswith(mine) and t.is_alive()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def sessions_gone(site: Site, ids: list[int], within: float) -> Optional[str]:
    """The dropped Database's server sessions must end (its connections closed)."""
    deadline = time.monotonic() + within
    while True:
        if site.kind == "postgresql":
            left = site.admin.runQueryValue(
                "select count(*) from pg_stat_activity where application_name = %s", (site.table,))
        elif site.kind == "mysql" and ids:
            left = site.admin.runQueryValue(
                "select count(*) from information_schema.processlist where id in ("
                + ",".join(str(i) for i in ids) + ")")
        else:
            left = 0
        if not left:
            return None
        if time.monotonic() > deadline:
            return f"{left} session(s) of the dropped Database still open after {within} s"
        time.sleep(0.05)


async def run(plan: Plan, tmp_dir: str, private: Any = None) -> Outcome:
    """Run one example; its findings (empty: every promise held) and figures."""
    out = Outcome()
    site = Site(plan.driver, tmp_dir, None if private is None else private.url)
    site.create()
    reactor = None
    try:
        if plan.front in ("twisted", "dropin"):
            reactor = AsyncioSelectorReactor(asyncio.get_running_loop())
        with Logs(site.table) as logs, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ledger = await run_in(plan, site, reactor, out, private)
            gc.collect()
        resource = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)
                    and site.table in str(w.message)]
        if plan.ending == "drop" and not resource:
            out.findings.append("a Database dropped unclosed gave no ResourceWarning")
        if plan.ending != "drop" and resource:
            out.findings.append(f"ResourceWarning without a drop: {resource[:2]}")
        out.figures["log_lines"] = len(logs.lines)
        bound = log_bound(plan, ledger)
        if len(logs.lines) > bound:
            out.findings.append(f"adb logged {len(logs.lines)} lines for one {plan.ending} "
                                f"(bound {bound}): {logs.lines[:8]}")
        left = await in_thread(site.wait_quiet, QUIET, True)
        if left:
            out.findings.append(f"after the close: {left}")
        present = await in_thread(site.tokens)
        figures = ledger.check(present, allow_unknown=True)
        out.findings.extend(figures.pop("findings"))
        out.figures.update(figures)
    finally:
        if reactor is not None:
            reactor.removeReader(reactor.waker)
            reactor.waker.connectionLost(None)
        await trio_guest.stop_guest()
        await in_thread(site.drop)
    return out


async def run_in(plan: Plan, site: Site, reactor: Any, out: Outcome, private: Any) -> Ledger:
    """The work, the ending and the checks that need the Database; the ledger."""
    ledger = Ledger()
    db = make_db(plan, site, reactor)
    env = Env(db, site, ledger, twisted=plan.front in ("twisted", "dropin"),
              trio=plan.front == "trio",
              hold_at=plan.moment[1] if plan.moment[0] == "hold" else 0, pause=pauses(plan))
    ids = thread_ids(connections_of(db)) if site.kind == "mysql" else []
    if plan.moment[0] == "running" and site.gated:
        await in_thread(site.close_gate)
    clients = Clients(plan, env)
    began = time.monotonic()
    out.figures["moment"] = await reach_moment(plan, env, clients)
    out.figures["moment_s"] = round(time.monotonic() - began, 2)
    await fire(plan, env, clients, out, private)
    fired = time.monotonic()
    out.figures["fired_s"] = round(fired - began, 2)
    await settle_clients(plan, env, clients, out)
    out.figures["settled_s"] = round(time.monotonic() - began, 2)
    slowest = env.ledger.slowest_since(fired)
    if slowest is not None:  # the longest any call waited for its answer after the ending
        out.figures["slowest_answer"] = f"{slowest[0]:.2f} s ({slowest[1]})"
    name = site.table
    if plan.ending == "drop":
        ids = ids or (thread_ids(connections_of(db)) if site.kind == "mysql" else [])
        env.db = db = None  # the application lets go of it, unclosed
        del clients
        gc.collect()
        left = sessions_gone(site, ids, BOUND) if site.kind != "sqlite" else None
        if left:
            out.findings.append(left)
    else:
        await close_db(plan, db, out)
    threads = await in_thread(threads_left, name, BOUND)
    if threads:
        out.findings.append(f"threads of the Database alive {BOUND} s after its end: {threads}")
    return ledger
