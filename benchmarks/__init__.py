"""``python -m benchmarks``: adb against its peers on published experiments.

Layout: ``cli`` (options, the run, the report), ``harness`` (one process per run,
interleaved rounds, verification), ``child`` (the per-run process), ``report``
(table, JSON, chart, HTML), ``scenarios/`` (one module per experiment) and
``systems/`` (what runs the experiment: adb's front-ends, adbapi, threads, the
asyncio drivers, the C clients). See docs/benchmarks.md.
"""
