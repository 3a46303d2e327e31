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

A statement with parameters runs as one blocking libpq call, which lets go of the
GIL once, where psycopg's own ``execute`` lets go at every step and waits to take it
back beside a busy event loop (``_psycopg_exec``: the cursor connections get unless
``cursor_factory=`` names another; rows, errors and prepared statements as psycopg's).

Through a transaction pooler (``Database(pooler="transaction")``) statements are
never prepared (``prepare_threshold=None``, unless given): psycopg prepares a
statement run ``prepare_threshold`` times on its connection, and the next
transaction may run on a server connection where that name does not exist, or
already names another client's statement.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import itertools
import logging
import operator
import threading
import uuid
import weakref
from typing import Any, Iterable, Iterator, Optional, Sequence

from ..copytext import text_chunks
from ..errors import InterfaceError, add_note
from ..sqltext import Path, without_terminator
from ..target import Family
from . import _libpq
from ._psycopg_exec import blocking_cursor
from .base import (ISOLATION_LEVELS, Connection, Cursor, Driver, DriverInfo, Pooler,
                   ReplicaPosition, hung_up)
from .copy import BulkCopy
from .pipelines import Answered, Pipelines

log = logging.getLogger("adb")

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
        #: every open connection, so that preparing can be stopped on each (pooler_symptom)
        self._open: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._open_lock = threading.Lock()  # workers add to _open while one stops preparing
        self._unprepared = threading.Lock()  # taken once: preparing is off from then on
        self.copy = PsycopgCopy()
        self.notifications = PsycopgNotifications(self)
        self.cancel = PsycopgCancel(self)
        cursor = self.connect_kwargs.get("cursor_factory", self.dbapi.Cursor)
        # a pipeline binds server-side: psycopg's plain Cursor only
        self.pipelines = PsycopgPipelines(self) if cursor is self.dbapi.Cursor else None
        #: the cursor connections get where none was asked for: a statement's one
        #: blocking call (``_psycopg_exec``); empty where psycopg's own Cursor serves
        blocking: Any = None if "cursor_factory" in self.connect_kwargs \
            else blocking_cursor(self.dbapi)
        self._cursor_factory = {} if blocking is None else {"cursor_factory": blocking}
        if blocking is not None:  # adb's own cursor: its result tells whether rows came
            self.returns_rows = blocking.returns_rows

    @classmethod
    def keywords(cls, dbapi: Any) -> frozenset[str]:
        from psycopg import pq
        listed = frozenset(d.keyword.decode() for d in pq.Conninfo.get_defaults())
        return _libpq.keywords(_PSYCOPG_KEYS | {"autocommit", "row_factory", "database"},
                               listed)

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
        _libpq.check_values(kwargs, dsn)
        _libpq.with_defaults(kwargs, dsn)
        options = {k: v for k, v in kwargs.items() if k not in _PSYCOPG_KEYS}
        _libpq.check_parses(lambda: make_conninfo(dsn, **options),
                            self.dbapi.ProgrammingError, options, self.connect_args)
        return kwargs

    def rejection(self, exc: BaseException) -> Optional[str]:
        return _libpq.rejection(exc, self.connect_kwargs, self.connect_args)

    rejection_cause = staticmethod(_libpq.rejection_cause)

    def probe(self, timeout: float) -> bool:
        return _libpq.probe(self.connect_kwargs, timeout)

    def replica_position(self, conn: Connection) -> ReplicaPosition:
        return _libpq.replica_position(conn)

    def open(self) -> Connection:
        conn = self.dbapi.connect(*self.connect_args, autocommit=True, **self._cursor_factory,
                                  **self.connect_kwargs)
        with self._open_lock:
            self._open.add(conn)
        return conn

    def pooler_symptom(self, error: BaseException) -> bool:
        """psycopg's own prepared statement (``_pg3_...``) missing on the server
        session, or already there: the connection runs through a transaction pooler
        (pgbouncer) that hands its statements to sessions that never prepared them,
        or that prepared another client's. On a Database not told so (``pooler=``),
        preparing stops on every connection, now and later (said once, in the log);
        the statement that met it did not run. The error gets a note naming
        ``pooler="transaction"`` (a transaction it ended is rolled back)."""
        errors = self.dbapi.errors
        if self.pooler is not None or "_pg3_" not in str(error) or not isinstance(
                error, (errors.DuplicatePreparedStatement, errors.InvalidSqlStatementName)):
            return False
        if self._unprepared.acquire(blocking=False):
            self.connect_kwargs["prepare_threshold"] = None
            log.warning("%s: psycopg's prepared statements are missing or doubled on the "
                        "server (%s): a transaction pooler stands in front of it; statements "
                        "are no longer prepared. Say pooler='transaction' to the Database",
                        self.target, str(error).strip()[:200])
        with self._open_lock:
            for conn in self._open:
                conn.prepare_threshold = None
        add_note(error, "adb: psycopg's prepared statement is missing or already there on the "
                        "server session: a transaction pooler (pgbouncer) is in front of this "
                        "Database; open it with pooler=\"transaction\" (adb has stopped "
                        "preparing statements meanwhile)")
        return True

    def begin(self, conn: Connection) -> None:
        conn.autocommit = False

    def commit(self, conn: Connection) -> None:
        conn.commit()
        conn.autocommit = True

    def rollback(self, conn: Connection) -> None:
        conn.rollback()
        conn.autocommit = True

    begin_read_only = _libpq.begin_read_only
    begin_transaction = _libpq.begin_transaction
    isolation_levels = frozenset(ISOLATION_LEVELS)
    stream_cursor = _libpq.stream_cursor

    def close_stream(self, cursor: Cursor, exhausted: bool, keep_transaction: bool) -> bool:
        if isinstance(cursor, CopyOut):
            cursor.end(cancel=not (exhausted or keep_transaction))
            return False
        return super().close_stream(cursor, exhausted, keep_transaction)

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

    def is_transient(self, exc: BaseException) -> bool:
        return getattr(exc, "sqlstate", None) in _libpq.TRANSIENT_SQLSTATES

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        """The connection is closed or broken, the server said it is ending the
        session (a ``57P0x`` shutdown, read before libpq has seen the socket close),
        or psycopg's own wait saw the socket fail before libpq did: it raises an
        ``OperationalError`` with no SQLSTATE ("connection socket closed") and leaves
        the connection looking healthy, with a command still in progress."""
        if conn.closed or conn.broken:
            return True
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate is not None:
            return str(sqlstate).startswith(_SESSION_ENDING)
        return isinstance(exc, self.dbapi.OperationalError) and _socket_failed(conn)

    def path_of(self, sql: str) -> Path:
        """Any self-contained DML goes in a message: each statement's own command
        tag is read with ``nextset()``."""
        return self.message_safe(sql)

    def run_message(self, conn: Connection, statements: list[tuple[str, Any]]) -> Any:
        """A unit in one round trip: in libpq's pipeline mode (``pipeline`` on) or
        as one simple-protocol message (``client_message``)."""
        if self.pipeline_depth and self.pipelines is not None:
            return self.pipeline_unit(conn, statements)
        return self.client_message(conn, statements)

    def pipeline_unit(self, conn: Connection, statements: list[tuple[str, Any]]) -> list[int]:
        """``BEGIN``, the statements bound server-side and prepared (each template
        once per connection), ``COMMIT``, all in libpq's pipeline mode with one Sync
        at the end: one round trip. A failing statement makes the server skip the
        rest and the COMMIT; the unit is then rolled back and its error raised."""
        cursor_class = _answering_cursor(self.dbapi)
        prepare = None if self.pooler is Pooler.TRANSACTION else True
        cursors = []
        try:
            with conn.pipeline():
                cursor_class(conn).execute("BEGIN")
                for sql, params in statements:
                    cursors.append(cursor_class(conn))
                    cursors[-1].execute(sql, params, prepare=prepare)
                cursors.append(cursor_class(conn))
                cursors[-1].execute("COMMIT")
        except BaseException:  # refused before it was sent (its parameters), or cut off
            if len(cursors) > len(statements) and _answered(cursors):
                return [cursor.rowcount for cursor in cursors[:-1]]  # the COMMIT came back
            self.end_unit(conn)
            raise
        failed = next((cursor.error for cursor in cursors if cursor.error is not None), None)
        if failed is not None:
            self.end_unit(conn)
            raise failed
        return [cursor.rowcount for cursor in cursors[:-1]]

    def end_unit(self, conn: Connection) -> None:
        """Roll back what a failed unit left open: a Sync ends only an implicit
        transaction, and the unit's is explicit."""
        if not conn.broken and not conn.closed \
                and conn.info.transaction_status != self.dbapi.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")

    def client_message(self, conn: Connection, statements: list[tuple[str, Any]]) -> Any:
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




class PsycopgCopy(BulkCopy):
    """Bulk loads by ``COPY ... FROM STDIN`` (binary where the rows allow, see
    ``copy_rows``), exports by ``COPY ... TO STDOUT``."""

    def open_export(self, conn: Connection, sql: Any, params: Any) -> Cursor:
        """``COPY (sql) TO STDOUT``: the server writes the text format itself."""
        return CopyOut(conn.cursor(), f"COPY ({without_terminator(sql)}) TO STDOUT", params)

    def copy_rows(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  rows: Iterable[Sequence[Any]]) -> int:
        """A binary ``COPY ... FROM STDIN`` while the rows fit the columns' types
        (``BinaryPlan``), then a text one for the rest: psycopg writes each row as
        it comes and sends the data in pieces, so memory stays bounded however
        many rows. Binary spares the server parsing every value's text; where a
        column's type is not one binary is known to load alike, or a batch holds
        a value that does not fit it, the text format loads what is left."""
        rest: Optional[Iterator[Sequence[Any]]] = iter(rows)
        plan = BinaryPlan.of(cursor, table, columns)
        total = 0
        if plan is not None and rest is not None:
            total, rest = plan.load(cursor, table, columns, rest)
        if rest is None:
            return total
        with cursor.copy(_libpq.copy_from_sql(table, columns)) as copy:
            write_row = copy.write_row
            for row in rest:
                write_row(row)
        count: int = cursor.rowcount
        return total + count

    def copy_text(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  source: Any) -> int:
        with cursor.copy(_libpq.copy_from_sql(table, columns)) as copy:
            for piece in text_chunks(source):
                copy.write(piece)
        count: int = cursor.rowcount
        return count


class PsycopgNotifications(_libpq.LibpqNotifications):
    """psycopg hands each notification to the connection's notify handlers: here,
    a list per listening connection (``received``)."""

    def __init__(self, driver: Driver) -> None:
        super().__init__(driver)
        #: the listening connection -> the notifications its handler received
        self.received: weakref.WeakKeyDictionary[Connection, list[Any]] = \
            weakref.WeakKeyDictionary()

    def connect(self) -> Connection:
        """A connection whose notifications go to a list of its own (``received``):
        psycopg hands each to its notify handlers, whether it arrived while a
        statement ran (the LISTEN itself) or was read by ``read``."""
        conn = self.driver.connect()
        received: list[Any] = []
        conn.add_notify_handler(received.append)
        self.received[conn] = received
        return conn

    def read(self, conn: Connection) -> list[tuple[int, str, str]]:
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
        received = self.received[conn]
        if not received:
            return []
        taken = [(n.pid, n.channel, n.payload) for n in received]
        del received[:]
        return taken


class PsycopgCancel(_libpq.LibpqCancel):
    """psycopg's ``cancel_safe()``: PostgreSQL's cancel protocol, waited for
    without holding the GIL, bounded by ``CANCEL_TIMEOUT``."""

    def cancel(self, conn: Connection) -> None:
        conn.cancel_safe(timeout=CANCEL_TIMEOUT)


class PsycopgPipelines(Pipelines):
    """libpq's pipeline mode. Off unless asked for: measured slower here than one
    statement at a time (each statement's own commit dominates, and a pipelined
    statement costs psycopg more client CPU), see docs/usage.md ("Pipelines")."""

    default = False

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def run(self, conn: Connection, statements: list[tuple[str, Any]]) -> list[Answered]:
        """libpq's pipeline mode with a Sync after every statement: each is its own
        implicit transaction (autocommit, as alone), an error aborts nothing but
        its own statement, and every result comes back in one round trip. Each
        statement gets a cursor that keeps its own error (``_answering_cursor``)."""
        cursor_class = _answering_cursor(self.driver.dbapi)
        cursors = []
        with conn.pipeline() as pipeline:
            for sql, params in statements:
                cursor = cursor_class(conn)
                cursors.append(cursor)
                try:
                    cursor.execute(sql, params)
                except Exception as exc:  # refused before it was sent (its parameters)
                    if self.driver.is_disconnect(exc, conn):
                        raise
                    cursor.error = exc
                    continue
                pipeline._enqueue_sync()  # psycopg's own Sync, queued with its result slot
        return [Answered(cursor, cursor.error) for cursor in cursors]


#: SQLSTATEs of a server ending the session: admin shutdown, crash shutdown, cannot connect now
_SESSION_ENDING = ("57P01", "57P02", "57P03")


def _socket_failed(conn: Connection) -> bool:
    """True when ``conn``'s socket has hung up or is no longer a socket."""
    try:
        return hung_up(conn.fileno())
    except Exception:  # psycopg refuses fileno() on a connection it closed
        return True


def _answered(cursors: list[Any]) -> bool:
    """True when every statement of a unit, and its COMMIT, came back without error."""
    return all(cursor.error is None and cursor.pgresult is not None for cursor in cursors)


_ANSWERING: dict[Any, Any] = {}


def _answering_cursor(dbapi: Any) -> Any:
    """psycopg's ``Cursor`` keeping the error of its own statement (``error``)
    instead of raising it wherever the pipeline's results happen to be read: in
    pipeline mode psycopg raises the first error it meets, from whichever call
    read it, and drops the others."""
    found = _ANSWERING.get(dbapi)
    if found is not None:
        return found

    class AnsweringCursor(dbapi.Cursor):  # type: ignore[misc,unused-ignore]
        error: Optional[BaseException] = None

        def _check_results(self, results: Any) -> None:
            try:
                super()._check_results(results)
            except dbapi.Error as exc:
                self.error = exc

        def _set_results(self, results: Any) -> None:
            if self.error is None:
                super()._set_results(results)

    _ANSWERING[dbapi] = AnsweringCursor
    return AnsweringCursor


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


#: what a binary COPY loads alike, by column type oid: the Python types of its values
#: (None is NULL everywhere) and, for integers, the range the column holds (binary
#: integers would wrap where the text would be refused)
_BINARY_TYPES: dict[int, tuple[frozenset[type], Optional[tuple[int, int]]]] = {
    21: (frozenset({int}), (-(1 << 15), (1 << 15) - 1)),  # int2
    23: (frozenset({int}), (-(1 << 31), (1 << 31) - 1)),  # int4
    20: (frozenset({int}), (-(1 << 63), (1 << 63) - 1)),  # int8
    25: (frozenset({str}), None), 1043: (frozenset({str}), None),  # text, varchar
    17: (frozenset({bytes, bytearray, memoryview}), None),  # bytea
    16: (frozenset({bool}), None), 701: (frozenset({float}), None),  # bool, float8
    1700: (frozenset({decimal.Decimal}), None), 1082: (frozenset({datetime.date}), None),
    2950: (frozenset({uuid.UUID}), None),  # numeric, date, uuid
}
#: the columns a COPY without a column list loads, with their types
_COLUMN_TYPES = ("select attname, atttypid from pg_attribute where attrelid = to_regclass(%s) "
                 "and attnum > 0 and not attisdropped and attgenerated = '' order by attnum")
#: rows per batch of a binary COPY: checked against the plan together
BINARY_BATCH = 1000
_NOT_NULL = functools.partial(operator.is_not, None)


class BinaryPlan:
    """How a load's rows go into a binary COPY: the columns' type oids, and what
    each column takes (``_BINARY_TYPES``). A batch of rows is checked at once, by
    builtins over its columns, before it is written."""

    def __init__(self, oids: list[int]) -> None:
        self.oids = oids
        self.width = {len(oids)}
        self.columns = [(_BINARY_TYPES[oid][0] | {type(None)}, _BINARY_TYPES[oid][1])
                        for oid in oids]

    @classmethod
    def of(cls, cursor: Cursor, table: str,
           columns: Optional[Sequence[str]]) -> Optional[BinaryPlan]:
        """The plan for ``table`` (its ``columns``), or None where a column's type
        is not in ``_BINARY_TYPES`` or a name is not found (the text COPY then
        loads, or fails, as it would have)."""
        types = dict(cursor.execute(_COLUMN_TYPES, (table,)).fetchall())
        names = list(types) if columns is None else [_attname(name) for name in columns]
        oids = [types.get(name) for name in names]
        if not oids or not all(oid in _BINARY_TYPES and _dumps_binary(cursor, oid)
                               for oid in oids):
            return None
        return cls([int(oid) for oid in oids if oid is not None])

    def fits(self, batch: list[Any]) -> bool:
        """Every row of ``batch`` has one value per column, of a type the column takes
        and, for an integer, in its range. Each column is read by builtins (a
        pass for the types, one for an integer's bit length; the exact range
        only when that says it may be out), with no per-row Python step."""
        if not batch:
            return True
        try:
            if set(map(len, batch)) != self.width:
                return False
            for index, (kinds, bounds) in enumerate(self.columns):
                seen = set(map(type, map(operator.itemgetter(index), batch)))
                if not seen <= kinds:
                    return False
                if bounds is not None and not _in_range(batch, index, bounds, type(None) in seen):
                    return False
        except TypeError:  # a row that is not a sequence: the text COPY says what is wrong
            return False
        return True

    def load(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
             rows: Iterator[Sequence[Any]]) -> tuple[int, Optional[Iterator[Sequence[Any]]]]:
        """Load batches of ``rows`` by binary COPY while they fit; the count, and the
        rows left for a text COPY (None when every row is loaded)."""
        rest: Optional[Iterator[Sequence[Any]]] = None
        sql = _libpq.copy_from_sql(table, columns) + " (FORMAT BINARY)"
        with cursor.copy(sql) as copy:
            copy.set_types(self.oids)
            write_row = copy.write_row
            while True:
                batch = list(itertools.islice(rows, BINARY_BATCH))
                if not batch:
                    break
                if not self.fits(batch):
                    rest = itertools.chain(batch, rows)
                    break
                for row in batch:
                    write_row(row)
        count: int = cursor.rowcount
        return count, rest


def _in_range(batch: list[Any], index: int, bounds: tuple[int, int], nulls: bool) -> bool:
    """The integers of column ``index`` (ints all, None where ``nulls``) are within
    ``bounds``: their largest bit length first, in one pass; then, only if some
    value reaches the top bit, their exact minimum and maximum."""
    def values() -> Iterator[int]:
        column = map(operator.itemgetter(index), batch)
        return filter(_NOT_NULL, column) if nulls else column
    low, high = bounds
    if max(map(int.bit_length, values()), default=0) < high.bit_length() + 1:
        return True
    present = list(values())
    return low <= min(present) and max(present) <= high


def _dumps_binary(cursor: Cursor, oid: int) -> bool:
    """psycopg has a binary dumper for ``oid`` on this cursor's adapters."""
    from psycopg import pq  # here: this module is imported where psycopg may not be
    try:
        cursor.adapters.get_dumper_by_oid(oid, pq.Format.BINARY)
    except Exception:  # psycopg.ProgrammingError: no dumper, the text format then
        return False
    return True


def _attname(name: str) -> str:
    """A column's name as the catalog spells it: a quoted name unquoted, any other folded."""
    if name.startswith('"'):
        return name[1:-1].replace('""', '"')
    return name.lower()


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
