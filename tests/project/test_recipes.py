"""The recipes page (docs/recipes.md): each recipe serves or runs against real PostgreSQL."""

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
import tornado.websocket
import uvicorn
from tornado.httpclient import AsyncHTTPClient

from .test_docs import localise, python_blocks

RECIPES = python_blocks("docs/recipes.md")
WEBSOCKET, STARLETTE, TWISTED, PROCESSES = RECIPES


def test_every_recipe_is_tested():
    assert len(RECIPES) == 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "recipe"}
    exec(compile(localise(code), "docs/recipes.md", "exec"), namespace)
    return namespace


@pytest.fixture
async def user(pg_url):
    """A row in the README's ``users`` table, removed afterwards."""
    import adb
    async with adb.Database(pg_url, pool_size=1) as db:
        await db.runOperation("create table if not exists users (userid int primary key, data text)")
        userid = int(uuid.uuid4().int % 1_000_000_000) + 1
        await db.runOperation("insert into users values (%s, %s)", (userid, "recipe"))
        yield userid
        await db.runOperation("delete from users where userid = %s", (userid,))


async def test_websocket_recipe_answers_in_order(pg_url, user):
    app = load(WEBSOCKET)["make_app"](pg_url)
    port = free_port()
    server = app.listen(port, address="127.0.0.1")
    try:
        conn = await tornado.websocket.websocket_connect(f"ws://127.0.0.1:{port}/users")
        for message in (str(user), "0", "x", str(user)):
            conn.write_message(message)
        answers = [json.loads(str(await conn.read_message())) for _ in range(4)]
        assert answers == [{"userid": user, "data": "recipe"}, {"error": "no such user"},
                           {"error": "not a user id: 'x'"}, {"userid": user, "data": "recipe"}]
        conn.close()
    finally:
        server.stop()
        await app.db.close()


async def test_starlette_recipe_opens_and_closes_in_the_lifespan(pg_url, user):
    app = load(STARLETTE)["make_app"](pg_url)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on",
                                           log_level="warning"))
    serving = asyncio.ensure_future(server.serve())
    try:
        while not server.started:
            assert not serving.done(), serving.exception()
            await asyncio.sleep(0.01)
        db = app.state.db
        client = AsyncHTTPClient()
        found = await client.fetch(f"http://127.0.0.1:{port}/users/{user}")
        assert json.loads(found.body) == {"userid": user, "data": "recipe"}
        missing = await client.fetch(f"http://127.0.0.1:{port}/users/0", raise_error=False)
        assert missing.code == 404
        assert not db.closed
    finally:
        server.should_exit = True
        await serving
    assert db.closed  # the lifespan closed it when the server stopped


def test_twisted_recipe_runs(tmp_path, pg_url):
    result = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", localise(TWISTED)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


async def test_multiprocess_recipe_one_pool_per_child_and_clean_stop(tmp_path, pg_url):
    port = free_port()
    script = tmp_path / "serve.py"
    script.write_text(localise(PROCESSES))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, start_new_session=True,
                            env={**os.environ, "PORT": str(port), "PROCESSES": "2"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = AsyncHTTPClient()
        backends: dict[int, set[int]] = {}
        deadline = time.monotonic() + 30
        while len(backends) < 2:
            assert time.monotonic() < deadline, f"served by {backends}"
            try:
                response = await client.fetch(f"http://127.0.0.1:{port}/")
            except (ConnectionError, OSError):
                await asyncio.sleep(0.05)
                continue
            answer = json.loads(response.body)
            backends.setdefault(answer["process"], set()).add(answer["backend"])
        first, second = backends.values()
        assert not first & second, "two processes shared a server connection"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    # two children write to one pipe: print's text and its newline may interleave
    closed = re.findall(r"process (\d+): pool closed", out)
    assert len(closed) == len(set(closed)) == 2, (out, err)
    assert "ForkError" not in err and "Traceback" not in err, err
