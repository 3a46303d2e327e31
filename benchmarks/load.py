"""HTTP load from the system tools: wrk (keep-alive, latency percentiles) and ab
(no keep-alive, as seed 002 ran it). Each run is bounded in time; only 127.0.0.1
is addressed. A tool that is missing says how to get it. And the one request the
benchmarks' own Python clients make (``get``: ``benchmarks.webtail``,
``benchmarks.webcurve``)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from typing import Any, Optional

HOW_TO_GET = {
    "wrk": "apt-get install wrk (Debian/Ubuntu; in a checkout, `bash .ci/start-servers` "
           "does it as root), or build it from https://github.com/wg/wrk",
    "ab": "apt-get install apache2-utils (Debian/Ubuntu; in a checkout, `bash .ci/start-servers` "
          "does it as root)",
}
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")


class LoadError(Exception):
    """The load tool failed or its output made no sense: the run is an error."""


async def get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
    """GET ``path`` on a keep-alive HTTP/1.1 connection to 127.0.0.1 and read the
    answer whole; LoadError unless it is a 200 with a Content-Length."""
    writer.write(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path.encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = _LENGTH.search(head)
    if not head.startswith(b"HTTP/1.1 200") or length is None:
        raise LoadError(f"GET {path} was answered {head[:200]!r}")
    await reader.readexactly(int(length.group(1)))


def missing(tool: str) -> Optional[str]:
    """None if ``tool`` is on PATH, else how to get it."""
    return None if shutil.which(tool) else f"{tool} is not on PATH: {HOW_TO_GET[tool]}"


def version(tool: str) -> Optional[str]:
    """The first line the tool prints about its version (None if it does not run)."""
    flag = "--version" if tool == "wrk" else "-V"
    try:
        out = subprocess.run([tool, flag], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout or out.stderr).strip().splitlines()[0]


def wrk(url: str, connections: int, seconds: float, threads: int = 2) -> dict[str, Any]:
    """Requests/s, latency percentiles (ms) and error counts of one wrk run."""
    threads = max(1, min(threads, connections))
    seconds = max(1, round(seconds))  # wrk takes whole seconds
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
            "--timeout", "10s", url]
    out = _run(args, seconds + 30)
    figures: dict[str, Any] = {"requests_per_s": _number(r"Requests/sec:\s+([\d.]+)", out),
               "requests": int(_number(r"(\d+) requests in", out)),
               "non_2xx": int(_number(r"Non-2xx or 3xx responses:\s+(\d+)", out, 0)),
               "socket_errors": sum(int(n) for n in re.findall(
                   r"(?:connect|read|write|timeout) (\d+)", _line(r"Socket errors:.*", out)))}
    figures.update(wrk_percentiles(out))
    return figures


def wrk_percentiles(out: str) -> dict[str, float]:
    """p50 and p99 (ms) from what ``wrk --latency`` printed."""
    figures = {}
    for pct in ("50", "99"):
        value, unit = _match(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$", out)
        figures[f"p{pct}_ms"] = float(value) * _UNITS[unit]
    return figures


def ab(url: str, requests: int, concurrency: int) -> dict[str, Any]:
    """Requests/s, latency percentiles (ms) and failures of one ab run (no keep-alive)."""
    out = _run(["ab", "-q", "-n", str(requests), "-c", str(concurrency), url], 120)
    return {"requests_per_s": _number(r"Requests per second:\s+([\d.]+)", out),
            "failed": int(_number(r"Failed requests:\s+(\d+)", out)),
            "non_2xx": int(_number(r"Non-2xx responses:\s+(\d+)", out, 0)),
            "p50_ms": _number(r"^\s+50%\s+(\d+)", out),
            "p99_ms": _number(r"^\s+99%\s+(\d+)", out)}


def _run(args: list[str], timeout: float) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LoadError(f"{args[0]} ran past {timeout} s") from None
    if proc.returncode != 0:
        raise LoadError(f"{args[0]} failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return proc.stdout


def _match(pattern: str, text: str) -> tuple[str, ...]:
    found = re.search(pattern, text, re.MULTILINE)
    if found is None:
        raise LoadError(f"no {pattern!r} in the tool's output:\n{text[-500:]}")
    return found.groups()


def _number(pattern: str, text: str, default: Optional[float] = None) -> float:
    found = re.search(pattern, text, re.MULTILINE)
    if found is None:
        if default is not None:
            return default
        raise LoadError(f"no {pattern!r} in the tool's output:\n{text[-500:]}")
    return float(found.group(1))


def _line(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    return found.group(0) if found else ""
