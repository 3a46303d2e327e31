"""sqlite3 (standard library).

Concurrency strategy for several workers on one file: WAL journal (readers never
block the writer), ``synchronous=NORMAL`` (safe with WAL: a crash of the process
loses nothing; a power cut may lose the last commits but never corrupts), a busy
timeout so a writer waits for the lock instead of failing with "database is
locked", and ``BEGIN IMMEDIATE`` for transactions so two transactions never
deadlock upgrading a read lock. URL query keys ``journal_mode`` and
``synchronous`` override the first two, ``timeout`` (seconds, default 30) the wait.
An in-memory database (``sqlite://``) exists in a single connection, so it gets
a single worker.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from ..errors import InterfaceError
from ..target import Family
from .base import ISOLATION_LEVELS, Connection, Driver, DriverInfo
from .cancel import Cancel

_PRAGMAS = {"journal_mode": "wal", "synchronous": "normal"}
_PRAGMA_VALUES = {
    "journal_mode": {"delete", "truncate", "persist", "memory", "wal", "off"},
    "synchronous": {"off", "normal", "full", "extra", "0", "1", "2", "3"},
}


#: what ``sqlite3.connect()`` takes (its signature cannot be read), and adb's pragmas
SQLITE_KEYWORDS = frozenset({"database", "timeout", "detect_types", "isolation_level",
                             "check_same_thread", "factory", "cached_statements", "uri",
                             "autocommit", *_PRAGMAS})


class SQLiteDriver(Driver):
    info = DriverInfo("sqlite3", Family.SQLITE, ("pysqlite",), default=True)
    autocommit = True

    @classmethod
    def keywords(cls, dbapi: Any) -> frozenset[str]:
        return SQLITE_KEYWORDS

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.connect_args:  # sqlite3.connect("path.db") as adbapi users write it
            if len(self.connect_args) > 1:
                raise InterfaceError("pass sqlite3 options other than the path by keyword")
            kwargs["database"] = self.connect_args[0]
            self.connect_args = ()
        self.pragmas: dict[str, str] = {}
        for key, default in _PRAGMAS.items():
            value = str(kwargs.pop(key, default)).lower()
            if value not in _PRAGMA_VALUES[key]:
                raise InterfaceError(
                    f"sqlite {key}={value!r} is not one of {sorted(_PRAGMA_VALUES[key])}")
            self.pragmas[key] = value
        try:
            kwargs["timeout"] = float(kwargs.get("timeout", 30.0))
        except ValueError:
            raise InterfaceError(f"sqlite timeout={kwargs['timeout']!r} is not a number") from None
        kwargs["isolation_level"] = None
        kwargs["check_same_thread"] = False  # each connection stays in one worker anyway
        kwargs.setdefault("database", ":memory:")
        if kwargs["database"] == ":memory:" or "mode=memory" in str(kwargs["database"]):
            self.max_pool_size = 1
            self.max_pool_size_reason = ("an in-memory SQLite database lives in one connection; "
                                         "use pool_size=1 or a file (sqlite:///path.db)")
            self.pragmas.pop("journal_mode")
        if str(kwargs["database"]).startswith("file:"):
            kwargs.setdefault("uri", True)
        return super().check(kwargs)

    _journal_lock = threading.Lock()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the connections (by id: they take no weak reference) in a read-only
        #: transaction, whose ``query_only`` is on until it ends
        self._read_only: set[int] = set()
        self.cancel = Interrupt()

    def open(self) -> Connection:
        conn = super().open()
        for key, value in self.pragmas.items():  # values checked against a fixed set
            if key == "journal_mode":
                # switching needs a lock no busy timeout waits for: once, by one connection
                with self._journal_lock:
                    if conn.execute("pragma journal_mode").fetchone()[0] != value:
                        conn.execute(f"pragma journal_mode={value}")
            else:
                conn.execute(f"pragma {key}={value}")
        return conn

    def begin(self, conn: Connection) -> None:
        conn.execute("begin immediate")

    def begin_read_only(self, conn: Connection) -> None:
        """A deferred transaction: it takes no write lock, and in WAL mode its
        reads see one snapshot while writers go on; ``query_only`` refuses a
        write in it (until it ends)."""
        conn.execute("pragma query_only = 1")
        self._read_only.add(id(conn))
        conn.execute("begin")

    #: every transaction of SQLite is SERIALIZABLE: a weaker level asked for gets that
    isolation_levels = frozenset(ISOLATION_LEVELS)

    def commit(self, conn: Connection) -> None:
        try:
            conn.execute("commit")
        finally:
            self.ended(conn)

    def rollback(self, conn: Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("rollback")
        finally:
            self.ended(conn)

    def ended(self, conn: Connection) -> None:
        """A read-only transaction's ``query_only`` goes off with it."""
        if id(conn) in self._read_only:
            self._read_only.discard(id(conn))
            conn.execute("pragma query_only = 0")

    def close(self, conn: Connection) -> None:
        self._read_only.discard(id(conn))
        super().close(conn)

    def is_closed(self, conn: Connection) -> bool:
        try:
            conn.in_transaction
        except self.dbapi.ProgrammingError:
            return True
        return False

    def is_transient(self, exc: BaseException) -> bool:
        """SQLITE_BUSY or SQLITE_LOCKED (and their extended codes): another connection
        held the lock longer than the busy ``timeout``."""
        if not isinstance(exc, self.dbapi.OperationalError):
            return False
        code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
        if code is not None:
            return code & 0xFF in (5, 6)
        return "database is locked" in str(exc) or "database table is locked" in str(exc)

    def rejection(self, exc: BaseException) -> Optional[str]:
        """A file that cannot be opened (no such folder, no permission, not a
        database) stays so: retrying will not open it."""
        if isinstance(exc, self.dbapi.DatabaseError):
            return f"the database file cannot be opened ({exc})"
        return None

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        return isinstance(exc, self.dbapi.ProgrammingError) and "closed" in str(exc)


class Interrupt(Cancel):
    """``interrupt()``, which SQLite lets another thread call: the running
    statement stops at its next step. Cutting a connection is the same call (a
    file has no socket to cut)."""

    def cancel(self, conn: Connection) -> None:
        conn.interrupt()

    abort = cancel


DRIVER = SQLiteDriver
