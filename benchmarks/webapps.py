"""The web scenarios' applications, written once per framework over a system's Calls.

Two endpoints, as TechEmpower defines them:

- ``/plaintext``: ``Hello, World!`` (the seed's hello-world handler; no database);
- ``/loop``: the class of the event loop serving (what ``--loop`` asked for);
- ``/db``: one row of the TechEmpower ``world`` table (``adb_bench_world``) by a random id in 1..10000, as JSON
  ``{"id": ..., "randomNumber": ...}``, read anew on every request. ``/db?id=N``
  asks for row N, so the harness can check sampled answers; ``/db?seq=K`` keeps
  the request's times in the server under K (``Stages``, ``/stages``).

Tornado and Starlette serve from an asyncio loop (Tornado's IOLoop is one); Twisted
Web from a reactor. An app never knows which system answers its queries: it gets
them from ``open_calls``, in the server process (``benchmarks.webserver``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Optional, TypedDict

from .sql import WEB_TABLE, placeholder
from .systems import SYSTEMS
from .systems.common import Calls, RunSpec
from .worlds import AsyncioWorld, World, awaited

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from tornado.web import Application
    from twisted.web.server import Site

WORLD_ROWS = 10_000
HELLO = b"Hello, World!"


class ServerConfig(TypedDict):
    """What a server process is told, as JSON (``benchmarks.webroster`` writes it)."""

    framework: str  # tornado, starlette, twisted-web
    system: Optional[str]  # a name in benchmarks.systems.SYSTEMS; None: /plaintext only
    url: str
    pool_size: int
    port: int
    processes: int
    loop: str  # an asyncio server's event loop: "asyncio" or "uvloop" (LOOPS)


#: the event loops an asyncio server may run on (``--loop``)
LOOPS = ("asyncio", "uvloop")


def run_loop(main: Any, loop: str) -> None:
    """Run the coroutine ``main`` on a new loop of the kind ``loop`` names."""
    if loop == "uvloop":
        import uvloop
        uvloop.run(main)
    else:
        asyncio.run(main)


def loop_name() -> str:
    """The running loop's class, as ``/loop`` answers it (``uvloop.Loop``, or
    ``asyncio.unix_events._UnixSelectorEventLoop``): what the harness checks."""
    loop = asyncio.get_running_loop()
    return f"{type(loop).__module__}.{type(loop).__qualname__}"


@contextlib.asynccontextmanager
async def open_calls(config: ServerConfig, place: Optional[World] = None) -> AsyncIterator[Calls]:
    """The Calls of ``config["system"]`` in this process (asyncio unless ``place``)."""
    system = SYSTEMS[config["system"] or ""]
    spec = RunSpec("web", config["url"], 0, config["pool_size"])
    async with system.open(spec, place or AsyncioWorld(), None) as calls:
        assert isinstance(calls, Calls), f"{system.name} is not a SQL system"
        yield calls


def world_query(paramstyle: str) -> str:
    return f"select id, randomnumber from {WEB_TABLE} where id = {placeholder(paramstyle)}"


def pick_id(asked: Optional[str]) -> int:
    """The id a request asks for (``?id=N``), else a random one; ValueError if bad."""
    if asked is None:
        return random.randint(1, WORLD_ROWS)
    value = int(asked)
    if not 1 <= value <= WORLD_ROWS:
        raise ValueError(f"id {value} is not in 1..{WORLD_ROWS}")
    return value


class Stages:
    """Where the ``/db`` requests named ``?seq=K`` were inside this server process:
    when the handler began and when its query's answer was back, on the machine's
    monotonic clock in nanoseconds (the clock a client on the same machine reads,
    ``benchmarks.webtail``). ``/stages`` hands them over as JSON and forgets them."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[int, int]] = {}

    def keep(self, seq: Optional[str], began: int) -> None:
        """Keep the request ``seq`` (None: not named, nothing kept), back now."""
        if seq is not None:
            self.kept[seq] = (began, time.monotonic_ns())

    def take(self) -> bytes:
        kept, self.kept = self.kept, {}
        return json.dumps(kept).encode()


#: this server process's named requests
STAGES = Stages()


def world_body(rows: Any) -> bytes:
    (row_id, number), = rows
    return json.dumps({"id": row_id, "randomNumber": number}).encode()


# -- Tornado -------------------------------------------------------------------------

def tornado_app(calls: Optional[Calls]) -> Application:
    """A Tornado Application; ``calls`` None serves /plaintext only."""
    from tornado import web

    class Plaintext(web.RequestHandler):
        def get(self) -> None:
            self.set_header("Content-Type", "text/plain")
            self.write(HELLO)

    class Loop(web.RequestHandler):
        def get(self) -> None:
            self.set_header("Content-Type", "text/plain")
            self.write(loop_name())

    class Kept(web.RequestHandler):
        def get(self) -> None:
            self.set_header("Content-Type", "application/json")
            self.write(STAGES.take())

    handlers: list[tuple[str, type[web.RequestHandler]]] = [(r"/plaintext", Plaintext),
                                                            (r"/loop", Loop),
                                                            (r"/stages", Kept)]
    if calls is not None:
        handlers.append((r"/db", _tornado_single_query(calls)))
    return web.Application(handlers, log_function=lambda handler: None)


def _tornado_single_query(calls: Calls) -> Any:
    """The ``/db`` handler class over ``calls``."""
    from tornado import web
    sql = world_query(calls.paramstyle)

    class SingleQuery(web.RequestHandler):
        async def get(self) -> None:
            began = time.monotonic_ns()
            try:
                row_id = pick_id(self.get_query_argument("id", None))
            except ValueError as exc:
                raise web.HTTPError(400, str(exc))
            rows = await calls.query(sql, (row_id,))
            STAGES.keep(self.get_query_argument("seq", None), began)
            self.set_header("Content-Type", "application/json")
            self.write(world_body(rows))
    return SingleQuery


# -- Starlette (run by uvicorn, which imports it by name in every worker) --------------

def starlette_app() -> Starlette:
    """The Starlette app for the server described by ``$ADB_WEB_SERVER`` (JSON):
    its lifespan opens the system's Calls in the worker, after uvicorn's fork."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    config: ServerConfig = json.loads(os.environ["ADB_WEB_SERVER"])
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if config.get("system") is None:
            yield
            return
        async with open_calls(config) as calls:
            state["calls"], state["sql"] = calls, world_query(calls.paramstyle)
            yield

    async def plaintext(request: Request) -> Response:
        return PlainTextResponse(HELLO)

    async def running_loop(request: Request) -> Response:
        return PlainTextResponse(loop_name())

    async def kept(request: Request) -> Response:
        return Response(STAGES.take(), media_type="application/json")

    async def single_query(request: Request) -> Response:
        began = time.monotonic_ns()
        try:
            row_id = pick_id(request.query_params.get("id"))
        except ValueError as exc:
            return Response(str(exc), status_code=400)
        rows = await state["calls"].query(state["sql"], (row_id,))
        STAGES.keep(request.query_params.get("seq"), began)
        (row_id, number), = rows
        return JSONResponse({"id": row_id, "randomNumber": number})

    return Starlette(routes=[Route("/plaintext", plaintext), Route("/loop", running_loop),
                             Route("/db", single_query), Route("/stages", kept)],
                     lifespan=lifespan)


# -- Twisted Web ------------------------------------------------------------------------

def twisted_site(calls: Optional[Calls]) -> Site:
    """A Twisted Web site; ``calls`` None serves /plaintext only."""
    from twisted.web import resource, server

    class Plaintext(resource.Resource):
        isLeaf = True

        def render_GET(self, request: Any) -> bytes:
            request.setHeader(b"content-type", b"text/plain")
            return HELLO

    root = resource.Resource()
    plaintext: Any = Plaintext()  # an IResource: zope's declaration, which mypy cannot see
    root.putChild(b"plaintext", plaintext)
    if calls is not None:
        root.putChild(b"db", _twisted_single_query(calls))
    return server.Site(root)


def _twisted_single_query(calls: Calls) -> Any:
    """The ``/db`` resource over ``calls``: answers when the query's Deferred fires."""
    from twisted.internet import defer
    from twisted.web import resource, server
    sql = world_query(calls.paramstyle)

    class SingleQuery(resource.Resource):
        isLeaf = True

        def render_GET(self, request: Any) -> Any:
            asked = request.args.get(b"id", [None])[0]
            try:
                row_id = pick_id(asked.decode() if asked is not None else None)
            except ValueError as exc:
                request.setResponseCode(400)
                return str(exc).encode()
            d = defer.ensureDeferred(awaited(calls.query(sql, (row_id,))))

            def answer(rows: Any) -> None:
                request.setHeader(b"content-type", b"application/json")
                request.write(world_body(rows))
                request.finish()

            def failed(failure: Any) -> None:
                request.setResponseCode(500)
                request.write(failure.getErrorMessage().encode())
                request.finish()
            d.addCallbacks(answer, failed)
            return server.NOT_DONE_YET
    return SingleQuery()
