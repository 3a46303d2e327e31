"""Seed 002, part A: the seed's own experiment, as it was run.

Hello-world handlers (``/plaintext``, no database): Tornado with ``listen()`` (one
process) and with ``bind()`` + ``start(N)``; Starlette on uvicorn with one worker
and with ``--workers N``. Loaded with ``ab -n REQUESTS -c 10``, no keep-alive, as
the seed ran it; ``--repeat`` gives the rounds. Any failed or non-2xx answer makes
the run an error.
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Optional

from .. import load, webroster
from ..interpreters import THIS, Interpreter
from ..systems.common import Figures, Options
from ..webroster import WebServer, free_port, running
from .base import Progress, Scenario, WrongResult

ROSTER = {s.name: s for s in [
    WebServer("tornado", "Tornado, app.listen(): one process", "tornado"),
    WebServer("tornado xN", "Tornado, HTTPServer.bind() + start(N)", "tornado", processes="N"),
    WebServer("uvicorn", "Starlette on uvicorn, one worker", "starlette"),
    WebServer("uvicorn xN", "Starlette on uvicorn --workers N", "starlette", processes="N"),
]}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--requests", type=int, default=1000,
                       help="web-hello: ab's -n, requests per run (1000, as the seed)")
    group.add_argument("--concurrency", type=int, default=10,
                       help="web-hello: ab's -c (10, as the seed)")
    group.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                       help="web-hello: N of the multi-process servers (the CPU count)")


def unavailable_reason() -> Optional[str]:
    return load.missing("ab")


def progress_total(rows: int, options: Options) -> int:
    return 1


def prepare(url: str, rows: int) -> None:
    """Nothing: hello world touches no database."""


def launch(name: str, url: str, pool_size: int, options: Options,
           progress: Optional[Progress] = None, python: Interpreter = THIS) -> Figures:
    config = ROSTER[name].config(url, pool_size, int(options.get("workers", 1)), free_port())
    with running(config, "/plaintext", python=python) as base:
        load.ab(base + "/plaintext", 100, 10)  # warm-up
        figures = load.ab(base + "/plaintext", int(options.get("requests", 1000)),
                          int(options.get("concurrency", 10)))
    figures["processes"] = config["processes"]
    if progress:
        progress(1)
    return figures


def verify(url: str, rows: int, figures: Optional[Figures] = None) -> None:
    if figures and (figures.get("failed") or figures.get("non_2xx")):
        raise WrongResult(f"{figures.get('failed')} failed and {figures.get('non_2xx')} "
                          "non-2xx answers")


SCENARIO = Scenario(
    name="web-hello", seed="002",
    description="hello world under ab -n 1000 -c 10, no keep-alive (seed 002, part A)",
    prepare=prepare, launch=launch, verify=verify, roster=ROSTER, uses_database=False,
    baselines=("tornado",), add_arguments=add_arguments, progress_total=progress_total,
    unavailable_reason=unavailable_reason, tools=functools.partial(webroster.tools, "ab"),
    fields=(("requests_per_s", "req/s", "{:,.0f}"), ("p50_ms", "p50 ms", "{:.0f}"),
            ("p99_ms", "p99 ms", "{:.0f}")))
