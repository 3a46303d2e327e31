"""A Starlette app on adb's asyncio Database, made per uvicorn worker in its lifespan."""

import contextlib
import os

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

import adb

URL = os.environ["ADB_DEPLOY_URL"]


@contextlib.asynccontextmanager
async def lifespan(app):
    app.state.db = adb.Database(URL, pool_size=4)
    try:
        yield
    finally:
        await app.state.db.close()


async def ping(request):
    return JSONResponse({"value": await request.app.state.db.runQueryValue("select 1")})


async def sleep(request):
    value = await request.app.state.db.runQueryValue(os.environ["ADB_DEPLOY_SLEEP"])
    return JSONResponse({"value": str(value)})


app = Starlette(routes=[Route("/", ping), Route("/sleep", sleep)], lifespan=lifespan)
