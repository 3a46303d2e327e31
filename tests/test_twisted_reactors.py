"""The Twisted front-end on the asyncio reactor, which a process picks only once,
so these run in subprocesses: trial runs the Twisted test modules again, and a
script shares one asyncio loop between Twisted and Tornado."""

import pathlib
import subprocess
import sys

from .conftest import require_server

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_twisted_suites_pass_on_the_asyncio_reactor():
    require_server("postgresql")
    require_server("mysql")
    result = run("-m", "twisted.trial", "--reactor=asyncio",
                 "tests.test_twisted", "tests.test_twisted_adbapi")
    tail = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, tail
    assert "PASSED (successes=" in result.stdout, tail
    assert "skips" not in result.stdout.rsplit("---", 1)[-1], tail


def test_twisted_and_tornado_share_one_asyncio_loop(pg_url):
    result = run("tests/shared_loop_app.py", pg_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK [('tornado', 200), ('twisted', 200)] AsyncioSelectorReactor" in result.stdout
