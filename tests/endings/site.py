"""One database the work of one example runs on, and the test's own view of it.

A ``Site`` is a driver (sqlite, postgresql = psycopg2, psycopg = psycopg 3, mysql =
PyMySQL on MariaDB, mysqldb = mysqlclient on MariaDB), a URL, a token table of the
example's own and, on the servers, a *gate*: a one-row table every token insert
reads with a share lock. The test closes the gate by holding that row's exclusive
lock in a transaction of its own: every insert then waits on the server, where
``pg_stat_activity`` / ``information_schema.processlist`` show it, so an ending can
be fired while exactly the statements the generator asked for are running, and the
test can ask the server afterwards whether any of them is still there. The table's
name is the marker: it is in the text of every statement of the work (PostgreSQL
sessions also carry it as ``application_name``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterable, Optional
from urllib.parse import urlsplit, urlunsplit

import adb.sync

from ..conftest import DIALECTS, URLS, mysql_thread_id, need_module, require_server, with_dialect

#: driver -> server kind
KINDS = {"sqlite": "sqlite", "postgresql": "postgresql", "psycopg": "postgresql",
         "mysql": "mysql", "mysqldb": "mysql"}
#: the drop-in's DB-API module per driver
DBAPI = {"sqlite": "sqlite3", "postgresql": "psycopg2", "psycopg": "psycopg", "mysql": "pymysql",
         "mysqldb": "MySQLdb"}
#: how an insert takes the gate row's share lock
SHARE = {"postgresql": "for share", "mysql": "lock in share mode"}


def with_query(url: str, **params: Any) -> str:
    parts = urlsplit(url)
    query = "&".join([parts.query] * bool(parts.query) + [f"{k}={v}" for k, v in params.items()])
    return urlunsplit(parts._replace(query=query))


class Site:
    """The example's database: its URL for the work, its tables, its gate, and
    the test's own connections to look at it from outside the work."""

    def __init__(self, driver: str, tmp_dir: str, server_url: Optional[str] = None) -> None:
        self.driver, self.kind = driver, KINDS[driver]
        self.table = "adb_end_" + uuid.uuid4().hex[:10]
        self.gate_table = self.table + "_g"
        self.p = "?" if self.kind == "sqlite" else "%s"
        if self.kind == "sqlite":
            self.admin_url = self.url = f"sqlite:///{tmp_dir}/{self.table}.db"
        else:
            if server_url is None:
                require_server(self.kind)
                server_url = URLS[self.kind]
            if driver in DIALECTS:
                need_module(DBAPI[driver])
                server_url = with_dialect(server_url, DIALECTS[driver])
            self.admin_url = server_url
            self.url = (with_query(server_url, application_name=self.table)
                        if self.kind == "postgresql" else server_url)
        self.admin = adb.sync.Database(self.admin_url, pool_size=1, name=f"{self.table}-admin")
        self._holder: Any = None
        self._holder_tx: Any = None

    @classmethod
    def named(cls, driver: str, table: str, url: str) -> Site:
        """The site as the work in another process sees it: its names, no
        connection of the test's."""
        site = cls.__new__(cls)
        site.driver, site.kind, site.table = driver, KINDS[driver], table
        site.gate_table, site.url = table + "_g", url
        site.p = "?" if site.kind == "sqlite" else "%s"
        return site

    @property
    def gated(self) -> bool:
        """True where inserts go through the gate (the servers)."""
        return self.kind != "sqlite"

    def create(self) -> None:
        self.admin.runOperation(f"create table {self.table} (token varchar(60), n int)")
        if self.gated:
            self.admin.runOperation(f"create table {self.gate_table} (id int primary key)")
            self.admin.runOperation(f"insert into {self.gate_table} values (1)")

    def drop(self) -> None:
        self.open_gate()
        try:
            for name in (self.table, self.gate_table):
                self.admin.runOperation(f"drop table if exists {name}")
        finally:
            self.admin.close()

    # -- the statements of the work ----------------------------------------------------

    def insert_sql(self) -> str:
        """One token insert (token, n): through the gate on the servers."""
        if not self.gated:
            return f"insert into {self.table} (token, n) values (?, ?)"
        return (f"insert into {self.table} (token, n) select %s, %s from {self.gate_table} "
                f"where id = 1 {SHARE[self.kind]}")

    def stream_sql(self, rows: int) -> str:
        """A read of ``rows`` rows whose text names the table (the marker)."""
        if self.kind == "postgresql":
            return f"select n from generate_series(1, {rows}) as {self.table}_s(n)"
        if self.kind == "mysql":
            return f"select seq from seq_1_to_{rows} as {self.table}_s"
        return (f"with recursive {self.table}_s(n) as (select 1 union all select n + 1 "
                f"from {self.table}_s where n < {rows}) select n from {self.table}_s")

    # -- the gate ------------------------------------------------------------------------

    def close_gate(self) -> None:
        """Hold the gate row's exclusive lock: every insert of the work waits."""
        assert self.gated and self._holder_tx is None
        if self._holder is None:
            self._holder = adb.sync.Database(self.admin_url, pool_size=1,
                                             name=f"{self.table}-gate")
        self._holder_tx = self._holder.beginTransaction()
        self._holder_tx.runQuery(f"select id from {self.gate_table} where id = 1 for update")

    def open_gate(self) -> None:
        """Let the waiting inserts through (idempotent)."""
        if self._holder_tx is not None:
            tx, self._holder_tx = self._holder_tx, None
            tx.rollback()
        if self._holder is not None:
            holder, self._holder = self._holder, None
            holder.close()

    @property
    def gate_closed(self) -> bool:
        return self._holder_tx is not None

    # -- what the server shows -----------------------------------------------------------

    def running(self) -> int:
        """How many statements of the work the server is running (or has waiting)."""
        like = f"%{self.table}%"
        if self.kind == "postgresql":
            return int(self.admin.runQueryValue(
                "select count(*) from pg_stat_activity where query like %s and state = 'active' "
                "and pid <> pg_backend_pid()", (like,)) or 0)
        if self.kind == "mysql":
            return int(self.admin.runQueryValue(
                "select count(*) from information_schema.processlist where info like %s "
                "and id <> connection_id()", (like,)) or 0)
        return 0

    def open_transactions(self) -> int:
        """PostgreSQL: sessions of the work left inside a transaction (0 elsewhere:
        MariaDB shows no statement text for an idle session)."""
        if self.kind != "postgresql":
            return 0
        return int(self.admin.runQueryValue(
            "select count(*) from pg_stat_activity where application_name = %s "
            "and state like 'idle in transaction%%'", (self.table,)) or 0)

    def wait_running(self, n: int, within: float) -> int:
        """Poll until the server runs at least ``n`` statements of the work; how many."""
        deadline = time.monotonic() + within
        while True:
            seen = self.running()
            if seen >= n or time.monotonic() > deadline:
                return seen
            time.sleep(0.01)

    def wait_quiet(self, within: float, transactions: bool = False) -> Optional[str]:
        """Poll until nothing of the work runs on the server (and, with
        ``transactions``, no session of it is left in a transaction); None, or
        what was still there after ``within`` seconds."""
        deadline = time.monotonic() + within
        while True:
            running = self.running()
            open_tx = self.open_transactions() if transactions else 0
            if running == 0 and open_tx == 0:
                return None
            if time.monotonic() > deadline:
                return (f"{running} statement(s) of the work still running and {open_tx} "
                        f"session(s) in a transaction {within} s after the ending: "
                        f"{self.describe()}")
            time.sleep(0.02)

    def describe(self) -> Any:
        like = f"%{self.table}%"
        if self.kind == "postgresql":
            return self.admin.runQuery(
                "select pid, state, wait_event_type, left(query, 120) from pg_stat_activity "
                "where (query like %s or application_name = %s) and pid <> pg_backend_pid()",
                (like, self.table))
        if self.kind == "mysql":
            return self.admin.runQuery(
                "select id, command, state, left(info, 120) from information_schema.processlist "
                "where info like %s and id <> connection_id()", (like,))
        return []

    def kill_all(self, thread_ids: Iterable[int] = ()) -> int:
        """Kill every session of the work from the server side; how many."""
        if self.kind == "postgresql":
            return len(self.admin.runQuery(
                "select pg_terminate_backend(pid) from pg_stat_activity "
                "where application_name = %s", (self.table,)))
        ids = {row[0] for row in self.admin.runQuery(
            "select id from information_schema.processlist where info like %s "
            "and id <> connection_id()", (f"%{self.table}%",))} | set(thread_ids)
        killed = 0
        for thread_id in ids:
            try:
                self.admin.runOperation("KILL CONNECTION %s", (thread_id,))
                killed += 1
            except Exception:  # gone meanwhile
                pass
        return killed

    def tokens(self) -> list[str]:
        return [row[0] for row in self.admin.runQuery(f"select token from {self.table}")]


def thread_ids(connections: Iterable[Any]) -> list[int]:
    """MariaDB thread ids of DB-API connections (PyMySQL's or mysqlclient's, or adb's
    wrapper of one; ``conftest.mysql_thread_id``)."""
    ids = []
    for conn in connections:
        raw = getattr(conn, "raw", conn)
        try:
            ids.append(mysql_thread_id(raw if hasattr(raw, "thread_id") else conn))
        except Exception:  # not connected, or not PyMySQL
            pass
    return ids
