"""Seed 004: zzzeek's bigdata, ingesting census lines row by row.

Phase 1 inserts one ``geo_record`` per line, one row per statement, into a table
with a unique index over five columns and a lookup index. Phase 2 takes one line
per unit of work: select the line's geo record id by ``(fileid, logrecno)``,
select the 222 dictionary items of its segment ordered by ``(sortkey, index)``,
then 222 single-row inserts into ``data_element``. A reader process parses the
lines and feeds a queue (``benchmarks.census``), and ``--pool_size`` workers take
them: threads, greenlets or coroutines, each running its calls one after another.
Autocommit throughout; ``--no-autocommit`` makes each unit one transaction and
``--executemany`` sends the 222 inserts as one executemany, the original's two
optional switches. Phase 2 is reported twice: while the reader is still filling
the queue, and after it is done (the original's second and third figures).

Facts from bigdata's ``model.py``, ``util.py`` and ``suites/`` (elprans/bigdata
at fc3f03f, 2015).
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Awaitable, Callable, Optional, Union

import adb.sync

from .. import census
from ..report import Points, Summary, line_chart
from ..sql import placeholder
from ..systems import MANY, TRANSACTION, System
from ..systems.common import Calls, Figures, Options, RunSpec, TxCalls
from .base import Scenario, WrongResult

TABLE = "adb_bench_data_element"
#: its four tables, each before the ones it references
TABLES = (TABLE, "adb_bench_geo_record", "adb_bench_dictionary_item", "adb_bench_matrix")
DEFAULT_SYSTEMS = ("threads", "dbutils", "gevent", "asyncpg", "aiopg", "aiomysql",
                   "adb-asyncio", "adb-tornado", "adb-sync", "adb-twisted")
GEO_INSERT = ("insert into adb_bench_geo_record (fileid, stusab, chariter, cifsn, logrecno) "
              "values ({m}, {m}, {m}, {m}, {m})")
GEO_LOOKUP = "select id from adb_bench_geo_record where fileid = {m} and logrecno = {m}"
ITEMS_OF_SEGMENT = ("select d.id, d.{index} from adb_bench_dictionary_item d join adb_bench_matrix m "
                    "on d.matrix_id = m.id where m.segment_id = {m} "
                    "order by m.sortkey, d.{index}")
DATA_INSERT = ("insert into adb_bench_data_element (geo_record_id, dictionary_item_id, value) "
               "values ({m}, {m}, {m})")


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--census", metavar="FILE",
                       help="bigdata: a real SF1 segment-01 file (.zip or text) instead of "
                            "generated lines; --rows of its lines are used")
    group.add_argument("--no-autocommit", "--no_autocommit", dest="no_autocommit",
                       action="store_true",
                       help="bigdata: one transaction per line (the original's switch)")
    group.add_argument("--executemany", action="store_true",
                       help="bigdata: a line's 222 inserts as one executemany")


def variant_unavailable(system: System, kind: str, options: Options) -> Optional[str]:
    if options.get("no_autocommit") and TRANSACTION not in system.optional_calls:
        return "--no-autocommit needs a transaction on one connection, which this system's " \
               "calls do not give here (the original had the switch for threads only)"
    if options.get("executemany") and MANY not in system.optional_calls:
        return "--executemany: this system has no executemany (aiopg has none, as the " \
               "original noted)"
    return None


class Tally:
    """Rows inserted so far (one counter per worker: no shared +=), when the first
    record arrived (the clock starts there, not at the reader's start-up), and the
    time and row count when the reader had queued its last one."""

    def __init__(self, workers: int) -> None:
        self.by_worker = [0] * workers
        self.first: Optional[float] = None  # perf_counter() readings
        self.reader_done: Optional[float] = None
        self.rows_at_reader_done = 0

    @property
    def rows(self) -> int:
        return sum(self.by_worker)


async def run(calls: Calls, spec: RunSpec) -> Figures:
    """Phase 1, then phase 2, each with ``pool_size`` workers fed by a reader process."""
    options, kind = spec.options, spec.kind
    sql = _statements(calls.paramstyle, kind)
    await calls.query("select 1")
    workers = spec.pool_size

    geo = Tally(workers)
    await _phase(calls, spec, "geo", geo,
                 lambda worker, record: _insert_geo(calls, sql, worker, record, geo))
    geo_seconds = time.perf_counter() - _started(geo)

    expected = len(await calls.query(sql["items"], (census.SEGMENT,)))
    data = Tally(workers)
    line = _line_runner(calls, options)
    await _phase(calls, spec, "data", data,
                 lambda worker, record: line(sql, worker, record, data, expected))
    end, first = time.perf_counter(), _started(data)
    seconds = end - first
    figures = {"lines": geo.rows, "geo_rows": geo.rows, "data_rows": data.rows,
               "geo_seconds": geo_seconds, "data_seconds": seconds,
               "seconds": geo_seconds + seconds,
               "geo_per_s": geo.rows / geo_seconds, "records_per_s": data.rows / seconds,
               "census": options.get("census")}
    reader_done = data.reader_done if data.reader_done is not None else first
    filling, rows = reader_done - first, data.rows_at_reader_done
    if rows and filling > 0.05 * seconds:  # else the queue filled before any real work
        figures["filling_per_s"] = rows / filling
    if end > reader_done:
        figures["drained_per_s"] = (data.rows - rows) / (end - reader_done)
    return figures


def _started(tally: Tally) -> float:
    """When the phase's first record arrived (the feeder sets it before the end mark)."""
    assert tally.first is not None, "a phase ended before its reader fed it"
    return tally.first


#: a worker's work on one record: ``work(worker index, record)``
Work = Callable[[int, census.Record], Awaitable[None]]
#: a phase's statements by name: geo, lookup, items, data
Statements = dict[str, str]


async def _phase(calls: Calls, spec: RunSpec, phase: str, tally: Tally, work: Work) -> None:
    """A reader process parses the lines; a feeder thread moves its records into
    the world's channel (unbounded, as the original's queue); the workers take
    them until each gets its end mark."""
    channel = calls.world.channel()
    process, records = census.start_reader(spec.options.get("census"), spec.rows, phase)

    def feed() -> None:
        while (record := records.get()) is not None:
            if tally.first is None:
                tally.first = time.perf_counter()
            channel.put(record)
        tally.reader_done, tally.rows_at_reader_done = time.perf_counter(), tally.rows
        if tally.first is None:
            tally.first = tally.reader_done
        for _ in range(spec.pool_size):
            channel.put(None)
    calls.world.start_thread(feed)

    async def worker(index: int) -> None:
        while (record := await channel.get()) is not None:
            await work(index, record)
    await calls.map(worker, range(spec.pool_size))
    process.join(5)  # it has sent its last record; reaped here, in the world's own thread


async def _insert_geo(calls: Calls, sql: Statements, worker: int, record: census.Record,
                      tally: Tally) -> None:
    await calls.execute(sql["geo"], record)
    tally.by_worker[worker] += 1


#: one line's work: ``line(sql, worker, record, tally, expected items)``
LineWork = Callable[[Statements, int, census.Record, Tally, int], Awaitable[None]]


def _line_runner(calls: Calls, options: Options) -> LineWork:
    """One line's work: in autocommit, or as one transaction (``--no-autocommit``);
    the inserts one by one, or as one executemany (``--executemany``)."""
    executemany = bool(options.get("executemany"))
    for switch, needs, given in (("executemany", MANY, calls.many),
                                 ("no_autocommit", TRANSACTION, calls.transaction)):
        if options.get(switch) and given is None:
            raise ValueError(f"--{switch.replace('_', '-')}: this system's calls have no {needs}")

    async def line(on: Union[Calls, TxCalls], sql: Statements, worker: int,
                   record: census.Record, tally: Tally, expected: int) -> None:
        counts = record[5]
        (geo_id,), = await on.query(sql["lookup"], (record[0], record[4]))
        items = [row[0] for row in await on.query(sql["items"], (record[3],))]
        if len(items) != len(counts) or len(items) != expected:
            raise ValueError(f"segment {record[3]} has {len(items)} items, the line "
                             f"{len(counts)}")
        rows = [(geo_id, item, value) for item, value in zip(items, counts)]
        if executemany:
            assert on.many is not None  # checked above
            await on.many(sql["data"], rows)
        else:
            for row in rows:
                await on.execute(sql["data"], row)
        tally.by_worker[worker] += len(rows)

    if not options.get("no_autocommit"):
        return functools.partial(line, calls)

    async def in_transaction(sql: Statements, worker: int, record: census.Record, tally: Tally,
                             expected: int) -> None:
        assert calls.transaction is not None  # checked above
        async with calls.transaction() as tx:
            await line(tx, sql, worker, record, tally, expected)
    return in_transaction


def _statements(paramstyle: str, kind: str) -> Statements:
    mark = placeholder(paramstyle)
    index = "`index`" if kind == "mysql" else '"index"'
    return {"geo": GEO_INSERT.format(m=mark), "lookup": GEO_LOOKUP.format(m=mark),
            "items": ITEMS_OF_SEGMENT.format(m=mark, index=index),
            "data": DATA_INSERT.format(m=mark)}


def progress_total(rows: int, options: Options) -> int:
    return rows * census.ITEMS_PER_LINE  # the bar follows data_element's rows


def prepare(url: str, rows: int) -> None:
    """bigdata's four tables, dropped and created, and the dictionary loaded."""
    with adb.sync.Database(url, pool_size=1) as db:
        kind = {"psycopg2": "postgresql", "pymysql": "mysql", "sqlite3": "sqlite"}[
            db.dbapi.__name__]
        for table in TABLES:
            db.runOperation(f"drop table if exists {table}")
        for statement in _schema(kind):
            db.runOperation(statement)
        _load_dictionary(db, kind)


def _schema(kind: str) -> list[str]:
    key = {"postgresql": "id serial primary key",
           "mysql": "id int not null auto_increment primary key",
           "sqlite": "id integer primary key autoincrement"}[kind]
    index = "`index`" if kind == "mysql" else '"index"'
    return [
        f"create table adb_bench_geo_record ({key}, fileid varchar(6) not null, "
        "stusab varchar(2) not null, chariter varchar(3) not null, cifsn varchar(2) not null, "
        "logrecno varchar(7) not null)",
        "create unique index adb_bench_geo_record_uq_idx on adb_bench_geo_record "
        "(fileid, stusab, chariter, cifsn, logrecno)",
        "create index adb_bench_geo_record_lookup_idx on adb_bench_geo_record (fileid, logrecno)",
        f"create table adb_bench_matrix ({key}, code varchar(6) not null unique, "
        "name varchar(200) not null, universe varchar(400) not null, "
        "sortkey varchar(5) not null, segment_id varchar(2) not null)",
        f"create table adb_bench_dictionary_item ({key}, name varchar(400) not null, "
        f"matrix_id int not null references adb_bench_matrix (id), {index} int not null, "
        f"parent_id int references adb_bench_dictionary_item (id), unique (matrix_id, {index}))",
        f"create table adb_bench_data_element ({key}, "
        "geo_record_id int not null references adb_bench_geo_record (id), "
        "dictionary_item_id int not null references adb_bench_dictionary_item (id), "
        "value numeric(10, 2))",
    ]


def _load_dictionary(db: adb.sync.Database, kind: str) -> None:
    mark = placeholder(db.paramstyle)
    index = "`index`" if kind == "mysql" else '"index"'
    matrices = census.dictionary()
    db.runMany(f"insert into adb_bench_matrix (id, code, name, universe, sortkey, segment_id) "
               f"values ({mark}, {mark}, {mark}, {mark}, {mark}, {mark})",
               [(n, code, f"matrix {code}", "generated", sortkey, segment)
                for n, (code, segment, sortkey, _items) in enumerate(matrices, 1)])
    db.runMany(f"insert into adb_bench_dictionary_item (matrix_id, {index}, name) "
               f"values ({mark}, {mark}, {mark})",
               [(n, item, f"item {item} of {code}")
                for n, (code, _segment, _sortkey, items) in enumerate(matrices, 1)
                for item in items])


def verify(url: str, rows: int, figures: Optional[Figures] = None) -> None:
    """``rows`` geo records, 222 data elements for each, and the values' sum that
    of the lines read."""
    source = (figures or {}).get("census")
    expected_sum = sum(sum(census.parse(line)[5]) for line in census.source(source, rows))
    with adb.sync.Database(url, pool_size=1) as db:
        (geo,), = db.runQuery("select count(*) from adb_bench_geo_record")
        (data, lines, total), = db.runQuery(
            "select count(*), count(distinct geo_record_id), sum(value) from adb_bench_data_element")
    expected_data = rows * census.ITEMS_PER_LINE
    if (geo, data, lines) != (rows, expected_data, rows) or int(total or 0) != expected_sum:
        raise WrongResult(f"expected {rows} geo records, {expected_data} data elements over "
                          f"{rows} lines summing to {expected_sum}; found {geo}, {data} over "
                          f"{lines} summing to {total}")


def plot(path: str, summary: Summary, title: str, options: Options) -> None:
    """Records/s (phase 2) against pool size, one line per system (median; bars min-max)."""
    lines: dict[str, Points] = {}
    for entry in summary.values():
        if "records_per_s" in entry:
            lines.setdefault(entry["system"], []).append((entry["pool_size"],
                                                          entry["records_per_s"]))
    line_chart(path, title, lines, "pool size (workers and connections)",
               "data elements inserted/s (median; bars min-max)")


SCENARIO = Scenario(
    name="bigdata", seed="004",
    description=("bigdata: census lines ingested row by row, geo records then 222 data "
                 "elements per line, across pool sizes (seed 004)"),
    prepare=prepare, run=run, verify=verify, table=TABLE, tables=TABLES,
    default_rows=1_000,  # census lines: 1,000 geo records and 222,000 data elements
    rows_are="census lines", default_pool_sizes=(15,), default_systems=DEFAULT_SYSTEMS,
    baselines=("threads",), add_arguments=add_arguments,
    variant_unavailable=variant_unavailable, progress_total=progress_total, plot=plot,
    fields=(("records_per_s", "records/s", "{:,.0f}"),
            ("geo_per_s", "geo r/s", "{:,.0f}"),
            ("filling_per_s", "filling r/s", "{:,.0f}"),
            ("drained_per_s", "drained r/s", "{:,.0f}"),
            ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
            ("cpu_us_per_row", "CPU us/line", "{:.0f}")))
