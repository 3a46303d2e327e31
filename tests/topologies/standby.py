"""The PostgreSQL hot standby of the replica tests (``.ci/start-standby``, port 5433):
its URL, a check that it streams, and the faults the tests put it through."""

import os
import subprocess
import time
from pathlib import Path

import pytest

import adb.sync

from ..conftest import IN_CI, URLS, require_server

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "start-standby"
PORT = int(os.environ.get("ADB_TEST_STANDBY_PORT", "5433"))
URL = os.environ.get("ADB_TEST_STANDBY_URL", f"postgresql://root@127.0.0.1:{PORT}/test")
HOW_TO_START = ("start the standby with `bash .ci/start-standby` (as root; `bash "
                ".ci/start-servers` does it too) or set ADB_TEST_STANDBY_URL")


def as_psycopg(url):
    """The same server for psycopg 3 (``postgresql+psycopg://``)."""
    scheme, rest = url.split("://", 1)
    return scheme.split("+")[0] + "+psycopg://" + rest


def in_recovery():
    """True when the standby answers and replays (None when it does not answer)."""
    try:
        db = adb.sync.Database(URL, pool_size=1)
    except Exception:
        return None
    try:
        return db.runQuery("select pg_is_in_recovery()")[0][0]
    except Exception:
        return None
    finally:
        db.close()


def require_standby():
    """Skip (fail under CI=true) unless the primary answers and the standby replays."""
    require_server("postgresql")
    if in_recovery():
        return
    message = f"no PostgreSQL standby replaying at {URL}: {HOW_TO_START}"
    if IN_CI:
        pytest.fail(message + " (CI=true: server-backed tests must run)")
    pytest.skip(message)


def _script(*args):
    subprocess.run(["bash", str(SCRIPT), *args], check=True, capture_output=True, timeout=120)


def stop():
    """Stop the standby (fast shutdown: its sessions are ended)."""
    _script("stop")


def start():
    """Start the standby again and wait until it streams from the primary."""
    _script()


def on_standby(sql):
    """Run ``sql`` on the standby directly (``pg_wal_replay_pause()`` and the like)."""
    db = adb.sync.Database(URL, pool_size=1)
    try:
        return db.runQuery(sql)
    finally:
        db.close()


def wait_until(predicate, timeout, what):
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` s.
    Returns the seconds it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - start


__all__ = ["URL", "as_psycopg", "in_recovery", "on_standby", "require_standby", "start",
           "stop", "wait_until", "URLS"]
