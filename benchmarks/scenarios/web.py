"""Seed 002, part B: a web application under HTTP load, TechEmpower's "single query".

``world(id int primary key, randomnumber int)`` holds 10,000 rows; every request
to ``/db`` reads one row by a random id and answers ``{"id", "randomNumber"}`` as
JSON, uncached (``benchmarks/webapps.py``). Each server runs in its own process
group (``benchmarks/webserver.py``); wrk loads it with keep-alive: a 1 s primer,
a warm-up at the highest concurrency, then each ``--connections`` level for
``--duration`` seconds. Sampled answers (``/db?id=N``, before and after the load)
must be the right row; a run with any non-2xx answer or socket error, or a wrong
sample, is an error, never a figure. Beside each level's requests/s and latency,
the CPU each side spent per request: the web server's, the database server's on
this machine, wrk's (``benchmarks.cpushare``; in the JSON).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import random
import urllib.request
from typing import Optional

import adb.sync

from .. import cpushare, load, webroster
from ..interpreters import THIS, Interpreter
from ..report import Field, Summary, line_chart
from ..sql import WEB_TABLE, placeholder
from ..systems.common import Figures, Options, kind_of, parse_url
from ..webapps import LOOPS, WORLD_ROWS
from ..webroster import WebServer, free_port, serving
from .base import Progress, Scenario, WrongResult

SAMPLES = 25

_PG, _MY = ("postgresql",), ("mysql",)
ROSTER = {s.name: s for s in [
    WebServer("tornado+adb", "Tornado + adb (asyncio front-end), 1 process", "tornado",
              "adb-asyncio"),
    WebServer("tornado+adb xN", "Tornado + adb, N processes (HTTPServer.start(N))", "tornado",
              "adb-asyncio", "N"),
    WebServer("tornado+blocking", "Tornado + the blocking driver called on the loop thread",
              "tornado", "threads", pool_size=1, note="the seed author's 'synchronously'"),
    WebServer("tornado+asyncpg", "Tornado + asyncpg pool", "tornado", "asyncpg", kinds=_PG),
    WebServer("tornado+aiomysql", "Tornado + aiomysql pool", "tornado", "aiomysql", kinds=_MY),
    WebServer("starlette+asyncpg", "Starlette on uvicorn + asyncpg, 1 worker", "starlette",
              "asyncpg", kinds=_PG),
    WebServer("starlette+asyncpg xN", "Starlette on uvicorn + asyncpg, N workers", "starlette",
              "asyncpg", "N", kinds=_PG),
    WebServer("starlette+aiomysql", "Starlette on uvicorn + aiomysql, 1 worker", "starlette",
              "aiomysql", kinds=_MY),
    WebServer("starlette+aiomysql xN", "Starlette on uvicorn + aiomysql, N workers",
              "starlette", "aiomysql", "N", kinds=_MY),
    WebServer("starlette+adb", "Starlette on uvicorn + adb (asyncio front-end), 1 worker",
              "starlette", "adb-asyncio"),
    WebServer("starlette+adb xN", "Starlette on uvicorn + adb, N workers", "starlette",
              "adb-asyncio", "N"),
    WebServer("twisted-web+adb", "Twisted Web + adb.twisted, 1 process", "twisted-web",
              "adb-twisted"),
    WebServer("twisted-web+adbapi", "Twisted Web + twisted.enterprise.adbapi, 1 process",
              "twisted-web", "adbapi"),
]}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--duration", type=int, default=10,
                       help="web: whole seconds of load per concurrency level (10)")
    group.add_argument("--connections", default="16,64,256",
                       help="web: wrk connection counts, comma-separated (16,64,256)")
    group.add_argument("--processes", type=int, default=os.cpu_count() or 1,
                       help="web: N of the multi-process servers (the CPU count)")
    group.add_argument("--loop", choices=LOOPS, default="asyncio",
                       help="web: the event loop of the asyncio servers (Tornado, Starlette "
                            "on uvicorn); Twisted Web keeps its own reactor")


def servers(text: str) -> list[str]:
    """``--systems`` of the web tools (``benchmarks.webprofile``, ``webtail``,
    ``webcurve``): the comma-separated names, each a server of ``ROSTER``; an
    ``argparse`` type, so a bad name is refused by name before anything starts."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ROSTER]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"not web scenario servers: {', '.join(unknown) or repr(text)} "
            f"(the web scenario's: {', '.join(sorted(ROSTER))})")
    return names


def event_loop(options: Options) -> str:
    """``--loop``, checked: uvloop must be importable here."""
    loop = str(options.get("loop") or "asyncio")
    if loop not in LOOPS:
        raise ValueError(f"--loop must be one of {', '.join(LOOPS)}, not {loop!r}")
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ValueError("--loop uvloop: uvloop is not installed (pip install 'adb-async[bench]')")
    return loop


def levels(options: Options) -> list[int]:
    try:
        values = [int(c) for c in str(options.get("connections", "16,64,256")).split(",")]
    except ValueError:
        raise ValueError(f"--connections must be numbers, not {options.get('connections')!r}")
    if not values or min(values) < 1:
        raise ValueError("--connections must be positive")
    return values


def fields(options: Options) -> tuple[Field, ...]:
    """requests/s at each level (the highest first: the headline), then p99 latency."""
    event_loop(options)
    ordered = sorted(levels(options), reverse=True)
    return (tuple((f"rps_c{c}", f"req/s @{c}", "{:,.0f}") for c in ordered)
            + tuple((f"p99_ms_c{c}", f"p99 ms @{c}", "{:.1f}") for c in ordered))


def progress_total(rows: int, options: Options) -> int:
    return len(levels(options))


def unavailable_reason() -> Optional[str]:
    """Why no server can be loaded here (wrk missing), or None."""
    return load.missing("wrk")


def prepare(url: str, rows: int) -> None:
    """The TechEmpower table: ids 1..10,000, a random number 1..10,000 each."""
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"drop table if exists {WEB_TABLE}")
        db.runOperation(f"create table {WEB_TABLE} (id int not null primary key, "
                        "randomnumber int not null)")
        mark = placeholder(db.paramstyle)
        db.runMany(f"insert into {WEB_TABLE} (id, randomnumber) values ({mark}, {mark})",
                   [(i, random.randint(1, WORLD_ROWS)) for i in range(1, WORLD_ROWS + 1)])


def launch(name: str, url: str, pool_size: int, options: Options,
           progress: Optional[Progress] = None, python: Interpreter = THIS) -> Figures:
    """Start server ``name`` (on ``python``), check samples, load it level by level,
    stop it."""
    server = ROSTER[name]
    duration = int(options.get("duration", 10))
    loop = event_loop(options)
    config = server.config(url, pool_size, int(options.get("processes", 1)), free_port(), loop)
    expected = _table(url)
    figures: Figures = {"processes": config["processes"]}
    with serving(config, "/db?id=1", python=python) as (base, pid):
        figures["loop"] = _serving_loop(base, server, loop)
        figures["sampled_ok"], figures["sampled_bad"] = _sample(base, expected)
        load.wrk(base + "/db", min(8, min(levels(options))), 1)  # primer
        load.wrk(base + "/db", max(levels(options)), min(duration, 3))  # warm-up
        meter = cpushare.Meter(pid, _local_database(url)) if cpushare.available() else None
        for step, connections in enumerate(levels(options), 1):
            if meter is not None:
                meter.start()
            run = load.wrk(base + "/db", connections, duration)
            for key in ("requests_per_s", "p50_ms", "p99_ms", "non_2xx", "socket_errors"):
                short = "rps" if key == "requests_per_s" else key
                figures[f"{short}_c{connections}"] = run[key]
            if meter is not None:
                meter.stop()
                for key, us in meter.per_request(run["requests"]).items():
                    figures[f"{key}_c{connections}"] = round(us, 1)
            if progress:
                progress(step)
        ok, bad = _sample(base, expected)
    figures["sampled_ok"] += ok
    figures["sampled_bad"] += bad
    figures["seconds"] = duration * len(levels(options))
    return figures


def _local_database(url: str) -> Optional[str]:
    """The kind of the database server whose processes run on this machine for
    ``url`` (its CPU is measured, ``benchmarks.cpushare``), or None: SQLite runs in
    the web server, and a server elsewhere is not this machine's."""
    kind = kind_of(url)
    host = parse_url(url).kwargs.get("host", "")
    local = not host or host.startswith("/") or host in ("127.0.0.1", "localhost", "::1")
    return kind if kind in cpushare.DATABASE_PROCESSES and local else None


def verify(url: str, rows: int, figures: Optional[Figures] = None) -> None:
    """Every answer 2xx, no socket errors, every sampled body the right row."""
    if figures is None:
        return
    errors = {k: v for k, v in figures.items()
              if (k.startswith("non_2xx") or k.startswith("socket_errors")) and v}
    if errors:
        raise WrongResult(f"failed responses: {errors}")
    if figures.get("sampled_bad") or figures.get("sampled_ok") != 2 * SAMPLES:
        raise WrongResult(f"{figures.get('sampled_bad')} of {2 * SAMPLES} sampled answers "
                          "were not the row asked for")


def plot(path: str, summary: Summary, title: str, options: Options) -> None:
    """Requests/s against connections, one line per server (median; bars min-max)."""
    xs = levels(options)
    title = f"{title} ({event_loop(options)} loop)"
    lines = {name: [(c, entry[f"rps_c{c}"]) for c in xs] for name, entry in summary.items()
             if all(f"rps_c{c}" in entry for c in xs)}
    line_chart(path, title, lines, "wrk connections (keep-alive)",
               "requests/s (median; bars min-max)", log_base=2)


def _serving_loop(base: str, server: WebServer, asked: str) -> str:
    """The loop the server says it runs on (``/loop``); WrongResult unless it is the
    one asked for, so a run never claims uvloop falsely. Twisted Web: its reactor."""
    if server.framework == "twisted-web":
        return "twisted reactor"
    with urllib.request.urlopen(f"{base}/loop", timeout=10) as response:
        serving = response.read().decode()
    if ("uvloop" in serving) != (asked == "uvloop"):
        raise WrongResult(f"{server.name} was asked for the {asked} loop and runs on {serving}")
    return serving


def _table(url: str) -> dict[int, int]:
    with adb.sync.Database(url, pool_size=1) as db:
        return dict(db.runQuery(f"select id, randomnumber from {WEB_TABLE}"))


def _sample(base: str, expected: dict[int, int]) -> tuple[int, int]:
    ok = bad = 0
    for row_id in random.sample(range(1, WORLD_ROWS + 1), SAMPLES):
        with urllib.request.urlopen(f"{base}/db?id={row_id}", timeout=10) as response:
            body = json.loads(response.read())
        if body == {"id": row_id, "randomNumber": expected[row_id]}:
            ok += 1
        else:
            bad += 1
    return ok, bad


SCENARIO = Scenario(
    name="web", seed="002",
    description="a Tornado app under HTTP load: one row per request, JSON (seed 002, part B)",
    prepare=prepare, launch=launch, verify=verify, roster=ROSTER, baselines=(),
    tables=(WEB_TABLE,),
    add_arguments=add_arguments, fields_for=fields, progress_total=progress_total,
    unavailable_reason=unavailable_reason, tools=functools.partial(webroster.tools, "wrk"),
    plot=plot)
