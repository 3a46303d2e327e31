"""Latency against load, open loop: the web scenario's ``/db`` at fixed arrival rates.

    python -m benchmarks.webcurve --dburl postgresql://root@127.0.0.1/test \\
        --systems starlette+adb,starlette+asyncpg --loop uvloop \\
        --rates 500,1000,2000,3000,4000 --duration 10 [--connections 256] \\
        [--pool_size 10] [--json out.json] [--plot curve.png]

wrk is a closed loop: each connection sends its next request when the last answer is
in, so a server that stalls also stops the requests that would have measured the
stall (coordinated omission), and wrk's own correction of that guesses. Here requests
arrive on a schedule instead, ``rate`` a second, whatever the server does: request i
is due at ``start + i / rate`` and its latency runs from that moment to its answer.
A request due while all ``--connections`` keep-alive connections are busy waits for
one, and that wait is its latency too, as it is for a client whose requests queue.

The connections are opened and used once before the clock starts, so the curve is of
requests on open connections (how fast a burst of new connections is accepted is
``benchmarks.webtail``'s subject). Each rate runs for ``--duration`` seconds on one
server process, lightest first; a rate the server cannot keep up with shows as
latency growing with the run and as fewer answers a second than asked for.

The client is Python on uvloop and shares the machine with the server: above a few
thousand requests a second it is its own bottleneck, which shows as the achieved rate
falling short for every system alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

from . import load
from .report import quantile
from .scenarios import web
from .webapps import LOOPS
from .webroster import free_port, running

#: the percentiles each rate reports
PERCENTILES = (50, 90, 99, 99.9)
#: how often the scheduler looks for requests that have come due (seconds)
TICK = 0.0005


class _Connection:
    """One keep-alive connection to the server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def get(self) -> None:
        """One ``/db`` request, answered 200, read whole."""
        await load.get(self.reader, self.writer, "/db")


async def open_idle(port: int, count: int) -> asyncio.Queue[_Connection]:
    """``count`` connections, each used once, idle in a queue."""
    idle: asyncio.Queue[_Connection] = asyncio.Queue()
    for _ in range(count):
        connection = _Connection(*await asyncio.open_connection("127.0.0.1", port))
        await connection.get()
        idle.put_nowait(connection)
    return idle


async def _request(idle: asyncio.Queue[_Connection], due: int, latencies: list[int]) -> None:
    connection = await idle.get()
    try:
        await connection.get()
    finally:
        idle.put_nowait(connection)
    latencies.append(time.monotonic_ns() - due)


async def schedule(idle: asyncio.Queue[_Connection], rate: float, seconds: float,
                   latencies: list[int]) -> list[asyncio.Future[None]]:
    """Make ``rate`` requests a second for ``seconds``, each when it comes due,
    whether or not earlier ones were answered; returns them, running. Each appends
    its latency from when it was due (ns) to ``latencies`` once answered."""
    total = int(rate * seconds)
    interval = 1_000_000_000 / rate
    start = time.monotonic_ns()
    made: list[asyncio.Future[None]] = []
    while len(made) < total:
        now = time.monotonic_ns()
        while len(made) < total and start + len(made) * interval <= now:
            due = start + int(len(made) * interval)
            made.append(asyncio.ensure_future(_request(idle, due, latencies)))
        await asyncio.sleep(TICK)
    return made


async def _at_rate(idle: asyncio.Queue[_Connection], rate: float,
                   seconds: float) -> tuple[list[int], float]:
    """One rate: every request's latency (ns), and the seconds until the last answer."""
    latencies: list[int] = []
    start = time.monotonic_ns()
    await asyncio.gather(*await schedule(idle, rate, seconds, latencies))
    return latencies, (time.monotonic_ns() - start) / 1e9


async def _curve(port: int, rates: Sequence[float], seconds: float,
                 connections: int) -> list[dict[str, Any]]:
    idle = await open_idle(port, connections)
    points = []
    for rate in rates:
        latencies, took = await _at_rate(idle, rate, seconds)
        points.append(point(rate, latencies, took))
    while not idle.empty():
        idle.get_nowait().writer.close()
    return points


def point(rate: float, latencies: Sequence[int], took: float) -> dict[str, Any]:
    """One rate's figures: the rate asked for, the rate answered, the percentiles of
    latency (ms) and the largest."""
    ms = 1e-6
    figures: dict[str, Any] = {"rate": rate, "answered_per_s": round(len(latencies) / took, 1)}
    for q in PERCENTILES:
        figures[f"p{q:g}_ms"] = round(quantile(latencies, q / 100) * ms, 2)
    figures["max_ms"] = round(max(latencies) * ms, 2)
    return figures


def measure(system: str, url: str, loop: str, rates: Sequence[float], seconds: float,
            connections: int, pool_size: int) -> list[dict[str, Any]]:
    """Start ``system``'s web server and run every rate against it, lightest first."""
    import uvloop

    config = web.ROSTER[system].config(url, pool_size, 1, free_port(), loop)
    with running(config, "/db?id=1"):
        return uvloop.run(_curve(config["port"], sorted(rates), seconds, connections))


def plot(path: str, curves: dict[str, list[dict[str, Any]]], title: str) -> None:
    """p50 and p99 against the rate asked for, one colour per system."""
    from .report import save

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for index, (system, points) in enumerate(curves.items()):
        colour = f"C{index}"
        rates = [p["rate"] for p in points]
        ax.plot(rates, [p["p99_ms"] for p in points], "o-", color=colour,
                label=f"{system}: p99")
        ax.plot(rates, [p["p50_ms"] for p in points], "s--", color=colour, alpha=0.6,
                label=f"{system}: p50")
    ax.set_yscale("log")
    ax.set_xlabel("requests a second asked for (open loop)")
    ax.set_ylabel("latency from when each request was due, ms (log)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path, title)


def _rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates must be numbers, not {text!r}")
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError("--rates must be positive requests a second")
    return rates


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.webcurve",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dburl", required=True)
    parser.add_argument("--systems", type=web.servers, default="starlette+adb,starlette+asyncpg")
    parser.add_argument("--loop", choices=LOOPS, default="uvloop")
    parser.add_argument("--rates", type=_rates, default=_rates("500,1000,2000,3000,4000"))
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--connections", type=int, default=256)
    parser.add_argument("--pool_size", type=int, default=10)
    parser.add_argument("--json", help="write the curves here")
    parser.add_argument("--plot", help="draw the curves here (PNG)")
    args = parser.parse_args(argv)
    web.prepare(args.dburl, 0)
    curves: dict[str, list[dict[str, Any]]] = {}
    for system in args.systems:
        curves[system] = measure(system, args.dburl, args.loop, args.rates, args.duration,
                                 args.connections, args.pool_size)
        for figures in curves[system]:
            print(system, json.dumps(figures), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"options": {k: v for k, v in vars(args).items()
                                   if k not in ("json", "plot")}, "curves": curves}, out,
                      indent=2)
    if args.plot:
        plot(args.plot, curves, f"Latency against load, open loop: {args.loop}, "
                                f"{args.connections} connections, pool {args.pool_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
