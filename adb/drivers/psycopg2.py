"""psycopg2, for PostgreSQL.

Connections run in autocommit mode; a transaction switches autocommit off until
it ends. ``runMany`` of an ``INSERT ... VALUES (...)`` goes through
``psycopg2.extras.execute_values`` (one multi-row statement per page); any other
statement falls back to ``executemany``.
"""

import re

from ..errors import InterfaceError
from . import _libpq
from .base import Driver, DriverInfo, Family

_VALUES = re.compile(r"\bvalues\s*\(", re.IGNORECASE)
#: what the splitter does not parse (dollar quotes, comments, E'' escapes): left to executemany
_UNPARSED = re.compile(r"\$|--|/\*|\bE'", re.IGNORECASE)
#: one multi-row statement fails where row-by-row succeeds: a key twice in a page
_DO_UPDATE = re.compile(r"\bdo\s+update\b", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"%[^%]")
PAGE_SIZE = 1000


class Psycopg2Driver(Driver):
    info = DriverInfo("psycopg2", Family.POSTGRESQL, ("psycopg2",), default=True,
                      extra="postgresql")
    autocommit = True

    def check(self, kwargs):
        from psycopg2.extensions import make_dsn
        _libpq.with_defaults(kwargs, str(self.connect_args[0]) if self.connect_args else "")
        try:
            make_dsn(*self.connect_args[:1], **kwargs)
        except self.dbapi.ProgrammingError as exc:
            message = str(exc).strip()
            raise InterfaceError(f"bad PostgreSQL connection option: {message}") from None
        return kwargs

    def open(self):
        conn = super().open()
        conn.autocommit = True
        return conn

    def begin(self, conn):
        conn.autocommit = False

    def commit(self, conn):
        conn.commit()
        conn.autocommit = True

    def rollback(self, conn):
        conn.rollback()
        conn.autocommit = True

    def failed_transaction(self, conn):
        from psycopg2.extensions import TRANSACTION_STATUS_INERROR
        return conn.info.transaction_status == TRANSACTION_STATUS_INERROR

    def executemany(self, cursor, sql, seq_of_params):
        split = split_values(sql)
        if split is None:
            return super().executemany(cursor, sql, seq_of_params)
        from psycopg2.extras import execute_values
        statement, template = split
        seq = seq_of_params if isinstance(seq_of_params, (list, tuple)) else list(seq_of_params)
        total = 0
        for start in range(0, len(seq), PAGE_SIZE):
            page = seq[start:start + PAGE_SIZE]
            execute_values(cursor, statement, page, template, page_size=len(page))
            total += cursor.rowcount
        return total

    def is_closed(self, conn):
        return bool(conn.closed)

    def peer_gone(self, conn):
        return _libpq.peer_gone(conn.fileno())

    def cancel(self, conn):
        """``pg_cancel_backend`` from a side connection. (psycopg2's ``cancel()``
        holds the GIL while it waits for the server: one unresponsive server would
        freeze the whole process.)"""
        side = self.dbapi.connect(*self.connect_args, **{**self.connect_kwargs,
                                                          "connect_timeout": 2})
        try:
            side.autocommit = True
            with side.cursor() as cursor:
                cursor.execute("select pg_cancel_backend(%s)", (conn.info.backend_pid,))
        finally:
            side.close()

    def abort(self, conn):
        _libpq.shut_down(conn.fileno())

    def is_disconnect(self, exc, conn):
        return bool(conn.closed)


def split_values(sql):
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


def _closing_paren(sql, start):
    depth, quote = 0, None
    for i in range(start, len(sql)):
        ch = sql[i]
        if quote:
            if ch == quote:
                quote = None
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
