"""The web scenarios' servers: the process (``python -m benchmarks.webserver
CONFIG``, JSON) and, for the harness, the roster entry and start/stop.

CONFIG: ``framework`` (``tornado``, ``starlette``, ``twisted-web``), ``system`` (a
``benchmarks.systems`` name, or None for the hello-world endpoint alone), ``url``,
``pool_size``, ``processes`` and ``port``. Multi-process servers fork (Tornado's
``start(N)``) or spawn (uvicorn's ``--workers N``) before any process opens its
database connections, as adb's fork check demands. The harness stops the server
by killing its process group. Access logs are off everywhere.
"""

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from .systems import SYSTEMS
from .systems.common import RunSpec
from .worlds import AsyncioWorld, world


@contextlib.asynccontextmanager
async def open_system(config, place=None):
    """The Calls of ``config["system"]`` in this process (asyncio unless ``place``)."""
    from .child import resolve
    system = SYSTEMS[config["system"]]
    spec = RunSpec("web", config["url"], 0, config["pool_size"])
    async with resolve(system.opener)(spec, place or AsyncioWorld(), None) as calls:
        yield calls


def serve_tornado(config):
    from tornado import netutil, process
    from tornado.httpserver import HTTPServer

    from .webapps import tornado_app
    sockets = netutil.bind_sockets(config["port"], "127.0.0.1")
    if config["processes"] > 1:
        process.fork_processes(config["processes"], max_restarts=0)

    async def main():
        if config["system"] is None:
            server = HTTPServer(tornado_app(None))
            server.add_sockets(sockets)
            await asyncio.Event().wait()
        async with open_system(config) as calls:
            server = HTTPServer(tornado_app(calls))
            server.add_sockets(sockets)
            await asyncio.Event().wait()
    asyncio.run(main())


def serve_starlette(config):
    import uvicorn
    os.environ["ADB_WEB_SERVER"] = json.dumps(config)
    uvicorn.run("benchmarks.webapps:starlette_app", factory=True, host="127.0.0.1",
                port=config["port"], workers=config["processes"], log_level="warning",
                access_log=False)


def serve_twisted(config):
    from .webapps import twisted_site
    system = SYSTEMS[config["system"]] if config["system"] else None
    place = world(system.world_for(_kind(config)) if system else "twisted", 1)

    async def main():
        from twisted.internet import reactor
        if system is None:
            reactor.listenTCP(config["port"], _quiet(twisted_site(None)), interface="127.0.0.1")
            await _until_shutdown(reactor)
        async with open_system(config, place) as calls:
            reactor.listenTCP(config["port"], _quiet(twisted_site(calls)), interface="127.0.0.1")
            await _until_shutdown(reactor)
    place.run(main)


def _until_shutdown(reactor):
    """A Deferred the reactor holds until it stops. (A bare ``Deferred()`` that
    only this coroutine refers to is garbage: the collector would close the
    coroutine, and with it the pool, in the middle of serving.)"""
    from twisted.internet import defer
    stopped = defer.Deferred()
    reactor.addSystemEventTrigger("before", "shutdown", stopped.callback, None)
    return stopped


def _quiet(site):
    site.log = lambda request: None  # no access log, as for the other servers
    return site


def _kind(config):
    from adb.url import parse_url
    return parse_url(config["url"]).family.scheme


SERVE = {"tornado": serve_tornado, "starlette": serve_starlette, "twisted-web": serve_twisted}


def main(argv):
    config = json.loads(argv[0])
    SERVE[config["framework"]](config)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# -- the parent's side: the roster entry, starting and stopping a server ----------------

FRAMEWORK_MODULES = {"tornado": ("tornado",), "starlette": ("starlette", "uvicorn"),
                     "twisted-web": ("twisted",)}


@dataclasses.dataclass(frozen=True)
class WebServer:
    """One server of a web scenario: a framework, the system behind it (None: no
    database), and its process count (``N``: one per CPU, or ``--processes``)."""

    name: str
    label: str
    framework: str
    system: object = None
    processes: str = "1"
    kinds: tuple = ("postgresql", "mysql", "sqlite")
    pool_size: object = None  # None: --pool_size
    note: str = ""

    def unavailable(self, kind, scenario=None):
        if kind not in self.kinds:
            return f"does not talk to {kind}"
        for module in FRAMEWORK_MODULES[self.framework]:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install 'adb-async[bench]')"
        if self.system is not None:
            return SYSTEMS[self.system].unavailable(kind)
        return None

    def config(self, url, pool_size, processes, port):
        return {"framework": self.framework, "system": self.system, "url": url,
                "pool_size": self.pool_size or pool_size, "port": port,
                "processes": processes if self.processes == "N" else 1}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running(config, path, ready_within=30.0):
    """Start the server for ``config`` in its own process group; yield its base URL
    once ``path`` answers 200; kill the whole group (every worker) on the way out."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.webserver", json.dumps(config)],
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{config['port']}"
    try:
        _wait_ready(proc, base + path, ready_within)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


def _wait_ready(proc, url, within):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}): "
                               f"{proc.stderr.read().strip()[-500:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the server did not answer {url} within {within} s")
