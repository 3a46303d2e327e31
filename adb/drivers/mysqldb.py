"""mysqlclient (``MySQLdb``), for MySQL and MariaDB: libmysqlclient's C client.

A statement is one call into the C library, which lets go of the GIL while it waits
for the server and reads the answer in C; the worker holds the GIL to convert the
rows only. PyMySQL reads the protocol in Python with the GIL held, beside the loop
thread that serves the application: about three times the CPU a call.

What the server does is ``_mysql.MySQLDriver``'s, shared with PyMySQL's driver; here
is what mysqlclient does. It has no pipelines (standalone calls run one at a time).
It would allow several statements in one text on every connection; adb allows them
only for ``autobatch``'s messages, as on PyMySQL. It refuses any method of a
connection called from another thread while the connection's call runs, so what a
cancel or a forked child needs (the server, the connection's id, its socket) is read
when it opens (``adb_connection``).

Install it with ``pip install mysqlclient`` (it builds against the MySQL or MariaDB
client headers: ``apt-get install default-libmysqlclient-dev pkg-config``); URLs
``mysql+mysqldb://``, or ``driver="MySQLdb"``.
"""

from __future__ import annotations

import functools
import importlib
import os
import socket
from typing import Any, Optional

from ..target import Family
from ._mysql import MIN_PACKET_LIMIT, MySQLDriver, Side, keep_alive, packet_too_large
from .base import Connection, Cursor, DriverInfo, readable
from .cancel import shut_down
from .copy import TextRows


class MySQLdbDriver(MySQLDriver):
    info = DriverInfo("MySQLdb", Family.MYSQL, ("mysqldb",), default=False, extra="mysqldb")

    def _open_one(self, host: Optional[str], port: Optional[int]) -> Connection:
        """One connection (libmysqlclient's ``connect_timeout`` bounds the handshake
        too), with TCP keepalive (``keep_alive``)."""
        kwargs = dict(self.connect_kwargs)
        if host is not None:
            kwargs["host"] = host
        if port is not None:
            kwargs["port"] = port
        kwargs["multi_statements"] = self.multi_statements or kwargs.get("multi_statements") is True
        plain = importlib.import_module(f"{self.dbapi.__name__}.connections").Connection
        conn = adb_connection(plain)(*self.connect_args, **kwargs)
        with socket.socket(fileno=os.dup(conn._adb_fd)) as sock:  # options set through
            keep_alive(sock)  # a duplicate descriptor are the connection's socket's
        return conn

    def connect(self) -> Connection:
        """One connection set up, its socket and server read now (``remember``): the
        adbapi drop-in's native sessions open mysqlclient's own ``Connection``
        (``drivers._native``), which ``peer_gone``, ``side_of`` and ``cut`` read as
        they read adb's."""
        conn = super().connect()
        if not hasattr(conn, "_adb_fd"):
            remember(conn)
        return conn

    def is_closed(self, conn: Connection) -> bool:
        return not conn.open

    def peer_gone(self, conn: Connection) -> bool:
        return readable(conn._adb_fd)

    def side_of(self, conn: Connection) -> Side:
        side: Side = conn._adb_side
        return side

    def cut(self, conn: Connection) -> None:
        """Shut down the socket libmysqlclient reads, through a duplicate of its
        descriptor (a shutdown is the socket's, whichever descriptor asks)."""
        if not conn.open:  # closed already: its descriptor may be another's by now
            return
        with socket.socket(fileno=os.dup(conn._adb_fd)) as sock:
            shut_down(sock)

    @staticmethod
    def warning_count(cursor: Cursor) -> int:
        return int(cursor.connection.warning_count())

    def close_stream(self, cursor: Cursor, exhausted: bool, keep_transaction: bool) -> bool:
        """As on PyMySQL: a stream closed early in a transaction of its own drops its
        connection rather than read every row left. libmysqlclient reads them when the
        result is freed, so the socket is shut down first: that read ends at once."""
        if exhausted or keep_transaction:
            return super().close_stream(cursor, exhausted, keep_transaction)
        inner = cursor.cursor if isinstance(cursor, TextRows) else cursor
        try:
            self.cut(inner.connection)
        except OSError:  # not connected any more: nothing left to read
            pass
        super().close_stream(cursor, exhausted, keep_transaction)
        return True


@functools.lru_cache(maxsize=None)
def adb_connection(cls: Any) -> Any:
    """``cls`` (mysqlclient's Connection) as adb runs it.

    - It refuses, before sending a byte of it, a statement longer than the server's
      ``max_allowed_packet``, as PyMySQL's driver does: the server would cut the
      connection, and the caller could not tell whether it ran. Every statement of a
      cursor goes through ``query``; the limit is read once per connection, at its
      first statement long enough to meet any limit a server may have.
    - What other threads need is read when it opens (``_adb_side``, ``_adb_fd``), and
      ``fileno()`` answers from them: mysqlclient's own refuses while another
      thread's call runs, and a forked child, whose copy may be mid-call, must find
      the socket to point it away from the server (``adb.engine.lifecycle``).
    - ``next_result`` calls into the C client only when a result is left."""

    class AdbConnection(cls):  # type: ignore[misc,unused-ignore]
        _adb_packet_limit: Optional[int] = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            remember(self, super().fileno())

        def fileno(self) -> int:
            """The socket's descriptor from any thread; -1 once closed (the number may
            be another file's by then)."""
            return self._adb_fd if self.open else -1

        def query(self, query: Any) -> Any:
            if len(query) >= MIN_PACKET_LIMIT:
                size = len(query.encode(self.encoding) if isinstance(query, str) else query) + 1
                limit = self._adb_max_allowed_packet()
                if size >= limit:  # the server refuses a packet as long as its limit
                    raise packet_too_large(size, limit, self.OperationalError)
            return super().query(query)

        def next_result(self) -> int:
            """libmysqlclient's ``mysql_next_result`` only when the server said a
            result is left (``more_results()``). mysqlclient's cursors ask for the next
            result before every statement and when they close, and its
            ``next_result`` lets go of the GIL even when there is none, where
            libmysqlclient only answers -1 (and clears the last error, which nothing
            reads after a success). Beside a busy loop thread each such release costs
            a wait for the GIL: ten threads running a select beside one busy thread
            made 8.3 voluntary context switches a call and ran half as many calls."""
            if not self.more_results():
                return -1
            return int(super().next_result())

        def _adb_max_allowed_packet(self) -> int:
            if self._adb_packet_limit is None:
                super().query(b"select @@max_allowed_packet")
                (value,), = self.store_result().fetch_row()
                self._adb_packet_limit = int(value)
            return self._adb_packet_limit

    AdbConnection.__name__ = AdbConnection.__qualname__ = cls.__name__
    AdbConnection.__module__ = cls.__module__
    return AdbConnection


def remember(conn: Any, fd: Optional[int] = None) -> None:
    """Keep on ``conn`` what other threads read while its call runs, which
    mysqlclient's own methods then refuse: its socket's descriptor (``_adb_fd``,
    ``fd`` or its ``fileno()``) and its server and connection id (``_adb_side``).
    Read in the thread that opened it, before any call."""
    conn._adb_fd = conn.fileno() if fd is None else fd
    conn._adb_side = Side(conn.host, conn.port, conn.thread_id())


DRIVER = MySQLdbDriver
