"""The open-loop latency curve (``benchmarks.webcurve``): requests are made when they
come due, not when an answer frees the client, and each one's latency runs from when
it was due. Against a small HTTP server of the test's own that holds every request at
a gate until the test opens it."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from benchmarks.scenarios import web
from benchmarks.webcurve import _rates, open_idle, point, schedule

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


async def _gated_server(gate: asyncio.Event, seen: list[int]) -> asyncio.Server:
    """Answers each request once ``gate`` is open (the first one of each connection,
    the one ``open_idle`` makes, at once)."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = True
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if not first:
                seen.append(1)
                await gate.wait()
            first = False
            writer.write(ANSWER)
        writer.close()
    return await asyncio.start_server(serve, "127.0.0.1", 0)


def test_requests_due_while_the_server_holds_are_made_and_timed_from_when_due() -> None:
    async def run() -> tuple[list[int], int]:
        gate, seen = asyncio.Event(), list[int]()
        server = await _gated_server(gate, seen)
        port = server.sockets[0].getsockname()[1]
        idle = await open_idle(port, 4)
        latencies: list[int] = []
        # 100 requests due 1 ms apart, all made though the server holds the four it
        # was sent and answers none
        made = await schedule(idle, 1000, 0.1, latencies)
        assert len(made) == 100
        while len(seen) < 4:  # the four sent reach the server
            await asyncio.sleep(0.001)
        held = len(seen)
        assert latencies == []  # none answered: the gate is shut
        gate.set()
        await asyncio.gather(*made)
        while not idle.empty():
            connection = idle.get_nowait()
            connection.writer.close()
            await connection.writer.wait_closed()
        server.close()
        await server.wait_closed()
        return latencies, held

    latencies, held = asyncio.run(run())
    assert held == 4  # four connections: a closed loop would have made no more requests
    assert len(latencies) == 100  # every request due was made and answered
    # the first was due at the start and answered after the last came due, 99 ms on
    assert max(latencies) >= 99_000_000


def test_a_point_gives_the_percentiles_of_its_latencies() -> None:
    figures = point(200, [i * 1_000_000 for i in range(1, 1001)], 5.0)
    assert figures["answered_per_s"] == 200.0
    assert figures["p50_ms"] == 501.0
    assert figures["p99_ms"] == 991.0
    assert figures["max_ms"] == 1000.0


def test_bad_rates_are_refused_by_name() -> None:
    assert _rates("500, 1000") == [500.0, 1000.0]
    for bad in ("fast", "0,100", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="--rates"):
            _rates(bad)


def test_the_web_tools_take_only_web_scenario_servers() -> None:
    assert web.servers("starlette+adb, starlette+asyncpg") == ["starlette+adb",
                                                               "starlette+asyncpg"]
    for bad in ("starlette+nothing", "starlette+adb,nope", " , "):
        with pytest.raises(argparse.ArgumentTypeError, match="not web scenario servers"):
            web.servers(bad)
