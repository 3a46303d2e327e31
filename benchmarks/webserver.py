"""A web scenario's server: ``python -m benchmarks.webserver CONFIG`` (JSON).

CONFIG (``benchmarks.webapps.ServerConfig``): ``framework`` (``tornado``,
``starlette``, ``twisted-web``), ``system`` (a ``benchmarks.systems`` name, or None
for the hello-world endpoint alone), ``url``, ``pool_size``, ``processes`` and
``port``, and ``loop`` (``asyncio`` or ``uvloop``, for the asyncio servers; Twisted
Web runs on Twisted's reactor). Multi-process servers fork (Tornado's ``start(N)``) or spawn (uvicorn's
``--workers N``) before any process opens its database connections, as adb's fork
check demands. The harness (``benchmarks.webroster.running``) stops the server by
killing its process group. Access logs are off everywhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, Callable

from .systems import SYSTEMS
from .systems.common import kind_of
from .webapps import ServerConfig, open_calls, run_loop, tornado_app, twisted_site
from .worlds import the_reactor, world


def serve_tornado(config: ServerConfig) -> None:
    from tornado import netutil, process
    from tornado.httpserver import HTTPServer
    sockets = netutil.bind_sockets(config["port"], "127.0.0.1")
    if config["processes"] > 1:
        process.fork_processes(config["processes"], max_restarts=0)

    async def main() -> None:
        if config["system"] is None:
            server = HTTPServer(tornado_app(None))
            server.add_sockets(sockets)
            await asyncio.Event().wait()
        async with open_calls(config) as calls:
            server = HTTPServer(tornado_app(calls))
            server.add_sockets(sockets)
            await asyncio.Event().wait()
    run_loop(main(), config["loop"])


def serve_starlette(config: ServerConfig) -> None:
    import uvicorn

    from .nodelay import http_protocol
    os.environ["ADB_WEB_SERVER"] = json.dumps(config)
    uvicorn.run(f"{__package__}.webapps:starlette_app", factory=True, host="127.0.0.1",
                port=config["port"], workers=config["processes"], log_level="warning",
                access_log=False, loop=config["loop"], http=http_protocol(config["processes"]))


def serve_twisted(config: ServerConfig) -> None:
    system = SYSTEMS[config["system"]] if config["system"] else None
    place = world(system.world_for(kind_of(config["url"])) if system else "twisted", 1)

    async def main() -> None:
        reactor = the_reactor()
        if system is None:
            reactor.listenTCP(config["port"], _quiet(twisted_site(None)), interface="127.0.0.1")
            await _until_shutdown(reactor)
        async with open_calls(config, place) as calls:
            reactor.listenTCP(config["port"], _quiet(twisted_site(calls)), interface="127.0.0.1")
            await _until_shutdown(reactor)
    place.run(main)


def _until_shutdown(reactor: Any) -> Any:
    """A Deferred the reactor holds until it stops. (A bare ``Deferred()`` that
    only this coroutine refers to is garbage: the collector would close the
    coroutine, and with it the pool, in the middle of serving.)"""
    from twisted.internet import defer
    stopped: defer.Deferred[None] = defer.Deferred()
    reactor.addSystemEventTrigger("before", "shutdown", stopped.callback, None)
    return stopped


def _quiet(site: Any) -> Any:
    site.log = lambda request: None  # no access log, as for the other servers
    return site


SERVE: dict[str, Callable[[ServerConfig], None]] = {
    "tornado": serve_tornado, "starlette": serve_starlette, "twisted-web": serve_twisted}


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    SERVE[config["framework"]](config)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
