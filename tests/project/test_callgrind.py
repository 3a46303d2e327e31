"""``benchmarks.callgrind``'s fronts, without valgrind: each child makes the calls it
is counted for. A front that made fewer (or none) would be counted cheap."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from benchmarks import callgrind

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the fronts that insert their N rows into the test table
INSERTING = [front for front in callgrind.FRONTS if front != "awaiting"]


def _child(front: str, url: str, calls: int) -> subprocess.CompletedProcess[str]:
    import adb
    tree = os.path.dirname(os.path.dirname(os.path.realpath(adb.__file__)))
    spec = json.dumps({"tree": tree, "front": front, "url": url, "calls": calls})
    return subprocess.run([sys.executable, callgrind.__file__, "--child", spec],
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([tree, ROOT])},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("front", INSERTING)
def test_each_front_makes_its_n_inserts(front, tmp_path):
    path = tmp_path / "calls.db"
    done = _child(front, f"sqlite:///{path}", 7)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*), sum(k) from adb_callgrind").fetchone() == (7, 21)


def test_the_awaiting_front_settles_every_future():
    """No database: N futures, gathered; the child ends only once all are settled."""
    done = _child("awaiting", "sqlite://", 50)
    assert done.returncode == 0, done.stderr


def test_an_unknown_front_is_refused(capsys):
    with pytest.raises(SystemExit):
        callgrind.parse(["--tree", f"A={ROOT}", "--fronts", "sync,nonesuch"])
    assert "unknown nonesuch" in capsys.readouterr().err
