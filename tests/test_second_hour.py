"""The second hour (issue "The second hour", items 1-3): start-up that costs only the
driver in use and serves the first call on the first connection ready; driver
mistakes with a note that names them; counters and messages that mean what they
say; rowcounts alike across servers where adb can make them so.

On PostgreSQL (psycopg2 and psycopg 3), MariaDB and SQLite.
"""

import json
import os
import subprocess
import sys

import pytest

from .conftest import TARGETS, make_target

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: every DB-API module a built-in driver imports
DRIVER_MODULES = ("psycopg", "psycopg2", "pymysql", "sqlite3")


def modules_after_one_query(url):
    """The driver modules imported by a fresh interpreter that made a Database of
    ``url`` and ran one query on it."""
    code = (
        "import json, sys, adb.sync\n"
        f"db = adb.sync.Database({url!r}, pool_size=2)\n"
        "assert db.runQueryValue('select 1') == 1\n"
        "db.close()\n"
        f"print(json.dumps([m for m in {DRIVER_MODULES!r} if m in sys.modules]))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


# -- 1. start-up imports only the driver in use ---------------------------------------

DRIVER_OF = {"postgresql": "psycopg2", "psycopg": "psycopg", "mysql": "pymysql",
             "sqlite": "sqlite3"}


@pytest.mark.parametrize("name", list(TARGETS))
def test_start_up_imports_only_the_driver_in_use(name, tmp_path):
    target = make_target(name, tmp_path)
    assert modules_after_one_query(target.url) == [DRIVER_OF[name]]
