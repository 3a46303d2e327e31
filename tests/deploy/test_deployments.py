"""Real process models, real signals: gunicorn (gthread workers, with and without
--preload), uvicorn --workers 2, Tornado's fork_processes, multiprocessing (fork and
spawn) and twistd with the adbapi drop-in, each stopped by SIGTERM or SIGINT at rest
or while a statement sleeps on the server. After each: the process exited within
EXIT_BOUND seconds, no statement of its own (its application_name) still runs on the
server, no embedded file is left in its TMPDIR, and its process group is empty.

CI runs the most telling subset, in parallel; ADB_DEPLOY_FULL=1 runs the whole matrix
(docs/failures.md has the command and its last result)."""

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

import adb.sync

from ..conftest import URLS, require_server

APPS = Path(__file__).parent / "apps"
ROOT = Path(__file__).parents[2]
#: the exit bound: slack for a loaded machine running four deployments side by side
#: (gunicorn's graceful_timeout, 4 s, is the longest a clean exit may take), and
#: still well short of the sleep below, so a process that waits its statement out
#: fails it
EXIT_BOUND = 20.0
#: the statement a mid-query scenario runs: long enough that one left running is
#: still on the server when it is looked for, however long the exit took
SLEEP = "select pg_sleep(60) /* adb-deploy */"
#: how long a deployment may take to serve, to start its sleep, and (after it
#: exited) for its cancelled statement to leave the server: generous bounds that
#: only a hang (or a statement left running, for the last) fails
READY_BOUND = 60.0
SLEEP_START_BOUND = 30.0
GONE_BOUND = 15.0
FULL = os.environ.get("ADB_DEPLOY_FULL") == "1"
PY = sys.executable


def _port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(model, port):
    """The command line of ``model``, and whether it serves HTTP on ``port``."""
    gunicorn = [PY, "-m", "gunicorn", "-c", str(APPS / "gunicorn_conf.py"), "--chdir",
                str(APPS), "-b", f"127.0.0.1:{port}", "wsgi:application"]
    return {
        "gunicorn": (gunicorn, True),
        "gunicorn-preload": (gunicorn[:-1] + ["--preload", "wsgi:application"], True),
        # uvicorn waits for the requests in flight without a limit unless given one;
        # past it, it cancels them: adb then cancels their statements on the server
        "uvicorn": ([PY, "-m", "uvicorn", "asgi:app", "--app-dir", str(APPS), "--workers", "2",
                     "--port", str(port), "--log-level", "warning",
                     "--timeout-graceful-shutdown", "3"], True),
        "tornado": ([PY, str(APPS / "tornado_app.py"), str(port)], True),
        "mp-fork": ([PY, str(APPS / "mp_app.py"), "fork"], False),
        "mp-spawn": ([PY, str(APPS / "mp_app.py"), "spawn"], False),
        "twistd": ([PY, "-c", "from twisted.scripts.twistd import run; run()", "-n",
                    "--pidfile=", "--logfile=-", "-y", str(APPS / "app.tac")], False),
    }[model]


def _admin(statement, params):
    with adb.sync.Database(URLS["postgresql"], pool_size=1) as admin:
        return admin.runQueryValue(statement, params)


def _backends(app, sleeping=False):
    """How many backends of application_name ``app`` run (the sleep, if ``sleeping``)."""
    extra = " and state = 'active' and query like '%%adb-deploy%%'" if sleeping else ""
    return _admin("select count(*) from pg_stat_activity where application_name = %s" + extra,
                  (app,))


def _until(condition, limit):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def _group_gone(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def run(model, signum, mid_query, tmp):
    """Start ``model``, stop it with ``signum`` (at rest, or with a statement
    sleeping); what went wrong, as a list of sentences (empty: all held)."""
    app = f"adb-deploy-{uuid.uuid4().hex[:10]}"
    port = _port()
    argv, http = _command(model, port)
    env = dict(os.environ, TMPDIR=str(tmp), ADB_DEPLOY_APP=app, PYTHONPATH=f"{ROOT}:{APPS}",
               ADB_DEPLOY_URL=f"{URLS['postgresql']}?application_name={app}",
               ADB_DEPLOY_SLEEP=SLEEP if mid_query else "select 1",
               ADB_DEPLOY_DBAPI="psycopg" if URLS["postgresql"].startswith("postgresql+psycopg")
               else "psycopg2",
               ADB_DEPLOY_PRELOADED="1" if model == "gunicorn-preload" else "")
    log = open(tmp / "output.log", "wb")
    proc = subprocess.Popen(argv, env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    problems = []
    try:
        ready = (lambda: _get(port, "/")) if http else (lambda: _backends(app) > 0)
        if model.startswith("mp-") and not mid_query:
            # its parent connects before it starts its pool's processes: at rest is
            # once their work is done (a signal amid a spawn is multiprocessing's)
            ready = lambda: b"at rest" in (tmp / "output.log").read_bytes()  # noqa: E731
        if not _until(ready, READY_BOUND):
            return [f"{model} never became ready"]
        if mid_query:
            if http:
                threading.Thread(target=_get, args=(port, "/sleep", 15), daemon=True).start()
            if not _until(lambda: _backends(app, sleeping=True) > 0, SLEEP_START_BOUND):
                return [f"{model}: the sleep never started"]
        if model in GROUP_SIGNALLED:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        sent = time.monotonic()
        try:
            proc.wait(EXIT_BOUND)
        except subprocess.TimeoutExpired:
            problems.append(f"{model} had not exited {EXIT_BOUND} s after "
                            f"{signal.Signals(signum).name}")
        left_of_bound = max(0.5, EXIT_BOUND - (time.monotonic() - sent))
        if not _until(lambda: _group_gone(proc.pid), left_of_bound):
            problems.append(f"{model} left processes in its group {EXIT_BOUND} s after "
                            f"{signal.Signals(signum).name}")
        if not _until(lambda: _backends(app, sleeping=True) == 0, GONE_BOUND):
            problems.append(f"{model} left its statement running on the server")
        left = sorted(p.name for p in tmp.glob("adb-*"))
        if left:
            problems.append(f"{model} left {left} in its TMPDIR")
        return problems
    finally:
        if not _group_gone(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _admin("select count(pg_terminate_backend(pid)) from pg_stat_activity "
               "where application_name = %s", (app,))  # what a failed run left behind
        log.close()
        if problems:
            problems.append((tmp / "output.log").read_text(errors="replace")[-1500:])


def _get(port, path, timeout=2):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as reply:
            return reply.status == 200
    except OSError:
        return False


#: models whose parent forwards no signal to its children (Tornado's fork_processes):
#: the signal goes to the process group, as a terminal's Ctrl-C and systemd's stop do
GROUP_SIGNALLED = {"tornado"}
MODELS = ["gunicorn", "gunicorn-preload", "uvicorn", "tornado", "mp-fork", "mp-spawn", "twistd"]
MATRIX = [(m, s, q) for m in MODELS for s in (signal.SIGTERM, signal.SIGINT)
          for q in (False, True)]
#: the most telling scenarios: each model once, mid-query where that is the hard case
CI = [("gunicorn-preload", signal.SIGTERM, True), ("gunicorn", signal.SIGINT, False),
      ("uvicorn", signal.SIGTERM, True), ("tornado", signal.SIGINT, True),
      ("mp-fork", signal.SIGTERM, True), ("mp-spawn", signal.SIGINT, False),
      ("twistd", signal.SIGTERM, True)]


def _run_all(scenarios, tmp_path, parallel):
    """Run ``scenarios`` ``parallel`` at a time; every problem, by scenario."""
    def one(index_scenario):
        index, (model, signum, mid) = index_scenario
        tmp = tmp_path / f"s{index}"
        tmp.mkdir()
        return (model, signal.Signals(signum).name, "mid-query" if mid else "at rest"), \
            run(model, signum, mid, tmp)
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(one, enumerate(scenarios)))
    return {scenario: problems for scenario, problems in results if problems}


@pytest.mark.timeout(900)
def test_each_process_model_stops_cleanly(tmp_path):
    """The CI subset, four at a time (ADB_DEPLOY_FULL=1: the whole matrix)."""
    require_server("postgresql")
    failed = _run_all(MATRIX if FULL else CI, tmp_path, 4)
    # each scenario's problems in full (a dict's repr would be cut short)
    assert not failed, "\n\n".join(f"{scenario}:\n" + "\n".join(map(str, problems))
                                     for scenario, problems in failed.items())
