"""The Twisted front-end on the asyncio reactor, which a process picks only once,
so these run in subprocesses: trial runs the Twisted test modules again, and a
script shares one asyncio loop between Twisted and Tornado."""

import os
import pathlib
import re
import subprocess
import sys

from ..conftest import require_server

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args):
    # without pytest's PYTEST_CURRENT_TEST: tests/adbapi/test_twisted_adbapi.py reads it to
    # tell pytest (xfail marks) from trial (todo) when it reports expected failures
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)


def test_twisted_suites_pass_on_the_asyncio_reactor():
    require_server("postgresql")
    require_server("mysql")
    result = run("-m", "twisted.trial", "--reactor=asyncio",
                 "tests.contract.test_twisted", "tests.adbapi.test_twisted_adbapi")
    tail = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, tail
    # the listed expected failures (todo) are allowed; an unexpected success is not
    # (trial passes it: its EXPECTED_FAILURES entry must go), nor is a skip
    summary = result.stdout.rsplit("---", 1)[-1]
    assert re.search(r"PASSED \((expectedFailures=\d+, )?successes=\d+\)", summary), tail


def test_twisted_and_tornado_share_one_asyncio_loop(pg_url):
    result = run("tests/contract/shared_loop_app.py", pg_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK [('tornado', 200), ('twisted', 200)] AsyncioSelectorReactor" in result.stdout
