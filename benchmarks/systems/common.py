"""What a system's opener gets (``RunSpec``) and gives (``Calls``, ``MongoCalls``),
and helpers the openers share."""

from __future__ import annotations

import dataclasses
import importlib
from typing import (Any, AsyncContextManager, AsyncIterable, Awaitable, Callable, Iterable,
                    Optional, Protocol, Sequence, Union)

from adb.drivers.base import URL_OPTIONS
from adb.url import parse_url

from ..worlds import World

#: a run's figures, as the JSON report holds them: numbers mostly, a list of report
#: lines (iibench), a path or a name (bigdata's census file, the C client's name)
Figures = dict[str, Any]
#: a scenario's own options (``--duration``, ``--modes``...), as argparse parsed them
Options = dict[str, Any]
#: a driver's rows, or a MongoDB document: whatever the driver returns (untyped)
Result = Any


def kind_of(url: str) -> str:
    """The server family of ``url``: postgresql, mysql, sqlite, or mongodb (which
    adb does not talk to: the MongoDB scenarios measure MongoDB's own clients)."""
    from ..mongo import SCHEME, is_mongo
    return SCHEME if is_mongo(url) else parse_url(url).family.scheme


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of one system: where, how many rows, how many connections."""

    scenario: str
    url: str
    rows: int
    pool_size: int
    options: Options = dataclasses.field(default_factory=dict, hash=False)  # the scenario's own

    @property
    def kind(self) -> str:
        return kind_of(self.url)

    @property
    def driver(self) -> str:
        """The DB-API module adb picks for the URL (``psycopg2``, ``pymysql``...)."""
        return parse_url(self.url).driver

    def connect_kwargs(self) -> dict[str, Any]:
        """Keywords for the driver module's own connect(): the URL's, less adb's own
        options (``?pipeline=``, ``?pooler=``), which mean nothing to a driver."""
        return {key: value for key, value in parse_url(self.url).kwargs.items()
                if key not in URL_OPTIONS}

    def paramstyle(self) -> str:
        return "qmark" if self.kind == "sqlite" else "format"


class Statement(Protocol):
    """``execute(sql, params=None)`` or ``query(sql, params=None)``: a statement
    sent, and what the world awaits for its result (a future, a Deferred, a ``Done``)."""

    def __call__(self, sql: str, params: Any = None, /) -> Awaitable[Result]: ...


#: ``many(sql, seq_of_params)``: the driver's executemany
Many = Callable[[str, Iterable[Any]], Awaitable[Any]]
#: a query's rows (or batches of them) as they arrive: an async iterable in an
#: event-loop world, a plain iterable in the blocking one (what a user of each
#: would loop over)
Rows = Union[AsyncIterable[Any], Iterable[Any]]
#: ``stream(sql, batch, batches)``: the rows of ``sql`` read ``batch`` at a time
#: through the system's way of reading a result bigger than memory (a server-side
#: cursor, an unbuffered result), open for the ``async with`` block; row by row
#: through the system's own iterator, or (``batches``) as the lists its batch call
#: gives (``fetch()``, ``fetchmany``)
Stream = Callable[[str, int, bool], AsyncContextManager[Rows]]
#: ``copy_in(table, columns, rows)``: ``rows`` (tuples) loaded through the system's
#: bulk path (COPY, LOAD DATA); what is awaited gives the row count
CopyIn = Callable[[str, Sequence[str], Sequence[tuple[Any, ...]]], Awaitable[int]]


@dataclasses.dataclass(frozen=True)
class TxCalls:
    """The calls of one transaction on one connection (``Calls.transaction()``)."""

    execute: Statement
    query: Statement
    many: Many


@dataclasses.dataclass(frozen=True)
class Calls:
    """What an opener hands a scenario: the system's calls, in its world.

    ``execute(sql, params=None)`` and ``query(sql, params=None)`` return what
    the world awaits (a future, a Deferred, or an already-settled ``Done``);
    ``world`` is where they run (``benchmarks.worlds``): its ``map``, ``spawn``
    and ``channel`` are the scenario's concurrency; ``stats`` gives adb's pool
    figures where there is a pool to ask. Optional, where the system has them:
    ``many(sql, seq_of_params)``, the driver's executemany; ``transaction()``,
    an async context manager giving ``TxCalls`` that run in one transaction on one
    connection, committed at the end (rolled back on an error); ``stream`` and
    ``copy_in`` (``Stream``, ``CopyIn``), its ways to read and load rows in bulk.
    """

    execute: Statement
    query: Statement
    world: World
    paramstyle: str
    stats: Optional[Callable[[], dict[str, Any]]] = None
    many: Optional[Many] = None
    transaction: Optional[Callable[[], AsyncContextManager[TxCalls]]] = None
    stream: Optional[Stream] = None
    copy_in: Optional[CopyIn] = None

    def map(self, fn: Callable[[Any], Awaitable[Any]],
            items: Iterable[Any]) -> Awaitable[list[Any]]:
        """``fn(item)`` for every item, as concurrently as the world allows."""
        return self.world.map(fn, items)


#: ``open_x(spec, world, min_size)``: a system's opener, an async context manager
#: connecting in ``world`` (``min_size`` connections before the run; None: all) and
#: giving the system's calls
Opener = Callable[[RunSpec, World, Optional[int]], AsyncContextManager[Calls]]

#: a DB-API connection: the driver module's own object, untyped across drivers
Connection = Any


def connect(spec: RunSpec, autocommit: bool = True) -> Connection:
    """One plain driver connection (autocommit, as adb runs standalone statements)."""
    module: Any = importlib.import_module(spec.driver)
    kwargs = spec.connect_kwargs()
    if spec.driver == "sqlite3":
        conn = module.connect(kwargs.pop("database"), timeout=30, isolation_level=None,
                              check_same_thread=False)
        sqlite_settings(conn)
        return conn
    if spec.driver == "pymysql":
        return module.connect(autocommit=autocommit, **kwargs)
    if spec.driver == "psycopg" and "database" in kwargs:  # libpq's name for it
        kwargs["dbname"] = kwargs.pop("database")
    conn = module.connect(**kwargs)
    conn.autocommit = autocommit
    return conn


def sqlite_settings(conn: Connection) -> None:
    """The settings adb uses on SQLite (WAL is stored in the file already), so that
    every system on SQLite pays for the same durability."""
    conn.execute("pragma synchronous=normal")


#: a MongoDB document, as the drivers take and give it
Document = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class MongoCalls:
    """What a MongoDB opener hands a scenario (``benchmarks.systems.mongo_clients``).

    ``insert(collection, document)`` gives the new ``_id``, ``find_one(collection,
    filter)`` a document or None, ``find_all(collection, filter)`` every matching
    document (the cursor emptied), ``ping()`` the server's answer; each returns what
    the world awaits, as ``Calls`` does. ``stats`` gives a hand-back's figures where
    the system has one.
    """

    insert: Callable[[str, Document], Awaitable[Any]]
    find_one: Callable[[str, Document], Awaitable[Optional[Document]]]
    find_all: Callable[[str, Document], Awaitable[list[Document]]]
    ping: Callable[[], Awaitable[Any]]
    world: World
    stats: Optional[Callable[[], dict[str, Any]]] = None

    def map(self, fn: Callable[[Any], Awaitable[Any]],
            items: Iterable[Any]) -> Awaitable[list[Any]]:
        return self.world.map(fn, items)


#: a MongoDB client's opener, as ``Opener`` but giving ``MongoCalls``
MongoOpener = Callable[[RunSpec, World, Optional[int]], AsyncContextManager[MongoCalls]]
