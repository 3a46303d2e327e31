"""Measure what a statement_timeout does through pgbouncer, per PostgreSQL driver.

    .venv/bin/python -m tests.pgbouncer_cancel

Starts a private pgbouncer (``apt-get install pgbouncer``; it must be on PATH) in
front of the test server, then, for psycopg2 and psycopg 3 and each pool mode,
runs ``select pg_sleep(3)`` with ``statement_timeout=0.5`` and reports when the
call ended and whether the sleep was still running on the server afterwards.
Not a test: it needs a tool CI does not install. Prints one JSON line per run.
"""

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlsplit

import adb.sync
from adb.errors import ConnectionLost, StatementTimeout

from .conftest import URLS

PORT = 6439


def start_pgbouncer(workdir, mode):
    server = urlsplit(URLS["postgresql"])
    ini = os.path.join(workdir, f"{mode}.ini")
    with open(ini, "w") as f:
        f.write(f"""[databases]
test = host={server.hostname} port={server.port or 5432} dbname={server.path.lstrip('/')}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {PORT}
auth_type = trust
auth_file = {workdir}/users.txt
pool_mode = {mode}
ignore_startup_parameters = extra_float_digits,options
logfile = {workdir}/{mode}.log
pidfile = {workdir}/{mode}.pid
""")
    with open(os.path.join(workdir, "users.txt"), "w") as f:
        f.write(f'"{server.username}" ""\n')
    user = ["-u", "postgres"] if os.geteuid() == 0 else []  # pgbouncer will not run as root
    if user:
        shutil.chown(workdir, pwd.getpwnam("postgres").pw_uid)
        for name in os.listdir(workdir):
            shutil.chown(os.path.join(workdir, name), pwd.getpwnam("postgres").pw_uid)
    proc = subprocess.Popen(["pgbouncer", "-q", *user, ini])
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"pgbouncer did not start; see {workdir}/{mode}.log")


def still_sleeping(admin):
    return admin.runQuery("select count(*) from pg_stat_activity "
                          "where query = 'select pg_sleep(3)' and state = 'active'")[0][0]


def measure(driver, mode, admin):
    user = urlsplit(URLS["postgresql"]).username
    scheme = "postgresql+psycopg" if driver == "psycopg" else "postgresql"
    extra = "?prepare_threshold=none" if driver == "psycopg" else ""
    db = adb.sync.Database(f"{scheme}://{user}@127.0.0.1:{PORT}/test{extra}", pool_size=1,
                           statement_timeout=0.5)
    try:
        db.runQuery("select 1")
        start = time.monotonic()
        try:
            db.runQuery("select pg_sleep(3)")
            outcome = "completed"
        except (StatementTimeout, ConnectionLost) as exc:
            outcome = f"{type(exc).__name__}(may_have_run={exc.may_have_run})"
        ended = time.monotonic() - start
        running = still_sleeping(admin)
        serves = db.runQuery("select 1", statement_timeout=5) == [(1,)]
    finally:
        db.close()
    return {"driver": driver, "pool_mode": mode, "call_ended_s": round(ended, 2),
            "outcome": outcome, "sleep_still_running_after": running, "pool_serves_after": serves}


def main():
    if shutil.which("pgbouncer") is None:
        sys.exit("pgbouncer is not on PATH: apt-get install pgbouncer (or your system's package)")
    with adb.sync.Database(URLS["postgresql"], pool_size=1) as admin:
        for mode in ("session", "transaction"):
            with tempfile.TemporaryDirectory() as workdir:
                proc = start_pgbouncer(workdir, mode)
                try:
                    for driver in ("psycopg2", "psycopg"):
                        print(json.dumps(measure(driver, mode, admin)), flush=True)
                        time.sleep(3)  # let a sleep that survived end before the next run
                finally:
                    proc.terminate()
                    proc.wait()


if __name__ == "__main__":
    main()
