"""psycopg (version 3), for PostgreSQL: ``postgresql+psycopg://`` or ``driver="psycopg"``.

Parameters are bound server-side, psycopg 3's default: they travel apart from
the statement, so a placeholder can stand only where PostgreSQL takes a
parameter (not in ``SET x = %s`` or DDL; compose those with ``psycopg.sql``).
For psycopg2's client-side interpolation pass ``cursor_factory=psycopg.ClientCursor``.

Connections run in autocommit mode; a transaction switches it off until it
ends. ``runMany`` uses psycopg's ``executemany``, which pipelines the statements
(one round trip per batch, not per row). A statement is cancelled in-band with
``cancel_safe()``: the request goes over PostgreSQL's own cancel protocol, so it
reaches the right backend through pgbouncer too, and the thread that sends it
waits without holding the GIL.

Through a transaction pooler (``Database(pooler="transaction")``) statements are
never prepared (``prepare_threshold=None``, unless given): psycopg prepares a
statement run ``prepare_threshold`` times on its connection, and the next
transaction may run on a server connection where that name does not exist, or
already names another client's statement.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable, Optional, Sequence

from ..copytext import text_chunks
from ..errors import InterfaceError
from ..sqltext import Path, without_terminator
from ..target import Family
from . import _libpq
from .base import Connection, Cursor, Driver, DriverInfo, Pooler, ReplicaPosition

#: connect() keywords that are psycopg's own, not libpq connection options
_PSYCOPG_KEYS = frozenset({"prepare_threshold", "cursor_factory", "context"})
#: how long a cancel request may take before the watchdog cuts the connection instead
CANCEL_TIMEOUT = 5.0


class PsycopgDriver(Driver):
    info = DriverInfo("psycopg", Family.POSTGRESQL, ("psycopg", "psycopg3"), extra="psycopg")
    autocommit = True
    poolers = _libpq.POOLERS
    cancel_check = _libpq.CANCEL_CHECK

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the listening connection -> the notifications its handler received
        self._received: weakref.WeakKeyDictionary[Connection, list[Any]] = \
            weakref.WeakKeyDictionary()

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        from psycopg.conninfo import make_conninfo
        if len(self.connect_args) > 1:
            raise InterfaceError("psycopg.connect() takes one positional argument, the conninfo")
        for key in ("autocommit", "row_factory"):
            if key in kwargs:
                raise InterfaceError(
                    f"psycopg {key}= is adb's to set: transactions are adb's "
                    "(beginTransaction), rows its row_factory= (Database(row_factory=...))")
        if "database" in kwargs:
            if "dbname" in kwargs:
                raise InterfaceError("give the PostgreSQL database as dbname= or database=, not both")
            kwargs["dbname"] = kwargs.pop("database")
        if "prepare_threshold" in kwargs:
            kwargs["prepare_threshold"] = _threshold(kwargs["prepare_threshold"])
        elif self.pooler is Pooler.TRANSACTION:
            kwargs["prepare_threshold"] = None  # a prepared statement lives in one server session
        dsn = str(self.connect_args[0]) if self.connect_args else ""
        _libpq.with_defaults(kwargs, dsn)
        options = {k: v for k, v in kwargs.items() if k not in _PSYCOPG_KEYS}
        try:
            make_conninfo(dsn, **options)
        except self.dbapi.ProgrammingError as exc:
            raise InterfaceError(f"bad PostgreSQL connection option: {exc}") from None
        return kwargs

    def replica_position(self, conn: Connection) -> ReplicaPosition:
        return _libpq.replica_position(conn)

    def open(self) -> Connection:
        return self.dbapi.connect(*self.connect_args, autocommit=True, **self.connect_kwargs)

    def begin(self, conn: Connection) -> None:
        conn.autocommit = False

    def commit(self, conn: Connection) -> None:
        conn.commit()
        conn.autocommit = True

    def rollback(self, conn: Connection) -> None:
        conn.rollback()
        conn.autocommit = True

    begin_read_only = _libpq.begin_read_only
    stream_cursor = _libpq.stream_cursor

    def close_stream(self, cursor: Cursor, exhausted: bool, keep_transaction: bool) -> bool:
        if isinstance(cursor, CopyOut):
            cursor.end(cancel=not (exhausted or keep_transaction))
            return False
        return super().close_stream(cursor, exhausted, keep_transaction)

    def open_export(self, conn: Connection, sql: Any, params: Any) -> Cursor:
        """``COPY (sql) TO STDOUT``: the server writes the text format itself."""
        return CopyOut(conn.cursor(), f"COPY ({without_terminator(sql)}) TO STDOUT", params)

    def copy_rows(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  rows: Iterable[Sequence[Any]]) -> int:
        """One ``COPY ... FROM STDIN``: psycopg writes each row as it comes and
        sends the data in pieces, so memory stays bounded however many rows."""
        with cursor.copy(_libpq.copy_from_sql(table, columns)) as copy:
            write_row = copy.write_row
            for row in rows:
                write_row(row)
        count: int = cursor.rowcount
        return count

    def copy_text(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  source: Any) -> int:
        with cursor.copy(_libpq.copy_from_sql(table, columns)) as copy:
            for piece in text_chunks(source):
                copy.write(piece)
        count: int = cursor.rowcount
        return count

    can_listen = True
    listen_channels = _libpq.listen_channels
    listen_fileno = _libpq.listen_fileno
    backend_pid = _libpq.backend_pid

    def listen_connect(self) -> Connection:
        """A connection whose notifications go to a list of its own (``received``):
        psycopg hands each to its notify handlers, whether it arrived while a
        statement ran (the LISTEN itself) or was read by ``read_notifies``."""
        conn = self.connect()
        received: list[Any] = []
        conn.add_notify_handler(received.append)
        self._received[conn] = received
        return conn

    def read_notifies(self, conn: Connection) -> list[tuple[int, str, str]]:
        """libpq's non-blocking read (``consume_input``, raising if the connection is
        gone), then each parsed notification through psycopg's own handler, which
        decodes it in the connection's encoding and appends it to ``received``."""
        pgconn = conn.pgconn
        pgconn.consume_input()
        handler = pgconn.notify_handler
        while True:
            raw = pgconn.notifies()
            if raw is None:
                break
            handler(raw)
        received = self._received[conn]
        if not received:
            return []
        taken = [(n.pid, n.channel, n.payload) for n in received]
        del received[:]
        return taken

    def failed_transaction(self, conn: Connection) -> bool:
        return bool(conn.info.transaction_status == self.dbapi.pq.TransactionStatus.INERROR)

    def executemany(self, cursor: Cursor, sql: str,
                    seq_of_params: Iterable[Sequence[Any]]) -> int:
        cursor.executemany(sql, seq_of_params)
        count: int = cursor.rowcount
        return max(count, 0)  # psycopg sums the sets' counts; -1 for none

    def is_closed(self, conn: Connection) -> bool:
        return bool(conn.closed)

    def peer_gone(self, conn: Connection) -> bool:
        return _libpq.peer_gone(conn.fileno())

    def cancel(self, conn: Connection) -> None:
        conn.cancel_safe(timeout=CANCEL_TIMEOUT)

    def abort(self, conn: Connection) -> None:
        _libpq.shut_down(conn.fileno())

    def is_transient(self, exc: BaseException) -> bool:
        return getattr(exc, "sqlstate", None) in _libpq.TRANSIENT_SQLSTATES

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        return bool(conn.closed or conn.broken)

    def path_of(self, sql: str) -> Path:
        """Any self-contained DML goes in a message: each statement's own command
        tag is read with ``nextset()``."""
        return self.message_safe(sql)

    def run_message(self, conn: Connection, statements: list[tuple[str, Any]]) -> Any:
        """The statements rendered by psycopg's client-side binding (``ClientCursor``,
        psycopg2's way), joined with ``;`` into one simple-protocol query, which
        PostgreSQL runs as one implicit transaction: all commit or none."""
        cursor = self.dbapi.ClientCursor(conn)
        try:
            message = ";".join(cursor.mogrify(without_terminator(sql), params)
                               for sql, params in statements)
            if len(message) > self.max_message:
                return None
            cursor.execute(message)
            counts = [cursor.rowcount]
            while cursor.nextset():
                counts.append(cursor.rowcount)
        finally:
            cursor.close()
        return counts


class CopyOut:
    """A ``COPY ... TO STDOUT`` read as a stream's cursor: each row is one line."""

    description = None

    def __init__(self, cursor: Cursor, sql: str, params: Any) -> None:
        self.cursor = cursor
        self.block = cursor.copy(sql, params)
        try:
            self.copy = self.block.__enter__()
        except BaseException:
            cursor.close()
            raise

    def fetchmany(self, size: int) -> list[str]:
        read = self.copy.read
        lines: list[str] = []
        while len(lines) < size:
            data = read()
            if not data:
                break
            lines.append(bytes(data).decode())
        return lines

    def end(self, cancel: bool) -> None:
        """Finish the COPY: read what is left, or (``cancel``) have the server stop
        it, which aborts the transaction (adb then rolls it back)."""
        try:
            if cancel:
                stop = InterruptedError("the stream was closed before its end")
                self.block.__exit__(type(stop), stop, None)
            else:
                while self.copy.read():
                    pass
                self.block.__exit__(None, None, None)
        except Exception:  # the cancel's error, or a broken connection seen next
            pass
        finally:
            self.cursor.close()


def _threshold(value: Any) -> Any:
    """``prepare_threshold`` from a URL is text: a count, or ``none`` (never prepare)."""
    if value is None or isinstance(value, int):
        return value
    if str(value).lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        raise InterfaceError(
            f"psycopg prepare_threshold={value!r} is not an integer or 'none'") from None


DRIVER = PsycopgDriver
