"""PyMySQL, for MySQL and MariaDB.

Connections run in autocommit mode; transactions use ``begin()``/``commit()``.
``executemany`` of an ``INSERT ... VALUES`` is rewritten by PyMySQL into multi-row
inserts, its bulk fast path.
"""

from __future__ import annotations

import socket
from typing import Any, Optional

from ..errors import InterfaceError
from ..sqltext import Path, without_terminator
from ..target import Family
from .base import Connection, Cursor, Driver, DriverInfo, readable

_INT_KEYS = {"port", "connect_timeout", "read_timeout", "write_timeout",
             "max_allowed_packet", "client_flag"}


class PyMySQLDriver(Driver):
    info = DriverInfo("pymysql", Family.MYSQL, ("pymysql",), default=True, extra="mysql")
    autocommit = True
    #: CLIENT.MULTI_STATEMENTS on every connection: only with ``autobatch``
    multi_statements = False

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.connect_args:
            raise InterfaceError("pymysql.connect() takes keywords only (host=, user=, ...)")
        for key in _INT_KEYS & set(kwargs):
            kwargs[key] = _as_int(key, kwargs[key])
        for alias, key in (("dbname", "database"), ("db", "database"), ("passwd", "password")):
            if alias in kwargs:  # MySQLdb-era spellings
                kwargs[key] = kwargs.pop(alias)
        kwargs.setdefault("charset", "utf8mb4")
        kwargs["autocommit"] = True
        return super().check(kwargs)

    def open(self) -> Connection:
        # PyMySQL's connect_timeout covers the TCP connect, not the handshake: bound
        # the handshake with a read timeout, lifted again once connected
        timeout = self.connect_kwargs.get("connect_timeout", 10)
        kwargs = {"read_timeout": timeout, **self.connect_kwargs}
        if self.multi_statements:
            from pymysql.constants import CLIENT
            kwargs["client_flag"] = kwargs.get("client_flag", 0) | CLIENT.MULTI_STATEMENTS
        conn = self.dbapi.connect(*self.connect_args, **kwargs)
        if "read_timeout" not in self.connect_kwargs:
            conn._read_timeout = None
            conn._sock.settimeout(None)
        sock = conn._sock  # a peer that vanished without a word is noticed within a minute
        for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, option):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        return conn

    def begin(self, conn: Connection) -> None:
        conn.begin()

    def is_closed(self, conn: Connection) -> bool:
        return not conn.open

    def peer_gone(self, conn: Connection) -> bool:
        return readable(conn._sock.fileno())

    def cancel(self, conn: Connection) -> None:
        """KILL QUERY from a side connection (MySQL has no in-band cancel)."""
        side = self.dbapi.connect(**{**self.connect_kwargs, "connect_timeout": 5})
        try:
            with side.cursor() as cursor:
                cursor.execute("KILL QUERY %s", (conn.thread_id(),))
        finally:
            side.close()

    def socket_of(self, conn: Connection) -> Any:
        return conn._sock

    def fetchall(self, cursor: Cursor) -> list[Any]:
        return list(cursor.fetchall())

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        err = self.dbapi.err
        if isinstance(exc, err.InterfaceError):
            return True
        if isinstance(exc, err.InternalError) and "Packet sequence" in str(exc):
            return True
        return isinstance(exc, err.OperationalError) and exc.args[:1] in (
            (2006,), (2013,), (2014,), (1927,), (4031,))

    def enable_autobatch(self) -> None:
        self.multi_statements = True

    def path_of(self, sql: str) -> Path:
        """Any self-contained DML goes in a message (``#`` starts a comment here too)."""
        return self.message_safe(sql, ("--", "#"))

    def run_message(self, conn: Connection,
                    statements: list[tuple[str, Any]]) -> Optional[list[int]]:
        """``START TRANSACTION; s1; ...; sN; COMMIT`` in one message, each statement
        rendered by PyMySQL's own escaping (``mogrify``, what ``execute`` does) and
        its affected rows read with ``nextset()``. The server stops at the first
        failing statement, so COMMIT is never reached then: the unit is rolled back."""
        cursor = conn.cursor()
        try:
            body = ";".join(cursor.mogrify(without_terminator(sql), params)
                            for sql, params in statements)
            if len(body) > self.max_message:
                return None
            try:
                cursor.execute(f"START TRANSACTION;{body};COMMIT")
                counts: list[int] = []
                for _ in statements:
                    cursor.nextset()
                    counts.append(cursor.rowcount)
                cursor.nextset()  # the COMMIT's
            except BaseException:
                self.rollback_quietly(conn)
                raise
        finally:
            cursor.close()
        return counts


def _as_int(key: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InterfaceError(f"mysql {key}={value!r} is not an integer") from None


DRIVER = PyMySQLDriver
