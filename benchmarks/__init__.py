"""``python -m benchmarks``: adb against its peers on published experiments.

Layout, top down (docs/architecture.md lists every module's layer): ``cli``
(options, the run, the report), ``harness`` (one process per run, interleaved
rounds, verification) and ``progress`` (its bars), ``child`` (the per-run
process) and ``webserver`` (a web scenario's server process), ``scenarios/`` (one
module per experiment, each declaring a ``Scenario`` record, and their registry),
``report`` (table, JSON, chart, HTML), ``webroster`` and ``webapps`` (the web
scenarios' servers and applications), ``systems/`` (what runs the experiment:
adb's front-ends, adbapi, threads, the asyncio drivers, the C clients, MongoDB's
clients, each a ``System`` record), and below them ``worlds``, ``mongo``,
``census``, ``load``, ``sql`` and ``interpreters`` (the Pythons a run's systems
run on, ``--python``). ``ab`` and ``burst`` are programs of their own.
See docs/benchmarks.md.
"""
