"""A throwaway PostgreSQL primary and synchronous hot standby, for failover tests.

The failover tests crash a primary and promote its standby, which no test may do
to the shared servers on 5432/5433: each test makes its own pair here, on free
ports in a temporary directory, with the same server binaries (run as the
postgres user), and removes it afterwards. The standby is synchronous
(``synchronous_standby_names = '*'``): a commit is acknowledged only once the
standby has flushed it, which is what makes "no acknowledged write lost" hold
across a crash. ``docs/replicas.md`` says the same for real deployments.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from ..conftest import IN_CI


def _bin_dir():
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    return f"/usr/lib/postgresql/{versions[-1]}/bin" if versions else ""


def require_pair_tools():
    """Skip (fail under CI=true) unless this process can make a pair: root, the
    postgres user and the server binaries, as on the CI machine."""
    bin_dir = _bin_dir()
    missing = None
    if os.geteuid() != 0:
        missing = "root (the servers run as the postgres user)"
    elif not os.path.exists(os.path.join(bin_dir, "initdb")):
        missing = "PostgreSQL's server binaries (apt-get install postgresql)"
    if missing:
        message = f"a throwaway primary/standby pair needs {missing}"
        if IN_CI:
            pytest.fail(message + " (CI=true: server-backed tests must run)")
        pytest.skip(message)


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgPair:
    """A primary on ``primary_port`` streaming synchronously to a standby on ``standby_port``."""

    def __init__(self):
        self.bin = _bin_dir()
        self.root = tempfile.mkdtemp(prefix="adb-pgpair-", dir="/var/tmp")
        shutil.chown(self.root, "postgres", "postgres")
        self.primary_dir = os.path.join(self.root, "primary")
        self.standby_dir = os.path.join(self.root, "standby")
        self.primary_port, self.standby_port = _free_port(), _free_port()

    def url(self, driver="postgresql", **query):
        """The multi-host URL of the pair, primary first: a failover is a reconnect."""
        params = "&".join(f"{k}={v}" for k, v in {"target_session_attrs": "read-write",
                                                   "connect_timeout": 2, **query}.items())
        return (f"{driver}://root@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
                f"/postgres?{params}")

    def start(self):
        self._run(f"{self.bin}/initdb", "-D", self.primary_dir, "-A", "trust", "-U", "root",
                  "--no-sync", "-E", "UTF8")
        self._configure(self.primary_dir, self.primary_port,
                        "synchronous_standby_names = '*'\n")
        with open(os.path.join(self.primary_dir, "pg_hba.conf"), "a") as f:
            f.write("host replication all 127.0.0.1/32 trust\n")
        self._ctl(self.primary_dir, "start")
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "root",
                  "-D", self.standby_dir, "-R", "-X", "stream", "-c", "fast")
        # the copy would wait, once promoted, for a synchronous standby of its own
        self._configure(self.standby_dir, self.standby_port, "synchronous_standby_names = ''\n")
        self._ctl(self.standby_dir, "start")
        self._wait_sync()
        return self

    def crash_primary(self):
        """Stop the primary the way a crash does (``immediate``: no shutdown checkpoint,
        clients cut at once)."""
        self._ctl(self.primary_dir, "stop", "-m", "immediate")

    def promote(self):
        """Make the standby the primary (``pg_ctl promote``, waiting until it is)."""
        self._ctl(self.standby_dir, "promote")

    def close(self):
        for path in (self.standby_dir, self.primary_dir):
            if os.path.exists(os.path.join(path, "postmaster.pid")):
                subprocess.run(["runuser", "-u", "postgres", "--", f"{self.bin}/pg_ctl", "-D",
                                path, "stop", "-m", "immediate"], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)

    def _configure(self, data_dir, port, extra):
        with open(os.path.join(data_dir, "postgresql.conf"), "a") as f:
            f.write(f"port = {port}\nlisten_addresses = '127.0.0.1'\n"
                    f"unix_socket_directories = '{self.root}'\nshared_buffers = 32MB\n"
                    f"max_connections = 60\nwal_receiver_status_interval = 1s\n{extra}")

    def _wait_sync(self):
        deadline = time.monotonic() + 30
        query = "select sync_state from pg_stat_replication"
        while self._psql(self.primary_port, query) != "sync":
            if time.monotonic() > deadline:
                raise AssertionError("the standby of the pair never became synchronous")
            time.sleep(0.1)

    def _psql(self, port, sql):
        done = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "root", "-d",
                               "postgres", "-tAqc", sql], capture_output=True, text=True)
        return done.stdout.strip()

    def _ctl(self, data_dir, *args):
        self._run(f"{self.bin}/pg_ctl", "-D", data_dir, "-l", data_dir + ".log", "-w",
                  "-t", "60", *args)

    def _run(self, *argv):
        done = subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True,
                              text=True, timeout=120)
        if done.returncode:
            raise AssertionError(f"{' '.join(argv[:2])} failed: {done.stderr.strip()[-500:]}")
