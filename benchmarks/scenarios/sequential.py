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
statement = parallel_insert.statement
params = parallel_insert.params
prepare = parallel_insert.prepare
verify = parallel_insert.verify


def select_statement(paramstyle):
    mark = "?" if paramstyle == "qmark" else "%s"
    return f"select data from {TABLE} where userid = {mark}"


def figures(insert_seconds, select_seconds, rows):
    return {"seconds": insert_seconds + select_seconds, "ok_calls": rows,
            "insert_us": insert_seconds / rows * 1e6, "select_us": select_seconds / rows * 1e6}


def run_blocking(rows, insert, select):
    """Time ``insert(params)`` for every row, then ``select(key)`` for every key."""
    start = time.perf_counter()
    for p in params(rows):
        insert(p)
    middle = time.perf_counter()
    for key in range(rows):
        select(key)
    return figures(middle - start, time.perf_counter() - middle, rows)


async def run_async(rows, insert, select):
    """``run_blocking`` for awaitable calls (futures, coroutines, Deferreds under Twisted)."""
    start = time.perf_counter()
    for p in params(rows):
        await insert(p)
    middle = time.perf_counter()
    for key in range(rows):
        await select(key)
    return figures(middle - start, time.perf_counter() - middle, rows)
