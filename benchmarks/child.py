"""One run of one system, in a fresh process: ``python -m benchmarks.child SPEC``.

SPEC is JSON (system, scenario, url, rows, pool_size, options). Prints one JSON
line: the system's figures plus this process's peak RSS and CPU (a scenario that
``drive``s the system reports only its own) and, on an interpreter that can run
without the GIL, whether it was on at the end (``gil_enabled``: a module may turn it
back on), then ends at once, so that threads a broken pool left hanging cannot keep
it alive. A fresh process per run keeps reactors restartable and memory figures
honest.

``python -m benchmarks.child --probe REQUEST`` (scenario, url, systems) answers,
for ``benchmarks.interpreters.probe``, what this interpreter is and why each system
cannot run here, without running anything.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import sys
import sysconfig
from typing import Any, Optional

import adb
from adb.url import parse_url

from .scenarios import scenario_for
from .scenarios.base import Scenario
from .systems import System
from .systems.common import Figures, RunSpec, kind_of
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


def gil_enabled() -> Optional[bool]:
    """Whether the GIL is on now (None: an interpreter before 3.13, where it always is)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return bool(check()) if check is not None else None


def probe(request: dict[str, Any]) -> dict[str, Any]:
    """This interpreter as a run would use it: its version, whether it is a
    free-threaded build and the GIL is on (after importing every scenario and
    system module), the adb it imports, the URL's driver when it is not installed,
    and why each system cannot run the scenario here (None: it can)."""
    kind = kind_of(request["url"])
    scenario = scenario_for(request["scenario"], kind)
    driver = None if kind == "mongodb" else parse_url(request["url"]).driver
    return {"python": sys.version.split()[0], "executable": sys.executable,
            "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
            "gil_enabled": gil_enabled(), "adb": os.path.dirname(adb.__file__ or ""),
            "driver_missing": (driver if driver and scenario.uses_database
                               and importlib.util.find_spec(driver) is None else None),
            "unavailable": {name: scenario.roster[name].unavailable(kind, scenario.name)
                            for name in request["systems"]}}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--probe"]:
        print(json.dumps(probe(json.loads(argv[1]))))
        return 0
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
    if (gil := gil_enabled()) is not None:
        result["gil_enabled"] = gil
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
