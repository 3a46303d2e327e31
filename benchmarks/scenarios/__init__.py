"""Scenarios: one module per published experiment, written once for every system.

A scenario module defines:

- ``NAME``, ``SEED``, ``DESCRIPTION``, and ``TABLE`` (whose row count the progress
  bar follows);
- ``MIN_CONNECTIONS``: connections a system opens before the run (None: all);
- ``FIELDS``: ``(key, label, format)`` of the figures the report shows, the first
  one the headline (ratios, chart, progress bar);
- ``prepare(url, rows)``: run by the harness before each run, in the parent;
- ``async def run(calls, spec)``: the experiment, in the child, over the system's
  ``Calls`` (``benchmarks.systems.common``) in the system's world
  (``benchmarks.worlds``); returns a dict of figures;
- ``verify(url, rows, figures)``: after each run; raises ``WrongResult``, which
  makes the run an error, never a figure.

Optional: ``DEFAULT_ROWS``, ``DEFAULT_POOL_SIZE`` and ``DEFAULT_SYSTEMS`` (what a
run without ``--rows``, ``--pool_size`` or ``--systems`` uses); ``variants(options)``,
a list of (name, options) pairs, each run as its own report row for every system
(iibench's modes); ``variant_unavailable(system, kind, options)``, the reason a
system cannot run a variant, or None; ``plot(path, summary, title, options)``, its
own chart. ``--pool_size`` may list sizes: every system then runs at each, and the
summary entries carry ``system``, ``variant`` and ``pool_size`` for the chart.

A scenario that is not a client workload (the web scenarios load a server with
a tool) brings its own ``ROSTER`` of systems and ``launch(name, url, pool_size,
options, progress)``, run by the harness in the parent instead of a child; it may
declare ``add_arguments(group)`` (its options), ``fields(options)`` instead of
``FIELDS``, ``BASELINES``, ``progress_total``, ``unavailable_reason()``,
``tools()`` (versions for the report), ``plot`` and ``USES_DATABASE = False``
(web-hello: no server version, no SQLite hint).

A scenario that runs on MongoDB (which adb does not talk to: these measure the
drivers people use there) says so with ``KINDS = ("mongodb",)`` and brings the
MongoDB clients as its ``ROSTER``; ``sequential`` has a MongoDB twin,
``sequential_mongo``, that ``scenario_for`` picks for a mongodb:// URL.

A new scenario is its module and a line below; no system needs a change.
"""

from ..systems import ALL as SQL, SYSTEMS
from . import (bigdata, iibench, mongo_tasks, parallel_insert, sequential, sequential_mongo, web,
               web_hello)

SCENARIOS = {module.NAME: module for module in (parallel_insert, sequential, web, web_hello,
                                                  iibench, bigdata, mongo_tasks)}
#: what a scenario name means on a mongodb:// URL
ON_MONGODB = {"sequential": sequential_mongo, "mongo-tasks": mongo_tasks}


def scenario_for(name, kind):
    """The scenario module that runs ``name`` against a ``kind`` of database;
    ValueError, naming the ones that can, if none does."""
    scenario = ON_MONGODB.get(name) if kind == "mongodb" else SCENARIOS[name]
    if scenario is None or kind not in getattr(scenario, "KINDS", SQL):
        on = "MongoDB" if kind == "mongodb" else "a SQL database"
        able = sorted(ON_MONGODB) if kind == "mongodb" else sorted(
            n for n, m in SCENARIOS.items() if kind in getattr(m, "KINDS", SQL))
        raise ValueError(f"--scenario {name} does not run on {on}; these do: {', '.join(able)}"
                         + ("" if kind == "mongodb" else
                            " (and sequential and mongo-tasks with --dburl mongodb://...)"))
    return scenario


def roster_of(scenario):
    """The systems a scenario runs: its own roster (the web servers, the MongoDB
    clients) or the SQL systems."""
    return getattr(scenario, "ROSTER", SYSTEMS)


class WrongResult(Exception):
    """A run finished but left the database in the wrong state: an error, not a result."""
