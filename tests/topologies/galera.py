"""The three-node Galera cluster of ``.ci/start-galera``, for the tests.

Node ``n`` (1, 2, 3) listens on 127.0.0.1:``3306 + n`` and keeps its files in
``$GALERA_BASE/node<n>`` (/var/lib/adb-galera by default): ``my.cnf``,
``mysqld.pid``, ``error.log``. ``require_galera()`` skips a test when the cluster
is not up (fails it under CI=true); ``kill_node``/``stop_node`` take a node down,
``restart_nodes`` brings back whatever is down through the script and waits until
all three are Synced again. Reads of the cluster's state use ``wsrep_sync_wait``-free
status queries over TCP, as root@127.0.0.1 without a password.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

import pymysql
import pytest

from ..conftest import IN_CI

NODES = (1, 2, 3)
BASE = Path(os.environ.get("GALERA_BASE", "/var/lib/adb-galera"))
SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "start-galera"
HOW_TO_START = "start it with `bash .ci/start-galera` (as root; see docs/galera.md)"
#: seconds a restarted node may take to be Synced again (IST, or an rsync SST)
REJOIN_TIMEOUT = 60.0
#: seconds the survivors may take to evict a killed node (evs.inactive_timeout is 3 s)
EVICT_TIMEOUT = 15.0
#: how often the cluster's state is polled
POLL = 0.1


def port(node: int) -> int:
    """Node ``node``'s MariaDB port: 3307, 3308, 3309."""
    return 3306 + node


def url(node: int, query: str = "") -> str:
    """A ``mysql://`` URL for node ``node``, with ``query`` (``key=value&...``, encoded)."""
    return f"mysql://root@127.0.0.1:{port(node)}/test" + (f"?{query}" if query else "")


#: every node in one URL: adb tries the hosts in this order on every connect
MULTI_HOST_URL = "mysql://root@" + ",".join(f"127.0.0.1:{port(n)}" for n in NODES) + "/test"
#: a connect parameter making every read on the session wait until the node has
#: applied everything the cluster committed before it (wsrep_sync_wait=1: reads)
SYNC_WAIT = "init_command=set%20session%20wsrep_sync_wait%3D1"


def connect(node: int, timeout: float = 2.0) -> pymysql.connections.Connection:
    """A plain PyMySQL connection to ``node`` (autocommit), outside any adb pool."""
    return pymysql.connect(host="127.0.0.1", port=port(node), user="root", database="test",
                           connect_timeout=timeout, read_timeout=timeout, autocommit=True)


def until_running(node: int, like: str, what: str, limit: float = 30.0) -> None:
    """Return once ``node``'s processlist shows another session running a statement
    whose text matches the LIKE pattern ``like``; fail after ``limit`` s naming ``what``."""
    conn = connect(node)
    try:
        deadline = time.monotonic() + limit
        while True:
            with conn.cursor() as cursor:
                cursor.execute("select count(*) from information_schema.processlist "
                               "where info like %s and id <> connection_id()", (like,))
                row = cursor.fetchone()
            if row is not None and row[0]:
                return
            assert time.monotonic() < deadline, f"node {node} never showed {what} running"
            time.sleep(0.005)
    finally:
        conn.close()


def status(node: int) -> Optional[dict[str, str]]:
    """The node's ``wsrep_%`` status, or None when it does not answer."""
    try:
        conn = connect(node)
    except pymysql.Error:
        return None
    try:
        with conn.cursor() as cursor:
            cursor.execute("show global status like 'wsrep_%%'")
            return {name: value for name, value in cursor.fetchall()}
    except pymysql.Error:
        return None
    finally:
        conn.close()


def synced(node: int, size: int = len(NODES)) -> bool:
    """True when ``node`` answers, is Synced, and sees a Primary cluster of ``size``."""
    state = status(node)
    return state is not None and state.get("wsrep_local_state_comment") == "Synced" \
        and state.get("wsrep_cluster_status") == "Primary" \
        and state.get("wsrep_cluster_size") == str(size)


def cluster_ready() -> bool:
    """All three nodes Synced in one Primary cluster of three."""
    return all(synced(node) for node in NODES)


_checked: dict[str, bool] = {}


def require_galera() -> None:
    """Skip the test unless the cluster is up with all three nodes Synced (under
    CI=true, fail it: .ci/start-servers starts the cluster there)."""
    if not _checked.get("up"):
        _checked["up"] = wait_until(cluster_ready, 10.0 if IN_CI else 1.0)
    if not _checked["up"]:
        message = f"no Galera cluster Synced on 127.0.0.1:3307-3309: {HOW_TO_START}"
        if IN_CI:
            pytest.fail(message + " (CI=true: server-backed tests must run)")
        pytest.skip(message)


def wait_until(check: Callable[[], bool], timeout: float) -> bool:
    """Poll ``check()`` every POLL seconds until it is true (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)


def pid_of(node: int) -> Optional[int]:
    """The pid of ``node``'s mariadbd when it runs (checked against its command line,
    so a stale pid file never names another process)."""
    try:
        pid = int((BASE / f"node{node}" / "mysqld.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if f"node{node}/my.cnf".encode() in cmdline else None


def kill_node(node: int, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` (by default SIGKILL: a crash) to ``node``'s mariadbd; its pid.
    Needs the rights to signal it (root, as on the CI machine): skips otherwise."""
    pid = pid_of(node)
    if pid is None:
        raise AssertionError(f"node{node} is not running")
    try:
        os.kill(pid, sig)
    except PermissionError:
        pytest.skip("killing a Galera node needs root (as on the CI machine)")
    return pid


def stop_node(node: int, timeout: float = 30.0) -> None:
    """A clean shutdown of ``node`` (SIGTERM), waited for."""
    pid = kill_node(node, signal.SIGTERM)
    if not wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout):
        raise AssertionError(f"node{node} did not stop within {timeout} s")


def wait_gone(node: int, timeout: float = EVICT_TIMEOUT) -> float:
    """Seconds until the other nodes have evicted ``node`` (each sees a Primary
    cluster of two): restarting it earlier makes its new incarnation wait out its
    old one's eviction."""
    start = time.monotonic()
    others = [n for n in NODES if n != node]
    if not wait_until(lambda: all(synced(n, len(NODES) - 1) for n in others), timeout):
        raise AssertionError(f"the nodes {others} did not evict node{node} within {timeout} s")
    return time.monotonic() - start


def restart_nodes(timeout: float = REJOIN_TIMEOUT) -> float:
    """Start every node that is down (``.ci/start-galera``: a crashed node recovers
    its position and catches up by IST) and wait until all three are Synced; the
    seconds it took."""
    start = time.monotonic()
    running = [node for node in NODES if pid_of(node) is not None]
    if len(running) > 1:  # a node killed a moment ago: let the others evict it first
        wait_until(lambda: all(synced(n, len(running)) for n in running), EVICT_TIMEOUT)
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0 or not wait_until(cluster_ready, timeout):
        raise AssertionError(f"the Galera cluster did not come back: {result.stdout}"
                             f"{result.stderr}")
    return time.monotonic() - start


