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

    def unavailable(self, kind):
        """None if this system can run against ``kind`` here, else the reason."""
        if kind not in self.kinds:
            return f"does not talk to {kind}"
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
]}
