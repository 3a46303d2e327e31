"""Measure what adb does through pgbouncer, per pool mode, driver and ``pooler=``.

    .venv/bin/python -m tests.topologies.pgbouncer_cancel [--runs 5]

Starts a private pgbouncer (``apt-get install pgbouncer``; it must be on PATH) on
port 6439 in front of the test server, once in session mode and once in
transaction mode, and for psycopg2 and psycopg 3, with and without ``pooler=``:

- the cancel: ``select pg_sleep(3)`` with ``statement_timeout=0.5``, ``--runs``
  times; when the call ended (median, min, max), how it failed, and in how many
  runs the sleep was still running on the server afterwards (``pg_stat_activity``
  on the server itself);
- psycopg 3's prepared statements: two clients run one query in turn, 20 times
  each, with psycopg's default prepare threshold;
- LISTEN: a notification sent on the server itself, and what a listener through
  pgbouncer gets of it within 2 s;
- (transaction mode) psycopg2's cancel request to a frozen pgbouncer (SIGSTOP,
  resumed by a shell 1 s later): how far another Python thread got meanwhile, with
  adb's ``CancelKey`` (libpq through ctypes) and with psycopg2's own ``cancel()``.

Not a test (the suite's own checks are ``tests/topologies/test_pgbouncer.py``, on the
transaction-mode pgbouncer of ``.ci/start-pgbouncer``): it starts pgbouncers of
its own and takes about a minute. Prints one JSON line per measurement;
``docs/poolers.md`` has the figures.
"""

import argparse
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable
from urllib.parse import urlsplit

import psycopg2

import adb.sync
from adb.drivers.psycopg2 import CancelKey
from adb.errors import ConnectionLost, InterfaceError, StatementTimeout

from ..conftest import URLS

PORT = 6439
MODES = ("session", "transaction")
DRIVERS = ("psycopg2", "psycopg")
SLEEP = 3.0
TIMEOUT = 0.5
ROUNDS = 20


def start_pgbouncer(workdir: str, mode: str) -> "subprocess.Popen[bytes]":
    """A pgbouncer in ``mode`` on PORT, its files in ``workdir``; as postgres when root."""
    server = urlsplit(URLS["postgresql"])
    ini = os.path.join(workdir, "pgbouncer.ini")
    with open(ini, "w") as f:
        f.write(f"""[databases]
test = host={server.hostname} port={server.port or 5432} dbname={server.path.lstrip('/')}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {PORT}
unix_socket_dir =
auth_type = trust
auth_file = {workdir}/users.txt
pool_mode = {mode}
ignore_startup_parameters = extra_float_digits,options
logfile = {workdir}/pgbouncer.log
pidfile = {workdir}/pgbouncer.pid
""")
    with open(os.path.join(workdir, "users.txt"), "w") as f:
        f.write(f'"{server.username}" ""\n')
    user = ["-u", "postgres"] if os.geteuid() == 0 else []  # pgbouncer will not run as root
    if user:
        uid = pwd.getpwnam("postgres").pw_uid
        for path in [workdir] + [os.path.join(workdir, n) for n in os.listdir(workdir)]:
            shutil.chown(path, uid)
    proc = subprocess.Popen(["pgbouncer", "-q", *user, ini])
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"pgbouncer did not start; see {workdir}/pgbouncer.log")


def url(driver: str, pooler: str = "") -> str:
    user = urlsplit(URLS["postgresql"]).username
    scheme = "postgresql+psycopg" if driver == "psycopg" else "postgresql"
    return f"{scheme}://{user}@127.0.0.1:{PORT}/test" + (f"?pooler={pooler}" if pooler else "")


def still_running(admin: adb.sync.Database, marker: str) -> int:
    return admin.runQuery("select count(*) from pg_stat_activity where state = 'active' "
                          "and query like %s and pid <> pg_backend_pid()", (f"%{marker}%",))[0][0]


def one_cancel(db: adb.sync.Database, admin: adb.sync.Database) -> tuple[float, str, int]:
    """One ``pg_sleep`` past its timeout: (seconds to the call's end, outcome, still running)."""
    marker = f"adb_measure_{uuid.uuid4().hex[:10]}"
    start = time.monotonic()
    try:
        db.runQuery(f"select pg_sleep({SLEEP}) /* {marker} */")
        outcome = "completed"
    except (StatementTimeout, ConnectionLost) as exc:
        outcome = f"{type(exc).__name__}(may_have_run={exc.may_have_run})"
    ended = time.monotonic() - start
    running = still_running(admin, marker)
    if running:
        time.sleep(SLEEP - ended + 0.2)  # let it end before the next run
    return ended, outcome, running


def cancel(mode: str, driver: str, pooler: str, runs: int, admin: adb.sync.Database) -> dict:
    db = adb.sync.Database(url(driver, pooler), pool_size=1, statement_timeout=TIMEOUT)
    try:
        db.runQuery("select 1")
        results = [one_cancel(db, admin) for _ in range(runs)]
        try:
            serves: object = db.runQuery("select 1", statement_timeout=5) == [(1,)]
        except Exception as exc:  # what a pooler did to the next call: part of the measure
            serves = f"{type(exc).__name__}: {str(exc).strip()[:80]}"
    finally:
        db.close()
    ended = [r[0] for r in results]
    return {"measure": "cancel", "pool_mode": mode, "driver": driver, "pooler": pooler or None,
            "runs": runs, "ended_s": {"median": round(statistics.median(ended), 2),
                                      "min": round(min(ended), 2), "max": round(max(ended), 2)},
            "outcomes": sorted(set(r[1] for r in results)),
            "still_running_after": sum(1 for r in results if r[2]), "pool_serves_after": serves}


def prepared(mode: str, pooler: str) -> dict:
    """Two psycopg 3 clients, one query in turn, past the prepare threshold."""
    clients = [adb.sync.Database(url("psycopg", pooler), pool_size=1) for _ in range(2)]
    outcome = "ok"
    try:
        for i in range(ROUNDS):
            for client in clients:
                client.runQuery("select %s::int", (i,))
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {str(exc).strip()[:80]}"
    finally:
        for client in clients:
            client.close()
    return {"measure": "prepared statements", "pool_mode": mode, "driver": "psycopg",
            "pooler": pooler or None, "rounds": ROUNDS, "outcome": outcome}


def listen(mode: str, driver: str, pooler: str, admin: adb.sync.Database) -> dict:
    """A listener through pgbouncer; a notification sent on the server itself."""
    channel = f"adb_measure_{uuid.uuid4().hex[:10]}"
    db = adb.sync.Database(url(driver, pooler), pool_size=1)
    try:
        with db.listen(channel) as listener:
            admin.notify(channel, "hello")
            item = listener.get(2.0)
        payload = getattr(item, "payload", None)  # a Notification's; a gap or None has none
        outcome = f"received {payload!r}" if payload is not None else f"nothing within 2 s ({item!r})"
    except InterfaceError as exc:
        outcome = f"InterfaceError: {str(exc)[:70]}..."
    finally:
        db.close()
    return {"measure": "listen", "pool_mode": mode, "driver": driver, "pooler": pooler or None,
            "outcome": outcome}


def spins_while_frozen(pgbouncer: int, send: Callable[[], object]) -> dict:
    """Freeze pgbouncer, resume it 1 s later from a shell, and ``send`` a cancel to
    it meanwhile: how long ``send`` took and how many loops another thread made."""
    count = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1
    spinner = threading.Thread(target=spin)
    spinner.start()
    os.kill(pgbouncer, signal.SIGSTOP)
    subprocess.Popen(["sh", "-c", f"sleep 1; kill -CONT {pgbouncer}"])
    start = time.monotonic()
    send()
    took, spins = time.monotonic() - start, count[0]
    stop.set()
    spinner.join()
    return {"cancel_took_s": round(took, 2), "other_thread_loops": spins}


def frozen(pgbouncer: int) -> list[dict]:
    conn = psycopg2.connect(url("psycopg2"))
    try:
        key = CancelKey(conn)
        idle = spins_while_frozen(pgbouncer, lambda: time.sleep(1))
        via_ctypes = spins_while_frozen(pgbouncer, lambda: key.send(psycopg2.OperationalError))
        via_psycopg2 = spins_while_frozen(pgbouncer, conn.cancel)
    finally:
        conn.close()
    return [{"measure": "cancel to a frozen pooler", "how": how, **figures}
            for how, figures in (("nothing sent (time.sleep(1))", idle),
                                 ("adb CancelKey.send (PQcancel via ctypes)", via_ctypes),
                                 ("psycopg2 connection.cancel()", via_psycopg2))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="cancels per case (default 5)")
    args = parser.parse_args()
    logging.getLogger("adb").setLevel(logging.ERROR)  # each cancel's warning: the JSON says it
    if shutil.which("pgbouncer") is None:
        sys.exit("pgbouncer is not on PATH: apt-get install pgbouncer (or your system's package)")
    with adb.sync.Database(URLS["postgresql"], pool_size=1) as admin:
        for mode in MODES:
            with tempfile.TemporaryDirectory() as workdir:
                proc = start_pgbouncer(workdir, mode)
                try:
                    for driver in DRIVERS:
                        for pooler in ("", mode):
                            print(json.dumps(cancel(mode, driver, pooler, args.runs, admin)),
                                  flush=True)
                    for pooler in ("", mode):
                        print(json.dumps(prepared(mode, pooler)), flush=True)
                        print(json.dumps(listen(mode, "psycopg2", pooler, admin)), flush=True)
                    if mode == "transaction":
                        for line in frozen(proc.pid):
                            print(json.dumps(line), flush=True)
                finally:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.terminate()
                    proc.wait()


if __name__ == "__main__":
    main()
