"""The web scenarios' servers, as the harness sees them: the roster entry
(``WebServer``), and starting and stopping the server process.

The server itself is another program (``python -m benchmarks.webserver CONFIG``):
``running`` starts it in its own process group, on the interpreter the run names
(``benchmarks.interpreters``; its workers follow it), waits until it answers, and
kills the whole group (every worker) afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from typing import Iterator, Optional

from .interpreters import THIS, Interpreter
from .systems import ALL, SYSTEMS
from .webapps import ServerConfig

FRAMEWORK_MODULES = {"tornado": ("tornado",), "starlette": ("starlette", "uvicorn"),
                     "twisted-web": ("twisted",)}


@dataclasses.dataclass(frozen=True)
class WebServer:
    """One server of a web scenario: a framework, the system behind it (None: no
    database), and its process count (``N``: one per CPU, or ``--processes``)."""

    name: str
    label: str
    framework: str  # a key of FRAMEWORK_MODULES
    system: Optional[str] = None  # a name in benchmarks.systems.SYSTEMS
    processes: str = "1"  # or "N"
    kinds: tuple[str, ...] = ALL
    pool_size: Optional[int] = None  # None: --pool_size
    note: str = ""

    def unavailable(self, kind: str, scenario: Optional[str] = None) -> Optional[str]:
        """None if this server can run against ``kind`` here, else why."""
        if kind not in self.kinds:
            return f"does not talk to {kind}"
        for module in FRAMEWORK_MODULES[self.framework]:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install 'adb-async[bench]')"
        if self.system is not None:
            return SYSTEMS[self.system].unavailable(kind)
        return None

    def config(self, url: str, pool_size: int, processes: int, port: int,
               loop: str = "asyncio") -> ServerConfig:
        """What the server process is told (``python -m benchmarks.webserver CONFIG``)."""
        return {"framework": self.framework, "system": self.system, "url": url,
                "pool_size": self.pool_size or pool_size, "port": port,
                "processes": processes if self.processes == "N" else 1, "loop": loop}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def running(config: ServerConfig, path: str, ready_within: float = 30.0,
            python: Interpreter = THIS) -> Iterator[str]:
    """Start the server for ``config`` on ``python`` in its own process group; yield
    its base URL once ``path`` answers 200; kill the whole group (every worker) on
    the way out."""
    with serving(config, path, ready_within, python) as (base, _pid):
        yield base


@contextlib.contextmanager
def serving(config: ServerConfig, path: str, ready_within: float = 30.0,
            python: Interpreter = THIS) -> Iterator[tuple[str, int]]:
    """``running``, yielding the base URL and the server's process id as well (the
    one process of a single-process server, which a profiler attaches to)."""
    proc = subprocess.Popen(python.command("webserver", json.dumps(config)), env=python.env(),
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{config['port']}"
    try:
        _wait_ready(proc, base + path, ready_within)
        yield base, proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


def _wait_ready(proc: subprocess.Popen[str], url: str, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            error = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"the server exited ({proc.returncode}): "
                               f"{error.strip()[-500:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the server did not answer {url} within {within} s")


def tools(load_tool: str) -> dict[str, object]:
    """For the report: the load tool's version, and what changes a Python web
    server's answer: uvloop and httptools (uvicorn uses them when installed; their
    versions, with the frameworks', are in the environment's libraries), access
    logs (off here)."""
    from . import load
    return {load_tool: load.version(load_tool), "access_logs": "off",
            **{m: importlib.util.find_spec(m) is not None for m in ("uvloop", "httptools")}}
