"""Native sessions: a driver's connections as the DB-API module itself makes them.

adb's own Database sets its connections up for its pool (sqlite3's
``isolation_level=None`` and pragmas, psycopg's and PyMySQL's autocommit, connect
and keepalive defaults) and runs transactions its own way. The adbapi drop-in
(``adb.twisted.ConnectionPool``) must hand applications the connection Twisted's
adbapi would: ``dbapi.connect(*connargs, **connkw)`` exactly, in the module's own
transaction mode, which the application's functions commit and roll back as
adbapi does. ``native(cls)`` is driver ``cls`` made so (``PoolOptions["native"]``,
read by ``drivers.load``):

- ``open`` calls ``connect`` with exactly the arguments given; the driver's own
  ``check`` still reads them (an in-memory SQLite database still gets one worker)
  but refusing them is left to the module, at connect time, as under adbapi;
- ``autocommit`` is False: adb's standalone calls run in a transaction of their own;
- adb's own transactions (``runMany``, ``beginTransaction``, streams, bulk loads)
  begin explicitly, as the driver begins them, and end with the module's own
  ``commit()``/``rollback()``, which leave the connection in the mode it was in
  before (an ``autocommit`` flag the begin switched off is switched back on);
- group commit never sends a message of statements (it would not be committed):
  a unit runs as one transaction.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from ..errors import InterfaceError
from ..sqltext import Path
from .base import Connection, Driver


class NativeSession(Driver):
    """The overrides that make a driver's sessions native (see the module docstring);
    ``native(cls)`` puts this class before ``cls``."""

    autocommit = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: per worker thread: the connection of the transaction adb began and the
        #: autocommit flag to restore when it ends (or None)
        self._begun = threading.local()
        super().__init__(*args, **kwargs)

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        #: what ``open`` passes to the module's ``connect()``, exactly as given
        self.native_connect = (self.connect_args, dict(kwargs))
        if not hasattr(self.dbapi, "connect"):  # adbapi only logs this: connects will fail
            return kwargs
        try:
            return super().check(kwargs)
        except InterfaceError:  # what adb would refuse, the module refuses (or takes) itself
            return kwargs

    def open(self) -> Connection:
        args, kwargs = self.native_connect
        return self.dbapi.connect(*args, **kwargs)

    def begin(self, conn: Connection) -> None:
        before = _autocommit_flag(conn)
        super().begin(conn)
        self._begun.flag = (conn, before) if before is not None \
            and _autocommit_flag(conn) != before else None

    # the module's own commit()/rollback() (the base Driver's), not the driver's way
    commit = Driver.commit
    rollback = Driver.rollback

    def ended(self, conn: Connection) -> None:
        """Undo what the driver set up for the transaction, then switch back the
        autocommit flag ``begin`` switched on ``conn``, if it did."""
        super().ended(conn)
        begun = getattr(self._begun, "flag", None)
        self._begun.flag = None
        if begun is not None and begun[0] is conn:
            conn.autocommit = begun[1]

    def path_of(self, sql: str) -> Path:
        path = super().path_of(sql)
        return Path.TRANSACTION if path is Path.MESSAGE else path


def _autocommit_flag(conn: Connection) -> Optional[bool]:
    """``conn.autocommit`` where it is a flag (psycopg2, psycopg; sqlite3 from Python
    3.12 when set to one); None where it is something else (PyMySQL's method)."""
    flag = getattr(conn, "autocommit", None)
    return flag if isinstance(flag, bool) else None


_made: dict[type[Driver], type[Driver]] = {}


def native(cls: type[Driver]) -> type[Driver]:
    """Driver ``cls`` with native sessions (one class per driver, made once)."""
    made = _made.get(cls)
    if made is None:
        made = _made.setdefault(cls, type(
            f"Native{cls.__name__}", (NativeSession, cls),
            {"__module__": cls.__module__, "__doc__": NativeSession.__doc__}))
    return made


__all__ = ["NativeSession", "native"]
