"""Seed 001: one caller, N inserts one after another, then N selects by key.

Motor vs PyMongo showed that an async wrapper over a blocking driver costs time
when the code has no concurrency; this measures that price per call on SQL: the
systems report microseconds per insert and per select, beside the blocking
driver used directly.
"""

import time

from . import parallel_insert

NAME = "sequential"
SEED = "001"
DESCRIPTION = "one caller: N inserts, then N selects by key, one at a time (seed 001)"
TABLE = parallel_insert.TABLE
MIN_CONNECTIONS = 1
FIELDS = (("rows_per_s", "rows/s", "{:,.0f}"), ("insert_us", "insert us", "{:.0f}"),
          ("select_us", "select us", "{:.0f}"), ("peak_rss_mb", "peak RSS MB", "{:.0f}"))
statement = parallel_insert.statement
params = parallel_insert.params
prepare = parallel_insert.prepare
verify = parallel_insert.verify


def select_statement(paramstyle):
    mark = "?" if paramstyle == "qmark" else "%s"
    return f"select data from {TABLE} where userid = {mark}"


async def run(calls, spec):
    """One caller: every insert awaited before the next, then every select."""
    insert, select = statement(calls.paramstyle), select_statement(calls.paramstyle)
    await calls.query("select 1")
    start = time.perf_counter()
    for p in params(spec.rows):
        await calls.execute(insert, p)
    middle = time.perf_counter()
    for key in range(spec.rows):
        await calls.query(select, (key,))
    end = time.perf_counter()
    return {"seconds": end - start, "ok_calls": spec.rows, "rows_per_s": spec.rows / (end - start),
            "insert_us": (middle - start) / spec.rows * 1e6,
            "select_us": (end - middle) / spec.rows * 1e6}
