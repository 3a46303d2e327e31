"""Telemetry (adb.telemetry): OpenTelemetry spans and metrics, read back with the
SDK's in-memory exporter and reader, on every front-end and driver; the
slow-call log. Each Database gets its own TracerProvider and MeterProvider, so
no test touches OpenTelemetry's global providers."""

import asyncio
import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import adb
import adb.errors
import adb.sync
from adb.errors import InterfaceError
from adb.telemetry import describe_sql

from ..conftest import FRONTS, ev, gather_calls, with_pool_options

SYSTEMS = {"postgresql": {"postgresql"}, "mysql": {"mysql", "mariadb"}, "sqlite": {"sqlite"}}


class Otel:
    """A TracerProvider and MeterProvider of one test, with what they recorded."""

    def __init__(self):
        self.spans_out = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans_out))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("test")

    def options(self):
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self, kind=SpanKind.CLIENT):
        return [s for s in self.spans_out.get_finished_spans() if s.kind is kind]

    def metrics(self):
        """name -> its data points, as the reader collects them now."""
        found: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def shutdown(self):
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def otel():
    recorded = Otel()
    yield recorded
    recorded.shutdown()


def open_db(front, target, otel, **kwargs):
    kwargs.setdefault("pool_size", 2)
    return FRONTS[front](target.url, **otel.options(), **kwargs)


async def with_table(db, table):
    await ev(db.runOperation(f"drop table if exists {table}"))
    await ev(db.runOperation(f"create table {table} (userid int primary key, data varchar(100))"))


async def drop(db, table):
    await ev(db.runOperation(f"drop table if exists {table}"))
    await ev(db.close())


def by_statement(spans, text):
    return [s for s in spans if s.attributes.get("db.query.text") == text]


async def test_a_span_per_call_with_the_conventions_and_the_callers_span_as_parent(
        front, target, table_name, otel):
    db = open_db(front, target, otel)
    await with_table(db, table_name)
    insert = target.sql(f"insert into {table_name} (userid, data) values (%s, %s)")
    select = target.sql(f"select data from {table_name} where userid = %s")
    otel.spans_out.clear()
    with otel.tracer.start_as_current_span("handler") as handler:
        assert await ev(db.runOperation(insert, (7, "secret-value-7"))) == 1
        assert await ev(db.runQuery(select, (7,))) == [("secret-value-7",)]
    await drop(db, table_name)
    spans = otel.spans()
    inserts, selects = by_statement(spans, insert), by_statement(spans, select)
    assert len(inserts) == 1 and len(selects) == 1
    for span, operation in ((inserts[0], "INSERT"), (selects[0], "SELECT")):
        attrs = span.attributes
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None and span.parent.span_id == handler.context.span_id
        assert span.context.trace_id == handler.context.trace_id
        assert span.name == f"{operation} {table_name}"
        assert attrs["db.operation.name"] == operation
        assert attrs["db.collection.name"] == table_name
        assert attrs["db.system.name"] in SYSTEMS[target.kind]
        assert attrs["adb.queue.wait"] >= 0
        assert span.status.status_code is StatusCode.UNSET
        assert span.start_time <= span.end_time
        if target.kind == "sqlite":
            assert "server.address" not in attrs
        else:
            assert attrs["server.address"] == "127.0.0.1"
            assert attrs["db.namespace"] == "test"
        # parameters are never recorded
        assert not any("secret-value-7" in str(value) for value in attrs.values())
    # the span of a call made with no span current is a root
    assert all(s.parent is None for s in by_statement(spans, "drop table if exists "
                                                       + table_name))


async def test_a_failed_call_has_an_error_span_with_its_type(front, target, otel):
    db = open_db(front, target, otel)
    with otel.tracer.start_as_current_span("handler") as handler:
        with pytest.raises(Exception) as caught:
            await ev(db.runQuery("select * from adb_no_such_table_xyz"))
    await ev(db.close())
    [span] = by_statement(otel.spans(), "select * from adb_no_such_table_xyz")
    assert span.status.status_code is StatusCode.ERROR
    error = type(caught.value)
    assert span.attributes["error.type"] == f"{error.__module__}.{error.__qualname__}"
    assert span.parent.span_id == handler.context.span_id
    durations = otel.metrics()["db.client.operation.duration"]
    failed = [p for p in durations
              if p.attributes.get("error.type") == span.attributes["error.type"]]
    assert len(failed) == 1 and failed[0].count == 1


async def test_a_transaction_is_a_span_with_its_statements_inside(
        front, target, table_name, otel):
    db = open_db(front, target, otel)
    await with_table(db, table_name)
    insert = target.sql(f"insert into {table_name} (userid, data) values (%s, %s)")
    otel.spans_out.clear()
    with otel.tracer.start_as_current_span("handler") as handler:
        tx = await ev(db.beginTransaction())
        await ev(db.runOperation(insert, (1, "a"), tx))
        await ev(db.commitTransaction(tx))
        tx = await ev(db.beginTransaction())
        await ev(db.rollbackTransaction(tx))
    await drop(db, table_name)
    spans = otel.spans()
    transactions = [s for s in spans if s.name.startswith("transaction")]
    assert [t.attributes["adb.transaction.outcome"] for t in transactions] == \
        ["commit", "rollback"]
    assert all(t.parent.span_id == handler.context.span_id for t in transactions)
    inside = {t.context.span_id: [s.attributes["db.operation.name"] for s in spans
                                  if s.parent is not None
                                  and s.parent.span_id == t.context.span_id]
              for t in transactions}
    assert list(inside.values()) == [["BEGIN", "INSERT", "COMMIT"], ["BEGIN", "ROLLBACK"]]


async def test_a_stream_and_its_fetches_have_spans(front, target, otel):
    db = open_db(front, target, otel)
    sql = {"postgresql": "select generate_series(1, 5)",
           "mysql": "select 1 union all select 2 union all select 3 union all select 4 "
                    "union all select 5",
           "sqlite": "with recursive n(i) as (select 1 union all select i + 1 from n "
                     "where i < 5) select i from n"}[target.kind]
    with otel.tracer.start_as_current_span("handler"):
        stream = db.stream(sql, batch=2)
        rows = []
        while True:
            batch = stream.fetch() if front == "sync" else await ev(stream.fetch())
            if not batch:
                break
            rows += batch
    assert len(rows) == 5
    await ev(db.close())
    spans = otel.spans()
    [opened] = by_statement(spans, sql)
    assert opened.attributes["adb.stream"] is True
    [tx] = [s for s in spans if s.name.startswith("transaction")]
    assert tx.attributes["adb.transaction.read_only"] is True
    assert opened.parent.span_id == tx.context.span_id
    fetches = [s for s in spans if s.attributes["db.operation.name"] == "FETCH"]
    assert len(fetches) == 2  # the first batch came with the statement, the third is the last
    assert all(s.parent.span_id == tx.context.span_id for s in fetches)


async def test_metrics_under_a_small_load(front, target, table_name, otel):
    db = open_db(front, target, otel)
    await with_table(db, table_name)
    insert = target.sql(f"insert into {table_name} (userid, data) values (%s, %s)")
    calls = 20
    if front == "sync":
        for i in range(calls):
            db.runOperation(insert, (i, "x"))
    else:
        await gather_calls(db.runOperation(insert, (i, "x")) for i in range(calls))
    stats = db.stats()
    metrics = otel.metrics()
    await drop(db, table_name)
    inserts = [p for p in metrics["db.client.operation.duration"]
               if p.attributes["db.operation.name"] == "INSERT"]
    assert len(inserts) == 1 and inserts[0].count == calls
    assert 0 < inserts[0].min <= inserts[0].max < 30
    assert inserts[0].attributes["db.system.name"] in SYSTEMS[target.kind]
    for name in ("db.client.connection.wait_time", "db.client.connection.count",
                 "db.client.connection.create_time"):
        assert {p.attributes["db.client.connection.pool.name"] for p in metrics[name]} \
            == {db.name}
    waits = metrics["db.client.connection.wait_time"]
    assert sum(p.count for p in waits) == stats["completed"]
    assert all(p.min >= 0 for p in waits)
    created = metrics["db.client.connection.create_time"]
    assert sum(p.count for p in created) == stats["connects"]
    assert all(0 < p.min <= p.max < 30 for p in created)
    counts = {p.attributes["db.client.connection.state"]: p.value
              for p in metrics["db.client.connection.count"]}
    assert counts["idle"] + counts["used"] == stats["connected"] and counts["used"] >= 0
    assert [p.value for p in metrics["db.client.connection.pending_requests"]] == [0]
    assert [p.value for p in metrics["db.client.connection.max"]] == [2]


async def test_queued_calls_are_pending_requests_and_their_wait_is_in_the_span(
        target, otel):
    db = with_pool_options(adb.Database, start=False)(target.url, pool_size=1, **otel.options())
    futures = [db.runQuery("select 1") for _ in range(5)]
    metrics = otel.metrics()
    assert [p.value for p in metrics["db.client.connection.pending_requests"]] == [5]
    assert {p.attributes["db.client.connection.state"]: p.value
            for p in metrics["db.client.connection.count"]} == {"idle": 0, "used": 0}
    await asyncio.sleep(0.05)
    db._engine.pool.start()
    assert await asyncio.gather(*futures) == [[(1,)]] * 5
    await db.close()
    spans = by_statement(otel.spans(), "select 1")
    assert len(spans) == 5
    assert all(s.attributes["adb.queue.wait"] >= 0.05 for s in spans)
    assert all(s.end_time - s.start_time >= 50_000_000 for s in spans)  # ns: the wait is inside


async def test_an_autobatch_unit_gives_each_call_a_span_saying_so(target, table_name, otel):
    db = with_pool_options(adb.Database, start=False)(target.url, pool_size=1, autobatch=8,
                                                      **otel.options())
    setup = adb.sync.Database(target.url, pool_size=1)
    setup.runOperation(f"drop table if exists {table_name}")
    setup.runOperation(f"create table {table_name} (userid int primary key, data varchar(10))")
    insert = target.sql(f"insert into {table_name} (userid, data) values (%s, %s)")
    try:
        with otel.tracer.start_as_current_span("handler") as handler:
            futures = [db.runOperation(insert, (i, "x")) for i in range(5)]
        db._engine.pool.start()
        assert await asyncio.gather(*futures) == [1] * 5
        units = db.stats()["units"]
        await db.close()
    finally:
        setup.runOperation(f"drop table if exists {table_name}")
        setup.close()
    spans = by_statement(otel.spans(), insert)
    assert len(spans) == 5
    assert all(s.parent.span_id == handler.context.span_id for s in spans)
    assert units == 1  # the worker found all five queued and ran them as one unit
    assert [s.attributes["adb.batch.size"] for s in spans] == [5] * 5


async def test_slow_call_logs_the_statement_never_its_parameters(front, target, caplog):
    db = FRONTS[front](target.url, pool_size=1, slow_call=0)
    sql = target.sql("select %s")
    with caplog.at_level(logging.WARNING, logger="adb"):
        assert await ev(db.runQuery(sql, ("hunter2-secret",))) == [("hunter2-secret",)]
    await ev(db.close())
    slow = [r for r in caplog.records if "slow call" in r.getMessage()]
    assert len(slow) == 1
    message = slow[0].getMessage()
    assert slow[0].levelno == logging.WARNING
    assert sql in message and "queued" in message and "ran" in message
    assert "hunter2" not in message
    assert db._engine.telemetry.tracer is None  # slow_call alone traces nothing


async def test_slow_call_leaves_fast_calls_alone(target, caplog):
    db = adb.sync.Database(target.url, pool_size=1, slow_call=30)
    with caplog.at_level(logging.WARNING, logger="adb"):
        db.runQuery("select 1")
    db.close()
    assert not [r for r in caplog.records if "slow call" in r.getMessage()]


@pytest.mark.parametrize("value", [-1, "1", True, [1]])
def test_bad_slow_call_values_are_refused(value):
    with pytest.raises(InterfaceError, match="slow_call"):
        adb.sync.Database(slow_call=value)


def test_a_bad_telemetry_value_is_refused():
    with pytest.raises(InterfaceError, match="telemetry"):
        adb.sync.Database(telemetry="yes")  # type: ignore[arg-type]


def test_without_telemetry_a_database_holds_none(otel):
    db = adb.sync.Database(pool_size=1)
    try:
        assert db._engine.telemetry is None
        assert db.runQuery("select 1") == [(1,)]
    finally:
        db.close()
    assert otel.spans_out.get_finished_spans() == ()


@pytest.mark.parametrize("sql,described", [
    ("select a from t where x = 1", ("SELECT", "t")),
    ("  /* hint */ INSERT INTO s.t (a) values (%s)", ("INSERT", "s.t")),
    ("update t set a = 1", ("UPDATE", "t")),
    ("delete from t", ("DELETE", "t")),
    ("select * from a join b on a.i = b.i join c on c.i = a.i", ("SELECT", None)),
    ("select 1", ("SELECT", None)),
    (b"select x from t", ("SELECT", "t")),
    ("", ("QUERY", None)),
])
def test_describe_sql(sql, described):
    assert describe_sql(sql) == described


async def test_a_call_that_never_reached_the_server_says_it_did_not_run(otel):
    db = adb.Database("postgresql://nobody@127.0.0.1:1/test", pool_size=1, **otel.options())
    with pytest.raises(adb.errors.ServerUnavailable):
        await db.runQuery("select 1")
    await db.close()
    [span] = by_statement(otel.spans(), "select 1")
    assert span.attributes["error.type"] == "adb.errors.ServerUnavailable"
    assert span.attributes["adb.may_have_run"] is False
    assert span.attributes["server.port"] == 1
    assert span.status.status_code is StatusCode.ERROR


def test_every_database_on_one_meter_provider_reports_its_own_connections(otel):
    dbs = [adb.sync.Database(pool_size=size, name=f"telemetry-{size}", **otel.options())
           for size in (1, 2)]
    try:
        for db in dbs:
            assert db.runQuery("select 1") == [(1,)]
        metrics = otel.metrics()
    finally:
        for db in dbs:
            db.close()
    sizes = {p.attributes["db.client.connection.pool.name"]: p.value
             for p in metrics["db.client.connection.max"]}
    assert sizes == {"telemetry-1": 1, "telemetry-2": 2}
    # closed, they report nothing more
    assert "db.client.connection.max" not in otel.metrics() or not [
        p for p in otel.metrics()["db.client.connection.max"]
        if p.attributes["db.client.connection.pool.name"].startswith("telemetry-")]


async def test_notify_and_run_interaction_have_spans_named_for_what_they_are(pg_url, otel):
    db = adb.Database(pg_url, pool_size=1, **otel.options())
    await db.notify("adb_telemetry_channel", "hello")
    assert await db.runInteraction(lambda cursor: 5) == 5
    await db.close()
    names = [s.name.split()[0] for s in otel.spans()]
    assert names == ["NOTIFY", "runInteraction"]
