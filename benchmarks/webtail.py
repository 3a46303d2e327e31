"""Where a web request's tail is spent: each request's time at every stage, per request.

    python -m benchmarks.webtail --dburl postgresql://root@127.0.0.1/test \\
        --systems starlette+adb,starlette+asyncpg --loop uvloop --connections 256 \\
        --duration 10 [--load python|wrk] [--pool_size 10] [--json out.json] [--plot tail.png]

wrk gives a latency distribution, not where one request waited. Here every request
is named (``/db?seq=K``), and the server notes, for each K, when the ``/db`` handler
began and when its query's answer was back (``benchmarks.webapps.Stages``, handed
over by ``/stages``). When the request was sent and when its answer came back is
told by the load:

- ``--load python`` (the default): a client of its own, ``--connections``
  keep-alive connections on uvloop, each sending its next request when the last
  answer is in, as wrk does. It notes both times itself. It is Python, takes a share
  of the CPU that wrk would not, and opens its connections slowly enough that the
  server never meets them all at once: its figures are for the picture of the
  steady state.
- ``--load wrk``: wrk itself (its Lua script names the requests), with ``tcpdump``
  recording loopback: a request was sent when its packet crossed the kernel, and
  answered when the server's first packet back on that connection did. wrk opens
  every connection at once, as in the web scenario's runs. Needs ``tcpdump`` and the
  right to capture (root). What wrk itself reported (its p50 and p99) is kept beside
  the capture's: where the two differ, the difference is wrk's own wait to read the
  answers. The capture is not free: it slows loopback, and with it the burst of new
  connections wrk opens (docs/performance.md, "The limit against the ramp, on the
  compiled wheel").

Both sides read the machine's monotonic clock (a packet's time, on the wall clock, is
moved onto it), so each request splits into three stages:

- **before the handler**: sent, until the framework ran the handler (the listen
  socket's queue until the connection was accepted, the socket's buffer, the
  server's read loop, HTTP parsing, the loop's ready queue);
- **the query**: the handler's ``await`` of the database call (for adb: the queue to
  a worker, the statement, the hand-back to the loop, the loop running the task on);
- **after the answer**: until the answer was back (serialising, writing).

For the slowest 1% of requests it also counts how many later requests (sent after
it) passed it at each stage: a request served in turn is passed by few; one that
waits out of turn, by many. And how many of them were the first request on their
connection: a connection accepted late makes its first request wait.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import dataclasses
import itertools
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, NamedTuple, Optional

from . import load
from .report import quantile
from .scenarios import web
from .webapps import LOOPS
from .webroster import free_port, running

#: the stages of one request, in order, as named in the output
STAGES = ("before the handler", "the query", "after the answer")
#: the loads that can drive a trace (``--load``)
LOADS = ("python", "wrk")


class Seen(NamedTuple):
    """What a load knows of one request: when it was sent and answered (monotonic ns),
    its connection, and the how-manyth request on that connection it was (0: the first)."""

    sent: int
    answered: int
    connection: int
    nth: int


#: each named request's ``Seen``, by its name (``seq``)
Sent = dict[int, Seen]
#: wrk's Lua script: each request named by its thread and its count there
_WRK_SCRIPT = """
local count, threads = 0, 0
function setup(thread)
   threads = threads + 1
   thread:set("tid", threads)
end
function request()
   count = count + 1
   return wrk.format("GET", "/db?seq=" .. (tid * 1000000000 + count))
end
"""


@dataclasses.dataclass(frozen=True)
class Request:
    """One named request's four moments (monotonic ns)."""

    sent: int
    began: int  # the handler began
    back: int  # the query's answer was back in the handler
    answered: int  # the client had read the response
    connection: int = 0  # which of the client's connections sent it
    nth: int = 0  # the how-manyth request on its connection (0: the first)

    @property
    def stages(self) -> tuple[int, int, int]:
        return (self.began - self.sent, self.back - self.began, self.answered - self.back)

    @property
    def total(self) -> int:
        return self.answered - self.sent


async def _connection(port: int, until: float, seqs: itertools.count[int],
                      out: Sent, index: int) -> None:
    """One keep-alive connection: request after request until ``until``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for nth in itertools.count():
            if time.monotonic() >= until:
                break
            seq = next(seqs)
            sent = time.monotonic_ns()
            await load.get(reader, writer, f"/db?seq={seq}")
            out[seq] = Seen(sent, time.monotonic_ns(), index, nth)
    finally:
        writer.close()


async def _python_load(port: int, connections: int, seconds: float) -> Sent:
    out: Sent = {}
    seqs = itertools.count()
    until = time.monotonic() + seconds
    await asyncio.gather(*(_connection(port, until, seqs, out, index)
                           for index in range(connections)))
    return out


def kernel_times(capture: bytes, port: int, offset: int) -> Sent:
    """Each named request's times from a pcap capture of loopback (``tcpdump -w``):
    when its packet crossed the kernel, and when the server's first answer packet on
    that connection after it did, moved onto the monotonic clock (``offset``: the
    wall clock minus the monotonic one). Its connection is the client's port."""
    magic, = struct.unpack("<I", capture[:4])
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        raise ValueError("not a little-endian pcap capture")
    scale = 1 if magic == 0xA1B23C4D else 1000  # nanosecond or microsecond stamps
    link, = struct.unpack("<I", capture[20:24])
    link_header = {1: 14, 113: 16, 276: 20}.get(link)
    if link_header is None:
        raise ValueError(f"link type {link} is not one loopback is captured with")
    asked: dict[int, tuple[int, int]] = {}  # seq -> (time, client port)
    answers: dict[int, list[int]] = {}  # client port -> answer packets' times
    pos = 24
    while pos + 16 <= len(capture):
        seconds, fraction, length, _ = struct.unpack("<IIII", capture[pos:pos + 16])
        packet = capture[pos + 16:pos + 16 + length]
        pos += 16 + length
        stamp = seconds * 1_000_000_000 + fraction * scale - offset
        ip = packet[link_header:]
        tcp = ip[(ip[0] & 0x0F) * 4:]
        source, destination = struct.unpack(">HH", tcp[:4])
        payload = tcp[(tcp[12] >> 4) * 4:]
        if destination == port and payload.startswith(b"GET /db?seq="):
            end = payload.index(b" ", 12)
            asked[int(payload[12:end])] = (stamp, source)
        elif source == port and payload.startswith(b"HTTP/1."):
            answers.setdefault(destination, []).append(stamp)
    out: Sent = {}
    nth: dict[int, int] = {}
    for seq, (sent, client) in sorted(asked.items(), key=lambda item: item[1][0]):
        times = answers.get(client, [])
        after = bisect.bisect_left(times, sent)
        if after < len(times):
            out[seq] = Seen(sent, times[after], client, nth.get(client, 0))
        nth[client] = nth.get(client, 0) + 1
    return out


def _wrk_load(port: int, connections: int, seconds: float) -> tuple[Sent, dict[str, float]]:
    """wrk on ``port`` for ``seconds``, its requests named, loopback captured; and what
    wrk itself reported (p50 and p99, ms)."""
    for tool in ("wrk", "tcpdump"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"--load wrk needs {tool} (apt-get install {tool})")
    with tempfile.TemporaryDirectory() as work:
        script, capture = os.path.join(work, "seq.lua"), os.path.join(work, "lo.pcap")
        with open(script, "w") as out:
            out.write(_WRK_SCRIPT)
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-s", "256", "-B", "65536",
                                 "-w", capture, f"tcp port {port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert dump.stderr is not None
        heard = dump.stderr.readline()  # "listening on lo, ...": capturing from here
        if "listening" not in heard:
            dump.kill()
            raise RuntimeError(f"tcpdump did not start: {heard.strip()}")
        try:
            args = ["wrk", "-t2", f"-c{connections}", f"-d{seconds:g}s", "--latency",
                    "-s", script, f"http://127.0.0.1:{port}/db"]
            said = subprocess.run(args, check=True, capture_output=True, text=True).stdout
            time.sleep(0.5)  # the last answers reach the capture
        finally:
            dump.send_signal(signal.SIGINT)
            dump.wait(timeout=30)
        offset = time.time_ns() - time.monotonic_ns()
        with open(capture, "rb") as packets:
            return kernel_times(packets.read(), port, offset), load.wrk_percentiles(said)


def _stages(base: str) -> dict[int, tuple[int, int]]:
    with urllib.request.urlopen(base + "/stages", timeout=30) as response:
        return {int(k): (v[0], v[1]) for k, v in json.loads(response.read()).items()}


class Traced(NamedTuple):
    """One system's traced requests, and what the load tool itself reported of them
    (wrk's p50 and p99 in ms; empty for the tracer's own client)."""

    requests: list[Request]
    load_said: dict[str, float]


def trace(system: str, url: str, loop: str, connections: int, seconds: float,
          pool_size: int, using: str = "python") -> Traced:
    """Start ``system``'s web server, warm it up, load it for ``seconds`` with the
    load ``using`` names (``LOADS``) and join the load's and the server's times of
    every request."""
    import uvloop

    server = web.ROSTER[system]
    config = server.config(url, pool_size, 1, free_port(), loop)
    port = config["port"]
    with running(config, "/db?id=1") as base:
        uvloop.run(_python_load(port, connections, min(seconds, 3)))  # warm-up
        _stages(base)  # forgotten
        said: dict[str, float] = {}
        if using == "wrk":
            client, said = _wrk_load(port, connections, seconds)
        else:
            client = uvloop.run(_python_load(port, connections, seconds))
        server_side = _stages(base)
    missing = set(client) - set(server_side)
    if missing:
        raise RuntimeError(f"{len(missing)} answered requests were not kept by the server")
    return Traced([Request(seen.sent, *server_side[seq], seen.answered, seen.connection,
                           seen.nth) for seq, seen in client.items()], said)


def _passed_by(requests: list[Request], slow: list[Request]) -> list[tuple[int, int]]:
    """For each slow request: how many requests sent after it began before it, and
    how many got their answer back before it."""
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
        stages[name] = {f"p{q:g}": round(quantile(values, q / 100), 2)
                        for q in (50, 90, 99, 99.9)}
        stages[name]["max"] = round(max(values), 2)
        stages[name]["slowest 1%: mean ms"] = round(
            statistics.fmean(r.stages[index] * ms for r in slow), 2)
    return {
        "requests": len(requests),
        "total": {f"p{q:g}": round(quantile(totals, q / 100), 2) for q in (50, 90, 99, 99.9)},
        "stages": stages,
        "slowest 1%: later requests that began before it (median)":
            statistics.median(p[0] for p in passed),
        "slowest 1%: later requests whose answer was back before it (median)":
            statistics.median(p[1] for p in passed),
        "slowest 1%: first requests on their connections": sum(r.nth == 0 for r in slow),
        "slowest 1%": len(slow),
    }


def plot(path: str, traced: dict[str, list[Request]], title: str) -> None:
    """Per system, a column: each request's wait before the handler (top) and its
    query (bottom) against when it was sent; a connection's first request in red,
    so that connections accepted late show as what they are."""
    from .report import save

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(traced), figsize=(5.5 * len(traced), 7), squeeze=False,
                             sharex=True, sharey=True)
    for column, (system, requests) in enumerate(traced.items()):
        start = min(r.sent for r in requests)
        for row, stage in enumerate(STAGES[:2]):
            ax = axes[row][column]
            for first, colour, size in ((False, "0.45", 1), (True, "tab:red", 6)):
                chosen = [r for r in requests if (r.nth == 0) is first]
                ax.scatter([(r.sent - start) / 1e9 for r in chosen],
                           [max(r.stages[row], 1) / 1e6 for r in chosen], s=size, c=colour,
                           linewidths=0, label="a connection's first request" if first
                           else "the others")
            ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.set_title(f"{system}: {stage}", fontsize=9)
            if row == 1:
                ax.set_xlabel("sent, seconds into the load")
    for row in axes:
        row[0].set_ylabel("ms (log)")
    axes[0][0].legend(loc="upper right", fontsize=8, markerscale=2)
    save(fig, path, title)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.webtail",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dburl", required=True)
    parser.add_argument("--systems", type=web.servers, default="starlette+adb,starlette+asyncpg")
    parser.add_argument("--loop", choices=LOOPS, default="uvloop")
    parser.add_argument("--connections", type=int, default=256)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--pool_size", type=int, default=10)
    parser.add_argument("--load", choices=LOADS, default="python",
                        help="the tracer's own client, or wrk with a capture of loopback")
    parser.add_argument("--json", help="write the summaries here")
    parser.add_argument("--plot", help="write the stacked stages here (PNG)")
    args = parser.parse_args(argv)
    web.prepare(args.dburl, 0)
    traced: dict[str, list[Request]] = {}
    results: dict[str, Any] = {}
    for system in args.systems:
        traced[system], said = trace(system, args.dburl, args.loop, args.connections,
                                     args.duration, args.pool_size, args.load)
        results[system] = summary(traced[system])
        if said:
            results[system]["wrk reported"] = said
        print(system, json.dumps(results[system], indent=2), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"options": vars(args), "results": results}, out, indent=2)
    if args.plot:
        plot(args.plot, traced, f"Where each request waited: {args.connections} connections, "
                                f"{args.loop}, {args.load} load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
