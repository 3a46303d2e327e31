"""Bulk: reading and loading rows by the million, in bounded memory.

Seed 000's rows made wide: an int key and a 100-character text (the key
zero-padded, so SQL can recompute it), ``--rows`` of them (1,000,000). Five parts,
each a variant of the report:

- ``stream``: every row of a table filled beforehand, read through the system's
  way of reading a result bigger than memory (``Calls.stream``: adb's
  ``db.stream``, asyncpg's cursor, psycopg 3's server-side cursor, aiomysql's and
  PyMySQL's unbuffered cursors, psycopg2's named cursor; the C clients' text
  output), ``--batch`` rows per fetch, row by row through the system's own
  iterator (``async for row in ...``; ``for`` in the blocking world);
- ``batches``: the same, a batch at a time through the system's batch call
  (adb's ``fetch()``, asyncpg's ``cursor.fetch(n)``, ``fetchmany(n)``), which
  spares the per-row step of an async iterator;
- ``fetchall``: the same rows through ``query`` (a whole result at once: adb's
  ``runQuery``), for contrast, above all in memory;
- ``copy``: the rows loaded into an empty table through the system's bulk path
  (``Calls.copy_in``: adb's ``copy_in``, asyncpg's ``copy_records_to_table``,
  psycopg 3's ``copy`` and ``write_row``; the C clients' ``\\copy`` and ``LOAD DATA
  LOCAL INFILE``);
- ``executemany``: the same load through ``many`` (adb's ``runMany``), in one
  transaction, for contrast.

A reader counts the rows and sums their keys as they come, and reports both with
the read's rows/s, the process's RSS before the read, its peak, the growth, and
the process's CPU time per row during the read (every thread's: adb's workers too);
the parent checks the count and the sum (a wrong one is an error, never a figure).
A loader's rows are built before the clock (and its CPU counted from there); the
parent checks the loaded table's
count, key sum and every text. The table readers read is filled once, on the
server (``generate_series``, MariaDB's ``seq_0_to_N``, a recursive CTE), and kept
while it holds ``--rows`` rows; the load table is created empty before every run.
The progress bar does not move during a run: counting the rows of a table being
loaded, every half second, would load the server the run measures.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import AsyncIterable
from typing import Any, Optional

import adb.sync

from ..sql import (BULK_COLUMNS, BULK_SOURCE, BULK_TARGET, bulk_key_sum, bulk_select,
                   bulk_text, placeholder)
from ..systems import COPY, MANY, STREAM, System
from ..systems.common import Calls, Figures, Options, Rows, RunSpec, kind_of
from .base import Scenario, Variant, WrongResult

#: the parts, each a variant, and the optional call a system needs for it (None: ``query``)
NEEDS = {"stream": STREAM, "batches": STREAM, "fetchall": None, "copy": COPY,
         "executemany": MANY}
PARTS = tuple(NEEDS)
READS = ("stream", "batches", "fetchall")
DEFAULT_SYSTEMS = ("adb-asyncio", "adb-tornado", "adb-twisted-db", "adb-sync", "asyncpg",
                   "psycopg3", "aiomysql", "threads", "c-client")
#: a row's text recomputed from its key (``{k}``) in each server's SQL
TEXT_OF_KEY = {"postgresql": "lpad({k}::text, 100, '0')", "mysql": "lpad({k}, 100, '0')",
               "sqlite": "printf('%0100d', {k})"}
FILL_CHUNK = 1_000_000  # rows per statement when MariaDB fills the source table


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """``--bulk_parts`` and ``--batch``: which parts run, and a stream's fetch size."""
    group.add_argument("--bulk_parts", default=",".join(PARTS),
                       help=f"bulk: which of {','.join(PARTS)} to run (all)")
    group.add_argument("--batch", type=int, default=1000,
                       help="bulk: rows per fetch of a stream (adb's batch, asyncpg's prefetch, "
                            "a cursor's fetchmany or itersize) (1000)")


def variants(options: Options) -> list[Variant]:
    """One variant per part asked for, in the order of ``PARTS``."""
    asked = [p.strip() for p in str(options.get("bulk_parts") or ",".join(PARTS)).split(",")]
    wrong = [p for p in asked if p not in NEEDS]
    if wrong or not asked:
        raise ValueError(f"--bulk_parts takes {', '.join(PARTS)}, not {', '.join(wrong)}")
    if int(options.get("batch") or 1000) < 1:
        raise ValueError("--batch must be positive")
    return [(part, {"part": part}) for part in PARTS if part in asked]


def variant_unavailable(system: System, kind: str, options: Options) -> Optional[str]:
    """Why ``system`` has no way to run this part (None: it has one)."""
    part = options.get("part", "stream")
    needs = NEEDS[part]
    if system.opener is None:  # a program (the C clients): its runner does the parts it names
        return None if part in system.optional_calls else \
            f"a program of its own: it runs bulk's {' and '.join(system.optional_calls)} parts"
    if needs is not None and needs not in system.optional_calls:
        return f"no {needs} call in this system (bulk's {part} part needs one)"
    return None


async def run(calls: Calls, spec: RunSpec) -> Figures:
    """The part ``spec.options["part"]`` asks for, on a connection already used once."""
    part = spec.options.get("part", "stream")
    await calls.query("select 1")
    if part in READS:
        return await _read(calls, spec, part)
    return await _load(calls, spec, part)


async def _read(calls: Calls, spec: RunSpec, part: str) -> Figures:
    """Every row of the source table, streamed or fetched at once, counted and
    summed as they come; rows/s and the RSS before the read, at its peak and the
    growth between."""
    before = _rss_mb()
    start, cpu = time.perf_counter(), time.process_time()
    if part == "fetchall":
        count, total = await _tally(await calls.query(bulk_select()))
    else:
        if calls.stream is None:
            raise ValueError("this system's calls have no stream")
        batches, batch = part == "batches", int(spec.options.get("batch") or 1000)
        async with calls.stream(bulk_select(), batch, batches) as rows:
            count, total = await (_tally_batches(rows) if batches else _tally(rows))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"part": part, "seconds": seconds, "rows_per_s": count / seconds,
            "rows_read": count, "key_sum": total, "rss_before_mb": before,
            "peak_rss_mb": peak, "rss_growth_mb": peak - before,
            "cpu_us_per_row": cpu / max(count, 1) * 1e6}


async def _tally(rows: Rows) -> tuple[int, int]:
    """How many rows, and the sum of their keys: ``async for`` over a stream of an
    event-loop world, ``for`` over a blocking one's (or a fetched list)."""
    count = total = 0
    if isinstance(rows, AsyncIterable):
        async for row in rows:
            count += 1
            total += row[0]
    else:
        for row in rows:
            count += 1
            total += row[0]
    return count, total


async def _tally_batches(batches: Rows) -> tuple[int, int]:
    """``_tally`` over a stream of batches (lists of rows)."""
    count = total = 0
    if isinstance(batches, AsyncIterable):
        async for rows in batches:
            count += len(rows)
            for row in rows:
                total += row[0]
    else:
        for rows in batches:
            count += len(rows)
            for row in rows:
                total += row[0]
    return count, total


async def _load(calls: Calls, spec: RunSpec, part: str) -> Figures:
    """``--rows`` rows, built before the clock, into the empty load table by
    ``copy_in`` or by ``many``."""
    rows = [(key, bulk_text(key)) for key in range(spec.rows)]
    start, cpu = time.perf_counter(), time.process_time()
    if part == "copy":
        if calls.copy_in is None:
            raise ValueError("this system's calls have no copy_in")
        reported = await calls.copy_in(BULK_TARGET, BULK_COLUMNS, rows)
    else:
        reported = await _many(calls, rows)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"part": part, "seconds": seconds, "rows_per_s": spec.rows / seconds,
            "reported": reported if isinstance(reported, int) else None,
            "cpu_us_per_row": cpu / spec.rows * 1e6}


async def _many(calls: Calls, rows: list[tuple[int, str]]) -> Any:
    """The rows by executemany in one transaction: the system's ``transaction()``
    where it has one (a driver in autocommit would commit every row), else its
    ``many`` alone (asyncpg's executemany is atomic; aiomysql's sends multi-row
    INSERTs, a commit each)."""
    sql = _insert(calls.paramstyle)
    if calls.transaction is not None:
        async with calls.transaction() as tx:
            return await tx.many(sql, rows)
    if calls.many is None:
        raise ValueError("this system's calls have no executemany")
    return await calls.many(sql, rows)


def _insert(paramstyle: str) -> str:
    """The executemany part's statement: one row into the load table."""
    mark = placeholder(paramstyle)
    return f"insert into {BULK_TARGET} ({', '.join(BULK_COLUMNS)}) values ({mark}, {mark})"


def _rss_mb() -> float:
    """This process's resident set now, in MB (Linux's /proc; elsewhere its peak so far)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return pages * resource.getpagesize() / 2**20


def prepare(url: str, rows: int) -> None:
    """The source table holding ``rows`` rows (filled only if it does not), and
    the load table created empty."""
    kind = kind_of(url)
    with adb.sync.Database(url, pool_size=1) as db:
        if not _holds(db, rows):
            _fill(db, kind, rows)
        db.runOperation(f"drop table if exists {BULK_TARGET}")
        db.runOperation(_create(BULK_TARGET))


def _create(table: str) -> str:
    """Both tables' shape: seed 000's, the key a primary key, the text never NULL."""
    return f"create table {table} (k int not null primary key, v varchar(100) not null)"


def _holds(db: adb.sync.Database, rows: int) -> bool:
    """Whether the source table is there with keys 0..rows-1 and full-width texts
    (the check also brings it into the server's cache before every run)."""
    try:
        (count, keys, width), = db.runQuery(
            f"select count(*), coalesce(sum(k), 0), coalesce(sum(length(v)), 0) "
            f"from {BULK_SOURCE}")
    except db.dbapi.Error:  # not there yet
        return False
    return (count, int(keys), int(width)) == (rows, bulk_key_sum(rows), rows * len(bulk_text(0)))


def _fill(db: adb.sync.Database, kind: str, rows: int) -> None:
    """The source table dropped, created and filled by the server itself."""
    db.runOperation(f"drop table if exists {BULK_SOURCE}")
    db.runOperation(_create(BULK_SOURCE))
    text = TEXT_OF_KEY[kind].format(k="k")
    if kind == "postgresql":
        db.runOperation(f"insert into {BULK_SOURCE} select k, {text} "
                        f"from generate_series(0, {rows - 1}) as k")
        db.runOperation(f"vacuum analyze {BULK_SOURCE}")  # hint bits set now, not by a reader
    elif kind == "mysql":
        for low in range(0, rows, FILL_CHUNK):
            high = min(low + FILL_CHUNK, rows) - 1
            db.runOperation(f"insert into {BULK_SOURCE} select seq, "
                            f"{TEXT_OF_KEY[kind].format(k='seq')} from seq_{low}_to_{high}")
    else:
        db.runOperation(f"insert into {BULK_SOURCE} with recursive n(k) as (select 0 union all "
                        f"select k + 1 from n where k < {rows - 1}) select k, {text} from n")


def verify(url: str, rows: int, figures: Optional[Figures] = None) -> None:
    """A read: the reader counted ``rows`` rows whose keys add up. A load: the
    table holds exactly the rows built, every text right."""
    part = (figures or {}).get("part")
    if part is None:
        raise WrongResult("the run reported no part: nothing to check")
    if part in READS:
        _check_read(rows, figures or {})
    else:
        _check_load(url, rows)


def _check_read(rows: int, figures: Figures) -> None:
    """The reader's own count and key sum, against those of ``rows`` rows."""
    expected = (rows, bulk_key_sum(rows))
    found = (figures.get("rows_read"), figures.get("key_sum"))
    if found != expected:
        raise WrongResult(f"expected {rows} rows read with key sum {expected[1]}, the reader "
                          f"counted {found[0]} with key sum {found[1]}")


def _check_load(url: str, rows: int) -> None:
    """The load table's count, key sum and texts, read back by the parent."""
    with adb.sync.Database(url, pool_size=1) as db:
        (count, keys, bad), = db.runQuery(
            f"select count(*), coalesce(sum(k), 0), "
            f"coalesce(sum(case when v = {TEXT_OF_KEY[kind_of(url)].format(k='k')} "
            f"then 0 else 1 end), 0) "
            f"from {BULK_TARGET}")
    if (count, int(keys), int(bad)) != (rows, bulk_key_sum(rows), 0):
        raise WrongResult(f"expected {rows} rows loaded (key sum {bulk_key_sum(rows)}), found "
                          f"{count} (key sum {keys}, {bad} with the wrong text)")


SCENARIO = Scenario(
    name="bulk", seed="000",
    description=("bulk: N wide rows streamed (or fetched at once) and loaded by COPY (or "
                 "executemany), with the reader's peak RSS; seed 000's rows, 100-char text"),
    prepare=prepare, run=run, verify=verify, min_connections=1,
    tables=(BULK_TARGET, BULK_SOURCE),
    default_rows=1_000_000, default_pool_sizes=(1,), default_systems=DEFAULT_SYSTEMS,
    baselines=("asyncpg", "aiomysql", "threads"), add_arguments=add_arguments,
    variants=variants, variant_unavailable=variant_unavailable,
    fields=(("rows_per_s", "rows/s", "{:,.0f}"), ("seconds", "seconds", "{:.2f}"),
            ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
            ("rss_growth_mb", "RSS growth MB", "{:.0f}"),
            ("cpu_us_per_row", "CPU us/row", "{:.2f}")))
