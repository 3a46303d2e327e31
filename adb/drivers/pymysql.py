"""PyMySQL, for MySQL and MariaDB: the protocol read in Python.

Connections run in autocommit mode; transactions use ``begin()``/``commit()``.
``executemany`` of an ``INSERT ... VALUES`` is rewritten by PyMySQL into multi-row
inserts, its bulk fast path. What the server does is ``_mysql.MySQLDriver``'s; here
is what PyMySQL does: its connections (each guarded against a statement over
``max_allowed_packet``), its socket, its unbuffered results, and pipelines of
standalone calls written and read with its own internals.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Optional

from ..sqltext import without_terminator
from ..target import Family
from ._mysql import MIN_PACKET_LIMIT, MySQLDriver, Side, keep_alive, packet_too_large
from .base import Connection, Cursor, DriverInfo, readable
from .cancel import shut_down
from .copy import TextRows
from .pipelines import Answered, PipelineBroken, Pipelines


class PyMySQLDriver(MySQLDriver):
    info = DriverInfo("pymysql", Family.MYSQL, ("pymysql",), default=True, extra="mysql")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pipelines = MySQLPipelines(self) if _speaks_messages(self.dbapi) else None

    def _open_one(self, host: Optional[str], port: Optional[int]) -> Connection:
        # PyMySQL's connect_timeout covers the TCP connect, not the handshake: bound
        # the handshake with a read timeout, lifted again once connected
        timeout = self.connect_kwargs.get("connect_timeout", 10)
        kwargs = {"read_timeout": timeout, **self.connect_kwargs}
        if host is not None:
            kwargs["host"] = host
        if port is not None:
            kwargs["port"] = port
        if self.multi_statements:
            from pymysql.constants import CLIENT
            kwargs["client_flag"] = kwargs.get("client_flag", 0) | CLIENT.MULTI_STATEMENTS
        conn = self.dbapi.connect(*self.connect_args, **kwargs)
        plain: Any = type(conn)
        conn.__class__ = packet_guarded(plain)
        if "read_timeout" not in self.connect_kwargs:
            conn._read_timeout = None
            conn._sock.settimeout(None)
        keep_alive(conn._sock)
        return conn

    def is_closed(self, conn: Connection) -> bool:
        return not conn.open

    def peer_gone(self, conn: Connection) -> bool:
        return readable(conn._sock.fileno())

    def side_of(self, conn: Connection) -> Side:
        return Side(conn.host, conn.port, conn.thread_id())

    def cut(self, conn: Connection) -> None:
        if conn._sock is not None:
            shut_down(conn._sock)

    @staticmethod
    def warning_count(cursor: Cursor) -> int:
        return int(cursor.warning_count)

    def close_stream(self, cursor: Cursor, exhausted: bool, keep_transaction: bool) -> bool:
        """An unbuffered result not read to its end blocks the connection: closing
        the cursor reads (and drops) every row left, however many millions. So a
        stream closed early in a transaction of its own drops its connection (one
        reconnect); in the caller's transaction, which must go on, it reads the rest."""
        if exhausted or keep_transaction:
            return super().close_stream(cursor, exhausted, keep_transaction)
        if isinstance(cursor, TextRows):
            cursor = cursor.cursor
        result = cursor._result  # forget the unread rows, or collecting these reads them
        if result is not None:
            result.unbuffered_active = False
        cursor.connection = None
        return True


class MySQLPipelines(Pipelines):
    """Multi-statement messages (on by default: faster here than one statement at
    a time); ``#`` starts a comment too."""

    default = True
    line_comment = ("--", "#")

    def __init__(self, driver: PyMySQLDriver) -> None:
        self.driver = driver

    def run(self, conn: Connection, statements: list[tuple[str, Any]]) -> list[Answered]:
        """Multi-statement messages, each statement rendered by PyMySQL's own
        escaping (``mogrify``, what ``execute`` does) and run by the server in its
        own implicit transaction (autocommit), as alone. The server stops a message
        at its first failing statement, so the ones after it have not run: they go
        again in the next message, and each statement runs exactly once."""
        answered: list[Answered] = []
        while len(answered) < len(statements):
            try:
                answered += self._message(conn, statements[len(answered):])
            except PipelineBroken as broken:
                raise PipelineBroken(answered + broken.answered, broken.error) from broken.error
            except BaseException as exc:
                if not answered:
                    raise
                raise PipelineBroken(answered, exc) from exc
        return answered

    def _message(self, conn: Connection, statements: list[tuple[str, Any]]) -> list[Answered]:
        """Send as many of ``statements`` as fit in one message; the answers read,
        up to and including a failing statement's. A connection opened without
        multi-statements (all but ``autobatch``'s) has them switched on for this
        message only (``COM_SET_OPTION`` before and after it, in the same write),
        so a caller's own text never runs as several statements anywhere else."""
        cursor = conn.cursor()
        texts: list[str] = []
        size = 0
        for sql, params in statements:
            try:
                text = cursor.mogrify(without_terminator(sql), params)
            except Exception as exc:  # refused before it was sent (its parameters)
                if not texts:
                    return [Answered(None, exc)]
                break
            if texts and size + len(text) >= self.driver.max_message:
                break
            texts.append(text)
            size += len(text) + 1
        count = len(texts)
        if count == 1:
            return [self._alone(cursor, texts[0])]
        message = ";".join(texts[:count])
        if len(message) >= MIN_PACKET_LIMIT and hasattr(conn, "_adb_max_allowed_packet"):
            conn._adb_max_allowed_packet()  # its one query, before any of the message is sent
        toggle = not self.driver.multi_statements
        if toggle:
            conn._execute_command(_COM_SET_OPTION, _MULTI_ON)
        conn._execute_command(_COM_QUERY, message)
        if toggle:
            conn._execute_command(_COM_SET_OPTION, _MULTI_OFF)
            conn._next_seq_id = 1
            conn._read_packet()  # the switch's EOF; an error here raises and drops the connection
        cursor._clear_result()
        cursor._executed = "pipeline"
        conn._next_seq_id = 1
        answered = []
        try:
            conn._affected_rows = conn._read_query_result()
            cursor._do_get_result()
            answered.append(_snapshot(cursor))
            while len(answered) < count and cursor.nextset():
                answered.append(_snapshot(cursor))
        except self.driver.dbapi.err.MySQLError as exc:
            if self.driver.is_disconnect(exc, conn):
                if answered:  # those answers were read: only the rest are in doubt
                    raise PipelineBroken(answered, exc) from exc
                raise
            answered.append(Answered(None, exc))  # the server stopped here
        if toggle:
            conn._next_seq_id = 1
            conn._read_packet()  # the switch back's EOF
        return answered

    def _alone(self, cursor: Cursor, text: str) -> Answered:
        try:
            cursor.execute(text)
        except self.driver.dbapi.err.MySQLError as exc:
            if self.driver.is_disconnect(exc, cursor.connection):
                raise
            return Answered(None, exc)
        return _snapshot(cursor)


class Result:
    """One statement's result read off a message, as a buffered cursor shows it."""

    __slots__ = ("description", "rowcount", "lastrowid", "rows", "position")

    def __init__(self, description: Any, rowcount: int, lastrowid: Any, rows: Any) -> None:
        self.description = description
        self.rowcount = rowcount
        self.lastrowid = lastrowid
        self.rows = list(rows) if rows else []
        self.position = 0

    def fetchone(self) -> Any:
        if self.position >= len(self.rows):
            return None
        self.position += 1
        return self.rows[self.position - 1]

    def fetchmany(self, size: int = 1) -> list[Any]:
        taken = self.rows[self.position:self.position + size]
        self.position += len(taken)
        return taken

    def fetchall(self) -> list[Any]:
        taken = self.rows[self.position:]
        self.position = len(self.rows)
        return taken


def _snapshot(cursor: Cursor) -> Answered:
    return Answered(Result(cursor.description, cursor.rowcount, cursor.lastrowid,
                           cursor.fetchall()), None)


#: the PyMySQL internals a pipeline's message is sent and read with (PyMySQL 1.1);
#: a PyMySQL without them runs one statement at a time instead
_MESSAGE_INTERNALS = {"Connection": ("_execute_command", "_read_packet", "_read_query_result"),
                      "Cursor": ("_clear_result", "_do_get_result", "mogrify", "nextset")}


def _speaks_messages(dbapi: Any) -> bool:
    """Whether this PyMySQL has what ``_message`` uses (else no pipelines)."""
    modules = {"Connection": getattr(dbapi, "connections", None),
               "Cursor": getattr(dbapi, "cursors", None)}
    return all(hasattr(getattr(module, name, None), attr)
               for name, module in modules.items() for attr in _MESSAGE_INTERNALS[name])


#: MySQL's commands and ``COM_SET_OPTION``'s two values (MYSQL_OPTION_MULTI_STATEMENTS_*)
_COM_QUERY, _COM_SET_OPTION = 0x03, 0x1B
_MULTI_ON, _MULTI_OFF = struct.pack("<H", 0), struct.pack("<H", 1)


@functools.lru_cache(maxsize=None)
def packet_guarded(cls: Any) -> Any:
    """``cls`` (PyMySQL's Connection) that refuses, before sending a byte of it, a
    command longer than the server's ``max_allowed_packet``: the server would cut
    the connection mid-send ("MySQL server has gone away", as if the statement may
    have run), where here the caller learns the limit and that nothing ran.
    The limit is read once per connection, at its first command long enough to
    meet any limit a server may have."""

    class PacketGuarded(cls):  # type: ignore[misc,unused-ignore]
        _adb_packet_limit: Optional[int] = None

        def _execute_command(self, command: int, sql: Any) -> Any:
            if len(sql) >= MIN_PACKET_LIMIT:
                size = len(sql.encode(self.encoding) if isinstance(sql, str) else sql) + 1
                limit = self._adb_max_allowed_packet()
                if size >= limit:  # the server refuses a packet as long as its limit
                    raise packet_too_large(size, limit, _operational_error())
            return super()._execute_command(command, sql)

        def _adb_max_allowed_packet(self) -> int:
            if self._adb_packet_limit is None:
                self.query("select @@max_allowed_packet")
                result: Any = getattr(self, "_result")
                self._adb_packet_limit = int(result.rows[0][0])
            return self._adb_packet_limit

    PacketGuarded.__name__ = PacketGuarded.__qualname__ = cls.__name__
    PacketGuarded.__module__ = cls.__module__
    return PacketGuarded


def _operational_error() -> type[Exception]:
    from pymysql.err import OperationalError
    return OperationalError


DRIVER = PyMySQLDriver
