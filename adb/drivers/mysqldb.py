"""mysqlclient (``MySQLdb``), for MySQL and MariaDB: libmysqlclient's C client.

A statement is one call into the C library, which lets go of the GIL while it waits
for the server and reads the answer in C; the worker holds the GIL to convert the
rows only. PyMySQL reads the protocol in Python with the GIL held, beside the loop
thread that serves the application: about three times the CPU a call.

What the server does is the same whichever client asks, so everything about MySQL
and MariaDB (errors, host lists and Galera, replicas, isolation, ``autobatch``'s
messages, ``KILL QUERY``, bulk loads) is PyMySQL's driver's; this module differs
where the client does. It has no pipelines (standalone calls run one at a time).
mysqlclient would allow several statements in one text on every connection; adb
allows them only for ``autobatch``'s messages, as on PyMySQL.

Install it with ``pip install mysqlclient`` (it builds against the MySQL or MariaDB
client headers: ``apt-get install default-libmysqlclient-dev pkg-config``, or the
platform's wheel); URLs ``mysql+mysqldb://``, or ``driver="MySQLdb"``.
"""

from __future__ import annotations

import functools
import importlib
import os
import socket
from typing import Any, NamedTuple, Optional

from ..target import Family
from .base import Connection, Cursor, DriverInfo, readable
from .cancel import shut_down
from .pymysql import (_MIN_PACKET_LIMIT, _TRANSIENT_ERRNOS, KillQuery, PyMySQLDriver,
                      packet_too_large)

#: the errors after which the connection is gone: 2006 server gone away, 2013 lost
#: during a query, 2014 commands out of sync, 2055 lost (a system error), 1927
#: MariaDB's killed connection, 4031 its idle timeout
_DISCONNECTS = frozenset({(2006,), (2013,), (2014,), (2055,), (1927,), (4031,)})


class MySQLdbDriver(PyMySQLDriver):
    info = DriverInfo("MySQLdb", Family.MYSQL, ("mysqldb",), default=False, extra="mysqldb")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cancel = SocketKillQuery(self)
        self.pipelines = None  # no hook into the client's messages here

    def _open_one(self, host: Optional[str], port: Optional[int]) -> Connection:
        """One connection (libmysqlclient's ``connect_timeout`` bounds the handshake
        too), with TCP keepalive so that a peer that vanished is noticed within a
        minute."""
        kwargs = dict(self.connect_kwargs)
        if host is not None:
            kwargs["host"] = host
        if port is not None:
            kwargs["port"] = port
        # mysqlclient allows several statements in one text unless told not to: as on
        # PyMySQL, only autobatch's messages (or a caller who asks for it) may
        kwargs["multi_statements"] = self.multi_statements or kwargs.get("multi_statements") is True
        plain = importlib.import_module(f"{self.dbapi.__name__}.connections").Connection
        conn = packet_guarded(plain)(*self.connect_args, **kwargs)
        # what a cancel needs, read now: mysqlclient refuses any method of a connection
        # called from another thread while the worker's call runs on it
        conn._adb_side = Side(conn.host, conn.port, conn.thread_id(), conn.fileno())
        if "unix_socket" not in kwargs:
            with _socket_of(conn) as sock:
                for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10),
                                      ("TCP_KEEPCNT", 3)):
                    if hasattr(socket, option):
                        sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        return conn

    def is_closed(self, conn: Connection) -> bool:
        return not conn.open

    def peer_gone(self, conn: Connection) -> bool:
        return readable(conn.fileno())

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        dbapi = self.dbapi
        if isinstance(exc, dbapi.InterfaceError):  # the connection was closed
            return True
        return isinstance(exc, dbapi.OperationalError) and exc.args[:1] in _DISCONNECTS

    def is_transient(self, exc: BaseException) -> bool:
        dbapi = self.dbapi
        return isinstance(exc, (dbapi.OperationalError, dbapi.InternalError)) \
            and exc.args[:1] in _TRANSIENT_ERRNOS

    @staticmethod
    def warning_count(cursor: Cursor) -> int:
        return int(cursor.connection.warning_count())

    def stream_cursor(self, conn: Connection) -> Cursor:
        """An unbuffered ``SSCursor``: rows are read off the socket as they are fetched."""
        from MySQLdb.cursors import SSCursor
        return conn.cursor(SSCursor)

    def close_stream(self, cursor: Cursor, exhausted: bool, keep_transaction: bool) -> bool:
        """As on PyMySQL: a stream closed early in a transaction of its own drops its
        connection rather than read every row left. libmysqlclient reads them when the
        result is freed, so the socket is shut down first: that read ends at once."""
        if exhausted or keep_transaction:
            return super(PyMySQLDriver, self).close_stream(cursor, exhausted, keep_transaction)
        conn = getattr(cursor, "cursor", cursor).connection  # a TextRows' own cursor
        try:
            self.cancel.abort(conn)
        except OSError:  # not connected any more: nothing left to read
            pass
        return super(PyMySQLDriver, self).close_stream(cursor, exhausted, keep_transaction)


@functools.lru_cache(maxsize=None)
def packet_guarded(cls: Any) -> Any:
    """``cls`` (mysqlclient's Connection) that refuses, before sending a byte of it, a
    statement longer than the server's ``max_allowed_packet``, as PyMySQL's driver
    does (``adb.drivers.pymysql.packet_guarded``): the server would cut the connection,
    and the caller could not tell whether it ran. Every statement of a cursor goes
    through ``query``; the limit is read once per connection, at its first statement
    long enough to meet any limit a server may have."""

    class PacketGuarded(cls):  # type: ignore[misc,unused-ignore]
        _adb_packet_limit: Optional[int] = None

        def query(self, query: Any) -> Any:
            if len(query) >= _MIN_PACKET_LIMIT:
                size = len(query.encode(self.encoding) if isinstance(query, str) else query) + 1
                limit = self._adb_max_allowed_packet()
                if size >= limit:  # the server refuses a packet as long as its limit
                    raise packet_too_large(size, limit, self.OperationalError)
            return super().query(query)

        def _adb_max_allowed_packet(self) -> int:
            if self._adb_packet_limit is None:
                super().query(b"select @@max_allowed_packet")
                (value,), = self.store_result().fetch_row()
                self._adb_packet_limit = int(value)
            return self._adb_packet_limit

    PacketGuarded.__name__ = PacketGuarded.__qualname__ = cls.__name__
    PacketGuarded.__module__ = cls.__module__
    return PacketGuarded


class Side(NamedTuple):
    """What another thread needs to stop a connection's call, read when it opened."""

    host: str
    port: int
    thread_id: int
    fd: int


class SocketKillQuery(KillQuery):
    """``KILL QUERY`` from a side connection, as on PyMySQL; a connection is cut by
    shutting down the socket libmysqlclient reads. Both use what the connection's
    ``Side`` says: the connection itself is the worker's while its call runs."""

    def cancel(self, conn: Connection) -> None:
        side: Side = conn._adb_side
        killer = self.driver.dbapi.connect(**{**self.driver.connect_kwargs, "host": side.host,
                                              "port": side.port, "connect_timeout": 5})
        try:
            with killer.cursor() as cursor:
                cursor.execute("KILL QUERY %s", (side.thread_id,))
        finally:
            killer.close()

    def abort(self, conn: Connection) -> None:
        if not conn.open:  # closed already: its descriptor may be another's by now
            return
        with socket.socket(fileno=os.dup(conn._adb_side.fd)) as sock:
            shut_down(sock)


def _socket_of(conn: Connection) -> socket.socket:
    """A socket over a duplicate of the connection's descriptor: options set through
    it are the connection's socket's; closing it leaves the connection's descriptor."""
    return socket.socket(fileno=os.dup(conn.fileno()))


DRIVER = MySQLdbDriver
