"""Where a web request's tail is spent: each request's time at every stage, per request.

    python -m benchmarks.webtail --dburl postgresql://root@127.0.0.1/test \\
        --systems starlette+adb,starlette+asyncpg --loop uvloop --connections 256 \\
        --duration 10 [--pool_size 10] [--json out.json] [--plot tail.png]

wrk gives a latency distribution, not where one request waited. Here a client of
its own (``--connections`` keep-alive connections on uvloop, each sending its next
request when the last answer is in, as wrk does) names every request (``/db?seq=K``)
and notes when it sent it and when the answer was in. The server notes, for the
same K, when the ``/db`` handler began and when its query's answer was back
(``benchmarks.webapps.Stages``, handed over by ``/stages``). Both read the machine's
monotonic clock, so each request splits into three stages:

- **before the handler**: sent, until the framework ran the handler (the socket's
  buffer, the server's accept and read loop, HTTP parsing, the loop's ready queue);
- **the query**: the handler's ``await`` of the database call (for adb: the queue to
  a worker, the statement, the hand-back to the loop, the loop running the task on);
- **after the answer**: until the client read the response (serialising, writing).

For the slowest 1% of requests it also counts how many later requests (sent after
it) passed it at each stage: a request served in turn is passed by few; one that
waits out of turn, by many.

The client is Python, and takes a share of the CPU that wrk would not: its figures
are for the picture (which stage holds the tail), not for comparison with wrk's.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import dataclasses
import itertools
import json
import re
import statistics
import sys
import time
import urllib.request
from collections.abc import Sequence
from typing import Any, Optional

from .scenarios import web
from .webapps import LOOPS
from .webroster import free_port, running

#: the stages of one request, in order, as named in the output
STAGES = ("before the handler", "the query", "after the answer")
_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")


@dataclasses.dataclass(frozen=True)
class Request:
    """One named request's four moments (monotonic ns)."""

    sent: int
    began: int  # the handler began
    back: int  # the query's answer was back in the handler
    answered: int  # the client had read the response

    @property
    def stages(self) -> tuple[int, int, int]:
        return (self.began - self.sent, self.back - self.began, self.answered - self.back)

    @property
    def total(self) -> int:
        return self.answered - self.sent


async def _connection(port: int, until: float, seqs: itertools.count[int],
                      out: dict[int, tuple[int, int]]) -> None:
    """One keep-alive connection: request after request until ``until``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < until:
            seq = next(seqs)
            sent = time.monotonic_ns()
            writer.write(b"GET /db?seq=%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % seq)
            head = await reader.readuntil(b"\r\n\r\n")
            length = _LENGTH.search(head)
            if not head.startswith(b"HTTP/1.1 200") or length is None:
                raise RuntimeError(f"request {seq} was answered {head[:200]!r}")
            await reader.readexactly(int(length.group(1)))
            out[seq] = (sent, time.monotonic_ns())
    finally:
        writer.close()


async def _load(port: int, connections: int, seconds: float) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    seqs = itertools.count()
    until = time.monotonic() + seconds
    await asyncio.gather(*(_connection(port, until, seqs, out) for _ in range(connections)))
    return out


def _stages(base: str) -> dict[int, tuple[int, int]]:
    with urllib.request.urlopen(base + "/stages", timeout=30) as response:
        return {int(k): (v[0], v[1]) for k, v in json.loads(response.read()).items()}


def trace(system: str, url: str, loop: str, connections: int, seconds: float,
          pool_size: int) -> list[Request]:
    """Start ``system``'s web server, warm it up, load it for ``seconds`` and join
    the client's and the server's times of every request."""
    import uvloop

    server = web.ROSTER[system]
    config = server.config(url, pool_size, 1, free_port(), loop)
    with running(config, "/db?id=1") as base:
        uvloop.run(_load(config["port"], connections, min(seconds, 3)))  # warm-up
        _stages(base)  # forgotten
        client = uvloop.run(_load(config["port"], connections, seconds))
        server_side = _stages(base)
    missing = set(client) - set(server_side)
    if missing:
        raise RuntimeError(f"{len(missing)} answered requests were not kept by the server")
    return [Request(sent, *server_side[seq], answered)
            for seq, (sent, answered) in client.items()]


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _passed_by(requests: list[Request], slow: list[Request]) -> list[tuple[int, int]]:
    """For each slow request: how many requests sent after it began before it, and
    got their answer back before it (the median over ``slow``, per stage)."""
    by_sent = sorted(requests, key=lambda r: r.sent)
    sent = [r.sent for r in by_sent]
    counts = []
    for request in slow:
        later = by_sent[bisect.bisect_right(sent, request.sent):]
        counts.append((sum(1 for r in later if r.began < request.began),
                       sum(1 for r in later if r.back < request.back)))
    return counts


def summary(requests: list[Request]) -> dict[str, Any]:
    """Percentiles of every stage (ms), and what the slowest 1% spent where."""
    ms = 1e-6
    totals = [r.total * ms for r in requests]
    slow = sorted(requests, key=lambda r: r.total)[-max(1, len(requests) // 100):]
    passed = _passed_by(requests, slow)
    stages: dict[str, dict[str, float]] = {}
    for index, name in enumerate(STAGES):
        values = [r.stages[index] * ms for r in requests]
        stages[name] = {f"p{q:g}": round(_quantile(values, q / 100), 2)
                        for q in (50, 90, 99, 99.9)}
        stages[name]["max"] = round(max(values), 2)
        stages[name]["slowest 1%: mean ms"] = round(
            statistics.fmean(r.stages[index] * ms for r in slow), 2)
    return {
        "requests": len(requests),
        "total": {f"p{q:g}": round(_quantile(totals, q / 100), 2) for q in (50, 90, 99, 99.9)},
        "stages": stages,
        "slowest 1%: later requests that began before it (median)":
            statistics.median(p[0] for p in passed),
        "slowest 1%: later requests whose answer was back before it (median)":
            statistics.median(p[1] for p in passed),
    }


def plot(path: str, traced: dict[str, list[Request]], title: str) -> None:
    """Per system: every request's stages, stacked, requests ordered by their total."""
    from .report import save

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(traced), figsize=(6 * len(traced), 4.5), squeeze=False,
                             sharey=True)
    for ax, (system, requests) in zip(axes[0], traced.items()):
        ordered = sorted(requests, key=lambda r: r.total)
        xs = [100 * i / len(ordered) for i in range(len(ordered))]
        ax.stackplot(xs, *([r.stages[i] / 1e6 for r in ordered] for i in range(3)),
                     labels=STAGES)
        ax.set_title(system, fontsize=9)
        ax.set_xlabel("requests, ordered by latency (percentile)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("ms (log)")
    axes[0][0].legend(loc="upper left", fontsize=8)
    save(fig, path, title)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.webtail",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dburl", required=True)
    parser.add_argument("--systems", default="starlette+adb,starlette+asyncpg")
    parser.add_argument("--loop", choices=LOOPS, default="uvloop")
    parser.add_argument("--connections", type=int, default=256)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--pool_size", type=int, default=10)
    parser.add_argument("--json", help="write the summaries here")
    parser.add_argument("--plot", help="write the stacked stages here (PNG)")
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in web.ROSTER]
    if unknown:
        parser.error(f"unknown systems {unknown}; the web scenario's: {sorted(web.ROSTER)}")
    web.prepare(args.dburl, 0)
    traced: dict[str, list[Request]] = {}
    results: dict[str, Any] = {}
    for system in systems:
        traced[system] = trace(system, args.dburl, args.loop, args.connections,
                               args.duration, args.pool_size)
        results[system] = summary(traced[system])
        print(system, json.dumps(results[system], indent=2), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"options": vars(args), "results": results}, out, indent=2)
    if args.plot:
        plot(args.plot, traced, f"Where each request waited, {args.connections} connections, "
                                f"{args.loop}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
