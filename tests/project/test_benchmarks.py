"""The benchmark harness: options, verification, JSON, and a tiny run of every system."""

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

import adb.sync
from benchmarks import cli, harness
from benchmarks.scenarios import parallel_insert as pi
from benchmarks.scenarios.base import WrongResult
from benchmarks.systems import SYSTEMS, System

from ..conftest import IN_CI, URLS, psycopg_url, require_server


def test_seed_flags_build_the_url_and_pick_the_systems():
    args = cli.parse(["--db", "mysql", "--dbhost", "db.example", "--dbuser", "bench",
                      "--dbpasswd", "p@ss:w", "--pool_size", "5", "--use_adb", "--use_adbapi",
                      "--use_tornado", "--use_txmysql"])
    assert args.dburl == "mysql://bench:p%40ss%3Aw@db.example/test"
    assert args.system_names == ["adb-tornado", "adbapi-asyncio", "txmysql-role"]
    assert args.pool_size == [5] and args.rows == 100_000
    args = cli.parse(["--db", "postgresql", "--use_adbapi"])
    assert args.dburl == "postgresql://root@127.0.0.1/test"
    assert args.system_names == ["adbapi"]


@pytest.mark.parametrize("argv, missing", [([], "tqdm"), (["--plot", "x.png"], "matplotlib")])
def test_a_run_names_the_extra_it_lacks_before_any_work(argv, missing, monkeypatch, capsys):
    """Without tqdm (any run) or matplotlib (``--plot``) the command says what to
    install and stops: no database, no system, nothing measured."""
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec",
                        lambda name, *a: None if name == missing else real(name, *a))
    monkeypatch.setattr(cli, "database", lambda url: pytest.fail("the run started"))
    assert cli.main(["--rows", "10", *argv], prog="adb-benchmark") == 2
    err = capsys.readouterr().err
    assert f"adb-benchmark: this run needs {missing}" in err
    assert "pip install 'adb-async[bench]'" in err
    assert cli.main(["--list"], prog="adb-benchmark") == 0  # listing needs neither


def test_the_help_points_at_nothing_a_wheel_lacks():
    text = cli.parser("adb-benchmark").format_help()
    assert "usage: adb-benchmark" in text
    assert "docs/benchmarks.md in the source distribution" in " ".join(text.split())
    assert ".ci/" not in text


def test_modern_flags_and_defaults():
    args = cli.parse(["--dburl", "postgresql://u@h/d", "--systems", "asyncpg, threads",
                      "--rows", "10", "--repeat", "2", "--json", "x.json", "--plot", "x.png"])
    assert (args.dburl, args.system_names, args.rows, args.repeat) == (
        "postgresql://u@h/d", ["asyncpg", "threads"], 10, 2)
    args = cli.parse([])
    assert args.dburl is None and args.rows == 20_000 and args.system_names == list(SYSTEMS)


@pytest.mark.parametrize("argv, message", [
    (["--systems", "adb-asyncio,nosuch"], "unknown system"),
    (["--rows", "0"], "must be positive"),
    (["--db", "sqlite"], "--db must be postgresql or mysql"),
    (["--db", "mysql", "--dburl", "mysql://h/d"], "not both"),
])
def test_bad_options_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        cli.parse(argv)
    assert message in capsys.readouterr().err


def test_native_systems_get_the_urls_driver_keywords_without_adbs_options():
    """``?pipeline=`` and ``?pooler=`` are adb's options: a native driver's connect()
    (aiomysql, asyncpg, the threads' own connections) never gets them, while the
    URL's driver keywords go through (a run with ``?pipeline=off`` failed every
    aiomysql server with "unexpected keyword argument 'pipeline'")."""
    from benchmarks.systems.common import RunSpec
    spec = RunSpec("web", "mysql://root@127.0.0.1/x?pipeline=off&pooler=session"
                          "&connect_timeout=3", 10, 4)
    assert spec.connect_kwargs() == {"host": "127.0.0.1", "user": "root", "database": "x",
                                     "connect_timeout": "3"}


def test_unavailable_systems_say_why():
    assert SYSTEMS["asyncpg"].unavailable("mysql") == "does not talk to mysql"
    opener = SYSTEMS["threads"].opener
    fake = System("x", "x", ("sqlite",), opener, requires=("no_such_module_here",))
    assert "no_such_module_here is not installed" in (fake.unavailable("sqlite") or "")
    fake = System("x", "x", ("sqlite",), opener, programs=("no-such-program",))
    assert fake.unavailable("sqlite") == "no-such-program is not on PATH"
    assert System("x", "x", ("sqlite",)).unavailable("sqlite") == "has no parallel-insert runner"


def test_verification_catches_wrong_count_and_wrong_data(tmp_path):
    url = f"sqlite:///{tmp_path}/v.db"
    pi.prepare(url, 10)
    with adb.sync.Database(url, pool_size=1) as db:
        db.runMany(pi.statement(db.paramstyle), pi.params(9))
    with pytest.raises(WrongResult, match="expected 10 rows.*found 9 rows"):
        pi.verify(url, 10)
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"insert into {pi.TABLE} values (9, 'nine')")
    with pytest.raises(WrongResult, match="1 with wrong data"):
        pi.verify(url, 10)
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"update {pi.TABLE} set data = '9' where userid = 9")
    pi.verify(url, 10)


def test_a_wrong_result_is_an_error_not_a_figure(tmp_path):
    def expects_one_more(url, rows, figures=None):
        pi.verify(url, rows + 1, figures)
    scenario = dataclasses.replace(pi.SCENARIO, verify=expects_one_more)
    url = f"sqlite:///{tmp_path}/w.db"
    ok, figures, error = harness.run_once("adb-asyncio", scenario, url, 50, 2, 60)
    assert not ok and error == "wrong result: 50 calls reported success, not 51"
    runs = [harness.Run("a", 1, False, figures, error), harness.Run("a", 2, True, figures)]
    summary = harness.summary_of(runs)
    assert summary["a"]["errors"] == [error] and summary["a"]["rows_per_s"]["median"] > 0


@pytest.mark.parametrize("kind", ["postgresql", "mysql", "sqlite"])
def test_tiny_run_of_every_system_and_the_json(kind, tmp_path):
    """Every system runs (or says why it cannot); the JSON holds all figures."""
    url = f"sqlite:///{tmp_path}/j.db" if kind == "sqlite" else URLS[kind]
    if kind != "sqlite":
        require_server(kind)
    out = tmp_path / "run.json"
    code = cli.main(["--dburl", url, "--rows", "203", "--pool_size", "4", "--json", str(out),
                     "--plot", str(tmp_path / "run.svg")])
    document = json.loads(out.read_text())
    assert code == 0, document["summary"]
    assert set(document["summary"]) | set(document["unavailable"]) == set(SYSTEMS)
    for name, entry in document["summary"].items():
        assert entry["errors"] == [], (name, entry["errors"])
        assert entry["rows_per_s"]["median"] > 0 and entry["peak_rss_mb"]["median"] > 0
        cpu, main = entry["cpu_us_per_row"]["median"], entry["main_cpu_us_per_row"]["median"]
        assert 0 < main <= cpu, (name, main, cpu)  # the main thread is part of the process
        if name == "threads" or name.startswith("adb"):  # the scenario's own burst
            assert 0 <= entry["machine_busy"]["median"] <= 1, name
            # the database server's CPU, where one runs on this machine (not SQLite's)
            assert ("db_cpu_us_per_row" in entry) == (kind != "sqlite"), name
    # one run's 203 rows may take less than the kernel's 10 ms tick; all of them do not
    metered = [entry for entry in document["summary"].values() if "machine_busy" in entry]
    assert sum(entry["machine_busy"]["median"] for entry in metered) > 0
    if kind != "sqlite":
        assert sum(entry["db_cpu_us_per_row"]["median"] for entry in metered) > 0
    for name, reason in document["unavailable"].items():
        assert kind in reason or "not installed" in reason or "PATH" in reason
    if kind != "sqlite":  # everything this project installs runs on the servers
        assert all("does not talk" in r for r in document["unavailable"].values())
    assert {"python", "cpu_count", "libraries", "server", "platform"} <= set(document["environment"])
    assert document["rows"] == 203 and len(document["runs"]) == len(document["summary"])
    assert all(run["figures"]["ok_calls"] == 203 for run in document["runs"])
    curves = {run["system"]: run["figures"]["progress"] for run in document["runs"]
              if "progress" in run["figures"]}
    assert {"adb-asyncio", "adb-asyncio-autobatch", "adb-sync"} <= set(curves)
    for name, curve in curves.items():  # adb's own counter, sampled while the burst runs
        assert curve[0] == [0.0, 0] and curve[-1][1] == 203, (name, curve)
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(curve, curve[1:])), name
        assert document["summary"][name]["opening_ratio"]["median"] > 0
    assert (tmp_path / "run.svg").read_text().startswith("<?xml")


@pytest.mark.parametrize("width", [6, 9, 12])
def test_a_long_chart_title_is_wrapped_inside_the_figure(width):
    """A title longer than the figure is wide (many options, a long server name)
    is wrapped, each line kept whole within the figure's edges."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks import report
    title = ("web, " + ", ".join(f"option{i} {i * 1000}" for i in range(30))
             + ",\nCongoDB (@push.rocks/smartmongo 2.2.0, a MongoDB-wire stand-in), 2 CPUs")
    fig, ax = plt.subplots(figsize=(width, 5))
    try:
        report.suptitle(fig, title)
        fig.canvas.draw()
        text = fig.get_suptitle()
        box = fig.texts[0].get_window_extent()
        assert text.replace("\n", " ").split() == title.replace("\n", " ").split()
        assert 0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1, (box, fig.bbox)
    finally:
        plt.close(fig)


def test_no_arguments_runs_on_the_embedded_default():
    result = subprocess.run([sys.executable, "-m", "benchmarks"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "parallel-insert: 20,000 rows, pool 10, 1 round(s), SQLite" in result.stdout
    assert "adb-asyncio" in result.stdout and "--dburl postgresql://" in result.stdout


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_seed_flag_form_runs_against_the_servers(kind, tmp_path):
    require_server(kind)
    from urllib.parse import urlsplit
    parts = urlsplit(URLS[kind])
    argv = ["--db", kind, "--dbhost", parts.hostname, "--dbuser", parts.username,
            "--dbname", parts.path.lstrip("/"), "--pool_size", "4", "--use_adb", "--use_adbapi",
            "--use_txmysql", "--rows", "300", "--json", str(tmp_path / "seed.json")]
    if parts.password:
        argv += ["--dbpasswd", parts.password]
    assert cli.main(argv) == 0
    document = json.loads((tmp_path / "seed.json").read_text())
    assert set(document["summary"]) == {"adb-tornado", "adbapi", "txmysql-role"}
    assert document["unavailable"] == {}


@pytest.mark.parametrize("kind", ["postgresql", "mysql", "sqlite"])
def test_sequential_scenario_runs_on_every_system_unchanged(kind, tmp_path):
    """A scenario is written once: every opener system runs it; only the C client,
    which is a program and not an opener, says it has no runner for it."""
    url = f"sqlite:///{tmp_path}/s.db" if kind == "sqlite" else URLS[kind]
    if kind != "sqlite":
        require_server(kind)
    out = tmp_path / "seq.json"
    assert cli.main(["--scenario", "sequential", "--dburl", url, "--rows", "150",
                     "--pool_size", "4", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    summary, unavailable = document["summary"], document["unavailable"]
    assert set(summary) | set(unavailable) == set(SYSTEMS)
    assert all("does not talk" in r or r == "has no sequential runner"
               for r in unavailable.values()), unavailable
    for entry in summary.values():
        assert entry["insert_us"]["median"] > 0 and entry["select_us"]["median"] > 0
        assert entry["errors"] == []


def _recording_python(tmp_path, name):
    """An interpreter (this one, behind a script) that logs every command it runs:
    what a run started on it."""
    log = tmp_path / f"{name}.log"
    script = tmp_path / name
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script), log


def test_python_runs_every_system_once_per_named_interpreter(tmp_path):
    """``--python NAME=PATH`` twice: each system runs on both, its rows named
    ``system@NAME``, its child started by that interpreter; the environment
    records what each interpreter is; ratios stay within one interpreter."""
    one, one_log = _recording_python(tmp_path, "one")
    two, two_log = _recording_python(tmp_path, "two")
    out = tmp_path / "py.json"
    code = cli.main(["--dburl", f"sqlite:///{tmp_path}/p.db", "--rows", "150", "--pool_size",
                     "3", "--systems", "adb-asyncio,threads", "--python", f"one={one}",
                     "--python", f"two={two}", "--json", str(out)])
    document = json.loads(out.read_text())
    assert code == 0, document["summary"]
    labels = ["adb-asyncio@one", "adb-asyncio@two", "threads@one", "threads@two"]
    assert list(document["summary"]) == labels
    for label in labels:
        entry = document["summary"][label]
        assert entry["errors"] == [] and entry["rows_per_s"]["median"] > 0
        assert entry["python"] == label.split("@")[1]
        assert entry["system"] == label.split("@")[0]
    assert {run["python"] for run in document["runs"]} == {"one", "two"}
    for log in (one_log, two_log):
        commands = log.read_text().splitlines()
        assert sum("benchmarks.child --probe" in c for c in commands) == 1
        assert sum(c.startswith("-m benchmarks.child {") for c in commands) == 2, commands
    found = document["environment"]["interpreters"]
    assert set(found) == {"one", "two"}
    assert found["one"]["python"] == sys.version.split()[0] and not found["one"]["driver_missing"]


def test_a_named_interpreter_runs_its_own_adb_where_it_has_one(tmp_path):
    """Two builds of adb side by side in one run: an interpreter with an adb of its
    own (a venv holding another commit's wheel) runs that one, with this run's
    ``benchmarks``; one without (a bare build) runs this run's adb. Every named
    interpreter used to run this run's adb, so two wheels compared were one."""
    import shutil

    import benchmarks
    from benchmarks import interpreters

    def venv(name):
        path = tmp_path / name
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
        python = str(path / "bin" / "python")
        ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        site = subprocess.run([python, "-c", ask], capture_output=True, text=True,
                              check=True).stdout.strip()
        return python, site
    bare, _ = venv("bare")
    own, site = venv("own")
    shutil.copytree(os.path.dirname(adb.__file__), os.path.join(site, "adb"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert interpreters.own_adb(bare) is None
    assert interpreters.own_adb(own) == os.path.join(site, "adb")
    ask = "import adb, benchmarks; print(adb.__file__); print(benchmarks.__file__)"
    for python, expected in ((bare, os.path.dirname(adb.__file__)),
                             (own, os.path.join(site, "adb"))):
        env = interpreters.Interpreter("x", python).env()
        found = subprocess.run(
            [python, "-c", ask], env=env, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
        assert os.path.realpath(os.path.dirname(found[0])) == os.path.realpath(expected), python
        assert os.path.realpath(os.path.dirname(found[1])) == \
            os.path.realpath(os.path.dirname(benchmarks.__file__))


@pytest.mark.parametrize("argv, message", [
    (["--python", "gone=/no/such/python"],
     "--python gone=/no/such/python: cannot run it: [Errno 2] No such file or directory"),
    (["--python", "no=/bin/false"],
     "--python no=/bin/false: cannot run the benchmark's child there: exit status 1"),
])
def test_python_that_cannot_run_the_systems_stops_the_run(argv, message, tmp_path, capsys):
    """A missing interpreter, or one that cannot start the benchmark's child
    (cannot import adb, say), is one line and exit status 2 before any work."""
    code = cli.main(["--dburl", f"sqlite:///{tmp_path}/x.db", "--rows", "10", *argv],
                    prog="adb-benchmark")
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"adb-benchmark: {message}"), err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists() or not _tables(f"sqlite:///{tmp_path}/x.db")


def _tables(url):
    with adb.sync.Database(url, pool_size=1) as db:
        return db.runQuery("select name from sqlite_master where type = 'table'")


def test_python_without_the_urls_driver_stops_the_run(tmp_path, capsys):
    """An interpreter without the URL's driver (a bare venv: no PyMySQL) is named,
    with the driver, in one line and exit status 2."""
    require_server("mysql")
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    code = cli.main(["--dburl", URLS["mysql"], "--rows", "10", "--systems", "threads",
                     "--python", f"bare={bare}/bin/python"], prog="adb-benchmark")
    err = capsys.readouterr().err
    assert code == 2 and "the URL's driver, pymysql, is not installed there" in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--python", "a=/x", "--python", "a=/y"], "--python names must differ: a, a"),
    (["--python", "a@b=/x"], "an interpreter's name has no '@'"),
    (["--python", "=/x"], "must be NAME=PATH"),
])
def test_bad_python_options_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        cli.parse(argv)
    assert message in capsys.readouterr().err


def test_blocking_world_runs_calls_from_its_threads_in_order():
    import threading

    from benchmarks.worlds import BlockingWorld, Done, drive
    world = BlockingWorld(threads=3)
    seen = set()

    def call(item):
        seen.add(threading.get_ident())
        time.sleep(0.001)  # a blocking call: the other callers take items meanwhile
        return Done(item * 2)

    async def main():
        return await world.map(call, range(300))
    assert world.run(main) == [i * 2 for i in range(300)]
    assert len(seen) == 3 and threading.get_ident() not in seen

    async def waits_for_a_future():
        import asyncio
        await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="not settled"):
        drive(waits_for_a_future())


def test_ab_compares_trees_in_child_processes(tmp_path):
    """``python -m benchmarks.ab``: bytes per queued call and burst rows/s per tree."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    out = tmp_path / "ab.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.ab", "--tree", f"A={root}", "--tree", f"B={root}",
         "--calls", "2000", "--rows", "500", "--rounds", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "bytes per call in flight" in result.stdout and "B/A" in result.stdout
    document = json.loads(out.read_text())
    assert [(r["tree"], r["what"]) for r in document["runs"]] == [
        ("A", "memory"), ("B", "memory"), ("A", "burst"), ("B", "burst")]
    for run in document["runs"]:
        assert run["figures"]["adb"].startswith(os.path.join(root, "adb", ""))
    for name in "AB":
        figures = document["summary"][name]
        assert 100 < figures["bytes_per_call"]["median"] < 5000  # a future and a job at least
        assert figures["submit_us"]["median"] > 0 and figures["rows_per_s"]["median"] > 0


def test_the_cpu_meter_counts_each_side_and_no_database_it_cannot_see():
    """``benchmarks.cpushare``: a server's process group and the load tool (a child
    waited for) are counted apart, each with the CPU it spent while metered; the
    database side only for a server on this machine."""
    from benchmarks import cpushare
    from benchmarks.scenarios import web
    assert web._local_database("sqlite:///x.db") is None
    assert web._local_database("postgresql://u@db.example.com/x") is None
    assert web._local_database("postgresql://u@127.0.0.1/x") == "postgresql"
    assert web._local_database("mysql://root@localhost/x") == "mysql"
    work = "sum(range(10 ** 7))"
    # the "server" works only between the meter's start and stop: it begins on a line
    # sent after start, and waits, alive, for another once its work is done
    script = f"input(); {work}; print(1, flush=True); input()"
    server = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert server.stdin is not None and server.stdout is not None
    meter = cpushare.Meter(server.pid, None)
    try:
        meter.start()
        server.stdin.write("go\n")
        server.stdin.flush()
        subprocess.run([sys.executable, "-c", work], check=True)  # the "load"
        assert server.stdout.readline() == "1\n"
        meter.stop()
    finally:
        server.communicate("\n", timeout=30)
    assert meter.server > 0.02 and meter.load > 0.02 and meter.database == 0
    shares = meter.per_request(1000)
    assert set(shares) == {"cpu_server_us", "cpu_load_us"}  # no database of its own kind
    assert shares["cpu_server_us"] == pytest.approx(meter.server * 1000)


def test_the_progress_curve_ends_with_the_run_whenever_its_sampler_stops():
    """A sample the progress thread took after the last call came back, before it
    was stopped, would put a point past the run's end before the end itself (a
    curve going back in time): it is left out."""
    done = {"completed": 0}
    sampler = pi.Sampler(lambda: done)
    sampler.stopped.set()  # its thread takes no sample of its own
    sampler.start(0.0)
    sampler.samples = [(0.25, 50), (0.75, 120), (1.02, 203)]  # the last after the end
    figures = sampler.figures(1.0, 203)
    assert figures["progress"] == [[0.0, 0], [0.25, 50], [0.75, 120], [1.0, 203]]
    assert figures["opening_ratio"] == pytest.approx(85 / 0.5 / 203)  # 85 done at 0.5 s


def test_the_machine_meter_reads_how_busy_all_the_cores_were():
    """``cpushare.Machine``: a core kept busy while metered shows as at least its
    share of all the cores (other programs may add to it, never take from it); a
    meter with nothing to measure reads 0."""
    from benchmarks import cpushare
    machine = cpushare.Machine()
    assert machine.busy == 0.0
    machine.start()
    until = time.process_time() + 0.5
    while time.process_time() < until:  # one core busy for 0.5 s of CPU
        pass
    machine.stop()
    # the whole time this thread could run its core was busy, with it or another;
    # the kernel counts in ticks (10 ms), hence the margin
    assert 0.75 / (os.cpu_count() or 1) <= machine.busy <= 1.0, machine.busy


def test_the_cpu_meter_counts_only_what_each_process_spent_while_metered():
    """A process that ended while metered (another program's database session on a
    shared machine) counts for nothing, never against the rest; one started
    meanwhile counts whole; a pid used again is another process."""
    from benchmarks.cpushare import _spent
    before = {(10, 1): 3.0, (11, 1): 50.0, (12, 1): 7.0}
    after = {(10, 1): 3.5, (13, 2): 0.25, (12, 9): 0.125}  # 11 ended; 12 is a new one
    assert _spent(before, after) == pytest.approx(0.875)
    assert _spent(before, {}) == 0.0


async def test_n_worker_starlette_servers_turn_nagle_off():
    """uvicorn's ``--workers N`` listener is made with ``proto`` 0, and asyncio then
    leaves Nagle's algorithm on for what it accepts (every keep-alive answer after
    the first waits for the client's delayed ACK): the N-worker servers' protocol
    (``benchmarks.nodelay``) sets ``TCP_NODELAY`` on each connection itself."""
    import socket

    import uvicorn

    from benchmarks.nodelay import http_protocol

    async def app(scope, receive, send):
        assert scope["type"] == "http"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hello"})

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # as uvicorn binds it
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, http=http_protocol(2), loop="asyncio",
                                           lifespan="off", log_level="warning"))
    serving = asyncio.ensure_future(server.serve(sockets=[listener]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        await reader.readuntil(b"hello")
        accepted = [c.transport.get_extra_info("socket") for c in server.server_state.connections]
        assert [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted] == [1]
        writer.close()
    finally:
        server.should_exit = True
        await serving
        listener.close()
    assert http_protocol(1) == "auto"  # one process: uvicorn's own (asyncio sets it there)


def _require_tool(tool):
    """Skip (under CI: fail) without the load tool, saying how to get it."""
    from benchmarks import load
    reason = load.missing(tool)
    if reason:
        if IN_CI:
            pytest.fail(reason + " (CI=true: the web scenarios must run)")
        pytest.skip(reason)


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_web_scenario_loads_every_server_and_checks_its_answers(kind, tmp_path):
    """Seed 002 part B, briefly: every server of the roster that talks to ``kind``
    serves, answers the sampled ids right, and gets requests/s and latency per level."""
    require_server(kind)
    _require_tool("wrk")
    from benchmarks.scenarios import web
    out, chart = tmp_path / "web.json", tmp_path / "web.svg"
    code = cli.main(["--scenario", "web", "--dburl", URLS[kind], "--duration", "1",
                     "--connections", "4,16", "--pool_size", "4", "--json", str(out),
                     "--plot", str(chart)])
    document = json.loads(out.read_text())
    assert code == 0, document["summary"]
    servers = {n for n, s in web.ROSTER.items() if kind in s.kinds}
    assert set(document["summary"]) == servers and document["unavailable"] == {
        n: f"does not talk to {kind}" for n in web.ROSTER if n not in servers}
    for name, entry in document["summary"].items():
        assert entry["errors"] == [], (name, entry["errors"])
        for c in (4, 16):
            assert entry[f"rps_c{c}"]["median"] > 0 and entry[f"p99_ms_c{c}"]["median"] > 0
            # each side's CPU per request: the web server, the database server, wrk
            for side in ("server", "db", "load"):
                assert entry[f"cpu_{side}_us_c{c}"]["median"] > 0, (name, side, c)
        assert entry["sampled_ok"]["median"] == 2 * web.SAMPLES
    assert document["environment"]["tools"]["wrk"].startswith("wrk")
    used = {"tornado", "Twisted", "starlette", "uvicorn"} | (
        {"asyncpg"} if kind == "postgresql" else {"aiomysql"})
    assert used <= set(document["environment"]["libraries"])  # every framework and server
    assert document["options"] == {"duration": 1, "connections": "4,16",
                                   "processes": os.cpu_count() or 1, "loop": "asyncio"}
    for run in document["runs"]:  # uvicorn would pick uvloop by itself: asked, it must not
        framework = web.ROSTER[run["system"]].framework
        loop = run["figures"]["loop"]
        assert loop == "twisted reactor" if framework == "twisted-web" else \
            loop.startswith("asyncio.") and "uvloop" not in loop, (run["system"], loop)
    assert chart.read_text().startswith("<?xml") and "asyncio loop" in chart.read_text()


def test_web_servers_run_on_the_named_python(tmp_path):
    """``--python``: the web scenario's server process (and its workers) start on
    the named interpreter; its rows carry its name."""
    _require_tool("wrk")
    one, log = _recording_python(tmp_path, "one")
    out = tmp_path / "web.json"
    code = cli.main(["--scenario", "web", "--dburl", f"sqlite:///{tmp_path}/w.db",
                     "--duration", "1", "--connections", "4", "--pool_size", "2",
                     "--systems", "tornado+adb", "--python", f"one={one}", "--json", str(out)])
    document = json.loads(out.read_text())
    assert code == 0, document["summary"]
    assert list(document["summary"]) == ["tornado+adb@one"]
    assert document["summary"]["tornado+adb@one"]["rps_c4"]["median"] > 0
    assert sum("benchmarks.webserver" in c for c in log.read_text().splitlines()) == 1


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_web_scenario_runs_the_asyncio_servers_on_uvloop(kind, tmp_path):
    """``--loop uvloop``: Tornado and Starlette (1 and N processes) serve from
    uvloop's loop, as each server says at ``/loop``; the JSON and the chart say so."""
    require_server(kind)
    _require_tool("wrk")
    servers = ["tornado+adb", "tornado+adb xN", "starlette+adb", "starlette+adb xN"]
    out, chart = tmp_path / "web.json", tmp_path / "web.svg"
    code = cli.main(["--scenario", "web", "--dburl", URLS[kind], "--duration", "1",
                     "--connections", "4", "--pool_size", "4", "--loop", "uvloop",
                     "--systems", ",".join(servers), "--json", str(out), "--plot", str(chart)])
    document = json.loads(out.read_text())
    assert code == 0, document["summary"]
    assert document["options"]["loop"] == "uvloop"
    assert sorted(run["system"] for run in document["runs"]) == sorted(servers)
    assert {run["figures"]["loop"] for run in document["runs"]} == {"uvloop.Loop"}
    for entry in document["summary"].values():
        assert entry["errors"] == [] and entry["rps_c4"]["median"] > 0
    assert "uvloop loop" in chart.read_text()


def test_web_loop_option_is_checked(capsys):
    with pytest.raises(SystemExit):
        cli.parse(["--scenario", "web", "--loop", "trio"])
    assert "invalid choice: 'trio'" in capsys.readouterr().err


def test_web_hello_runs_the_seed_experiment_with_ab(tmp_path):
    _require_tool("ab")
    out = tmp_path / "hello.json"
    assert cli.main(["--scenario", "web-hello", "--requests", "200", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert set(document["summary"]) == {"tornado", "tornado xN", "uvicorn", "uvicorn xN"}
    for entry in document["summary"].values():
        assert entry["requests_per_s"]["median"] > 0 and entry["errors"] == []
    assert document["summary"]["tornado xN"]["processes"]["median"] == (os.cpu_count() or 1)
    assert document["environment"]["tools"]["ab"].startswith("This is ApacheBench")
    assert {"tornado", "starlette", "uvicorn"} <= set(document["environment"]["libraries"])


def test_a_server_that_answers_wrong_is_an_error(tmp_path):
    from benchmarks.scenarios import web
    with pytest.raises(WrongResult, match="failed responses"):
        web.verify("", 0, {"non_2xx_c16": 3, "sampled_ok": 50, "sampled_bad": 0})
    with pytest.raises(WrongResult, match="1 of 50 sampled"):
        web.verify("", 0, {"sampled_ok": 49, "sampled_bad": 1})
    with pytest.raises(SystemExit):
        cli.parse(["--scenario", "web", "--connections", "a,b"])
    with pytest.raises(SystemExit):
        cli.parse(["--scenario", "web", "--systems", "adb-asyncio"])  # not a web server


@pytest.mark.parametrize("kind", ["postgresql", "mysql", "sqlite"])
def test_bulk_scenario_reads_and_loads_on_every_system(kind, tmp_path):
    """Briefly: every bulk system streams, fetches and loads the rows (each read's
    count and key sum, each load's table checked by the parent), or says why it
    cannot; a stream's reader reports its RSS growth."""
    from benchmarks.scenarios import bulk
    url = f"sqlite:///{tmp_path}/b.db" if kind == "sqlite" else URLS[kind]
    if kind != "sqlite":
        require_server(kind)
    out = tmp_path / "bulk.json"
    code = cli.main(["--scenario", "bulk", "--dburl", url, "--rows", "3001", "--batch", "256",
                     "--json", str(out)])
    document = json.loads(out.read_text())
    assert code == 0, document["summary"]
    summary, unavailable = document["summary"], document["unavailable"]
    for system in bulk.DEFAULT_SYSTEMS:
        for part in bulk.PARTS:
            name = f"{system} {part}"
            if name in summary:
                entry = summary[name]
                assert entry["errors"] == [] and entry["rows_per_s"]["median"] > 0, name
                assert entry["peak_rss_mb"]["median"] > 0
                assert (part == "stream" and system != "c-client") <= ("rss_growth_mb" in entry)
            else:  # the system cannot, here: another server, a missing tool, no such call
                reason = unavailable.get(name) or unavailable[system]
                assert ("does not talk" in reason or "not installed" in reason
                        or "PATH" in reason or "call in this system" in reason
                        or "a program of its own" in reason), (name, reason)
    for system in ("adb-asyncio", "adb-tornado", "adb-twisted-db", "adb-sync"):
        assert all(f"{system} {part}" in summary for part in bulk.PARTS), system
    runners = {"postgresql": ("asyncpg", "psycopg3", "threads", "c-client"),
               "mysql": ("aiomysql", "threads", "c-client"), "sqlite": ("threads",)}[kind]
    assert all(f"{system} stream" in summary for system in runners), summary.keys()


def test_bulk_verification_catches_a_wrong_read_and_a_wrong_load(tmp_path):
    from benchmarks.scenarios import bulk
    from benchmarks.sql import BULK_SOURCE, BULK_TARGET, bulk_text
    url = f"sqlite:///{tmp_path}/v.db"
    bulk.prepare(url, 10)
    bulk.verify(url, 10, {"part": "stream", "rows_read": 10, "key_sum": 45})
    with pytest.raises(WrongResult, match="counted 9 with key sum 36"):
        bulk.verify(url, 10, {"part": "stream", "rows_read": 9, "key_sum": 36})
    with pytest.raises(WrongResult, match="counted 10 with key sum 46"):
        bulk.verify(url, 10, {"part": "fetchall", "rows_read": 10, "key_sum": 46})
    with pytest.raises(WrongResult, match="found 0"):
        bulk.verify(url, 10, {"part": "copy"})
    with adb.sync.Database(url, pool_size=1) as db:
        db.runMany(f"insert into {BULK_TARGET} values (?, ?)", [(k, bulk_text(k)) for k in range(10)])
        bulk.verify(url, 10, {"part": "copy"})
        db.runOperation(f"update {BULK_TARGET} set v = 'x' where k = 3")
        with pytest.raises(WrongResult, match="1 with the wrong text"):
            bulk.verify(url, 10, {"part": "executemany"})
        (count, keys), = db.runQuery(f"select count(*), sum(k) from {BULK_SOURCE}")
    assert (count, keys) == (10, 45)  # the readers' table, filled by prepare


def test_bulk_prepare_keeps_a_full_source_table_and_refills_a_wrong_one(tmp_path):
    from benchmarks.scenarios import bulk
    from benchmarks.sql import BULK_SOURCE, BULK_TARGET
    url = f"sqlite:///{tmp_path}/p.db"
    bulk.prepare(url, 20)
    marked = "m" * 100  # a text of the right width: the count, key sum and width hold
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"update {BULK_SOURCE} set v = ? where k = 3", (marked,))
        db.runOperation(f"insert into {BULK_TARGET} values (1, 'left over')")
        bulk.prepare(url, 20)  # kept (the mark is still there), the load table emptied
        assert db.runQuery(f"select v from {BULK_SOURCE} where k = 3") == [(marked,)]
        assert db.runQuery(f"select count(*) from {BULK_TARGET}") == [(0,)]
        db.runOperation(f"delete from {BULK_SOURCE} where k = 7")
        bulk.prepare(url, 20)  # a row missing: filled again
        assert db.runQuery(f"select count(*), sum(k) from {BULK_SOURCE}") == [(20, 190)]
        bulk.prepare(url, 25)
        assert db.runQuery(f"select count(*), sum(k) from {BULK_SOURCE}") == [(25, 300)]


def test_notify_latency_tiny_run_of_every_system(tmp_path):
    """``python -m benchmarks.notify``: every listener gets every notification, in order,
    paced and in a burst, and the JSON holds each system's percentiles."""
    from benchmarks import notify
    require_server("postgresql")
    for interval, systems in (("0.0005", list(notify.SYSTEMS)), ("0", ["adb-psycopg2", "asyncpg"])):
        out = tmp_path / f"notify-{interval}.json"
        code = notify.main(["--dburl", URLS["postgresql"], "--count", "200", "--rounds", "1",
                            "--interval", interval, "--systems", ",".join(systems),
                            "--json", str(out)])
        document = json.loads(out.read_text())
        assert code == 0, document["summary"]
        assert document["unavailable"] == {}  # the project installs every peer
        assert list(document["summary"]) == systems
        for name, entry in document["summary"].items():
            assert entry["errors"] == [], (name, entry["errors"])
            assert entry["received"]["median"] == notify.WARMUP + 200
            assert 0 < entry["min_us"]["median"] <= entry["p50_us"]["median"] \
                <= entry["p99_us"]["median"] <= entry["max_us"]["median"], name
        assert document["ratios"]["asyncpg"]["p50_us"] == 1.0


def test_notify_latency_verification_catches_a_wrong_sequence():
    """A lost, duplicated, reordered or foreign notification, a gap reported by the
    listener, or a missing end is an error, never a figure."""
    from benchmarks import notify
    stamps = [notify.Stamp(i, 0) for i in range(5)]
    notify.check_sequence(stamps, 5)
    for wrong, message in (
            (stamps[:2] + stamps[3:], r"5 notifications sent, 4 received: 1 lost \(first: \[2\]\)"),
            (stamps + stamps[4:], r"1 duplicated \(first: \[4\]\)"),
            (stamps[:1] + stamps[2:3] + stamps[1:2] + stamps[3:], "1 out of order"),
            (stamps + [notify.Stamp(7, 0)], r"1 never sent \(first: \[7\]\)")):
        with pytest.raises(WrongResult, match=message):
            notify.check_sequence(wrong, 5)

    def collector(*seqs, end=True):
        c = notify.Collector()
        for seq in seqs:
            c.add(notify.payload(seq))
        if end:
            c.add(notify.END)
        return c
    figures = notify.figures_of(collector(0, 1, 2, 3), 4, 1)
    assert figures["received"] == 4 and figures["min_us"] <= figures["p99_us"]
    with pytest.raises(WrongResult, match="1 lost"):
        notify.figures_of(collector(0, 1, 3), 4, 1)
    with pytest.raises(WrongResult, match="not the end"):
        timed_out = collector(0, 1, 2, 3, end=False)
        timed_out.timed_out = True
        notify.figures_of(timed_out, 4, 1)
    gapped = collector(0, 1, 2, 3)
    gapped.gaps.append("reconnected (0 missed)")
    with pytest.raises(WrongResult, match="reported 1 gap"):
        notify.figures_of(gapped, 4, 1)
    bad = collector(0, 1)
    bad.add("hello")
    with pytest.raises(WrongResult, match="a payload that was not sent"):
        notify.figures_of(bad, 2, 0)


@pytest.mark.parametrize("rows, clients, size", [
    (100_000, 10, 64), (203, 4, 64), (203, 4, 1), (5, 10, 64), (640, 10, 64), (100_000, 10, 1)])
def test_the_c_clients_plan_covers_exactly_the_rows(rows, clients, size):
    from benchmarks.systems.cclients import plan
    rounds = plan(rows, clients, size)
    assert sum(one.rows for one in rounds) == rows
    assert all(one.clients <= clients and 1 <= one.size <= size for one in rounds)
    assert rounds[0].size == (size if rows >= clients * size else rounds[0].size)


@pytest.mark.parametrize("rows", [0, 1, 63, 64, 65, 203, 100_000])
def test_threads_pipelined_messages_cover_exactly_the_rows(rows):
    from benchmarks.systems.threads_pipelined import MESSAGE, messages
    sent = messages(rows)
    assert [row for message in sent for row in message] == [(i, str(i)) for i in range(rows)]
    assert all(1 <= len(message) <= MESSAGE for message in sent)


@pytest.mark.parametrize("kind, url", [("postgresql", URLS["postgresql"]),
                                       ("postgresql", psycopg_url()), ("mysql", URLS["mysql"])])
def test_threads_pipelined_runs_beside_the_pipelined_c_client(kind, url, tmp_path):
    """The Python limit runs on both servers (on PostgreSQL with psycopg 3 whatever
    the URL's driver), its rows verified like every system's, in messages of 64 by
    the client named for the server."""
    require_server(kind)
    out = tmp_path / "run.json"
    code = cli.main(["--dburl", url, "--rows", "203", "--pool_size", "4",
                     "--systems", "threads-pipelined,c-client-pipelined,threads",
                     "--json", str(out)])
    document = json.loads(out.read_text())
    assert code == 0, document["summary"]
    assert document["summary"]["threads-pipelined"]["errors"] == []
    figures = [run["figures"] for run in document["runs"] if run["system"] == "threads-pipelined"]
    assert [f["ok_calls"] for f in figures] == [203]
    assert figures[0]["statements_per_message"] == 64
    assert figures[0]["client"] == {"postgresql": "psycopg 3 pipeline",
                                    "mysql": "PyMySQL multi-statement"}[kind]
