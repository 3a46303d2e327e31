"""The recipes page (docs/recipes.md): each recipe serves or runs against real PostgreSQL."""

import asyncio
import concurrent.futures
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

import pytest
import tornado.websocket
import uvicorn
from tornado.httpclient import AsyncHTTPClient

from .test_docs import localise, python_blocks

RECIPES = python_blocks("docs/recipes.md")
WEBSOCKET, STARLETTE, TWISTED, PROCESSES, WSGI_APP, GUNICORN_CONF = RECIPES
GUNICORN = pathlib.Path(sys.executable).with_name("gunicorn")


def test_every_recipe_is_tested():
    assert len(RECIPES) == 6


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
        # one creator at a time: two runs' concurrent "if not exists" can both create,
        # and the second fails (pg_type's unique key) on a server without the table
        async with db.transaction() as tx:
            await tx.runQuery("select pg_advisory_xact_lock(hashtext('adb recipes users'))")
            await tx.runOperation(
                "create table if not exists users (userid int primary key, data text)")
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


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-import", "preload"])
def test_gunicorn_recipe_one_pool_per_worker_and_clean_stop(tmp_path, pg_url, preload):
    """Two gthread workers, each with its own pool made after the fork, with and without
    --preload; SIGTERM to the master closes every worker's pool and exits cleanly."""
    if not GUNICORN.exists():
        pytest.skip("gunicorn is not installed (the test extra brings it)")
    (tmp_path / "app.py").write_text(localise(WSGI_APP))
    (tmp_path / "gunicorn.conf.py").write_text(GUNICORN_CONF)
    port = free_port()
    args = [str(GUNICORN), "--bind", f"127.0.0.1:{port}", *(["--preload"] if preload else []),
            "app:application"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WORKERS": "2", "THREADS": "3",
                                 "PYTHONWARNINGS": "error::ResourceWarning"})
    try:
        backends: dict[int, set[int]] = {}
        deadline = time.monotonic() + 60
        while len(backends) < 2:
            assert time.monotonic() < deadline, f"served by {backends}"
            assert proc.poll() is None, proc.communicate()
            try:
                answer = get_json(f"http://127.0.0.1:{port}/")
            except OSError:
                time.sleep(0.05)
                continue
            backends.setdefault(answer["process"], set()).add(answer["backend"])
        with concurrent.futures.ThreadPoolExecutor(12) as pool:  # more than 2 workers x 3 threads
            for answer in pool.map(get_json, [f"http://127.0.0.1:{port}/"] * 24):
                backends.setdefault(answer["process"], set()).add(answer["backend"])
        assert len(backends) == 2
        assert all(len(pids) <= 3 for pids in backends.values()), backends  # pool_size = threads
        first, second = backends.values()
        assert not first & second, "two workers shared a server connection"
    finally:
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        out, err = proc.communicate(timeout=40)
    assert time.monotonic() - started < 35, "gunicorn took its whole graceful timeout to stop"
    assert proc.returncode == 0, err
    closed = re.findall(r"worker (\d+): pool closed", err)
    assert sorted(map(int, closed)) == sorted(backends), err
    assert "ForkError" not in err and "Traceback" not in err and "ResourceWarning" not in err, err
