"""Telemetry's cost on the ``sequential`` scenario (seed 001), off against on.

    python -m benchmarks.telemetry --dburl postgresql://root@127.0.0.1/test \\
        --rows 2000 --rounds 5 [--json out.json]

Variants, on adb's asyncio front-end (pool 10), each run in a fresh child process:

- ``off`` and ``off-again``: ``Database(...)`` as shipped; the two together are
  the A/A noise of the machine.
- ``api``: ``telemetry=True`` with the OpenTelemetry API and no SDK configured,
  so its no-op tracer and meter (what an application that installed the extra
  but exports nothing pays).
- ``sdk``: ``telemetry=True`` with the SDK: a TracerProvider exporting each span
  through a SimpleSpanProcessor to an InMemorySpanExporter, and a MeterProvider
  with an InMemoryMetricReader (every span and every metric recorded).

The variants alternate in every round (the order rotates), and the table gives
median (min-max) microseconds per insert and per select (wall clock, as the
scenario reports them), the client's CPU time per call (the process's, worker
threads included: what telemetry adds, with less of the server's noise), and
each median's ratio to ``off``'s. The scenario's table is ``adb_telemetry_bench`` here, not
``benchmark``, so that a run never meets another benchmark on a shared server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any, Optional, Sequence

VARIANTS = ("off", "off-again", "api", "sdk")
TABLE = "adb_telemetry_bench"
POOL_SIZE = 10


def _child(variant: str, url: str, rows: int) -> dict[str, Any]:
    import adb
    from .scenarios import parallel_insert, sequential
    from .systems.adb_fronts import _calls
    from .systems.common import RunSpec
    from .worlds import AsyncioWorld

    parallel_insert.TABLE = sequential.TABLE = TABLE  # read at call time by both
    options: dict[str, Any] = {}
    spans: Any = None
    if variant == "api":
        options["telemetry"] = True
    elif variant == "sdk":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter)
        spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        options.update(tracer_provider=tracer_provider,
                       meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
    parallel_insert.prepare(url, rows)
    spec = RunSpec("sequential", url, rows, POOL_SIZE)

    async def main() -> dict[str, Any]:
        db = adb.Database(url, pool_size=POOL_SIZE, **options)
        try:
            cpu = time.process_time()
            figures: dict[str, Any] = await sequential.run(_calls(db, AsyncioWorld()), spec)
            figures["cpu_us"] = (time.process_time() - cpu) / (2 * rows) * 1e6
        finally:
            await db.close()
        return figures

    figures = asyncio.run(main())
    parallel_insert.verify(url, rows, figures)
    if spans is not None:
        figures["spans"] = len(spans.get_finished_spans())
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"drop table if exists {TABLE}")
    return figures


def _run(variant: str, url: str, rows: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", f"{__package__}.telemetry", "--child", variant,
                           "--dburl", url, "--rows", str(rows)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{variant}: {(proc.stderr or proc.stdout).strip()[-500:]}")
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


def _cell(values: Sequence[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.telemetry",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dburl", default="postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.dburl, args.rows)))
        return
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for round_ in range(args.rounds):
        order = VARIANTS[round_ % len(VARIANTS):] + VARIANTS[:round_ % len(VARIANTS)]
        for variant in order:
            runs[variant].append(_run(variant, args.dburl, args.rows))
            print(f"round {round_ + 1}: {variant} done", file=sys.stderr)
    keys = ("insert_us", "select_us", "cpu_us")
    base = {key: statistics.median(r[key] for r in runs["off"]) for key in keys}
    print(f"{args.dburl}, {args.rows} rows, {args.rounds} interleaved rounds, "
          "us per call, median (min-max), and each median / off's:\n")
    print("| variant | insert | select | client CPU per call | vs off (insert, select, CPU) |")
    print("|---|---|---|---|---|")
    for variant in VARIANTS:
        cells = [[r[key] for r in runs[variant]] for key in keys]
        ratios = ", ".join(f"{statistics.median(c) / base[k]:.2f}" for c, k in zip(cells, keys))
        print(f"| {variant} | " + " | ".join(_cell(c) for c in cells) + f" | {ratios} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(runs, out, indent=1)


if __name__ == "__main__":
    main()
