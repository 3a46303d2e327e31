"""One run of one system, in a fresh process: ``python -m benchmarks.child SPEC``.

SPEC is JSON (system, scenario, url, rows, pool_size). Prints one JSON line: the
system's figures plus this process's peak RSS. A fresh process per run keeps
reactors restartable and memory figures honest.
"""

import importlib
import json
import resource
import sys

from .systems import MONGO_SYSTEMS, SYSTEMS
from .systems.common import RunSpec


def run_system(system, spec):
    """Run ``spec.scenario`` on ``system`` in this process; return its figures."""
    from .scenarios import scenario_for
    from .worlds import world
    if spec.scenario in system.runners:
        return resolve(system.runners[spec.scenario])(spec)
    scenario = scenario_for(spec.scenario, spec.kind)
    place = world(system.world_for(spec.kind), spec.pool_size)
    opener = resolve(system.opener)

    async def main():
        async with opener(spec, place, scenario.MIN_CONNECTIONS) as calls:
            return await scenario.run(calls, spec)
    return place.run(main)


def _system(name, spec):
    """The system called ``name``: a MongoDB client on a mongodb:// URL, else a SQL
    system (looked up without importing a scenario, so no driver before gevent's
    patching)."""
    return (MONGO_SYSTEMS if spec.kind == "mongodb" else SYSTEMS)[name]


def resolve(name):
    module, function = name.split(":")
    return getattr(importlib.import_module(module), function)


def main(argv):
    request = json.loads(argv[0])
    name = request.pop("system")
    spec = RunSpec(**request)
    system = _system(name, spec)
    if system.world_for(spec.kind) == "gevent":  # before the scenario imports any driver
        from .worlds import GeventWorld
        GeventWorld.patch(spec.driver)
    result = run_system(system, spec)
    # the main thread first, then the process: the process total read afterwards can
    # only be larger, so the main thread's share of it never comes out above 100%
    main = resource.getrusage(resource.RUSAGE_THREAD)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result.setdefault("peak_rss_mb", usage.ru_maxrss / 1024)
    # CPU this process used (the whole run: start-up included), per row, in microseconds;
    # on a machine where the server shares the CPUs, that is what the client costs it
    result.setdefault("cpu_us_per_row", (usage.ru_utime + usage.ru_stime) / spec.rows * 1e6)
    result.setdefault("switches_per_row", (usage.ru_nvcsw + usage.ru_nivcsw) / spec.rows)
    # the same for the main thread alone (the event loop of every async system here):
    # the rest of the process is the worker threads
    result.setdefault("main_cpu_us_per_row", (main.ru_utime + main.ru_stime) / spec.rows * 1e6)
    result.setdefault("main_switches_per_row", (main.ru_nvcsw + main.ru_nivcsw) / spec.rows)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
