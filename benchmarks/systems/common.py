"""What a system's opener gets (``RunSpec``) and gives (``Calls``), and helpers
the openers share."""

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

from adb.url import parse_url


def kind_of(url):
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
    options: dict = dataclasses.field(default_factory=dict, hash=False)  # the scenario's own

    @property
    def target(self):
        return parse_url(self.url)

    @property
    def kind(self):
        return kind_of(self.url)

    @property
    def driver(self):
        return self.target.driver

    def connect_kwargs(self):
        """Keywords for the driver module's own connect()."""
        return dict(self.target.kwargs)

    def paramstyle(self):
        return "qmark" if self.kind == "sqlite" else "format"


@dataclasses.dataclass(frozen=True)
class Calls:
    """What an opener hands a scenario: the system's calls, in its world.

    ``execute(sql, params=None)`` and ``query(sql, params=None)`` return what
    the world awaits (a future, a Deferred, or an already-settled ``Done``);
    ``world`` is where they run (``benchmarks.worlds``): its ``map``, ``spawn``
    and ``channel`` are the scenario's concurrency; ``stats`` gives adb's pool
    figures where there is a pool to ask. Optional, where the system has them:
    ``many(sql, seq_of_params)``, the driver's executemany, and ``unit()``, an
    async context manager giving a ``Unit`` whose calls run in one transaction
    on one connection, committed at the end (rolled back on an error).
    """

    execute: Callable[..., Any]
    query: Callable[..., Any]
    world: Any
    paramstyle: str
    stats: Optional[Callable[[], dict]] = None
    many: Optional[Callable[..., Any]] = None
    unit: Optional[Callable[[], Any]] = None

    def map(self, fn, items):
        """``fn(item)`` for every item, as concurrently as the world allows."""
        return self.world.map(fn, items)


class Unit(NamedTuple):
    """The calls of one transaction on one connection (``Calls.unit()``)."""

    execute: Callable[..., Any]
    query: Callable[..., Any]
    many: Callable[..., Any]


def connect(spec, autocommit=True):
    """One plain driver connection (autocommit, as adb runs standalone statements)."""
    import importlib
    module = importlib.import_module(spec.driver)
    kwargs = spec.connect_kwargs()
    if spec.driver == "sqlite3":
        conn = module.connect(kwargs.pop("database"), timeout=30, isolation_level=None,
                              check_same_thread=False)
        sqlite_settings(conn)
        return conn
    if spec.driver == "pymysql":
        return module.connect(autocommit=autocommit, **kwargs)
    conn = module.connect(**kwargs)
    conn.autocommit = autocommit
    return conn


def sqlite_settings(conn):
    """The settings adb uses on SQLite (WAL is stored in the file already), so that
    every system on SQLite pays for the same durability."""
    conn.execute("pragma synchronous=normal")


@dataclasses.dataclass(frozen=True)
class MongoCalls:
    """What a MongoDB opener hands a scenario (``benchmarks.systems.mongo_clients``).

    ``insert(collection, document)`` gives the new ``_id``, ``find_one(collection,
    filter)`` a document or None, ``find_all(collection, filter)`` every matching
    document (the cursor emptied), ``ping()`` the server's answer; each returns what
    the world awaits, as ``Calls`` does. ``stats`` gives a hand-back's figures where
    the system has one.
    """

    insert: Callable[..., Any]
    find_one: Callable[..., Any]
    find_all: Callable[..., Any]
    ping: Callable[[], Any]
    world: Any
    stats: Optional[Callable[[], dict]] = None

    def map(self, fn, items):
        return self.world.map(fn, items)
