"""Scenario ``faults``: what breaks async database pools, run against adb and its peers.

Six fault programs (``PROGRAMS``), each bounded by ``--fault_seconds`` and
``--fault_calls``, run against each system of ``ROSTER`` (adb on asyncio and on
Tornado, asyncpg's pool, psycopg_pool, aiomysql's pool, SQLAlchemy's asyncio
engine, Twisted's adbapi: ``systems.FAULT_SYSTEMS``), by the harness like every
scenario: a fresh child process per run, in which ``drive`` opens the system's
pool, runs the program over it and checks it; around the child the parent
``arrange``s the run's name on the server and its private server. Every run
counts, checked against the server rather than taken from the client:

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
import contextlib
import random
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit
from typing import Any, Awaitable, Callable, Iterator, Optional

from .. import privateserver
from ..faultledger import Run, cancelling, count_double_settles
from ..faultproxy import FaultProxy
from ..report import Field, Summary, save
from ..serverside import Admin
from ..systems import FAULT_SYSTEMS, System
from ..systems.common import Figures, Options, RunSpec
from ..systems.fault_pools import Boom, Target
from ..worlds import on_asyncio_reactor, run_loop
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
                    if isinstance(exc, asyncio.CancelledError) and cancelling():
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


class Context:
    """What a child run knows: its system and spec, the options ``arrange`` added
    (the run's name on the server, the URLs, the private server), and the proxy."""

    def __init__(self, system: System, spec: RunSpec) -> None:
        self.system = system
        self.options: Options = spec.options
        self.program: str = self.options["program"]
        self.kind: str = spec.kind
        self.app: str = self.options["app"]
        self.pool_size: int = spec.pool_size
        self.settle_seconds = float(self.options.get("settle_seconds") or 10.0)
        self.admin_url: str = self.options["admin_url"]
        self.pool_url: str = self.options["pool_url"]
        self.private = (privateserver.Private(**self.options["private"])
                        if self.options.get("private") else None)
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
    count_double_settles(run.ledger)
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
        count_double_settles(run.ledger)
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


def drive(system: System, spec: RunSpec) -> Figures:
    """One (system, program, server) run, in the harness's fresh child process."""
    context = Context(system, spec)
    reason = NOT_EXPRESSIBLE.get((system.name, context.program))
    if reason:
        return {"program": context.program, "na": reason}
    table = "adb_faults_" + uuid.uuid4().hex[:10]
    with context.admin() as admin:
        admin.rows(f"create table {table} (token varchar(60), n int)")
    try:
        if context.program == "second-loop":
            return second_loop(context, table)
        if system.world_for(context.kind).startswith("twisted"):
            return on_asyncio_reactor(lambda: on_one_loop(context, table))
        return run_loop(on_one_loop(context, table))
    finally:
        with context.admin() as admin:
            admin.kill(context.app)  # what the pool leaked (counted already) would hold its locks
            admin.rows(f"drop table if exists {table}")


# -- the parent, around each child: a private server per kind, a user per MariaDB run ----

_PRIVATE: dict[str, privateserver.Private] = {}


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


@contextlib.contextmanager
def arrange(name: str, url: str, options: Options) -> Iterator[Options]:
    """Around one child run of system ``name``: the run's name on the server (and on
    MariaDB its own user), the private server ``kills-restart`` restarts; yields the
    options the child gets, which say where the pool and the admin connect."""
    program = options["program"]
    kind = Target.of(url, "", 1).kind
    app = f"adbf_{name.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    private = _private(kind) if program == "kills-restart" else None
    server_url = private.url if private else url
    with _own_user(server_url, app) as pool_url:
        yield {**options, "app": app, "admin_url": server_url, "pool_url": pool_url,
               "private": private.as_dict() if private else None}


def run_timeout(options: Options) -> float:
    """Seconds a run may take: its faults, its settling and the pool's start, with room."""
    seconds = float(options.get("fault_seconds") or 2.0)
    return 6 * seconds + 4 * float(options.get("settle_seconds") or 10) + 120


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
    prepare=prepare, verify=verify, drive=drive, arrange=arrange, run_timeout=run_timeout,
    roster=ROSTER, kinds=SERVERS,
    default_pool_sizes=(4,), baselines=(), add_arguments=add_arguments, variants=variants,
    variant_unavailable=variant_unavailable, progress_total=lambda rows, options: 1,
    fields=FIELDS, plot=plot, tools=tools, rows_are="fault programs")

