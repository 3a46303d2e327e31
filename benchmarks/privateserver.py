"""A throwaway PostgreSQL or MariaDB server of the benchmark's own, to restart
under load without touching anyone else's.

The ``faults`` scenario restarts a server in the middle of a run; the shared
servers (5432, 3306) must never be restarted, so it makes one here: its own data
directory under /tmp and its own port, from the same server binaries (PostgreSQL
through ``initdb``/``pg_ctl`` as the postgres user; MariaDB through
``mariadb-install-db``/``mariadbd`` as the mysql user), and removes it afterwards.
``Private`` is what a child process needs to restart it: plain fields, JSON-able.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, Optional

#: the OS user each server runs as (neither may run as root)
OWNER = {"postgresql": "postgres", "mysql": "mysql"}


@dataclasses.dataclass(frozen=True)
class Private:
    """One private server: its kind, data directory, port, and URL (user root)."""

    kind: str
    root: str
    port: int

    @property
    def url(self) -> str:
        scheme = "postgresql" if self.kind == "postgresql" else "mysql"
        return f"{scheme}://root@127.0.0.1:{self.port}/test"

    @property
    def data(self) -> str:
        return os.path.join(self.root, "data")

    @property
    def socket_path(self) -> str:
        return os.path.join(self.root, "mysqld.sock")

    @property
    def tmpdir(self) -> str:
        """MariaDB's temporary files. Never the shared /tmp: a MariaDB server deletes
        every ``#sql*`` file of its tmpdir as it starts, and in /tmp those include the
        temporary tables other servers are using (the test server's, mid-query)."""
        return os.path.join(self.root, "tmp")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def unavailable(kind: str) -> Optional[str]:
    """Why no private ``kind`` server can be made here (None: one can)."""
    if os.geteuid() != 0:
        return "a private server needs root (it runs as the server's own user)"
    tool = _pg_bin("initdb") if kind == "postgresql" else shutil.which("mariadb-install-db")
    if not tool or not os.path.exists(tool):
        return f"no server binaries for {kind} (initdb / mariadb-install-db)"
    return None


def _pg_bin(name: str) -> str:
    versions = sorted(os.listdir("/usr/lib/postgresql")) if os.path.isdir(
        "/usr/lib/postgresql") else []
    return f"/usr/lib/postgresql/{versions[-1]}/bin/{name}" if versions else ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _as_owner(kind: str, *argv: str, timeout: float = 120) -> None:
    done = subprocess.run(["runuser", "-u", OWNER[kind], "--", *argv], capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {(done.stderr or done.stdout).strip()[-400:]}")


def create(kind: str) -> Private:
    """Make, start and open a private ``kind`` server with a ``test`` database."""
    root = tempfile.mkdtemp(prefix=f"adb-faults-{kind}-", dir="/tmp")
    os.chmod(root, 0o755)
    shutil.chown(root, OWNER[kind], OWNER[kind])
    server = Private(kind, root, _free_port())
    if kind == "postgresql":
        _as_owner(kind, _pg_bin("initdb"), "-D", server.data, "-A", "trust", "-U", "root",
                  "--no-sync")
    else:
        os.mkdir(server.tmpdir)
        shutil.chown(server.tmpdir, OWNER[kind], OWNER[kind])
        _as_owner(kind, shutil.which("mariadb-install-db") or "mariadb-install-db",
                  "--no-defaults", f"--datadir={server.data}", "--skip-test-db",
                  "--auth-root-authentication-method=normal", f"--tmpdir={server.tmpdir}")
    start(server)
    _setup(server)
    return server


def start(server: Private) -> None:
    """Start it and wait until it accepts connections."""
    if server.kind == "postgresql":
        _as_owner(server.kind, _pg_bin("pg_ctl"), "-D", server.data, "-w", "-l",
                  os.path.join(server.root, "log"), "-o",
                  f"-p {server.port} -k {server.root} -c listen_addresses=127.0.0.1 "
                  "-c fsync=off -c max_connections=200", "start")
        return
    # setsid -f: detached at once, so no process object of ours is left to reap it
    subprocess.run(["setsid", "-f", "runuser", "-u", "mysql", "--", "/usr/sbin/mariadbd",
                    "--no-defaults",
                    f"--datadir={server.data}", f"--port={server.port}",
                    f"--socket={server.socket_path}", f"--tmpdir={server.tmpdir}",
                    "--bind-address=127.0.0.1",
                    "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=0",
                    f"--pid-file={server.root}/mysqld.pid", "--max-connections=300",
                    f"--log-error={server.root}/log"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    _wait_port(server.port)


def _wait_port(port: int, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the private server on port {port} did not start within {within} s")


def _setup(server: Private) -> None:
    """The test database, and for MariaDB root over TCP from 127.0.0.1."""
    if server.kind == "postgresql":
        try:
            import psycopg2 as driver
        except ImportError:  # where only psycopg 3 loads (the free-threaded build)
            import psycopg as driver  # type: ignore[no-redef]
        pg = driver.connect(host="127.0.0.1", port=server.port, user="root",
                            dbname="postgres")
        pg.autocommit = True
        pg.cursor().execute("create database test")
        pg.close()
        return
    import pymysql
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = pymysql.connect(unix_socket=server.socket_path, user="root", autocommit=True)
            break
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    cur = conn.cursor()
    for sql in ("create user if not exists root@'127.0.0.1'",
                "grant all on *.* to root@'127.0.0.1' with grant option",
                "create database if not exists test"):
        cur.execute(sql)
    conn.close()


def _mariadb_pid(server: Private) -> Optional[int]:
    try:
        with open(os.path.join(server.root, "mysqld.pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def restart(server: Private, mode: str = "fast") -> None:
    """Restart it (PostgreSQL ``pg_ctl restart -m <mode>``: ``fast``, or ``immediate``
    for a crash-like stop with recovery; MariaDB SIGTERM, then start again): every
    session ends, and the server answers again on the same port."""
    if server.kind == "postgresql":
        _as_owner(server.kind, _pg_bin("pg_ctl"), "-D", server.data, "-w", "-m", mode,
                  "-l", os.path.join(server.root, "log"), "restart")
        return
    _stop_mariadb(server)
    start(server)


def _stop_mariadb(server: Private, within: float = 30.0) -> None:
    pid = _mariadb_pid(server)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def remove(server: Private) -> None:
    """Stop it and delete its directory."""
    try:
        if server.kind == "postgresql":
            _as_owner(server.kind, _pg_bin("pg_ctl"), "-D", server.data, "-m", "immediate",
                      "-w", "stop", timeout=60)
        else:
            _stop_mariadb(server)
    finally:
        shutil.rmtree(server.root, ignore_errors=True)
