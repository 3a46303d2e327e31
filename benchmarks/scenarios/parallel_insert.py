"""Seed 000: N single-row inserts fired at once through a pool of 10, then count(*).

drop/create ``adb_bench_insert(userid int primary key, data varchar(100))``; every
system inserts ``(i, str(i))`` for i in 0..N-1, all calls issued before the
first completes; afterwards the parent checks the count, the key sum and the
data column.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

import adb.sync

from .. import cpushare
from ..sql import placeholder
from ..systems.common import Calls, Figures, RunSpec
from .base import Scenario, WrongResult

TABLE = "adb_bench_insert"
_AS_TEXT = {"psycopg2": "cast(userid as varchar(100))", "psycopg": "cast(userid as varchar(100))",
            "pymysql": "cast(userid as char)",
            "sqlite3": "cast(userid as text)"}


def statement(paramstyle: str) -> str:
    mark = placeholder(paramstyle)
    return f"insert into {TABLE} (userid, data) values ({mark}, {mark})"


def params(rows: int) -> list[tuple[int, str]]:
    return [(i, str(i)) for i in range(rows)]


#: how often the progress of a run is sampled (systems with ``stats``: adb's)
SAMPLE_EVERY = 0.1
#: the opening stretch whose rate the warm-up figure compares with the run's
OPENING = 0.5


async def run(calls: Calls, spec: RunSpec) -> Figures:
    """Warm every connection, then fire all N inserts at once and wait for them."""
    sql = statement(calls.paramstyle)
    rows = params(spec.rows)
    await calls.map(lambda _: calls.query("select 1"), range(spec.pool_size * 2))
    sampler = Sampler(calls.stats) if calls.stats is not None else None
    meters = Meters.start(spec.kind)
    start = time.perf_counter()
    if sampler is not None:
        sampler.start(start)
    done = await calls.map(lambda p: calls.execute(sql, p), rows)
    seconds = time.perf_counter() - start
    figures: Figures = {"seconds": seconds, "ok_calls": len(done),
                        "rows_per_s": spec.rows / seconds}
    if sampler is not None:
        figures.update(sampler.figures(seconds, spec.rows))
    if meters is not None:
        figures.update(meters.figures(spec.rows))
    if calls.stats is not None:
        stats = calls.stats()
        figures.update(wakeups=stats["wakeups"], polls=stats.get("polls"),
                       largest_batch=stats["largest_batch"])
    return figures


class Meters:
    """Where the burst's CPU went besides the client: the database server's
    processes on this machine and how busy all the cores were, read around the
    inserts alone (the client's own CPU is ``cpu_us_per_row``, read by the child).
    Client and server share this machine's cores: with ``machine_busy`` near 1, the
    rate is what the cores give for the two sides' CPU per row together."""

    def __init__(self, database: cpushare.Meter, machine: cpushare.Machine) -> None:
        self.database, self.machine = database, machine

    @classmethod
    def start(cls, kind: str) -> Optional["Meters"]:
        """Both meters started, or None where ``/proc`` is not there to read."""
        if not cpushare.available():
            return None
        meters = cls(cpushare.Meter(None, kind), cpushare.Machine())
        meters.database.start()
        meters.machine.start()
        return meters

    def figures(self, rows: int) -> Figures:
        self.machine.stop()
        self.database.stop()
        found: Figures = {"machine_busy": self.machine.busy}
        if self.database.names:
            found["db_cpu_us_per_row"] = self.database.database / rows * 1e6
        return found


class Sampler:
    """The run's progress, read from the pool's own completed-call counter by a
    thread every ``SAMPLE_EVERY`` s (no query, nothing on the event loop): the
    ``progress`` curve in the JSON, and the opening rate, which says whether the
    run warms up (``opening_rows_per_s`` over the first ``OPENING`` s, and its
    ratio to the whole run's rate)."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.stats = stats
        self.base = stats()["completed"]
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True,
                                       name="progress-sampler")
        self.start_time = 0.0

    def start(self, start_time: float) -> None:
        self.start_time = start_time
        self.thread.start()

    def sample(self) -> None:
        while not self.stopped.wait(SAMPLE_EVERY):
            done = self.stats()["completed"] - self.base
            self.samples.append((time.perf_counter() - self.start_time, done))

    def figures(self, seconds: float, rows: int) -> Figures:
        self.stopped.set()
        self.thread.join()
        # a sample the thread took after the last call came back but before it was
        # stopped belongs to no part of the run
        curve = [(0.0, 0), *(s for s in self.samples if s[0] < seconds), (seconds, rows)]
        opening = min(OPENING, seconds)
        reached = _at(curve, opening)
        rate = rows / seconds
        return {"progress": [[round(t, 3), n] for t, n in curve],
                "opening_rows_per_s": reached / opening,
                "opening_ratio": reached / opening / rate}


def _at(curve: list[tuple[float, int]], when: float) -> float:
    """Calls done at ``when``, interpolated between the samples either side."""
    for (t0, n0), (t1, n1) in zip(curve, curve[1:]):
        if t0 <= when <= t1:
            return n0 + (n1 - n0) * ((when - t0) / (t1 - t0) if t1 > t0 else 1.0)
    return float(curve[-1][1])


def prepare(url: str, rows: int) -> None:
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"drop table if exists {TABLE}")
        db.runOperation(f"create table {TABLE} (userid int not null primary key, "
                        "data varchar(100))")


def verify(url: str, rows: int, figures: Optional[Figures] = None) -> None:
    """Raise WrongResult unless every call reported success and exactly the N
    expected rows are there."""
    if figures is not None and figures.get("ok_calls") != rows:
        raise WrongResult(f"{figures.get('ok_calls')} calls reported success, not {rows}")
    with adb.sync.Database(url, pool_size=1) as db:
        text = _AS_TEXT[db.dbapi.__name__]
        (count, key_sum, bad), = db.runQuery(
            f"select count(*), coalesce(sum(userid), 0), "
            f"sum(case when data = {text} then 0 else 1 end) from {TABLE}")
    expected_sum = rows * (rows - 1) // 2
    if count != rows or int(key_sum) != expected_sum or (bad or 0) != 0:
        raise WrongResult(f"expected {rows} rows (key sum {expected_sum}), found {count} rows "
                          f"(key sum {key_sum}, {bad or 0} with wrong data)")


SCENARIO = Scenario(
    name="parallel-insert", seed="000",
    description="N single-row inserts fired at once, pool of 10 (seed 000)",
    prepare=prepare, run=run, verify=verify, table=TABLE, tables=(TABLE,),
    fields=(("rows_per_s", "rows/s", "{:,.0f}"), ("seconds", "seconds", "{:.2f}"),
            ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
            ("cpu_us_per_row", "CPU us/row", "{:.0f}"),
            ("db_cpu_us_per_row", "server CPU us/row", "{:.0f}"),
            ("machine_busy", "cores busy", "{:.0%}"),
            ("opening_ratio", "first 0.5s", "{:.2f}")))
