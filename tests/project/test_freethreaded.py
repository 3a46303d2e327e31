"""Free-threaded Python: adb and its pure-Python drivers keep the interpreter lock
off, and a driver that turns it back on is named once.

The first test means something on a free-threaded build only (``python3.13t``, CI's
free-threaded suite, ``.ci/run-freethreaded``); the warning's test fakes the lock's
state, so it runs on every build.
"""

import subprocess
import sys
import warnings
from importlib.util import find_spec

import pytest

import adb.sync
from adb.drivers import _gil

def test_adb_and_its_pure_python_drivers_leave_the_lock_as_the_build_has_it():
    """Off on a free-threaded build, on (of course) on the others."""
    drivers = [name for name in ("sqlite3", "pymysql", "psycopg") if find_spec(name)]
    code = ("import adb, adb.sync, adb.tornado, adb.twisted\n"
            "from adb.drivers import _gil\n"
            f"for name in {drivers!r}: __import__(name)\n"
            "print(_gil.enabled())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PSYCOPG_IMPL": "python", "PATH": ""}, check=True)
    assert out.stdout.strip() == str(not _gil.FREE_THREADED), out.stderr


if find_spec("psycopg2") is not None:  # CI's free-threaded venv leaves it out
    def test_psycopg2_is_named_where_it_turns_the_lock_on(pg_url):
        code = ("import adb.sync\n"
                f"adb.sync.Database({pg_url!r}, pool_size=1).close()")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        named = "'psycopg2' turned the interpreter lock (GIL) back on" in out.stderr
        assert named == _gil.FREE_THREADED, out.stderr
        assert not named or ("psycopg 3" in out.stderr and "PyMySQL" in out.stderr)


def test_a_driver_that_turns_the_lock_on_is_named_once(monkeypatch, tmp_path):
    states = iter([False, True, True, True])  # off before the import, on after, stays on
    monkeypatch.setattr(_gil, "FREE_THREADED", True)
    monkeypatch.setattr(_gil, "_warned", False)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: next(states), raising=False)
    with pytest.warns(RuntimeWarning, match=r"driver module 'sqlite3' turned the interpreter "
                                            r"lock \(GIL\) back on.*psycopg 3.*PyMySQL"):
        adb.sync.Database(f"sqlite:///{tmp_path}/a.db", pool_size=1).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adb.sync.Database(f"sqlite:///{tmp_path}/b.db", pool_size=1).close()


def test_no_word_while_the_lock_stays_off_or_was_on_before(monkeypatch, tmp_path):
    monkeypatch.setattr(_gil, "FREE_THREADED", True)
    monkeypatch.setattr(_gil, "_warned", False)
    for state in (False, True):  # off throughout; on already (PYTHON_GIL=1, or earlier)
        monkeypatch.setattr(sys, "_is_gil_enabled", lambda: state, raising=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            adb.sync.Database(f"sqlite:///{tmp_path}/a.db", pool_size=1).close()
    assert not _gil._warned
