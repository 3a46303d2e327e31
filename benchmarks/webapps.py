"""The web scenarios' applications, written once per framework over a system's Calls.

Two endpoints, as TechEmpower defines them:

- ``/plaintext``: ``Hello, World!`` (the seed's hello-world handler; no database);
- ``/db``: one row of ``world`` by a random id in 1..10000, as JSON
  ``{"id": ..., "randomNumber": ...}``, read anew on every request. ``/db?id=N``
  asks for row N, so the harness can check sampled answers.

Tornado and Starlette serve from an asyncio loop (Tornado's IOLoop is one); Twisted
Web from a reactor. An app never knows which system answers its queries.
"""

import json
import os
import random

WORLD_ROWS = 10_000
HELLO = b"Hello, World!"


def world_query(paramstyle):
    mark = "?" if paramstyle == "qmark" else "%s"
    return f"select id, randomnumber from world where id = {mark}"


def pick_id(asked):
    """The id a request asks for (``?id=N``), else a random one; ValueError if bad."""
    if asked is None:
        return random.randint(1, WORLD_ROWS)
    value = int(asked)
    if not 1 <= value <= WORLD_ROWS:
        raise ValueError(f"id {value} is not in 1..{WORLD_ROWS}")
    return value


def world_body(rows):
    (row_id, number), = rows
    return json.dumps({"id": row_id, "randomNumber": number}).encode()


# -- Tornado -------------------------------------------------------------------------

def tornado_app(calls):
    """A Tornado Application; ``calls`` None serves /plaintext only."""
    from tornado import web

    class Plaintext(web.RequestHandler):
        def get(self):
            self.set_header("Content-Type", "text/plain")
            self.write(HELLO)

    class SingleQuery(web.RequestHandler):
        async def get(self):
            try:
                row_id = pick_id(self.get_query_argument("id", None))
            except ValueError as exc:
                raise web.HTTPError(400, str(exc))
            rows = await calls.query(sql, (row_id,))
            self.set_header("Content-Type", "application/json")
            self.write(world_body(rows))

    handlers = [(r"/plaintext", Plaintext)]
    if calls is not None:
        sql = world_query(calls.paramstyle)
        handlers.append((r"/db", SingleQuery))
    return web.Application(handlers, log_function=lambda handler: None)


# -- Starlette (run by uvicorn, which imports it by name in every worker) --------------

def starlette_app():
    """The Starlette app for the server described by ``$ADB_WEB_SERVER`` (JSON):
    its lifespan opens the system's Calls in the worker, after uvicorn's fork."""
    import contextlib

    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    from .webserver import open_system
    config = json.loads(os.environ["ADB_WEB_SERVER"])
    state = {}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if config.get("system") is None:
            yield
            return
        async with open_system(config) as calls:
            state["calls"], state["sql"] = calls, world_query(calls.paramstyle)
            yield

    async def plaintext(request):
        return PlainTextResponse(HELLO)

    async def single_query(request):
        try:
            row_id = pick_id(request.query_params.get("id"))
        except ValueError as exc:
            return Response(str(exc), status_code=400)
        rows = await state["calls"].query(state["sql"], (row_id,))
        (row_id, number), = rows
        return JSONResponse({"id": row_id, "randomNumber": number})

    return Starlette(routes=[Route("/plaintext", plaintext), Route("/db", single_query)],
                     lifespan=lifespan)


# -- Twisted Web ------------------------------------------------------------------------

def twisted_site(calls):
    from twisted.internet import defer
    from twisted.web import resource, server

    sql = world_query(calls.paramstyle) if calls is not None else None

    class Plaintext(resource.Resource):
        isLeaf = True

        def render_GET(self, request):
            request.setHeader(b"content-type", b"text/plain")
            return HELLO

    class SingleQuery(resource.Resource):
        isLeaf = True

        def render_GET(self, request):
            asked = request.args.get(b"id", [None])[0]
            try:
                row_id = pick_id(asked.decode() if asked is not None else None)
            except ValueError as exc:
                request.setResponseCode(400)
                return str(exc).encode()
            d = defer.ensureDeferred(_awaited(calls.query(sql, (row_id,))))

            def answer(rows):
                request.setHeader(b"content-type", b"application/json")
                request.write(world_body(rows))
                request.finish()

            def failed(failure):
                request.setResponseCode(500)
                request.write(failure.getErrorMessage().encode())
                request.finish()
            d.addCallbacks(answer, failed)
            return server.NOT_DONE_YET

    root = resource.Resource()
    root.putChild(b"plaintext", Plaintext())
    if calls is not None:
        root.putChild(b"db", SingleQuery())
    return server.Site(root)


async def _awaited(value):
    return await value
