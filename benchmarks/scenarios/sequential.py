"""Seed 001: one caller, N inserts one after another, then N selects by key.

Motor vs PyMongo showed that an async wrapper over a blocking driver costs time
when the code has no concurrency; this measures that price per call on SQL: the
systems report microseconds per insert and per select, beside the blocking
driver used directly. The table, its rows and their check are parallel-insert's.
"""

from __future__ import annotations

import time

from ..sql import placeholder
from ..systems.common import Calls, Figures, RunSpec
from . import parallel_insert
from .base import Scenario

TABLE = parallel_insert.TABLE


def select_statement(paramstyle: str) -> str:
    return f"select data from {TABLE} where userid = {placeholder(paramstyle)}"


async def run(calls: Calls, spec: RunSpec) -> Figures:
    """One caller: every insert awaited before the next, then every select."""
    insert = parallel_insert.statement(calls.paramstyle)
    select = select_statement(calls.paramstyle)
    await calls.query("select 1")
    start = time.perf_counter()
    for p in parallel_insert.params(spec.rows):
        await calls.execute(insert, p)
    middle = time.perf_counter()
    for key in range(spec.rows):
        await calls.query(select, (key,))
    end = time.perf_counter()
    return {"seconds": end - start, "ok_calls": spec.rows, "rows_per_s": spec.rows / (end - start),
            "insert_us": (middle - start) / spec.rows * 1e6,
            "select_us": (end - middle) / spec.rows * 1e6}


SCENARIO = Scenario(
    name="sequential", seed="001",
    description="one caller: N inserts, then N selects by key, one at a time (seed 001)",
    prepare=parallel_insert.prepare, run=run, verify=parallel_insert.verify, table=TABLE,
    tables=(TABLE,),
    min_connections=1,
    fields=(("rows_per_s", "rows/s", "{:,.0f}"), ("insert_us", "insert us", "{:.0f}"),
            ("select_us", "select us", "{:.0f}"), ("peak_rss_mb", "peak RSS MB", "{:.0f}")))
