"""The benchmark's manners as a command: a database it cannot use is one line and
exit status 2, a single round says it is one, its tables are its own (``adb_bench_*``)
and gone after the run unless ``--keep``, systems that cannot run share a line, the
columns are explained, the server is named briefly, and a log gets no progress bars.
Each test runs ``python -m benchmarks`` as a user does, in a subprocess."""

import re
import signal
import sqlite3
import subprocess
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

import adb.sync
from benchmarks import cli
from benchmarks.scenarios import SCENARIOS

from ..conftest import CTRL_C, URLS, require_server

#: a short run: two systems, a few hundred rows
SHORT = ["--rows", "200", "--systems", "adb-asyncio,threads"]


def bench(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks argv`` with stdout and stderr captured (so not a terminal)."""
    return subprocess.run([sys.executable, "-m", "benchmarks", *argv], capture_output=True,
                          text=True, timeout=timeout, check=False)


def with_user(url: str, user: str, password: str = "") -> str:
    """``url`` logging in as ``user`` (with ``password``, if any)."""
    parts = urlsplit(url)
    auth = user + (f":{password}" if password else "")
    return urlunsplit(parts._replace(netloc=f"{auth}@{parts.hostname}:{parts.port or ''}"
                                     .rstrip(":")))


def tables_of(url: str) -> set[str]:
    """The adb_bench_* tables and the ``benchmark`` table in ``url``'s database."""
    with adb.sync.Database(url, pool_size=1) as db:
        rows = db.runQuery({
            "sqlite": "select name from sqlite_master where type = 'table'",
            "mysql": "select table_name from information_schema.tables "
                     "where table_schema = database()",
            "postgresql": "select tablename from pg_tables where schemaname = current_schema()",
        }[url.split(":")[0]])
    return {name for name, in rows if name.startswith("adb_bench_") or name == "benchmark"}


def assert_one_line_and_2(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit status 2, nothing on stdout, one line on stderr with ``words`` in it, no
    traceback, no progress bar."""
    err = result.stderr
    assert result.returncode == 2, (result.returncode, err)
    assert result.stdout == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "%|" not in err and "round 1/" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


@pytest.mark.parametrize("dburl, words", [
    ("nonsense", ["not a database URL", "nonsense"]),
    ("foo://host/db", ["unsupported URL scheme 'foo'", "postgresql://"]),
    ("postgresql://root@127.0.0.1:1/test", ["cannot reach", "Connection refused", "--dburl"]),
    ("mysql://root:secret-pw@127.0.0.1:1/test", ["cannot reach", "--dburl"]),
])
def test_a_url_it_cannot_use_is_one_line_and_exit_2(dburl, words):
    err = assert_one_line_and_2(bench("--dburl", dburl, "--repeat", "3"), *words)
    assert "secret-pw" not in err


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_a_refused_login_is_one_line_and_exit_2(kind):
    """The hint's own form with a role the server does not have: what to fix, not a traceback."""
    require_server(kind)
    url = with_user(URLS[kind], "adb_no_such_role", "wrong-pw" if kind == "mysql" else "")
    err = assert_one_line_and_2(bench("--dburl", url, "--repeat", "3"),
                                "refused the connection", "adb_no_such_role",
                                "check the user, password and database name in --dburl")
    assert "wrong-pw" not in err


def test_a_wrong_option_is_one_line():
    assert_one_line_and_2(bench("--rows", "0"), "--rows and --repeat must be positive")


def test_one_round_says_so_and_more_give_median_min_max(tmp_path):
    one = bench(*SHORT)
    assert one.returncode == 0, one.stderr[-2000:]
    assert "One round" in one.stdout and "--repeat N" in one.stdout
    assert "median (min-max)" not in one.stdout.splitlines()[2]  # the table's header
    two = bench(*SHORT, "--repeat", "2")
    assert two.returncode == 0, two.stderr[-2000:]
    assert "rows/s median (min-max)" in two.stdout.splitlines()[2]
    assert "median (min-max) over 2 interleaved rounds" in two.stdout
    assert "One round" not in two.stdout


def test_sqlite_lists_what_cannot_run_on_one_line_and_only_what_ran_in_the_legend():
    result = bench("--rows", "200", "--systems", "adb-asyncio,asyncpg,aiomysql,gevent")
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "not available" not in out
    not_run = [line for line in out.splitlines() if line.startswith("not run here:")]
    assert not_run == [("not run here: asyncpg, aiomysql, gevent "
                        "(need a server: --dburl postgresql://... or mysql://...)")]
    assert "  adb-asyncio: adb, asyncio" in out
    assert "asyncpg pool" not in out and "aiomysql pool" not in out  # their legend lines
    assert "x adbapi" not in out  # a ratio only to a system that ran


def test_the_columns_are_explained_under_the_table():
    result = bench(*SHORT)
    assert result.returncode == 0, result.stderr[-2000:]
    notes = result.stdout.split("\n  threads: plain blocking threads")[1]
    for column in ("rows/s", "seconds", "peak RSS MB", "CPU us/row", "first 0.5s", "x threads"):
        assert f"\n  {column}: " in notes, column
    assert "warms up" in notes and "CPU time" in notes


def test_no_progress_bar_goes_into_a_file_or_pipe():
    """stderr is a pipe here: one plain line per run, no carriage return."""
    result = bench(*SHORT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\r" not in result.stderr and "%|" not in result.stderr
    assert re.search(r"^adb-asyncio +round 1/1: [\d,]+ rows/s, \d+ MB$", result.stderr, re.MULTILINE), \
        result.stderr


@pytest.mark.parametrize("kind, name", [("postgresql", r"PostgreSQL \d+\.\d+"),
                                        ("mysql", r"MariaDB \d+\.\d+\.\d+|MySQL \d+\.\d+")])
def test_the_header_names_the_server_briefly(kind, name):
    require_server(kind)
    result = bench("--dburl", URLS[kind], *SHORT)
    assert result.returncode == 0, result.stderr[-2000:]
    header = result.stdout.splitlines()[1]
    assert re.fullmatch(rf"parallel-insert: 200 rows, pool 10, 1 round\(s\), ({name}), "
                        r"\d+ CPUs, Python [\d.]+", header), header


def test_short_server_names():
    assert cli.short_server("PostgreSQL 15.19 (Debian 15.19-1.pgdg120+1) on x86_64-pc-linux-"
                            "gnu, compiled by gcc (Debian 12.2.0-14) 12.2.0, 64-bit") == \
        "PostgreSQL 15.19"
    assert cli.short_server("10.11.6-MariaDB-0+deb12u1") == "MariaDB 10.11.6"
    assert cli.short_server("8.0.36") == "MySQL 8.0.36"
    assert cli.short_server("SQLite 3.40.1") == "SQLite 3.40.1"


def test_the_help_says_what_it_creates_and_drops():
    text = " ".join(bench("--help").stdout.split())
    assert "adb_bench_*" in text and "drops them when it ends" in text
    assert "--keep" in text and "It touches no other table" in text


@pytest.mark.parametrize("name", sorted(n for n, s in SCENARIOS.items()
                                        if s.uses_database and "sqlite" in s.kinds
                                        and s.launch is None or n == "web"))
def test_every_table_a_scenario_creates_is_its_own_and_listed(name, tmp_path):
    """prepare creates exactly the scenario's ``tables``, every one ``adb_bench_*``."""
    scenario = SCENARIOS[name]
    url = f"sqlite:///{tmp_path}/t.db"
    scenario.prepare(url, 20)
    with sqlite3.connect(f"{tmp_path}/t.db") as conn:
        made = {n for n, in conn.execute("select name from sqlite_master where type = 'table'")
                if not n.startswith("sqlite_")}
    assert made == set(scenario.tables) and made
    assert all(table.startswith("adb_bench_") for table in made), made


def test_a_run_leaves_the_database_as_it_found_it_unless_keep(tmp_path):
    """A table of the user's named ``benchmark`` survives; the run's own are dropped,
    or kept with ``--keep``."""
    path = tmp_path / "user.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table benchmark (note text)")
        conn.execute("insert into benchmark values ('mine')")
    url = f"sqlite:///{path}"
    result = bench("--dburl", url, *SHORT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tables: adb_bench_insert dropped" in result.stdout
    assert tables_of(url) == {"benchmark"}
    with sqlite3.connect(path) as conn:
        assert conn.execute("select note from benchmark").fetchall() == [("mine",)]
    kept = bench("--dburl", url, *SHORT, "--keep")
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert tables_of(url) == {"benchmark", "adb_bench_insert"}


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_a_server_run_drops_its_tables(kind):
    require_server(kind)
    result = bench("--dburl", URLS[kind], *SHORT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tables: adb_bench_insert dropped at the end of the run" in result.stdout
    assert "adb_bench_insert" not in tables_of(URLS[kind])


def test_an_interrupted_run_drops_its_tables_too():
    """Ctrl-C (SIGINT) in the middle of a run: its table is dropped, one line, 130."""
    require_server("postgresql")
    url = URLS["postgresql"]
    run = CTRL_C + "import runpy; runpy.run_module('benchmarks', run_name='__main__')"
    proc = subprocess.Popen([sys.executable, "-c", run, "--dburl", url, "--rows",
                             "200000", "--systems", "threads"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while "adb_bench_insert" not in tables_of(url):
            assert time.monotonic() < deadline and proc.poll() is None, "the run never began"
            time.sleep(0.2)
        time.sleep(1)  # inserting now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "python -m benchmarks: interrupted"
    assert "Traceback" not in err
    assert "adb_bench_insert" not in tables_of(url)


def test_the_docs_options_table_lists_every_flag():
    """docs/benchmarks.md's options table names every option of the command (one of
    each option's spellings), so a new flag cannot go undocumented."""
    import argparse
    import pathlib
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text()
    table = text.split("| option | meaning |", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"--[a-z_-]+", table))
    missing = [action.option_strings for action in cli.parser("x")._actions
               if action.option_strings and action.help != argparse.SUPPRESS
               and "--help" not in action.option_strings
               and not documented & set(action.option_strings)]
    assert missing == []
