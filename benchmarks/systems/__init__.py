"""Systems under test: what a user would pick to do the same work.

A system is an *opener* in a *world*: ``System.open(spec, world, min_size)`` is an
async context manager that connects in the system's own world (an asyncio loop, a
Tornado IOLoop, a Twisted reactor, plain threads; see ``benchmarks.worlds``) and
yields its ``Calls``. Every scenario is written once over those calls, so a new
scenario needs nothing here. A system that cannot be an opener (a C client that
runs its own program) names a ``runner`` per scenario instead. A system that
cannot run here is reported with the reason. The ``faults`` scenario breaks pools
rather than running calls: its systems (``FAULT_SYSTEMS``) carry a ``fault_opener``
that opens the pool behind ``fault_pools.FaultPool``.

A new system is one ``System`` line below, and its opener (a function in one of
the modules here, or a new module beside them).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from typing import AsyncContextManager, Awaitable, Callable, Mapping, Optional, Protocol, Union

from ..worlds import World
from . import (adb_fronts, asyncio_drivers, cclients, cclients_bulk, fault_pools, mongo_clients,
               threads, threads_pipelined, twisted_pools, txmysql_role)
from .common import Calls, Figures, MongoCalls, MongoOpener, Opener, RunSpec
from .fault_pools import FaultOpener, FaultPool, Target

ALL = ("postgresql", "mysql", "sqlite")
SERVERS = ("postgresql", "mysql")
#: the optional calls (``Calls.many``, ``Calls.transaction``, ``Calls.stream``,
#: ``Calls.copy_in``) a scenario may count on; a program's runner (the C clients)
#: names what it does
MANY, TRANSACTION, STREAM, COPY = "many", "transaction", "stream", "copy"
BOTH = (MANY, TRANSACTION)
BULK = (STREAM, COPY)
#: ``run(spec, table)``: a scenario run by a program of the system's own (the C
#: clients), inserting into the scenario's table; returns the run's figures
Runner = Callable[[RunSpec, str], Figures]


class Entrant(Protocol):
    """A row of a scenario's roster, as the CLI, the harness and the report see it:
    a ``System``, or a web scenario's server (``benchmarks.webroster.WebServer``)."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def kinds(self) -> tuple[str, ...]: ...

    @property
    def note(self) -> str: ...

    def unavailable(self, kind: str, scenario: str = ...) -> Optional[str]: ...


@dataclasses.dataclass(frozen=True)
class System:
    """One system: its opener (or runners), its world, and what it needs here."""

    name: str
    label: str
    kinds: tuple[str, ...]  # "postgresql", "mysql", "sqlite"; "mongodb" (MONGO_SYSTEMS)
    opener: Optional[Union[Opener, MongoOpener]] = None
    world: Union[str, Mapping[str, str]] = "asyncio"  # or {kind: world}
    requires: tuple[str, ...] = ()  # importable modules
    programs: tuple[str, ...] = ()  # executables on PATH, "{kind}" filled in
    note: str = ""
    runners: Mapping[str, Runner] = dataclasses.field(default_factory=dict)  # by scenario
    #: MANY, TRANSACTION (what bigdata's switches need), STREAM, COPY (bulk's parts)
    optional_calls: tuple[str, ...] = ()
    #: the programs a scenario's runner needs instead of ``programs``, by scenario
    scenario_programs: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: the faults scenario's opener (FAULT_SYSTEMS): ``fault_opener(target)`` opens the
    #: pool behind ``FaultPool``, for a fault program to break
    fault_opener: Optional[FaultOpener] = None
    #: the distribution whose version the report shows (FAULT_SYSTEMS)
    distribution: str = ""

    def world_for(self, kind: str) -> str:
        return self.world if isinstance(self.world, str) else self.world[kind]

    def open(self, spec: RunSpec, world: World,
             min_size: Optional[int]) -> AsyncContextManager[Union[Calls, MongoCalls]]:
        """The opener's context: connect in ``world`` (``min_size`` connections up
        front; None: all), give the calls, close on the way out."""
        if self.opener is None:
            raise ValueError(f"{self.name} has no opener: it runs {', '.join(self.runners)} "
                             "with a program of its own")
        return self.opener(spec, world, min_size)

    def open_pool(self, target: Target) -> Awaitable[FaultPool]:
        """The faults scenario's pool, opened at ``target``."""
        if self.fault_opener is None:
            raise ValueError(f"{self.name} has no pool for the faults scenario")
        return self.fault_opener(target)

    def version(self) -> Optional[str]:
        """The installed version of ``distribution`` (None: not installed or not named)."""
        from importlib import metadata
        try:
            return metadata.version(self.distribution) if self.distribution else None
        except metadata.PackageNotFoundError:
            return None

    def unavailable(self, kind: str, scenario: str = "parallel-insert") -> Optional[str]:
        """None if this system can run ``scenario`` against ``kind`` here, else why."""
        if kind not in self.kinds:
            return f"does not talk to {kind}"
        if self.opener is None and self.fault_opener is None and scenario not in self.runners:
            return f"has no {scenario} runner"
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install 'adb-async[bench]')"
        for program in self.scenario_programs.get(scenario, self.programs):
            if shutil.which(program.format(kind=kind)) is None:
                return f"{program.format(kind=kind)} is not on PATH"
        return None


SYSTEMS = {s.name: s for s in [
    System("adb-asyncio", "adb, asyncio", ALL, adb_fronts.open_asyncio,
           optional_calls=BOTH + BULK),
    System("adb-tornado", "adb, Tornado", ALL, adb_fronts.open_tornado, "tornado",
           requires=("tornado",), optional_calls=BOTH + BULK),
    System("adb-twisted", "adb, Twisted (default reactor)", ALL, twisted_pools.open_adb,
           "twisted", requires=("twisted",), optional_calls=(MANY,)),
    System("adb-twisted-asyncio", "adb, Twisted (asyncio reactor)", ALL,
           twisted_pools.open_adb, "twisted-asyncio", requires=("twisted",),
           optional_calls=(MANY,)),
    System("adb-twisted-db", "adb.twisted.Database, adb's own API on Twisted (default reactor)",
           ALL, adb_fronts.open_twisted, "twisted", requires=("twisted",),
           optional_calls=BOTH + BULK, note="the same calls as adb-asyncio, giving Deferreds"),
    System("adb-asyncio-autobatch", "adb, asyncio, autobatch=64 (group commit)", ALL,
           adb_fronts.open_asyncio_autobatch,
           note="standalone runOperation calls queued together run as one unit"),
    System("adb-tornado-autobatch", "adb, Tornado, autobatch=64", ALL,
           adb_fronts.open_tornado_autobatch, "tornado", requires=("tornado",)),
    System("adb-twisted-autobatch", "adb's adbapi drop-in, cp_autobatch=64", ALL,
           twisted_pools.open_adb_autobatch, "twisted", requires=("twisted",)),
    System("adb-sync", "adb, sync front-end from pool_size threads", ALL,
           adb_fronts.open_sync, "blocking", optional_calls=BOTH + BULK),
    System("adbapi", "Twisted adbapi, same driver", ALL, twisted_pools.open_adbapi,
           "twisted", requires=("twisted",), note="begin/insert/commit per call, as adbapi does"),
    System("adbapi-asyncio", "Twisted adbapi on the asyncio reactor", ALL,
           twisted_pools.open_adbapi, "twisted-asyncio", requires=("twisted",)),
    System("adbapi-autocommit", "Twisted adbapi, driver in autocommit (cp_openfun)", SERVERS,
           twisted_pools.open_adbapi_autocommit, "twisted", requires=("twisted",),
           note="adbapi tuned: one round trip per insert, like adb"),
    System("threads", "plain blocking threads, same driver", ALL, threads.open_threads,
           "blocking", optional_calls=BOTH + (STREAM,)),
    System("dbutils", "threads over DBUtils' PooledDB, same driver", ALL,
           threads.open_dbutils, "blocking", requires=("dbutils",), optional_calls=BOTH,
           note="the classic threaded pool: a connection checked out per call"),
    System("gevent", "gevent greenlets, the driver made cooperative (psycogreen / patched "
           "sockets)", SERVERS, threads.open_threads, "gevent",
           requires=("gevent", "psycogreen"), optional_calls=BOTH + (STREAM,),
           note="one connection per greenlet"),
    System("executor", "asyncio run_in_executor, a thread pool of the same driver", ALL,
           asyncio_drivers.open_executor,
           note="one future and one loop wake-up per call: the naive hand-off"),
    System("txmysql-role", "txMySQL's role: aiomysql on Twisted's asyncio reactor (MariaDB), "
           "txpostgres (PostgreSQL)", SERVERS, txmysql_role.open_role,
           {"mysql": "twisted-asyncio", "postgresql": "twisted"},
           requires=("twisted", "aiomysql", "txpostgres"),
           note="txMySQL is Python 2 only and unpublished: its successors stand in"),
    System("asyncpg", "asyncpg pool", ("postgresql",), asyncio_drivers.open_asyncpg,
           requires=("asyncpg",), optional_calls=(MANY,) + BULK),
    System("aiopg", "aiopg pool", ("postgresql",), asyncio_drivers.open_aiopg,
           requires=("aiopg",)),
    System("psycopg3", "psycopg 3 AsyncConnectionPool (autocommit)", ("postgresql",),
           asyncio_drivers.open_psycopg3, requires=("psycopg", "psycopg_pool"),
           optional_calls=BULK),
    System("aiomysql", "aiomysql pool (autocommit)", ("mysql",),
           asyncio_drivers.open_aiomysql, requires=("aiomysql",),
           optional_calls=(MANY, STREAM)),
    System("c-client", "the limit: pgbench / mysqlslap, same inserts and concurrency (bulk: "
           "psql / mysql)", SERVERS, programs=("pgbench", "mysqlslap"),
           note="C clients; parallel-insert's keys from a server-side sequence",
           runners={"parallel-insert": cclients.run, "bulk": cclients_bulk.run},
           optional_calls=BULK, scenario_programs={"bulk": ("psql", "mysql")}),
    System("c-client-pipelined", f"the limit, batched: pgbench pipelines / mysqlslap "
           f"multi-statement messages of {cclients.MESSAGE} inserts", SERVERS,
           programs=("pgbench", "mysqlslap"),
           note="one commit per message: the shape of adb's autobatch=64 units",
           runners={"parallel-insert": cclients.run_pipelined}),
    System("threads-pipelined", f"the Python limit, batched: {threads_pipelined.MESSAGE}-insert "
           "messages from plain threads (psycopg 3 pipeline mode / PyMySQL multi-statement)",
           SERVERS, requires=("psycopg", "pymysql"),
           note="no loop, no pool, no future per call: one commit per message, as autobatch=64",
           runners={"parallel-insert": threads_pipelined.run}),
]}

#: MongoDB's clients, for the MongoDB scenarios (their ``ROSTER``); the figures come
#: from whatever answers the mongodb:// URL, usually the stand-in of .ci/start-mongo
MONGO = ("mongodb",)
MONGO_SYSTEMS = {s.name: s for s in [
    System("pymongo", "PyMongo, blocking (MongoClient)", MONGO, mongo_clients.open_pymongo,
           "blocking", requires=("pymongo",)),
    System("motor-asyncio", "Motor on asyncio (AsyncIOMotorClient)", MONGO,
           mongo_clients.open_motor, requires=("motor",),
           note="PyMongo on Motor's thread pool, a future per call; deprecated since 2025-05-14"),
    System("motor-tornado", "Motor on Tornado's IOLoop (MotorClient)", MONGO,
           mongo_clients.open_motor, "tornado", requires=("motor", "tornado")),
    System("pymongo-async", "PyMongo's native asyncio client (AsyncMongoClient)", MONGO,
           mongo_clients.open_async_client, requires=("pymongo",),
           note="no threads: Motor's successor"),
    System("executor", "PyMongo through asyncio's run_in_executor", MONGO,
           mongo_clients.open_executor, requires=("pymongo",),
           note="as many threads as Motor's pool; one loop wake-up per call"),
    System("pymongo-batched", "PyMongo on threads, results handed back in batches (adb's "
           "BatchedHandback)", MONGO, mongo_clients.open_batched, requires=("pymongo",),
           note="as many threads as Motor's pool; one loop wake-up per batch"),
]}

#: the pools the faults scenario breaks (its ``ROSTER``): adb's asyncio and Tornado
#: front-ends and the peers users pick, each opened as its documentation says
FAULT_SYSTEMS = {s.name: s for s in [
    System("adb-asyncio", "adb, asyncio front-end", SERVERS,
           fault_opener=fault_pools.open_adb, distribution="adb-async"),
    System("adb-tornado", "adb, Tornado front-end", SERVERS, world="tornado",
           requires=("tornado",), fault_opener=fault_pools.open_adb_tornado,
           distribution="adb-async"),
    System("asyncpg", "asyncpg's pool", ("postgresql",), requires=("asyncpg",),
           fault_opener=fault_pools.open_asyncpg, distribution="asyncpg"),
    System("psycopg-pool", "psycopg_pool's AsyncConnectionPool (check=check_connection)",
           ("postgresql",), requires=("psycopg_pool",), fault_opener=fault_pools.open_psycopg,
           distribution="psycopg-pool"),
    System("aiomysql", "aiomysql's pool (autocommit)", ("mysql",), requires=("aiomysql",),
           fault_opener=fault_pools.open_aiomysql, distribution="aiomysql"),
    System("sqlalchemy", "SQLAlchemy's asyncio engine (pool_pre_ping; asyncpg / aiomysql)",
           SERVERS, requires=("sqlalchemy", "greenlet"),
           fault_opener=fault_pools.open_sqlalchemy, distribution="SQLAlchemy"),
    System("adbapi", "Twisted's adbapi (cp_reconnect; psycopg2 / PyMySQL) on the "
           "asyncio reactor", SERVERS, world="twisted-asyncio", requires=("twisted",),
           fault_opener=fault_pools.open_adbapi, distribution="Twisted"),
]}
