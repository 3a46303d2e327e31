"""One run of one system, in a fresh process: ``python -m benchmarks.child SPEC``.

SPEC is JSON (system, scenario, url, rows, pool_size, options). Prints one JSON
line: the system's figures plus this process's peak RSS and CPU (a scenario that
``drive``s the system reports only its own), then ends at once, so that threads a
broken pool left hanging cannot keep it alive. A fresh process per run keeps
reactors restartable and memory figures honest.
"""

from __future__ import annotations

import json
import os
import resource
import sys

from .scenarios import scenario_for
from .scenarios.base import Scenario
from .systems import System
from .systems.common import Figures, RunSpec
from .worlds import GeventWorld, world


def run_system(system: System, spec: RunSpec) -> Figures:
    """Run ``spec.scenario`` on ``system`` in this process; return its figures."""
    scenario = scenario_for(spec.scenario, spec.kind)
    if scenario.drive is not None:
        return scenario.drive(system, spec)
    runner = system.runners.get(spec.scenario)
    if runner is not None:
        return runner(spec, scenario.table or "")
    if scenario.run is None:
        raise ValueError(f"{scenario.name} is launched from the parent, not run in a child")
    run = scenario.run
    place = world(system.world_for(spec.kind), spec.pool_size)

    async def main() -> Figures:
        async with system.open(spec, place, scenario.min_connections) as calls:
            return await run(calls, spec)
    return place.run(main)


def _system(name: str, scenario: Scenario) -> System:
    """The system called ``name`` in the scenario's roster."""
    system = scenario.roster[name]
    if not isinstance(system, System):
        raise ValueError(f"{name} is launched from the parent, not run in a child")
    return system


def process_figures(rows: int) -> Figures:
    """This process's peak RSS, and its CPU time and context switches per row, the
    whole process's and the main thread's (the event loop of every async system
    here; the rest of the process is the worker threads). The main thread is read
    first: the process total read afterwards can only be larger, so the main
    thread's share of it never comes out above 100%. CPU per row covers the whole
    run, start-up included: on a machine where the server shares the CPUs, that
    is what the client costs it."""
    main = resource.getrusage(resource.RUSAGE_THREAD)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak_rss_mb": usage.ru_maxrss / 1024,
            "cpu_us_per_row": (usage.ru_utime + usage.ru_stime) / rows * 1e6,
            "switches_per_row": (usage.ru_nvcsw + usage.ru_nivcsw) / rows,
            "main_cpu_us_per_row": (main.ru_utime + main.ru_stime) / rows * 1e6,
            "main_switches_per_row": (main.ru_nvcsw + main.ru_nivcsw) / rows}


def main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    name = request.pop("system")
    spec = RunSpec(**request)
    scenario = scenario_for(spec.scenario, spec.kind)
    system = _system(name, scenario)
    if system.world_for(spec.kind) == "gevent":  # before the scenario opens any driver
        GeventWorld.patch(spec.driver)
    result = run_system(system, spec)
    if scenario.drive is None:
        for key, value in process_figures(spec.rows).items():
            result.setdefault(key, value)  # the C clients report their own peak RSS
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
