"""psycopg2, for PostgreSQL.

Connections run in autocommit mode; a transaction switches autocommit off until
it ends. ``runMany`` of an ``INSERT ... VALUES (...)`` goes through
``psycopg2.extras.execute_values`` (one multi-row statement per page); any other
statement falls back to ``executemany``.

A statement past its ``statement_timeout`` is cancelled by ``pg_cancel_backend``
from a side connection. Through a pooler (``Database(pooler=...)``) that would
reach nothing: the backend pid psycopg2 knows is the pooler's invention, and the
side connection lands on any server connection. There the cancel is PostgreSQL's
own cancel request instead (``CancelKey``), which the pooler passes on to the
server connection running the statement.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import itertools
import logging
import re
import weakref
from typing import Any, Iterable, Optional, Sequence

from ..errors import InterfaceError
from ..sqltext import Path, without_terminator
from ..target import Family
from . import _libpq
from ..copytext import RowReader
from .base import (ISOLATION_LEVELS, Connection, Cursor, Driver, DriverInfo, Pooler,
                   ReplicaPosition)
from .copy import InsertCopy

log = logging.getLogger("adb")

_VALUES = re.compile(r"\bvalues\s*\(", re.IGNORECASE)
#: what the splitter does not parse (dollar quotes, comments, E'' escapes): left to executemany
_UNPARSED = re.compile(r"\$|--|/\*|\bE'", re.IGNORECASE)
#: one multi-row statement fails where row-by-row succeeds: a key twice in a page
_DO_UPDATE = re.compile(r"\bdo\s+update\b", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"%[^%]")
_PERCENT = re.compile(r"%.?", re.DOTALL)
PAGE_SIZE = 1000
#: rows rendered per read of a bulk load's file: one piece of its COPY
COPY_ROWS_PER_READ = 1000
#: the size copy_expert asks each read for (its buffer; a piece may be longer)
COPY_READ_SIZE = 1 << 16
#: the table of ``INSERT INTO name``: plain or quoted identifiers, schema-qualified or not
_IDENT = r'(?:"(?:[^"]|"")+"|[A-Za-z_][\w$]*)'
_TARGET = re.compile(rf"\s*insert\s+into\s+({_IDENT}(?:\s*\.\s*{_IDENT})*)", re.IGNORECASE)
_ON_CONFLICT = re.compile(r"\bon\s+conflict\b", re.IGNORECASE)
#: the last statement of a unit's message: it fails (and so rolls the whole message
#: back) if a target table, or a partition of it, has what can change the rowcount of
#: a one-row INSERT: a BEFORE or INSTEAD OF row trigger on INSERT, an INSERT rule,
#: or a foreign table's remote side. It scans only those catalog rows (0.16 ms here)
GUARD_TAG = "adb-autobatch-guard"
GUARD = (
    f"select ('{GUARD_TAG}: ' || s.x::regclass::text)::int from ("
    "select tgrelid as x from pg_trigger where tgtype::int & 5 = 5 and tgtype::int & 66 <> 0 "
    "union all select ev_class from pg_rewrite where ev_type = '3' "
    "union all select ftrelid from pg_foreign_table) s, "
    "(select $1::text[]::regclass[]::oid[] as t) named "
    "where s.x = any(named.t) "
    "or exists (select from pg_partition_ancestors(s.x) a where a.relid = any(named.t))")
#: prepared once per connection: planning it for every unit cost 14% of a burst's rate
PREPARE_GUARD = f"prepare adb_autobatch_guard(text[]) as {GUARD}"
RUN_GUARD = "execute adb_autobatch_guard(%s)"
#: through a transaction pooler nothing prepared survives the transaction: the
#: guard goes in the message itself, planned each time
INLINE_GUARD = GUARD.replace("$1", "%s")
#: room for the message ``PQcancel`` writes when it fails (libpq's own examples use 256)
CANCEL_ERRBUF = 256


class Psycopg2Driver(Driver):
    info = DriverInfo("psycopg2", Family.POSTGRESQL, ("psycopg2",), default=True,
                      extra="postgresql")
    autocommit = True
    poolers = _libpq.POOLERS
    cancel_check = _libpq.CANCEL_CHECK

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: each open connection's cancel key, through a pooler (``Psycopg2Cancel``)
        self.cancel_keys: weakref.WeakKeyDictionary[Connection, CancelKey] = \
            weakref.WeakKeyDictionary()
        self.copy = Psycopg2Copy(self)
        self.notifications = Psycopg2Notifications(self)
        self.cancel = Psycopg2Cancel(self)

    def enable_autobatch(self) -> None:
        self.guarded: weakref.WeakSet[Connection] = weakref.WeakSet()  # guard prepared on these
        self.slots: dict[str, int] = {}  # template -> its number of %s (-1: other % forms too)

    @classmethod
    def keywords(cls, dbapi: Any) -> frozenset[str]:
        return _libpq.keywords(frozenset({"dsn", "connection_factory", "cursor_factory",
                                          "async", "async_", "database"}), _conninfo_keywords())

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        from psycopg2.extensions import make_dsn
        if self.pooler is not None:
            _cancel_functions()  # InterfaceError now, not a cancel that cannot be sent later
        dsn = str(self.connect_args[0]) if self.connect_args else ""
        _libpq.check_values(kwargs, dsn)
        _libpq.with_defaults(kwargs, dsn)
        _libpq.check_parses(lambda: make_dsn(*self.connect_args[:1], **kwargs),
                            self.dbapi.ProgrammingError, kwargs, self.connect_args)
        return kwargs

    def rejection(self, exc: BaseException) -> Optional[str]:
        return _libpq.rejection(exc, self.connect_kwargs, self.connect_args)

    rejection_cause = staticmethod(_libpq.rejection_cause)

    def probe(self, timeout: float) -> bool:
        return _libpq.probe(self.connect_kwargs, timeout)

    def replica_position(self, conn: Connection) -> ReplicaPosition:
        return _libpq.replica_position(conn)

    def open(self) -> Connection:
        conn = super().open()
        conn.autocommit = True
        if self.pooler is not None:
            try:
                self.cancel_keys[conn] = CancelKey(conn)
            except BaseException:
                self.close(conn)
                raise
        return conn

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

    def failed_transaction(self, conn: Connection) -> bool:
        from psycopg2.extensions import TRANSACTION_STATUS_INERROR
        return bool(conn.info.transaction_status == TRANSACTION_STATUS_INERROR)

    def executemany(self, cursor: Cursor, sql: str,
                    seq_of_params: Iterable[Sequence[Any]]) -> int:
        split = split_values(sql)
        if split is None:
            return super().executemany(cursor, sql, seq_of_params)
        from psycopg2.extras import execute_values
        statement, template = split
        seq = seq_of_params if isinstance(seq_of_params, (list, tuple)) else list(seq_of_params)
        total: int = 0
        for start in range(0, len(seq), PAGE_SIZE):
            page = seq[start:start + PAGE_SIZE]
            execute_values(cursor, statement, page, template, page_size=len(page))
            total += cursor.rowcount
        return total

    def is_closed(self, conn: Connection) -> bool:
        return bool(conn.closed)

    def peer_gone(self, conn: Connection) -> bool:
        return _libpq.peer_gone(conn.fileno())

    def is_transient(self, exc: BaseException) -> bool:
        return getattr(exc, "pgcode", None) in _libpq.TRANSIENT_SQLSTATES

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        return bool(conn.closed)

    def path_of(self, sql: str) -> Path:
        """A message only for a one-row ``INSERT ... VALUES (...)`` without ON CONFLICT:
        psycopg2 reads only a message's last result, so each statement's rowcount
        must be fixed by its form (1), and the message's guard proves nothing on
        the target can change that. Any other DML: one transaction."""
        if split_values(sql) is None or _ON_CONFLICT.search(sql) or not _TARGET.match(sql):
            return Path.TRANSACTION
        return self.message_safe(sql)

    def run_message(self, conn: Connection,
                    statements: list[tuple[str, Any]]) -> Optional[list[int]]:
        """The statements rendered by psycopg2's ``mogrify`` (what ``execute`` sends),
        joined with ``;``, then the guard: one simple query, which PostgreSQL runs
        as one implicit transaction, so a failing guard leaves no effect. A target
        the guard refuses is remembered: its statements batch in a transaction."""
        tables = sorted({_target(sql) for sql in {sql for sql, _ in statements}})
        cursor = conn.cursor()
        try:
            message = b";".join(self.render(cursor, statements)
                                + [self.guard(cursor, conn, tables)])
            if len(message) > self.max_message:
                return None
            try:
                cursor.execute(message)
            except self.dbapi.DataError as exc:
                if GUARD_TAG in str(exc):
                    for sql, _ in statements:
                        self.batch_path.demote(sql)
                raise
            except self.dbapi.errors.InvalidSqlStatementName:
                self.guarded.discard(conn)  # deallocated (DISCARD ALL, a pooler): again next time
                raise
        finally:
            cursor.close()
        return [1] * len(statements)

    def render(self, cursor: Cursor, statements: list[tuple[str, Any]]) -> list[bytes]:
        """Each statement as ``execute`` would send it, by psycopg2's ``mogrify``. A
        run of statements whose templates use only ``%s`` and whose parameter
        tuples match their ``%s`` counts goes through one ``mogrify`` call (15%
        less time than one call each): the counts matching, each statement gets
        exactly its own values. Anything else is rendered on its own, as alone."""
        parts: list[bytes] = []
        run_sql: list[str] = []
        run_params: list[Any] = []
        slots = self.slots
        for sql, params in statements:
            sql = without_terminator(sql)
            count = slots.get(sql)
            if count is None:
                count = slots[sql] = _positional_slots(sql)
            if type(params) in (tuple, list) and len(params) == count:
                run_sql.append(sql)
                run_params.extend(params)
                continue
            if run_sql:
                parts.append(cursor.mogrify(";".join(run_sql), run_params))
                run_sql, run_params = [], []
            parts.append(cursor.mogrify(sql, params))
        if run_sql:
            parts.append(cursor.mogrify(";".join(run_sql), run_params))
        return parts

    def guard(self, cursor: Cursor, conn: Connection, tables: list[str]) -> bytes:
        """The message's last statement: the guard over ``tables``, prepared on the
        connection once, or whole through a transaction pooler."""
        if self.pooler is Pooler.TRANSACTION:
            return bytes(cursor.mogrify(INLINE_GUARD, (tables,)))
        self.prepare_guard(cursor, conn)
        return bytes(cursor.mogrify(RUN_GUARD, (tables,)))

    def prepare_guard(self, cursor: Cursor, conn: Connection) -> None:
        if conn not in self.guarded:
            try:
                cursor.execute(PREPARE_GUARD)
            except self.dbapi.errors.DuplicatePreparedStatement:
                pass
            self.guarded.add(conn)


class Psycopg2Copy(InsertCopy):
    """Bulk loads by ``COPY ... FROM STDIN`` (``copy_expert``); exports as the
    stream of the query, each row rendered."""

    def __init__(self, driver: Psycopg2Driver) -> None:
        super().__init__(driver)
        self.dbapi = driver.dbapi

    def copy_rows(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  rows: Iterable[Sequence[Any]]) -> int:
        """One ``COPY ... FROM STDIN`` in the text format, reading a file that renders
        the rows as ``copy_expert`` asks for them (``RowReader``): each piece is
        sent as soon as it is rendered, so the server ingests one while the next
        is rendered, and no more than one piece is held. What the source raises
        fails the COPY and is raised as it was."""
        reader = RowReader(rows, rows_per_read=COPY_ROWS_PER_READ)
        try:
            cursor.copy_expert(_libpq.copy_from_sql(table, columns), reader, COPY_READ_SIZE)
        except self.dbapi.Error:
            if reader.error is not None:  # psycopg2 ended the COPY with it: raise it as is
                raise reader.error from None
            raise
        count: int = cursor.rowcount
        return count

    def copy_text(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  source: Any) -> int:
        """One ``COPY ... FROM STDIN`` that reads ``source`` piece by piece."""
        cursor.copy_expert(_libpq.copy_from_sql(table, columns), source)
        count: int = cursor.rowcount
        return count


class Psycopg2Notifications(_libpq.LibpqNotifications):
    """psycopg2 reads what has arrived with ``poll()``."""

    def read(self, conn: Connection) -> list[tuple[int, str, str]]:
        """``poll()`` reads what the socket holds (raising if the connection is gone)
        and appends each notification to ``conn.notifies``, which is emptied here."""
        conn.poll()
        notifies = conn.notifies
        if not notifies:
            return []
        taken = [(n.pid, n.channel, n.payload) for n in notifies]
        del notifies[:]
        return taken


class Psycopg2Cancel(_libpq.LibpqCancel):
    """``pg_cancel_backend`` from a side connection; through a pooler, PostgreSQL's
    cancel request with the connection's ``CancelKey``."""

    def __init__(self, driver: Psycopg2Driver) -> None:
        super().__init__(driver)
        self.psycopg2 = driver

    def cancel(self, conn: Connection) -> None:
        """(psycopg2's own ``cancel()`` holds the GIL while it waits for the server:
        one unresponsive server would freeze the whole process.)"""
        driver = self.psycopg2
        key = driver.cancel_keys.get(conn)
        if key is not None:
            key.send(driver.dbapi.OperationalError)
            return
        pid = conn.info.backend_pid
        side = driver.dbapi.connect(*driver.connect_args, **{**driver.connect_kwargs,
                                                              "connect_timeout": 2})
        try:
            side.autocommit = True
            with side.cursor() as cursor:
                cursor.execute("select pg_cancel_backend(%s)", (pid,))
                reached = cursor.fetchone()[0]
        finally:
            side.close()
        if not reached:
            log.warning(
                "%s: the cancel reached no server process (pid %s is not a backend): if the "
                "connection goes through a pooler such as pgbouncer, pass Database(pooler=...)",
                driver.target, pid)


class CancelKey:
    """A connection's cancel key, for PostgreSQL's cancel request.

    Taken from libpq (``PQgetCancel``) in the worker thread as the connection
    opens, so the watchdog's side thread never touches the connection itself;
    freed with this object. ``send`` is ``PQcancel``: a new TCP connection to the
    host and port the connection went to, carrying the key the server (or the
    pooler, which maps it to the server connection running the statement) gave
    it. psycopg2's own ``cancel()`` makes the same call holding the GIL; through
    ctypes the call lets go of it, so a slow pooler stalls only the side thread.
    """

    def __init__(self, conn: Connection) -> None:
        lib = _cancel_functions()
        self.pointer = lib.PQgetCancel(conn.pgconn_ptr)
        if not self.pointer:
            raise InterfaceError("libpq gave no cancel key for a new connection")
        weakref.finalize(self, lib.PQfreeCancel, self.pointer)

    def send(self, error: type[Exception]) -> None:
        """Send the cancel request and wait for the server to take it; ``error``
        (the driver's) with libpq's message when it fails."""
        message = ctypes.create_string_buffer(CANCEL_ERRBUF)
        if not _cancel_functions().PQcancel(self.pointer, message, CANCEL_ERRBUF):
            raise error(f"the cancel request failed: {message.value.decode(errors='replace')}")


@functools.lru_cache(maxsize=None)
def _cancel_functions() -> Any:
    """libpq's ``PQgetCancel``, ``PQcancel`` and ``PQfreeCancel``, from the very libpq
    psycopg2 is linked with (looked up through psycopg2's own extension module,
    whose dependencies the dynamic linker searches), typed for ctypes."""
    try:
        lib = ctypes.CDLL(importlib.import_module("psycopg2._psycopg").__file__)
        lib.PQgetCancel.argtypes, lib.PQgetCancel.restype = [ctypes.c_void_p], ctypes.c_void_p
        lib.PQcancel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        lib.PQcancel.restype = ctypes.c_int
        lib.PQfreeCancel.argtypes, lib.PQfreeCancel.restype = [ctypes.c_void_p], None
    except (OSError, AttributeError, ImportError) as exc:
        raise InterfaceError(
            f"psycopg2's libpq cannot be reached to cancel through a pooler ({exc}); "
            "use psycopg (postgresql+psycopg://), whose cancel goes through poolers") from None
    return lib


class _ConninfoOption(ctypes.Structure):
    """libpq's ``PQconninfoOption``: one connection parameter, its defaults."""

    _fields_ = [("keyword", ctypes.c_char_p), ("envvar", ctypes.c_char_p),
                ("compiled", ctypes.c_char_p), ("val", ctypes.c_char_p),
                ("label", ctypes.c_char_p), ("dispchar", ctypes.c_char_p),
                ("dispsize", ctypes.c_int)]


@functools.lru_cache(maxsize=None)
def _conninfo_keywords() -> Optional[frozenset[str]]:
    """The connection parameters of the libpq psycopg2 is linked with
    (``PQconndefaults``, reached as ``_cancel_functions`` reaches libpq), or None
    where it cannot be asked (``_libpq.KEYWORDS`` then serves)."""
    try:
        lib = ctypes.CDLL(importlib.import_module("psycopg2._psycopg").__file__)
        lib.PQconndefaults.restype = ctypes.POINTER(_ConninfoOption)
        lib.PQconninfoFree.argtypes, lib.PQconninfoFree.restype = \
            [ctypes.POINTER(_ConninfoOption)], None
    except (OSError, AttributeError, ImportError):
        return None
    options = lib.PQconndefaults()
    if not options:
        return None
    try:
        names = itertools.takewhile(bool, (option.keyword for option in options))
        return frozenset(name.decode() for name in names)
    finally:
        lib.PQconninfoFree(options)


def _target(sql: str) -> str:
    """The table ``INSERT INTO`` names (``path_of`` let only such statements through)."""
    match = _TARGET.match(sql)
    if match is None:
        raise ValueError(f"not an INSERT INTO statement: {sql[:80]!r}")
    return match.group(1)


def _positional_slots(sql: str) -> int:
    """How many ``%s`` the template has, or -1 if it has any other ``%`` form
    (``%(name)s``, a stray ``%``): only the plain form may share a ``mogrify``."""
    count = 0
    for match in _PERCENT.finditer(sql):
        if match.group() == "%s":
            count += 1
        elif match.group() != "%%":
            return -1
    return count


def split_values(sql: object) -> Optional[tuple[str, str]]:
    """Split ``INSERT ... VALUES (row template) [suffix]`` for execute_values.

    Returns ``(statement_with_one_%s, row_template)`` or None when the statement
    is not a single-row insert whose only placeholders are in the VALUES row, or
    when batching could change its meaning: ``ON CONFLICT DO UPDATE`` fails on a
    key that appears twice in one statement, where one statement per row updates.
    Statements with what the splitter does not parse (dollar quotes, comments,
    ``E''`` strings) are not split either.
    """
    if not isinstance(sql, str) or not sql.lstrip()[:6].lower() == "insert":
        return None
    if _UNPARSED.search(sql) or _DO_UPDATE.search(sql):
        return None
    match = _VALUES.search(sql)
    if match is None:
        return None
    start = match.end() - 1
    end = _closing_paren(sql, start)
    if end is None:
        return None
    prefix, row, suffix = sql[:start], sql[start:end + 1], sql[end + 1:]
    if suffix.lstrip().startswith(",") or _PLACEHOLDER.search((prefix + suffix).replace("%%", "")):
        return None
    return prefix + "%s" + suffix, row


def _closing_paren(sql: str, start: int) -> Optional[int]:
    depth, quote = 0, ""
    for i in range(start, len(sql)):
        ch = sql[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
    return None


DRIVER = Psycopg2Driver
