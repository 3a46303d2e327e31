"""Seed 003: iiBench, inserts into a table that keeps three secondary indexes.

One statement inserts ``--rows_per_commit`` rows (1000) as a multi-row INSERT of
literal values and is committed on its own; generating that text is real Python
work, which is the seed's finding: run **serial** (generate, execute, generate the
next), the database waits while the client generates. The producer/consumer modes
generate the next statement while the database works on the current one: a
``thread``, a ``coroutine`` (the loop generates while a worker or the socket is
busy: adb's natural form) or a ``process`` (the original's, through a queue),
each bounded to one statement ahead (the clock starts once the first statement is
ready: a producer process's start-up is not counted). With ``+queries``, four
closed loops run the original's four queries (primary-key range, ``marketsegment``,
``registersegment``, ``pdc``; ``LIMIT --rows_per_query``) beside the inserts.

Facts from mdcallag/mytools ``bench/ibench/iibench.py`` at 4ed4931 (2009): the
table, the column distributions, the random seed, the report line.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import multiprocessing
import random
import time
from multiprocessing.queues import Queue
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Optional

import adb.sync

from ..report import Summary, save
from ..systems import System
from ..systems.common import Calls, Figures, Options, RunSpec
from ..worlds import Channel, World
from .base import Scenario, Variant, WrongResult

TABLE = "adb_bench_purchases_index"
DEFAULT_SYSTEMS = ("adb-asyncio", "adb-sync", "adb-twisted", "threads", "asyncpg", "aiomysql")
MODES = ("serial", "thread", "coroutine", "process")
RANDOM_SEED = 3221223452  # the original's
START = datetime.datetime(2009, 3, 18)  # dateandtime = START + rows so far / 100,000 s
CASHREGISTERS, PRODUCTS, CUSTOMERS, MAX_PRICE = 1000, 10_000, 100_000, 500
QUERY_LOOPS = 4


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--rows_per_commit", type=int, default=1000,
                       help="iibench: rows per INSERT statement, each committed alone (1000)")
    group.add_argument("--rows_per_report", type=int, default=None,
                       help="iibench: rows between two report lines (a tenth of --rows)")
    group.add_argument("--rows_per_query", type=int, default=1000,
                       help="iibench: LIMIT of each query (1000)")
    group.add_argument("--modes", default=",".join(MODES),
                       help=f"iibench: which of {','.join(MODES)} to run (all)")
    load = group.add_mutually_exclusive_group()
    load.add_argument("--queries", action="store_true",
                      help="iibench: only runs with the query load (default: with and without)")
    load.add_argument("--insert_only", action="store_true",
                      help="iibench: only runs without the query load")


def variants(options: Options) -> list[Variant]:
    """(name, options) for every mode, without and with the query load."""
    modes = [m.strip() for m in str(options.get("modes") or ",".join(MODES)).split(",")]
    wrong = [m for m in modes if m not in MODES]
    if wrong or not modes:
        raise ValueError(f"--modes takes {', '.join(MODES)}, not {', '.join(wrong) or 'nothing'}")
    if int(options.get("rows_per_commit") or 1000) < 1:
        raise ValueError("--rows_per_commit must be positive")
    loads = [True] if options.get("queries") else [False] if options.get("insert_only") \
        else [False, True]
    return [(mode + (" +queries" if queries else ""), {"mode": mode, "with_queries": queries})
            for mode in modes for queries in loads]


def variant_unavailable(system: System, kind: str, options: Options) -> Optional[str]:
    if options.get("mode") == "coroutine" and system.world_for(kind) == "blocking":
        return "coroutine mode needs an event loop (the blocking world has its thread mode)"
    return None


def rows_of(rng: random.Random) -> Iterator[tuple[int, int, int, float]]:
    """The original's row stream: (cashregisterid, productid, customerid, price)."""
    while True:
        cashregisterid = rng.randrange(0, CASHREGISTERS)
        productid = rng.randrange(0, PRODUCTS)
        customerid = rng.randrange(0, CUSTOMERS)
        yield cashregisterid, productid, customerid, (rng.random() * MAX_PRICE + customerid) / 100


def statements(total: int, per_statement: int,
               clock: Optional[list[float]] = None) -> Iterator[tuple[str, int]]:
    """(sql, rows) for every INSERT of the run, generated on demand: the CPU work
    the producer/consumer modes take off the inserter's path. ``clock`` (a list
    of one float) adds up the seconds spent generating."""
    stream = rows_of(random.Random(RANDOM_SEED))
    done = 0
    while done < total:
        began = time.perf_counter()
        count = min(per_statement, total - done)
        when = _when(done)
        values = ",".join("('%s',%d,%d,%d,%.2f)" % (when, c, cu, p, price)
                          for c, p, cu, price in (next(stream) for _ in range(count)))
        sql = (f"insert into {TABLE} (dateandtime,cashregisterid,customerid,productid,price) "
               f"values {values}")
        if clock is not None:
            clock[0] += time.perf_counter() - began
        yield sql, count
        done += count


def expected_sums(total: int) -> list[int]:
    """Sums of cashregisterid, customerid and productid over the first ``total`` rows."""
    stream = rows_of(random.Random(RANDOM_SEED))
    sums = [0, 0, 0]
    for _ in range(total):
        c, p, cu, _price = next(stream)
        sums[0] += c
        sums[1] += cu
        sums[2] += p
    return sums


class Tally:
    """What the inserter and the query loops count, and the report lines."""

    def __init__(self, rows_per_report: int) -> None:
        self.rows = 0
        self.queries_by_loop = [0] * QUERY_LOOPS  # one counter per loop: no shared +=
        self.generating = [0.0]  # seconds spent generating statements, in any thread
        self.done = False
        self.per_report = rows_per_report
        self.reports: list[dict[str, float]] = []
        self.start = self.last_time = time.perf_counter()
        self.last_rows = self.last_queries = 0

    @property
    def queries(self) -> int:
        return sum(self.queries_by_loop)

    def inserted(self, count: int) -> None:
        before, self.rows = self.rows, self.rows + count
        if before // self.per_report != self.rows // self.per_report:
            self.report()

    def report(self) -> None:
        """The original's line: rows, seconds, cumulative and last inserts/s, table
        size, queries, cumulative and last queries/s."""
        now = time.perf_counter()
        seconds, interval = now - self.start, max(now - self.last_time, 1e-9)
        self.reports.append({
            "rows": self.rows, "seconds": round(seconds, 3),
            "cum_ips": self.rows / seconds, "last_ips": (self.rows - self.last_rows) / interval,
            "table_size": self.rows, "queries": self.queries,
            "cum_qps": self.queries / seconds,
            "last_qps": (self.queries - self.last_queries) / interval})
        self.last_time, self.last_rows, self.last_queries = now, self.rows, self.queries


async def run(calls: Calls, spec: RunSpec) -> Figures:
    """The inserter in the chosen mode, and the query loops if asked for."""
    options = spec.options
    per_statement = int(options.get("rows_per_commit") or 1000)
    with_queries = bool(options.get("with_queries"))
    if with_queries and spec.pool_size < 1 + QUERY_LOOPS:
        raise ValueError(f"iibench with queries needs --pool_size >= {1 + QUERY_LOOPS}")
    tally = Tally(int(options.get("rows_per_report") or max(per_statement, spec.rows // 10)))
    await calls.query("select 1")
    source = await _source(calls, options.get("mode", "serial"), spec.rows, per_statement,
                           tally.generating)
    jobs: list[Callable[[], Awaitable[None]]] = [lambda: _insert(source, tally)]
    if with_queries:
        limit = int(options.get("rows_per_query") or 1000)
        jobs += [functools.partial(_query_loop, calls, spec.kind, n, limit, tally)
                 for n in range(QUERY_LOOPS)]
    tally.start = tally.last_time = time.perf_counter()
    await calls.map(lambda job: job(), jobs)
    seconds = time.perf_counter() - tally.start
    if not tally.reports or tally.reports[-1]["rows"] != tally.rows:
        tally.report()
    return {"seconds": seconds, "rows": tally.rows, "inserts_per_s": tally.rows / seconds,
            "last_inserts_per_s": tally.reports[-1]["last_ips"], "queries": tally.queries,
            "queries_per_s": tally.queries / seconds,
            "generate_pct": 100 * tally.generating[0] / seconds, "reports": tally.reports}


async def _insert(source: Statements, tally: Tally) -> None:
    """Await every insert ``source`` gives, one at a time; then stop the query loops."""
    try:
        async for count, answer in source:
            await answer
            tally.inserted(count)
    finally:
        tally.done = True


#: (rows, what to await for that statement's insert), statement after statement
Statements = AsyncIterator[tuple[int, Awaitable[Any]]]


async def _source(calls: Calls, mode: str, total: int, per_statement: int,
                  clock: list[float]) -> Statements:
    """An async iterator of (rows, what to await for that statement's insert)."""
    if mode == "serial":
        async def serial() -> Statements:
            for sql, count in statements(total, per_statement, clock):
                yield count, calls.execute(sql)
        return serial()
    if mode == "coroutine":
        return _overlapped(calls, total, per_statement, clock)
    channel = calls.world.channel(1)
    if mode == "thread":
        calls.world.start_thread(_produce, channel.put, total, per_statement)
    elif mode == "process":
        _start_process(calls.world, channel, total, per_statement)
    else:
        raise ValueError(f"unknown iibench mode {mode!r}")

    first = await channel.get()  # the clock starts with a statement ready, not at start-up

    async def consumed() -> Statements:
        sql, count = first
        while sql is not None:
            yield count, calls.execute(sql)
            sql, count = await channel.get()
        clock[0] += count  # the producer's last word: its seconds generating
    return consumed()


async def _overlapped(calls: Calls, total: int, per_statement: int,
                      clock: list[float]) -> Statements:
    """Coroutine mode: statement k is sent, then k+1 generated while k runs, then
    k awaited: the loop generates while a worker (or the socket) is busy."""
    pending = None
    for sql, count in statements(total, per_statement, clock):
        if pending is not None:
            yield pending
        pending = count, calls.world.spawn(calls.execute(sql))
        await calls.world.pause()  # a coroutine driver sends on its first step
    if pending is not None:
        yield pending


def _produce(put: Callable[[Any], None], total: int, per_statement: int) -> None:
    """A producer: every statement into ``put``, then (None, seconds generating)."""
    clock = [0.0]
    for item in statements(total, per_statement, clock):
        put(item)
    put((None, clock[0]))


def _produce_to_queue(handoff: Queue[Any], total: int, per_statement: int) -> None:
    _produce(handoff.put, total, per_statement)


def _start_process(world: World, channel: Channel, total: int, per_statement: int) -> None:
    """The original's form: a producer process feeding a queue of one statement; a
    thread here moves what arrives into the world's channel."""
    context = multiprocessing.get_context("spawn")  # the pool's threads are running: no fork
    handoff: Queue[Any] = context.Queue(1)
    process = context.Process(target=_produce_to_queue, args=(handoff, total, per_statement),
                              daemon=True)
    process.start()

    def feed() -> None:
        while True:
            item = handoff.get()
            channel.put(item)
            if item[0] is None:
                process.join()
                return
    world.start_thread(feed)


async def _query_loop(calls: Calls, kind: str, which: int, limit: int, tally: Tally) -> None:
    """One of the four closed query loops, until the inserts are done."""
    rng = random.Random(RANDOM_SEED + 1 + which)
    while not tally.done:
        await calls.query(_QUERIES[which](rng, tally.rows, limit, kind == "mysql"))
        tally.queries_by_loop[which] += 1


def _when(rows: float) -> str:
    """The original's dateandtime: the start plus rows so far / 100,000 seconds."""
    return (START + datetime.timedelta(seconds=rows / 100_000)).strftime("%Y-%m-%d %H:%M:%S")


def _price(rng: random.Random) -> tuple[int, float]:
    customerid = rng.randrange(0, CUSTOMERS)
    return customerid, (rng.random() * MAX_PRICE + customerid) / 100


def _pk_query(rng: random.Random, rows: int, limit: int, mysql: bool) -> str:
    return (f"select transactionid from {TABLE} where transactionid >= "
            f"{rng.randrange(max(rows, 1))} limit {limit}")


def _market_query(rng: random.Random, rows: int, limit: int, mysql: bool) -> str:
    customerid, price = _price(rng)
    hint = " force index (marketsegment)" if mysql else ""
    return (f"select price, customerid from {TABLE}{hint} where "
            f"(price = {price:.2f} and customerid >= {customerid}) or (price > {price:.2f}) "
            f"limit {limit}")


def _register_query(rng: random.Random, rows: int, limit: int, mysql: bool) -> str:
    customerid, price = _price(rng)
    register = rng.randrange(0, CASHREGISTERS)
    hint = " force index (registersegment)" if mysql else ""
    return (f"select cashregisterid, price, customerid from {TABLE}{hint} where "
            f"(cashregisterid = {register} and price = {price:.2f} and customerid >= {customerid})"
            f" or (cashregisterid = {register} and price > {price:.2f})"
            f" or (cashregisterid > {register}) limit {limit}")


def _pdc_query(rng: random.Random, rows: int, limit: int, mysql: bool) -> str:
    customerid, price = _price(rng)
    when = _when(rng.randrange(max(rows, 1)))
    hint = " force index (pdc)" if mysql else ""
    return (f"select price, dateandtime, customerid from {TABLE}{hint} where "
            f"(price = {price:.2f} and dateandtime = '{when}' and customerid >= {customerid})"
            f" or (price = {price:.2f} and dateandtime > '{when}') or (price > {price:.2f}) "
            f"limit {limit}")


_QUERIES = (_pk_query, _market_query, _register_query, _pdc_query)


def prepare(url: str, rows: int) -> None:
    """The original's table and its three secondary indexes, dropped and created."""
    with adb.sync.Database(url, pool_size=1) as db:
        kind = db.dbapi.__name__
        db.runOperation(f"drop table if exists {TABLE}")
        key = {"psycopg2": "transactionid bigserial primary key",
               "pymysql": "transactionid bigint not null auto_increment primary key",
               "sqlite3": "transactionid integer primary key autoincrement"}[kind]
        stamp = "timestamp" if kind == "psycopg2" else "datetime"
        db.runOperation(f"create table {TABLE} ({key}, dateandtime {stamp}, "
                        "cashregisterid int not null, customerid int not null, "
                        "productid int not null, price float not null)")
        for index, columns in (("marketsegment", "price, customerid"),
                               ("registersegment", "cashregisterid, price, customerid"),
                               ("pdc", "price, dateandtime, customerid")):
            db.runOperation(f"create index {index} on {TABLE} ({columns})")


def verify(url: str, rows: int, figures: Optional[Figures] = None) -> None:
    """Every row there, and the columns' sums those of the seeded stream."""
    if figures is not None and figures.get("rows") != rows:
        raise WrongResult(f"{figures.get('rows')} rows reported inserted, not {rows}")
    with adb.sync.Database(url, pool_size=1) as db:
        (count, *sums), = db.runQuery(f"select count(*), sum(cashregisterid), sum(customerid), "
                                      f"sum(productid) from {TABLE}")
    expected = expected_sums(rows)
    if count != rows or [int(s or 0) for s in sums] != expected:
        raise WrongResult(f"expected {rows} rows with sums {expected}, found {count} with "
                          f"{[int(s or 0) for s in sums]}")


def plot(path: str, summary: Summary, title: str, options: Options) -> None:
    """Cumulative inserts/s over rows inserted (the last successful run's report
    lines): a panel without and one with the query load; a colour per system, a
    line style per mode."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    styles = dict(zip(MODES, ("-", "--", ":", "-.")))
    systems = list(dict.fromkeys(entry["system"] for entry in summary.values()))
    colours = {system: f"C{n % 10}" for n, system in enumerate(systems)}
    fig, panels = plt.subplots(1, 2, figsize=(13, 5.5), sharey=False)
    for panel, queries in zip(panels, (False, True)):
        for name, entry in summary.items():
            reports = entry.get("reports")
            mode = entry["variant"].split()[0] if entry.get("variant") else "serial"
            if reports and entry["variant"].endswith("+queries") == queries:
                panel.plot([r["rows"] for r in reports], [r["cum_ips"] for r in reports],
                           styles.get(mode, "-"), color=colours[entry["system"]],
                           label=name.replace(" +queries", ""))
        panel.set_title("with the four query loops" if queries else "inserts only", fontsize=9)
        panel.set_xlabel("rows inserted")
        panel.set_ylabel("inserts/s (cumulative)")
    handles, labels = max((panel.get_legend_handles_labels() for panel in panels),
                          key=lambda pair: len(pair[0]))  # a run may fill one panel only
    if handles:
        panels[1].legend(handles, labels, fontsize=7, loc="center left",
                         bbox_to_anchor=(1.02, 0.5))
    save(fig, path, title)


SCENARIO = Scenario(
    name="iibench", seed="003",
    description=("iiBench: 1000-row INSERTs into a table with 3 secondary indexes, serial or "
                 "producer/consumer, with and without 4 query loops (seed 003)"),
    prepare=prepare, run=run, verify=verify, table=TABLE, tables=(TABLE,),
    default_rows=100_000, default_pool_sizes=(5,),  # one inserter and the four query loops
    default_systems=DEFAULT_SYSTEMS, baselines=("threads",), add_arguments=add_arguments,
    variants=variants, variant_unavailable=variant_unavailable, plot=plot,
    fields=(("inserts_per_s", "inserts/s", "{:,.0f}"),
            ("last_inserts_per_s", "last ips", "{:,.0f}"),
            ("queries_per_s", "queries/s", "{:,.1f}"),
            ("generate_pct", "generate %", "{:.0f}"),
            ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
            ("cpu_us_per_row", "CPU us/row", "{:.1f}")))
