"""Seed 002, part A: the seed's own experiment, as it was run.

Hello-world handlers (``/plaintext``, no database): Tornado with ``listen()`` (one
process) and with ``bind()`` + ``start(N)``; Starlette on uvicorn with one worker
and with ``--workers N``. Loaded with ``ab -n REQUESTS -c 10``, no keep-alive, as
the seed ran it; ``--repeat`` gives the rounds. Any failed or non-2xx answer makes
the run an error.
"""

import os

from .. import load
from ..webserver import WebServer, free_port, running

NAME = "web-hello"
SEED = "002"
DESCRIPTION = "hello world under ab -n 1000 -c 10, no keep-alive (seed 002, part A)"
TABLE = None
USES_DATABASE = False
MIN_CONNECTIONS = None
BASELINES = ("tornado",)
FIELDS = (("requests_per_s", "req/s", "{:,.0f}"), ("p50_ms", "p50 ms", "{:.0f}"),
          ("p99_ms", "p99 ms", "{:.0f}"))

ROSTER = {s.name: s for s in [
    WebServer("tornado", "Tornado, app.listen(): one process", "tornado"),
    WebServer("tornado xN", "Tornado, HTTPServer.bind() + start(N)", "tornado", processes="N"),
    WebServer("uvicorn", "Starlette on uvicorn, one worker", "starlette"),
    WebServer("uvicorn xN", "Starlette on uvicorn --workers N", "starlette", processes="N"),
]}


def add_arguments(group):
    group.add_argument("--requests", type=int, default=1000,
                       help="web-hello: ab's -n, requests per run (1000, as the seed)")
    group.add_argument("--concurrency", type=int, default=10,
                       help="web-hello: ab's -c (10, as the seed)")
    group.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                       help="web-hello: N of the multi-process servers (the CPU count)")


def unavailable_reason():
    return load.missing("ab")


def tools():
    import importlib.util
    return {"ab": load.version("ab"), "access_logs": "off",
            **{m: importlib.util.find_spec(m) is not None for m in ("uvloop", "httptools")}}


def progress_total(rows, options):
    return 1


def prepare(url, rows):
    """Nothing: hello world touches no database."""


def launch(name, url, pool_size, options, progress=None):
    config = ROSTER[name].config(url, pool_size, int(options.get("workers", 1)), free_port())
    with running(config, "/plaintext") as base:
        load.ab(base + "/plaintext", 100, 10)  # warm-up
        figures = load.ab(base + "/plaintext", int(options.get("requests", 1000)),
                          int(options.get("concurrency", 10)))
    figures["processes"] = config["processes"]
    if progress:
        progress(1)
    return figures


def verify(url, rows, figures=None):
    from . import WrongResult
    if figures and (figures.get("failed") or figures.get("non_2xx")):
        raise WrongResult(f"{figures.get('failed')} failed and {figures.get('non_2xx')} "
                          "non-2xx answers")
