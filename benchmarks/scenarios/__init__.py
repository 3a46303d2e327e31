"""Scenarios: one module per published experiment, written once for every system.

Each module declares ``SCENARIO``, a ``Scenario`` record (``benchmarks/scenarios/
base.py`` lists every field a scenario may set, with its default): its name and
seed, ``prepare``, ``run`` (or ``launch``, for a scenario that loads a server from
the parent; or ``drive``, for one that breaks the system itself), ``verify``, its report fields, and what it changes of a run's
defaults, options, variants and roster. The registry below is the only list of
them: a new scenario is its module and one line here (and its section in
docs/benchmarks.md and a test); no system needs a change.

A scenario that runs on MongoDB (which adb does not talk to: these measure the
drivers people use there) says so with ``kinds=("mongodb",)`` and brings the
MongoDB clients as its roster; ``sequential`` has a MongoDB twin,
``sequential_mongo``, that ``scenario_for`` picks for a mongodb:// URL.
"""

from __future__ import annotations

from . import (bigdata, bulk, faults, iibench, mongo_tasks, parallel_insert, sequential, sequential_mongo,
               web, web_hello)
from .base import Scenario

#: every scenario by name, in the order ``--list`` shows them
SCENARIOS = {scenario.name: scenario for scenario in (
    parallel_insert.SCENARIO,
    sequential.SCENARIO,
    web.SCENARIO,
    web_hello.SCENARIO,
    iibench.SCENARIO,
    bigdata.SCENARIO,
    bulk.SCENARIO,
    mongo_tasks.SCENARIO,
    faults.SCENARIO,
)}
#: what a scenario name means on a mongodb:// URL
ON_MONGODB = {"sequential": sequential_mongo.SCENARIO, "mongo-tasks": mongo_tasks.SCENARIO}


def scenario_for(name: str, kind: str) -> Scenario:
    """The scenario that runs ``name`` against a ``kind`` of database;
    ValueError, naming the ones that can, if none does."""
    scenario = ON_MONGODB.get(name) if kind == "mongodb" else SCENARIOS[name]
    if scenario is None or kind not in scenario.kinds:
        on = "MongoDB" if kind == "mongodb" else "a SQL database"
        able = sorted(ON_MONGODB) if kind == "mongodb" else sorted(
            n for n, s in SCENARIOS.items() if kind in s.kinds)
        raise ValueError(f"--scenario {name} does not run on {on}; these do: {', '.join(able)}"
                         + ("" if kind == "mongodb" else
                            " (and sequential and mongo-tasks with --dburl mongodb://...)"))
    return scenario
