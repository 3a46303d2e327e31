"""Systems under test: what a user would pick to do the same work.

Each system names the modules it needs and the databases it can talk to; its
runner (``"module:function"``, resolved in the child process) takes a
``RunSpec`` and returns ``{"seconds": ..., "ok_calls": ...}`` plus anything
it wants to report. A system that cannot run here is reported with the reason.
"""

import dataclasses
import importlib.util
import shutil


@dataclasses.dataclass(frozen=True)
class System:
    name: str
    label: str
    kinds: tuple            # "postgresql", "mysql", "sqlite"
    runner: str             # "benchmarks.systems.module:function", per kind via {kind}
    requires: tuple = ()    # importable modules
    programs: tuple = ()    # executables on PATH
    note: str = ""

    def runner_for(self, scenario):
        """``(module, function name)`` running ``scenario``."""
        module, function = self.runner.split(":")
        if scenario != "parallel-insert":
            function += "_" + scenario.replace("-", "_")
        return module, function

    def unavailable(self, kind, scenario="parallel-insert"):
        """None if this system can run ``scenario`` against ``kind`` here, else why."""
        if kind not in self.kinds:
            return f"does not talk to {kind}"
        module, function = self.runner_for(scenario)
        if importlib.util.find_spec(module) and not hasattr(importlib.import_module(module),
                                                            function):
            return f"has no {scenario} runner"
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install 'adb-async[bench]')"
        for program in self.programs:
            if shutil.which(program.format(kind=kind)) is None:
                return f"{program.format(kind=kind)} is not on PATH"
        return None


ALL = ("postgresql", "mysql", "sqlite")
SERVERS = ("postgresql", "mysql")

SYSTEMS = {s.name: s for s in [
    System("adb-asyncio", "adb, asyncio", ALL, "benchmarks.systems.adb_fronts:asyncio_run"),
    System("adb-tornado", "adb, Tornado", ALL, "benchmarks.systems.adb_fronts:tornado_run",
           requires=("tornado",)),
    System("adb-twisted", "adb, Twisted (default reactor)", ALL,
           "benchmarks.systems.twisted_pools:adb_default", requires=("twisted",)),
    System("adb-twisted-asyncio", "adb, Twisted (asyncio reactor)", ALL,
           "benchmarks.systems.twisted_pools:adb_asyncio", requires=("twisted",)),
    System("adb-sync", "adb, sync front-end from pool_size threads", ALL,
           "benchmarks.systems.adb_fronts:sync_run"),
    System("adbapi", "Twisted adbapi, same driver", ALL,
           "benchmarks.systems.twisted_pools:adbapi_default", requires=("twisted",),
           note="begin/insert/commit per call, as adbapi does"),
    System("adbapi-asyncio", "Twisted adbapi on the asyncio reactor", ALL,
           "benchmarks.systems.twisted_pools:adbapi_asyncio", requires=("twisted",)),
    System("adbapi-autocommit", "Twisted adbapi, driver in autocommit (cp_openfun)", SERVERS,
           "benchmarks.systems.twisted_pools:adbapi_autocommit", requires=("twisted",),
           note="adbapi tuned: one round trip per insert, like adb"),
    System("threads", "plain blocking threads, same driver", ALL,
           "benchmarks.systems.threads:run"),
    System("executor", "asyncio run_in_executor, a thread pool of the same driver", ALL,
           "benchmarks.systems.asyncio_drivers:executor_run",
           note="one future and one loop wake-up per call: the naive hand-off"),
    System("txmysql-role", "txMySQL's role: aiomysql on Twisted's asyncio reactor (MariaDB), "
           "txpostgres (PostgreSQL)", SERVERS, "benchmarks.systems.txmysql_role:run",
           requires=("twisted", "aiomysql", "txpostgres"),
           note="txMySQL is Python 2 only and unpublished: its successors stand in"),
    System("asyncpg", "asyncpg pool", ("postgresql",), "benchmarks.systems.asyncio_drivers:asyncpg_run",
           requires=("asyncpg",)),
    System("aiopg", "aiopg pool", ("postgresql",), "benchmarks.systems.asyncio_drivers:aiopg_run",
           requires=("aiopg",)),
    System("psycopg3", "psycopg 3 AsyncConnectionPool (autocommit)", ("postgresql",),
           "benchmarks.systems.asyncio_drivers:psycopg3_run", requires=("psycopg", "psycopg_pool")),
    System("aiomysql", "aiomysql pool (autocommit)", ("mysql",),
           "benchmarks.systems.asyncio_drivers:aiomysql_run", requires=("aiomysql",)),
    System("c-client", "the limit: pgbench / mysqlslap, same inserts and concurrency", SERVERS,
           "benchmarks.systems.cclients:run", programs=("pgbench", "mysqlslap"),
           note="C clients; keys from a server-side sequence"),
]}
