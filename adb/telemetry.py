"""Telemetry: OpenTelemetry spans and metrics of each call, and the slow-call log.

``Database(telemetry=True)`` (or ``tracer_provider=``/``meter_provider=``)
turns it on; ``slow_call=seconds`` logs calls slower than that, with or
without OpenTelemetry. With neither, a Database holds no ``Telemetry`` and each
call pays one attribute check in the caller's thread and one ``is None`` in
the worker. Only the OpenTelemetry *API* is used (the ``otel`` extra); what
records and exports the spans and metrics (an SDK, exporters) is the
application's: without one, the API's no-op tracer and meter record nothing.

The caller's thread makes a ``Trace`` when a call is queued (the caller's
OpenTelemetry context and the time); it travels in the job (``call.TRACE``) to
the worker, which opens the span with that start time, so the queue wait is
inside it, as a child of the caller's span. Spans and attributes follow the
OpenTelemetry database client semantic conventions: kind CLIENT, named
``{db.operation.name} {target}``, with ``db.system.name``, ``db.namespace``,
``db.operation.name``, ``db.collection.name`` (when the statement names one
table), ``db.query.text`` (the SQL text: adb passes parameters apart, so their
values are never in it), ``server.address``, ``server.port`` and, on failure,
``error.type``; adb adds ``adb.queue.wait`` (seconds), ``adb.batch.size`` (the
calls of an autobatch unit), ``adb.may_have_run`` (on failure) and
``adb.database`` (the Database's name). A transaction is a span from its
BEGIN to its COMMIT or ROLLBACK, with its statements as children.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import weakref
from typing import Any, Callable, NamedTuple, Optional, Protocol, Union

from .errors import InterfaceError
from .target import Family, Target

log = logging.getLogger("adb")

try:  # the ``otel`` extra
    from opentelemetry import context as _context, trace as _trace
    from opentelemetry import metrics as _metrics
    from opentelemetry.metrics import CallbackOptions, Observation
except ImportError:  # pragma: no cover - exercised where opentelemetry is not installed
    _context = _trace = _metrics = None  # type: ignore[assignment]

#: db.system.name per server family (the conventions' well-known values)
_SYSTEMS = {Family.POSTGRESQL: "postgresql", Family.MYSQL: "mysql", Family.SQLITE: "sqlite"}
#: the operation histograms' bucket boundaries the conventions advise (seconds)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
#: the most characters of a statement a slow-call log line shows
LOGGED_SQL = 1000

_FIRST_WORD = re.compile(r"\s*(?:/\*.*?\*/\s*)*([A-Za-z]+)", re.S)
_TABLE = re.compile(
    r"\b(?:from|into|update|table|join)\s+([A-Za-z_][A-Za-z0-9_$]*(?:\.[A-Za-z_][A-Za-z0-9_$]*)?)",
    re.I)
#: per SQL text: (operation, table or None); bounded, cleared when full
_described: dict[Any, tuple[str, Optional[str]]] = {}
_DESCRIBED_MAX = 4096


def describe_sql(sql: Any) -> tuple[str, Optional[str]]:
    """The operation (``SELECT``) of a statement and the one table it names, if it
    names one where a simple reading finds it (``FROM t``, ``INTO t``, ``UPDATE t``)."""
    known = _described.get(sql)
    if known is not None:
        return known
    text = sql.decode("utf-8", "replace") if isinstance(sql, bytes) else str(sql)
    first = _FIRST_WORD.match(text)
    operation = first.group(1).upper() if first else "QUERY"
    tables = {m.group(1) for m in _TABLE.finditer(text)}
    described = (operation, tables.pop() if len(tables) == 1 else None)
    if len(_described) >= _DESCRIBED_MAX:
        _described.clear()
    _described[sql] = described
    return described


def available() -> bool:
    """True when the OpenTelemetry API is installed (``pip install adb-async[otel]``)."""
    return _trace is not None


class Operation(NamedTuple):
    """What a call that is not one plain statement does, for its span: its name
    (``COPY``, ``NOTIFY``, ``runInteraction``; "" to take it from ``sql``), the
    statement it runs (or None) and attributes of its own. A call that runs one
    statement is described by its SQL text alone."""

    name: str
    sql: Any = None
    attributes: tuple[tuple[str, Any], ...] = ()


#: what the calls that have no statement of their own are (the span names)
BEGIN, COMMIT, ROLLBACK = Operation("BEGIN"), Operation("COMMIT"), Operation("ROLLBACK")
FETCH = Operation("FETCH", attributes=(("adb.stream", True),))
INTERACTION = Operation("runInteraction")
NOTIFY = Operation("NOTIFY")
CONNECT = Operation("connect")

#: what a call is: its SQL text, or an Operation
What = Union[str, bytes, Operation]


def many_what(sql: Any, count: int) -> Operation:
    """What a ``runMany`` of ``count`` parameter sets is."""
    return Operation("", sql, (("adb.batch.size", count),))


class Traced(Protocol):
    """A transaction as telemetry sees it (``adb.transaction.Transaction``): the
    span its statements are children of, made when its BEGIN runs."""

    span: Any
    read_only: bool

    def trace_span(self, span: Any) -> None: ...


class Trace:
    """One call's telemetry, made in the caller's thread as the call is queued: what
    the call is, the transaction it runs in (or None), the caller's OpenTelemetry
    context (None without tracing) and when it was queued."""

    __slots__ = ("what", "tx", "context", "queued", "queued_ns")

    def __init__(self, what: What, tx: Optional[Traced], context: Any) -> None:
        self.what = what
        self.tx = tx
        self.context = context
        self.queued = time.perf_counter()
        self.queued_ns = time.time_ns()


class Span:
    """A call's span while its worker runs it (or None where nothing is traced)."""

    __slots__ = ("span", "token", "started", "operation", "sql")

    def __init__(self, span: Any, token: Any, started: float, operation: str,
                 sql: Any) -> None:
        self.span = span
        self.token = token
        self.started = started
        self.operation = operation
        self.sql = sql


class Telemetry:
    """The telemetry of one Database: its tracer and instruments, its slow-call
    threshold. Built with its engine (``adb.engine``); ``trace()`` runs in the caller's
    thread, everything else in worker threads (and the meter's collection thread
    for the observable instruments)."""

    def __init__(self, name: str, target: Target, *, traced: bool,
                 slow_call: Optional[float] = None,
                 tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.name = name
        self.slow_call = slow_call
        self.tracer: Any = None
        self._attrs: dict[str, Any] = {"db.system.name": _SYSTEMS.get(target.family,
                                                                      target.driver)}
        kw = target.kwargs
        namespace = kw.get("database") or kw.get("dbname") or kw.get("db")
        if target.family is Family.SQLITE:
            namespace = None if namespace in (None, ":memory:") else str(namespace)
        else:
            host = kw.get("host")
            if host:
                self._attrs["server.address"] = str(host)
            port = kw.get("port")
            if port:
                try:
                    self._attrs["server.port"] = int(port)
                except (TypeError, ValueError):
                    pass
        if namespace:
            self._attrs["db.namespace"] = str(namespace)
        self._target = str(namespace or self._attrs["db.system.name"])
        self._ask_server = target.family is Family.MYSQL  # MariaDB or MySQL?
        #: the connection metrics' attributes (the operation's are ``_attrs``)
        self._pool_attrs = {"db.client.connection.pool.name": name}
        self._duration: Any = None
        self._wait: Any = None
        self._create: Any = None
        if traced:
            if _trace is None:
                raise InterfaceError(
                    "telemetry needs the OpenTelemetry API: pip install 'adb-async[otel]'")
            self.tracer = _trace.get_tracer("adb", tracer_provider=tracer_provider)
            instruments = Instruments.of(meter_provider)
            self._instruments = instruments
            self._duration = instruments.duration
            self._wait = instruments.wait
            self._create = instruments.create

    # -- the caller's thread ---------------------------------------------------------

    def trace(self, what: What, tx: Optional[Traced] = None) -> Trace:
        """A call is being queued: what it is, its transaction, its caller's context
        and the time."""
        return Trace(what, tx, None if self.tracer is None else _context.get_current())

    # -- observable instruments ------------------------------------------------------

    def observe(self, pool: Any, admission: Any) -> None:
        """Report ``pool``'s connections and the calls waiting for one (queued, and
        parked by ``admission`` if not None) when the meter collects, while ``pool``
        lives (held weakly: a Database dropped unclosed is still collected)."""
        if self.tracer is None:
            return
        parked: Callable[[], int] = _no_parked if admission is None else _weak_parked(admission)
        self._instruments.add(_Observed(weakref.ref(pool), parked, self._pool_attrs))

    # -- worker threads --------------------------------------------------------------

    def start(self, trace: Trace, started: Optional[float] = None, **extra: Any) -> Span:
        """Open the span of a call its worker is about to run, named by what the call
        is (``trace.what``), a child of its transaction's span or else of its
        caller's; ``started``: when it started running, if not now. A BEGIN opens
        its transaction's span first."""
        if started is None:
            started = time.perf_counter()
        what, tx = trace.what, trace.tx
        if isinstance(what, Operation):
            operation, sql = what.name, what.sql
            extra.update(what.attributes)
        else:
            operation, sql = "", what
        table = None
        if sql is not None:
            operation, table = describe_sql(sql)
        parent = None
        if tx is not None:
            if what is BEGIN:
                tx.trace_span(self.begin_transaction(trace, tx.read_only))
            parent = tx.span
        span = token = None
        tracer = self.tracer
        if tracer is not None:
            attrs = dict(self._attrs)
            attrs["db.operation.name"] = operation
            if table is not None:
                attrs["db.collection.name"] = table
            if sql is not None:
                attrs["db.query.text"] = sql.decode("utf-8", "replace") \
                    if isinstance(sql, bytes) else sql
            attrs["adb.queue.wait"] = started - trace.queued
            attrs["adb.database"] = self.name
            attrs.update(extra)
            ctx = trace.context if parent is None else _trace.set_span_in_context(parent)
            span = tracer.start_span(f"{operation} {table or self._target}", context=ctx,
                                     kind=_trace.SpanKind.CLIENT, attributes=attrs,
                                     start_time=trace.queued_ns)
            if span.is_recording():  # the current span in the worker, for nested instrumentation
                token = _context.attach(_trace.set_span_in_context(span))
            if self._wait is not None:
                self._wait.record(started - trace.queued, self._pool_attrs)
        return Span(span, token, started, operation, sql)

    def end(self, trace: Trace, running: Span, ok: bool, value: Any) -> None:
        """The call ran: end its span, record its duration, log it if slow."""
        ended = time.perf_counter()
        span = running.span
        error_type = None if ok else _error_type(value)
        if span is not None:
            if running.token is not None:
                _context.detach(running.token)
            if not ok:
                span.set_attribute("error.type", error_type)
                may_have_run = getattr(value, "may_have_run", None)
                if may_have_run is not None:
                    span.set_attribute("adb.may_have_run", bool(may_have_run))
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, error_type))
            span.end()
            attrs = {**self._attrs, "db.operation.name": running.operation}
            if not ok:
                attrs["error.type"] = error_type
            self._duration.record(ended - trace.queued, attrs)
        if self.slow_call is not None and ended - trace.queued > self.slow_call:
            self.log_slow(running, ended - running.started, running.started - trace.queued,
                          ok, error_type)

    def log_slow(self, running: Span, run: float, wait: float, ok: bool,
                 error_type: Optional[str]) -> None:
        """The WARNING of a call slower than ``slow_call``: its statement (never its
        parameters), its wait for a worker and its run time."""
        sql = running.sql
        if sql is None:
            what = running.operation
        else:
            text = sql.decode("utf-8", "replace") if isinstance(sql, bytes) else str(sql)
            what = text if len(text) <= LOGGED_SQL else text[:LOGGED_SQL] + "..."
        log.warning("%s: slow call, %.3f s (queued %.3f s, ran %.3f s)%s: %s", self.name,
                    wait + run, wait, run, "" if ok else f", failed with {error_type}", what)

    def begin_transaction(self, trace: Trace, read_only: bool) -> Any:
        """The span of a transaction beginning, left open until it ends (or None)."""
        if self.tracer is None:
            return None
        attrs = {**self._attrs, "db.operation.name": "transaction", "adb.database": self.name,
                 "adb.transaction.read_only": read_only}
        return self.tracer.start_span(f"transaction {self._target}", context=trace.context,
                                      kind=_trace.SpanKind.CLIENT, attributes=attrs,
                                      start_time=trace.queued_ns)

    @staticmethod
    def end_transaction(span: Any, outcome: str) -> None:
        """The transaction ended: ``outcome`` is commit, rollback or failed."""
        span.set_attribute("adb.transaction.outcome", outcome)
        if outcome == "failed":
            span.set_status(_trace.Status(_trace.StatusCode.ERROR, "failed"))
        span.end()

    def connecting(self) -> float:
        """A worker starts opening a connection (its start, for ``connected``)."""
        return time.perf_counter()

    def connected(self, started: float, conn: Any) -> None:
        """A worker opened ``conn``: record how long it took; the first connection
        of a MySQL-family Database tells whether the server is MariaDB."""
        if self._create is None:
            return
        if self._ask_server:
            self._ask_server = False
            info = getattr(conn, "get_server_info", None)
            try:
                mariadb = callable(info) and "mariadb" in str(info()).lower()
            except Exception:  # a driver's own quirk: keep "mysql"
                mariadb = False
            if mariadb:
                self._attrs["db.system.name"] = "mariadb"
        self._create.record(time.perf_counter() - started, self._pool_attrs)

    def unit(self, traces: list[Optional[Trace]], ok: bool, value: Any, started: float) -> None:
        """An autobatch unit of ``len(traces)`` calls ran as one: a span per call
        (each its caller's child) that says so."""
        for trace in traces:
            if trace is None:
                continue
            running = self.start(trace, started, **{"adb.batch.size": len(traces)})
            self.end(trace, running, ok, value)


class _Observed:
    """One Database's pool, as its meter's observable instruments read it."""

    __slots__ = ("pool", "parked", "attrs")

    def __init__(self, pool: Callable[[], Any], parked: Callable[[], int],
                 attrs: dict[str, Any]) -> None:
        self.pool = pool  # a weak reference
        self.parked = parked
        self.attrs = attrs


class Instruments:
    """adb's instruments on one MeterProvider (None: the global one), made once:
    a meter keeps the first instrument of a name and ignores the callbacks of a
    second, so every Database on a provider reports through the same ones, whose
    callbacks read each live Database's pool."""

    _made: dict[int, Instruments] = {}
    _lock = threading.Lock()

    @classmethod
    def of(cls, meter_provider: Any) -> Instruments:
        key = id(meter_provider)  # None (the global provider) has one id too
        with cls._lock:
            made = cls._made.get(key)
            if made is None or made.provider is not meter_provider:
                made = cls._made[key] = cls(meter_provider)
            return made

    def __init__(self, meter_provider: Any) -> None:
        self.provider = meter_provider
        self._observed: list[_Observed] = []
        self._observed_lock = threading.Lock()
        meter = _metrics.get_meter("adb", meter_provider=meter_provider)
        buckets = list(DURATION_BUCKETS)
        self.duration = meter.create_histogram(
            "db.client.operation.duration", unit="s",
            description="Duration of database client operations.",
            explicit_bucket_boundaries_advisory=buckets)
        self.wait = meter.create_histogram(
            "db.client.connection.wait_time", unit="s",
            description="The time it took to obtain an open connection from the pool",
            explicit_bucket_boundaries_advisory=buckets)
        self.create = meter.create_histogram(
            "db.client.connection.create_time", unit="s",
            description="The time it took to create a new connection",
            explicit_bucket_boundaries_advisory=buckets)
        meter.create_observable_up_down_counter(
            "db.client.connection.count", [self._connections], unit="{connection}",
            description="The number of connections that are currently in state "
                        "described by the state attribute")
        meter.create_observable_up_down_counter(
            "db.client.connection.pending_requests", [self._pending], unit="{request}",
            description="The number of current pending requests for an open connection")
        meter.create_observable_up_down_counter(
            "db.client.connection.max", [self._max], unit="{connection}",
            description="The maximum number of open connections allowed")

    def add(self, observed: _Observed) -> None:
        with self._observed_lock:
            self._observed.append(observed)

    def _live(self) -> list[tuple[Any, _Observed]]:
        """The pools still running, each with its record; forgets the others."""
        live, kept = [], []
        with self._observed_lock:
            for observed in self._observed:
                pool = observed.pool()
                if pool is None or pool.stopping():
                    continue
                kept.append(observed)
                live.append((pool, observed))
            self._observed = kept
        return live

    def _connections(self, options: CallbackOptions) -> list[Observation]:
        found = []
        for pool, observed in self._live():
            used = idle = 0
            for worker in pool.workers:
                if worker.conn is None:
                    continue
                if worker.busy or worker.pinned:
                    used += 1
                else:
                    idle += 1
            found += [Observation(idle, {**observed.attrs, "db.client.connection.state": "idle"}),
                      Observation(used, {**observed.attrs, "db.client.connection.state": "used"})]
        return found

    def _pending(self, options: CallbackOptions) -> list[Observation]:
        return [Observation(pool.dispatch.queued() + observed.parked(), observed.attrs)
                for pool, observed in self._live()]

    def _max(self, options: CallbackOptions) -> list[Observation]:
        return [Observation(len(pool.workers), observed.attrs) for pool, observed in self._live()]


def _no_parked() -> int:
    return 0


def _weak_parked(admission: Any) -> Callable[[], int]:
    ref = weakref.ref(admission)

    def parked() -> int:
        held = ref()
        return 0 if held is None else int(held.parked)
    return parked


def _error_type(error: Any) -> str:
    kind = type(error)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


__all__ = ["BEGIN", "COMMIT", "FETCH", "INTERACTION", "NOTIFY", "Operation", "ROLLBACK", "Span",
           "Telemetry", "Trace", "Traced", "What", "available", "many_what",
           "describe_sql"]
