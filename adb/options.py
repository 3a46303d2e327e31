"""A Database's options: the keywords it takes, checked and grouped into records.

``Database(url, **options)`` takes adb's own options and, beside them, the
driver's ``connect()`` keywords (the keyword form, ``driver="psycopg2",
host=..., user=...``). ``Options`` lists every one of them with its type, so
mypy and an IDE see each keyword of every front-end's constructor. ``parse``
checks adb's options where they are given (before anything is opened) and
groups them into named records, one per concern: ``PoolSettings``,
``Timeouts``, ``TelemetrySettings``, ``ReplicaSettings``; what is left are the
driver's keywords. Pure logic: no I/O, no threads.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional, TypedDict, Union

from .errors import ConnectionRejected, InterfaceError
from .rows import RowFactory, resolve

class Embedded(enum.Enum):
    """``Database()`` with no URL: the embedded default, a private SQLite file
    removed on close (``EMBEDDED`` is that default; None is refused, not taken for it)."""

    DEFAULT = "the embedded default"

    def __repr__(self) -> str:
        return "EMBEDDED"


EMBEDDED = Embedded.DEFAULT

#: the row factories a Database or a call may name
RowFactoryOption = Union[str, RowFactory, None]

_names = itertools.count(1)


class ConnectKeywords(TypedDict, total=False):
    """The drivers' ``connect()`` keywords a Database passes on (the keyword form,
    or beside a URL, overriding what it says). The common ones of libpq
    (psycopg2, psycopg), PyMySQL and sqlite3; a driver refuses one it does not take."""

    host: str
    port: Union[int, str]
    user: str
    password: str
    database: str
    dbname: str
    db: str
    passwd: str
    unix_socket: str
    charset: str
    sslmode: str
    sslrootcert: str
    sslcert: str
    sslkey: str
    ssl: Any
    ssl_ca: str
    ssl_verify_identity: bool
    connect_timeout: Union[int, float, str]
    read_timeout: float
    write_timeout: float
    application_name: str
    options: str
    target_session_attrs: str
    keepalives: int
    keepalives_idle: int
    tcp_user_timeout: int
    prepare_threshold: Optional[int]
    cursor_factory: Any
    local_infile: Union[bool, int]
    init_command: str
    journal_mode: str
    synchronous: str
    detect_types: int
    uri: bool


class Options(ConnectKeywords, total=False):
    """Every keyword of ``Database(url, **options)``, the same on every front-end
    (see ``adb.core.BaseDatabase`` for what each does)."""

    driver: str
    pool_size: int
    row_factory: RowFactoryOption
    timeout: Optional[float]
    name: Optional[str]
    on_connect: Optional[Callable[[Any], object]]
    statement_timeout: Optional[float]
    max_queued: Optional[int]
    on_full: str
    max_lifetime: Optional[float]
    max_idle: Optional[float]
    check_idle: Optional[float]
    autobatch: Optional[int]
    pipeline: Optional[bool]
    retries: Optional[int]
    replicas: Optional[Sequence[Any]]
    max_replica_lag: Optional[float]
    replica_fallback: str
    pooler: Optional[str]
    telemetry: bool
    slow_call: Optional[float]
    tracer_provider: Any
    meter_provider: Any


#: adb's own options (the keywords of ``Options`` that are not the drivers')
OPTION_NAMES = frozenset(Options.__annotations__) - frozenset(ConnectKeywords.__annotations__)


class PoolOptions(TypedDict, total=False):
    """The protected pool options, for adb's own adbapi drop-in
    (``adb.twisted.ConnectionPool``), tests and ``benchmarks.ab``; not public API
    (a Database subclass returns them from ``_pool_options()``).

    ``start``: start the workers at construction (default True; False queues calls
    until the engine's ``start()``); ``warm``: how many workers connect at once
    (default all); ``fit_size``: cap a ``pool_size`` above the driver's limit
    instead of refusing it; ``check_sql``: test the connection with it after an
    error; ``cancel_grace``: seconds from a cancel to the cut;
    ``native``: connections as the DB-API module makes them, in its own transaction
    mode (``adb.drivers._native``: the adbapi drop-in's).
    """

    start: bool
    warm: int
    fit_size: bool
    check_sql: Optional[str]
    cancel_grace: float
    native: bool


@dataclasses.dataclass(frozen=True)
class PoolSettings:
    """The pool: its size (None: the driver's default), backpressure, recycling,
    group commit (``autobatch`` 1: off) and the hook run on each new connection."""

    size: Optional[int] = None
    max_queued: Optional[int] = None
    on_full: str = "wait"
    max_lifetime: Optional[float] = None
    max_idle: Optional[float] = None
    check_idle: Optional[float] = None
    autobatch: int = 1
    on_connect: Optional[Callable[[Any], object]] = None
    #: pipelined standalone calls: True, False, None (the driver's default)
    pipeline: Optional[bool] = None


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """``wait``: seconds a call may wait for a worker (``timeout``); ``statement``:
    seconds it may run (``statement_timeout``). None: no limit."""

    wait: Optional[float] = None
    statement: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class TelemetrySettings:
    """Spans and metrics (``traced``), the slow-call log, the providers to use."""

    traced: bool = False
    slow_call: Optional[float] = None
    tracer_provider: Any = None
    meter_provider: Any = None

    @property
    def wanted(self) -> bool:
        """True when the Database needs a Telemetry at all."""
        return self.traced or self.slow_call is not None


@dataclasses.dataclass(frozen=True)
class ReplicaSettings:
    """Read replicas: their URLs, the lag they may have, where reads go without one."""

    urls: tuple[Any, ...] = ()
    max_lag: Optional[float] = None
    fallback: str = "primary"


@dataclasses.dataclass(frozen=True)
class Settings:
    """A Database's options, checked and grouped; ``connect`` holds the driver's keywords."""

    name: str
    driver: Optional[str] = None
    pooler: Optional[str] = None
    row_factory: RowFactory = resolve(None)
    retries: Optional[int] = None
    pool: PoolSettings = PoolSettings()
    timeouts: Timeouts = Timeouts()
    telemetry: TelemetrySettings = TelemetrySettings()
    replicas: ReplicaSettings = ReplicaSettings()
    connect: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def for_replica(self, number: int) -> Settings:
        """The settings of this Database's ``number``-th replica: the same options
        under its own name, with no replicas and no pooler of its own (a replica
        behind a pooler says so in its URL)."""
        return dataclasses.replace(self, name=f"{self.name}/replica{number}", pooler=None,
                                   replicas=ReplicaSettings())


#: why ``on_connect`` must be a plain function, for the errors that refuse one
_PLAIN = ("on_connect runs in the worker thread that opened the connection, where "
          "nothing awaits: it must be a plain function (def, not async def) that sets "
          "the connection up with blocking DB-API calls")


def check_on_connect(fn: Any) -> Optional[OnConnect]:
    """``on_connect=``, checked (callable, not a coroutine function) and wrapped."""
    if fn is None:
        return None
    if not callable(fn):
        raise InterfaceError(f"on_connect must be callable, not {fn!r}")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)):
        raise InterfaceError(f"on_connect={fn!r} is a coroutine function: {_PLAIN}")
    return OnConnect(fn)


class OnConnect:
    """The application's ``on_connect``, as a worker runs it on a new connection:
    whatever it raises is the application's failure, not a server out of reach
    (``ConnectionRejected`` whose cause it is: no backoff, no retry), and a result
    that is awaitable (a coroutine nothing would ever run) is refused."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], object]) -> None:
        self.fn = fn

    def __call__(self, conn: Any) -> None:
        try:
            result = self.fn(conn)
        except Exception as exc:
            raise ConnectionRejected(f"on_connect raised {type(exc).__name__}: {exc}",
                                     f"on_connect raised {type(exc).__name__}") from exc
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()  # never run: no "never awaited" warning for it
            raise ConnectionRejected(
                f"on_connect returned {type(result).__name__} {result!r}, an awaitable: "
                + _PLAIN, "on_connect returned an awaitable")

    def __repr__(self) -> str:
        return repr(self.fn)


def parse(options: Mapping[str, Any]) -> Settings:
    """Check adb's options and group them; the rest are the driver's keywords."""
    given = dict(options)
    take = given.pop
    name = take("name", None)
    telemetry = check_flag(take("telemetry", False), "telemetry")
    tracer_provider, meter_provider = take("tracer_provider", None), take("meter_provider", None)
    on_full = take("on_full", "wait")
    if on_full not in ("wait", "raise"):
        raise InterfaceError(f"on_full must be 'wait' or 'raise', not {on_full!r}")
    on_connect = check_on_connect(take("on_connect", None))
    return Settings(
        name=name if name is not None else f"adb-{next(_names)}",
        driver=take("driver", None),
        pooler=take("pooler", None),
        row_factory=resolve(take("row_factory", None)),
        retries=check_retries(take("retries", None)),
        pool=PoolSettings(
            size=take("pool_size", None), max_queued=check_count(take("max_queued", None),
                                                                  "max_queued"),
            on_full=on_full, max_lifetime=check_timeout(take("max_lifetime", None),
                                                        "max_lifetime"),
            max_idle=check_timeout(take("max_idle", None), "max_idle"),
            check_idle=check_timeout(take("check_idle", None), "check_idle"),
            autobatch=check_count(take("autobatch", None), "autobatch") or 1,
            on_connect=on_connect, pipeline=check_pipeline(take("pipeline", None))),
        timeouts=Timeouts(check_timeout(take("timeout", None)),
                          check_statement_timeout(take("statement_timeout", None))),
        telemetry=TelemetrySettings(
            telemetry or tracer_provider is not None or meter_provider is not None,
            check_timeout(take("slow_call", None), "slow_call"), tracer_provider,
            meter_provider),
        replicas=ReplicaSettings(
            check_urls(take("replicas", None)),
            check_timeout(take("max_replica_lag", None), "max_replica_lag"),
            check_fallback(take("replica_fallback", "primary"))),
        connect=given)


def check_timeout(timeout: object, name: str = "timeout") -> Optional[float]:
    """A number of seconds >= 0, or None (no limit; so is infinity)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not timeout >= 0:  # NaN compares false
        raise InterfaceError(f"{name} must be a number of seconds >= 0, not {timeout!r}")
    return None if timeout == math.inf else timeout


def check_statement_timeout(timeout: object) -> Optional[float]:
    """``statement_timeout``: a number of seconds > 0; 0, None and infinity mean no
    limit, as PostgreSQL's and MySQL's own statement timeouts read 0."""
    return check_timeout(timeout, "statement_timeout") or None


#: the isolation levels a transaction may ask for (``isolation=``)
ISOLATION_LEVELS = ("read uncommitted", "read committed", "repeatable read", "serializable")


def check_isolation(isolation: object) -> Optional[str]:
    """``isolation=``: one of ``ISOLATION_LEVELS`` (any case; ``_`` or ``-`` for the
    space), or None for the server's default; as adb writes it (lower case)."""
    if isolation is None:
        return None
    level = " ".join(isolation.lower().replace("_", " ").replace("-", " ").split()) \
        if isinstance(isolation, str) else None
    if level not in ISOLATION_LEVELS:
        raise InterfaceError(f"isolation must be one of {', '.join(map(repr, ISOLATION_LEVELS))} "
                             f"or None, not {isolation!r}")
    return level


def check_flag(value: object, name: str) -> bool:
    """True or False (not a truthy stand-in: ``read_only="no"`` is an error)."""
    if not isinstance(value, bool):
        raise InterfaceError(f"{name} must be True or False, not {value!r}")
    return value


#: the most standalone calls one worker sends as one pipeline (``pipeline``): also
#: the most calls one lost connection leaves in doubt (``may_have_run=True``). 16
#: kept most of 64's speed on MariaDB (20,000 inserts, pool 10, five interleaved
#: rounds: 0.81x-0.95x of 64 for depths 8-32, all within the noise of a shared
#: machine) with a quarter of the doubt; docs/failures.md
PIPELINE_DEPTH = 16
#: how a URL's query says ``pipeline=``
_SWITCHES = {"on": True, "true": True, "yes": True, "1": True,
             "off": False, "false": False, "no": False, "0": False}


def check_pipeline(value: object, name: str = "pipeline") -> Optional[bool]:
    """``pipeline=``: True, False or None (the driver's default); a URL's text
    (``?pipeline=off``) as on/off, true/false, yes/no, 1/0."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _SWITCHES:
        return _SWITCHES[value.strip().lower()]
    raise InterfaceError(f"{name} must be True or False (in a URL: on or off), not {value!r}")


def pipeline_depth(given: Optional[bool], in_url: object, supported: bool,
                   default: bool) -> int:
    """How many standalone calls one worker may send as one pipeline: 0 (one at a
    time) when ``Database(pipeline=)`` or the URL's ``?pipeline=`` says off, or the
    driver cannot pipeline (psycopg2, sqlite3: they keep one statement at a time);
    else ``PIPELINE_DEPTH``. The keyword and the URL must agree when both say."""
    url = check_pipeline(in_url, "the URL's pipeline")
    if given is not None and url is not None and given != url:
        raise InterfaceError(f"pipeline={given!r} but the URL says pipeline="
                             f"{'on' if url else 'off'}: say it once")
    wanted = given if given is not None else url if url is not None else default
    return PIPELINE_DEPTH if wanted and supported else 0


def check_count(count: object, name: str) -> Optional[int]:
    """A positive whole number, or None."""
    return None if count is None else check_positive(count, name)


def check_positive(count: object, name: str) -> int:
    """A positive whole number (None is refused too)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InterfaceError(f"{name} must be a positive integer, not {count!r}")
    return count


def check_retries(retries: object) -> Optional[int]:
    """A whole number >= 0, or None."""
    if retries is None:
        return None
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InterfaceError(f"retries must be a whole number >= 0, not {retries!r}")
    return retries


def check_fallback(fallback: object) -> str:
    if fallback not in ("primary", "raise"):
        raise InterfaceError(f"replica_fallback must be 'primary' or 'raise', not {fallback!r}")
    return str(fallback)


def check_urls(replicas: object) -> tuple[Any, ...]:
    """The replica URLs (or Targets); a lone string is refused, not split."""
    if replicas is None:
        return ()
    if isinstance(replicas, (str, bytes)) or not hasattr(replicas, "__iter__"):
        raise InterfaceError("replicas must be a list of database URLs, "
                             f"not {type(replicas).__name__}")
    return tuple(replicas)


__all__ = ["ConnectKeywords", "EMBEDDED", "Embedded", "OPTION_NAMES", "Options", "PoolOptions", "PoolSettings", "ReplicaSettings",
           "Settings", "TelemetrySettings", "Timeouts", "check_count", "check_positive", "check_fallback", "check_flag",
           "check_isolation", "check_statement_timeout", "ISOLATION_LEVELS", "PIPELINE_DEPTH",
           "check_pipeline", "pipeline_depth",
           "check_retries", "check_timeout", "check_urls", "parse"]
