"""Systems under test: what a user would pick to do the same work.

A system is an *opener* in a *world*: ``opener(spec, world, min_size)`` is an async
context manager that connects in the system's own world (an asyncio loop, a
Tornado IOLoop, a Twisted reactor, plain threads; see ``benchmarks.worlds``) and
yields its ``Calls``. Every scenario is written once over those calls, so a new
scenario needs nothing here. A system that cannot be an opener (a C client that
runs its own program) names a ``runner`` per scenario instead. A system that
cannot run here is reported with the reason.
"""

import dataclasses
import importlib.util
import shutil
from typing import Mapping, Union


@dataclasses.dataclass(frozen=True)
class System:
    name: str
    label: str
    kinds: tuple            # "postgresql", "mysql", "sqlite"; "mongodb" (MONGO_SYSTEMS)
    opener: str = ""        # "benchmarks.systems.module:open_x"
    world: Union[str, Mapping[str, str]] = "asyncio"  # or {kind: world}
    requires: tuple = ()    # importable modules
    programs: tuple = ()    # executables on PATH, "{kind}" filled in
    note: str = ""
    runners: Mapping[str, str] = dataclasses.field(default_factory=dict)  # scenario -> "m:f"

    def world_for(self, kind):
        return self.world if isinstance(self.world, str) else self.world[kind]

    def unavailable(self, kind, scenario="parallel-insert"):
        """None if this system can run ``scenario`` against ``kind`` here, else why."""
        if kind not in self.kinds:
            return f"does not talk to {kind}"
        if not self.opener and scenario not in self.runners:
            return f"has no {scenario} runner"
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install 'adb-async[bench]')"
        for program in self.programs:
            if shutil.which(program.format(kind=kind)) is None:
                return f"{program.format(kind=kind)} is not on PATH"
        return None


_M = "benchmarks.systems"
ALL = ("postgresql", "mysql", "sqlite")
SERVERS = ("postgresql", "mysql")

SYSTEMS = {s.name: s for s in [
    System("adb-asyncio", "adb, asyncio", ALL, f"{_M}.adb_fronts:open_asyncio"),
    System("adb-tornado", "adb, Tornado", ALL, f"{_M}.adb_fronts:open_tornado", "tornado",
           requires=("tornado",)),
    System("adb-twisted", "adb, Twisted (default reactor)", ALL, f"{_M}.twisted_pools:open_adb",
           "twisted", requires=("twisted",)),
    System("adb-twisted-asyncio", "adb, Twisted (asyncio reactor)", ALL,
           f"{_M}.twisted_pools:open_adb", "twisted-asyncio", requires=("twisted",)),
    System("adb-asyncio-autobatch", "adb, asyncio, autobatch=64 (group commit)", ALL,
           f"{_M}.adb_fronts:open_asyncio_autobatch",
           note="standalone runOperation calls queued together run as one unit"),
    System("adb-tornado-autobatch", "adb, Tornado, autobatch=64", ALL,
           f"{_M}.adb_fronts:open_tornado_autobatch", "tornado", requires=("tornado",)),
    System("adb-twisted-autobatch", "adb's adbapi drop-in, cp_autobatch=64", ALL,
           f"{_M}.twisted_pools:open_adb_autobatch", "twisted", requires=("twisted",)),
    System("adb-sync", "adb, sync front-end from pool_size threads", ALL,
           f"{_M}.adb_fronts:open_sync", "blocking"),
    System("adbapi", "Twisted adbapi, same driver", ALL, f"{_M}.twisted_pools:open_adbapi",
           "twisted", requires=("twisted",), note="begin/insert/commit per call, as adbapi does"),
    System("adbapi-asyncio", "Twisted adbapi on the asyncio reactor", ALL,
           f"{_M}.twisted_pools:open_adbapi", "twisted-asyncio", requires=("twisted",)),
    System("adbapi-autocommit", "Twisted adbapi, driver in autocommit (cp_openfun)", SERVERS,
           f"{_M}.twisted_pools:open_adbapi_autocommit", "twisted", requires=("twisted",),
           note="adbapi tuned: one round trip per insert, like adb"),
    System("threads", "plain blocking threads, same driver", ALL, f"{_M}.threads:open_threads",
           "blocking"),
    System("dbutils", "threads over DBUtils' PooledDB, same driver", ALL,
           f"{_M}.threads:open_dbutils", "blocking", requires=("dbutils",),
           note="the classic threaded pool: a connection checked out per call"),
    System("gevent", "gevent greenlets, the driver made cooperative (psycogreen / patched "
           "sockets)", SERVERS, f"{_M}.threads:open_threads", "gevent",
           requires=("gevent", "psycogreen"), note="one connection per greenlet"),
    System("executor", "asyncio run_in_executor, a thread pool of the same driver", ALL,
           f"{_M}.asyncio_drivers:open_executor",
           note="one future and one loop wake-up per call: the naive hand-off"),
    System("txmysql-role", "txMySQL's role: aiomysql on Twisted's asyncio reactor (MariaDB), "
           "txpostgres (PostgreSQL)", SERVERS, f"{_M}.txmysql_role:open_role",
           {"mysql": "twisted-asyncio", "postgresql": "twisted"},
           requires=("twisted", "aiomysql", "txpostgres"),
           note="txMySQL is Python 2 only and unpublished: its successors stand in"),
    System("asyncpg", "asyncpg pool", ("postgresql",), f"{_M}.asyncio_drivers:open_asyncpg",
           requires=("asyncpg",)),
    System("aiopg", "aiopg pool", ("postgresql",), f"{_M}.asyncio_drivers:open_aiopg",
           requires=("aiopg",)),
    System("psycopg3", "psycopg 3 AsyncConnectionPool (autocommit)", ("postgresql",),
           f"{_M}.asyncio_drivers:open_psycopg3", requires=("psycopg", "psycopg_pool")),
    System("aiomysql", "aiomysql pool (autocommit)", ("mysql",),
           f"{_M}.asyncio_drivers:open_aiomysql", requires=("aiomysql",)),
    System("c-client", "the limit: pgbench / mysqlslap, same inserts and concurrency", SERVERS,
           programs=("pgbench", "mysqlslap"), note="C clients; keys from a server-side sequence",
           runners={"parallel-insert": f"{_M}.cclients:run"}),
]}

#: MongoDB's clients, for the MongoDB scenarios (their ``ROSTER``); the figures come
#: from whatever answers the mongodb:// URL, usually the stand-in of .ci/start-mongo
MONGO = ("mongodb",)
MONGO_SYSTEMS = {s.name: s for s in [
    System("pymongo", "PyMongo, blocking (MongoClient)", MONGO, f"{_M}.mongo_clients:open_pymongo",
           "blocking", requires=("pymongo",)),
    System("motor-asyncio", "Motor on asyncio (AsyncIOMotorClient)", MONGO,
           f"{_M}.mongo_clients:open_motor", requires=("motor",),
           note="PyMongo on Motor's thread pool, a future per call; deprecated since 2025-05-14"),
    System("motor-tornado", "Motor on Tornado's IOLoop (MotorClient)", MONGO,
           f"{_M}.mongo_clients:open_motor", "tornado", requires=("motor", "tornado")),
    System("pymongo-async", "PyMongo's native asyncio client (AsyncMongoClient)", MONGO,
           f"{_M}.mongo_clients:open_async_client", requires=("pymongo",),
           note="no threads: Motor's successor"),
    System("executor", "PyMongo through asyncio's run_in_executor", MONGO,
           f"{_M}.mongo_clients:open_executor", requires=("pymongo",),
           note="as many threads as Motor's pool; one loop wake-up per call"),
    System("pymongo-batched", "PyMongo on threads, results handed back in batches (adb's "
           "BatchedHandback)", MONGO, f"{_M}.mongo_clients:open_batched", requires=("pymongo",),
           note="as many threads as Motor's pool; one loop wake-up per batch"),
]}

