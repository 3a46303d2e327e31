"""A run's sessions, transactions and rows, seen from the server through a
connection of its own: ``Admin`` counts, kills and reads only those of one run,
told apart by its name there (PostgreSQL's application_name, or the run's own
user on MariaDB).
"""

from __future__ import annotations

import contextlib
from typing import Any

from .systems.fault_pools import Target


class Admin:
    """A plain driver connection to the server (never through the proxy), as root:
    it counts, kills and reads only the sessions and rows of one run."""

    def __init__(self, url: str) -> None:
        target = Target.of(url, "", 1)
        self.kind = target.kind
        if self.kind == "postgresql":
            import psycopg2
            self.conn: Any = psycopg2.connect(host=target.host, port=target.port,
                                              user=target.user, dbname=target.database,
                                              password=target.password or None)
            self.conn.autocommit = True
        else:
            import pymysql
            self.conn = pymysql.connect(host=target.host, port=target.port, user=target.user,
                                        password=target.password, database=target.database,
                                        autocommit=True)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()
        cur.execute(sql, params)
        found = list(cur.fetchall()) if cur.description else []
        cur.close()
        return found

    def _own(self) -> str:
        """The condition that picks one run's sessions (its application_name or user)."""
        if self.kind == "postgresql":
            return "application_name = %s and pid <> pg_backend_pid()"
        return "user = %s and id <> connection_id()"

    def sessions(self, app: str) -> int:
        view = "pg_stat_activity" if self.kind == "postgresql" else "information_schema.processlist"
        return int(self.rows(f"select count(*) from {view} where {self._own()}", (app,))[0][0])

    def open_transactions(self, app: str) -> int:
        if self.kind == "postgresql":
            sql = (f"select count(*) from pg_stat_activity where {self._own()} "
                   "and state like 'idle in transaction%%'")
        else:
            sql = ("select count(*) from information_schema.innodb_trx t join "
                   "information_schema.processlist p on p.id = t.trx_mysql_thread_id "
                   "where p.user = %s and p.command = 'Sleep'")
        return int(self.rows(sql, (app,))[0][0])

    def kill(self, app: str) -> int:
        """Kill every session of the run (and only those); how many."""
        if self.kind == "postgresql":
            return len(self.rows("select pg_terminate_backend(pid) from pg_stat_activity "
                                 f"where {self._own()}", (app,)))
        ids = [r[0] for r in self.rows(
            f"select id from information_schema.processlist where {self._own()}", (app,))]
        for thread_id in ids:
            with contextlib.suppress(Exception):  # gone meanwhile
                self.rows("kill connection %s", (thread_id,))
        return len(ids)

    def close(self) -> None:
        self.conn.close()
