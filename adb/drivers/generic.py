"""Any other PEP 249 module, named by ``driver=`` (as adbapi's ``dbapiName``).

The module's connections are assumed to open transactions implicitly, so adb
commits after every standalone call and rolls back after a failed one.

PEP 249 says nothing of how a connection ends, so adb tells it from what every
networked driver has: a socket. The first connection is searched for one (a
``fileno()`` method, or a ``socket.socket`` among its attributes or theirs), and
from then on:

- ``is_closed``: the driver let go of that socket (no system call);
- ``peer_gone``: the socket says the server hung up (one ``poll``); data waiting
  on an idle connection is confirmed by a probe, as the server may just be talking;
- ``is_disconnect``: after an error, the socket says the server hung up; or the
  error is one a broken connection raises (``OperationalError``,
  ``InterfaceError``, an ``OSError`` in its causes) and a probe fails;
- ``rollback`` on such a connection succeeds: its transaction ended with it, and
  the call's own error is the one reported (as ``ConnectionLost``).

A probe is the connection's ``ping()`` where it has one (it never touches a
transaction), else ``select 1``. Where no socket is found, ``peer_gone`` probes
instead of polling. A module whose connections are not PEP 249's transactions
is refused at construction (``REFUSED``); a ``:memory:`` database, which lives in
one connection, gets one worker.
"""

from __future__ import annotations

import select
import socket
import types
from typing import Any, Optional

from ..errors import InterfaceError
from .base import Connection, Driver

#: modules adb cannot run as PEP 249 transactions, and why, with what to do instead
REFUSED = {
    "duckdb": (
        "its cursor() is a second connection in autocommit, so what runs on a cursor "
        "is outside the connection's transaction (a transaction's rows are visible before "
        "its commit, a failed call keeps what it wrote), its rollback() raises when no "
        "transaction is open, and an in-memory database differs on every connection; "
        "use duckdb's own connection from one thread (asyncio.to_thread), or an embedded "
        "database adb runs as PEP 249 transactions: SQLite (sqlite:///path.db)"),
}

#: the connect() keywords that name a database, where ``:memory:`` means in memory
_DATABASE_KEYWORDS = ("database", "dbname", "db", "path", "filename")

#: poll() answers that mean the socket is finished: hung up, reset, or closed under us
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)

#: attribute values never searched for a socket: they hold none of the connection's
_NOT_SEARCHED = (type, types.ModuleType, types.FunctionType, str, bytes, int, float, dict, list,
                 tuple, set)

#: how deep attributes are searched for a socket (the connection's, then theirs)
_SEARCH_DEPTH = 2


class GenericDriver(Driver):
    """The PEP 249 defaults of ``Driver``, with a connection's end told by its socket."""

    #: where the connections' socket is: a path of attribute names ending at a
    #: ``socket.socket``, ``("fileno()",)`` for a ``fileno()`` method, None: unknown
    socket_path: Optional[tuple[str, ...]] = None
    #: False until the first connection has been searched
    searched = False

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        top = self.name.partition(".")[0]
        if top in REFUSED:
            raise InterfaceError(f"driver {self.name!r} cannot run through adb: {REFUSED[top]}")
        named = [kwargs.get(key) for key in _DATABASE_KEYWORDS] + list(self.connect_args[:1])
        if ":memory:" in named:
            self.max_pool_size = 1
            self.max_pool_size_reason = (
                f"an in-memory {self.name} database lives in one connection; use pool_size=1 "
                "or a database on disk")
        return super().check(kwargs)

    def connect(self) -> Connection:
        conn = super().connect()
        if not self.searched:
            self.socket_path = find_socket(conn)
            self.searched = True
        return conn

    # -- the socket ----------------------------------------------------------------------

    def fd_of(self, conn: Connection) -> Optional[int]:
        """The connection's socket's descriptor; -1 when the driver has let go of it
        (closed it, or dropped the object); None when no socket is known."""
        path = self.socket_path
        if path is None:
            return None
        try:
            if path == ("fileno()",):
                fd: int = conn.fileno()
                return fd
            found = conn
            for name in path:
                found = getattr(found, name)
            return found.fileno() if isinstance(found, socket.socket) else -1
        except Exception:  # the driver refuses fileno() on a closed connection
            return -1

    def is_closed(self, conn: Connection) -> bool:
        return self.fd_of(conn) == -1

    def peer_gone(self, conn: Connection) -> bool:
        fd = self.fd_of(conn)
        if fd is None:
            return not self.idle_probe(conn)
        if fd == -1:
            return True
        events = poll(fd)
        if events & _GONE:
            return True
        return bool(events) and not self.idle_probe(conn)

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        if not isinstance(exc, (getattr(self.dbapi, "Error", Exception), OSError, EOFError)):
            return False  # the caller's own error: the connection did not raise it
        fd = self.fd_of(conn)
        if fd == -1 or (fd is not None and poll(fd) & _GONE):
            return True
        return self.may_be_broken(exc) and not self.alive(conn)

    def rollback(self, conn: Connection) -> None:
        """Roll back; on a connection the server has ended there is nothing to roll
        back (its transaction ended with it), so that is no failure: the error that
        broke it goes to the caller as ``ConnectionLost``, and the connection is
        replaced before its next use (``is_closed``, ``peer_gone``)."""
        try:
            super().rollback(conn)
        except Exception as exc:
            if not self.is_disconnect(exc, conn):
                raise

    def may_be_broken(self, exc: BaseException) -> bool:
        """True for an error a broken connection raises: PEP 249's
        ``OperationalError`` ("unexpected disconnect") and ``InterfaceError``, or
        one caused by a socket's ``OSError``."""
        broken = tuple(getattr(self.dbapi, name) for name in ("OperationalError", "InterfaceError")
                       if isinstance(getattr(self.dbapi, name, None), type))
        seen: Optional[BaseException] = exc
        for _ in range(8):  # a cause chain is short; a cycle must not hang
            if seen is None:
                return False
            if isinstance(seen, (OSError, EOFError, *broken)):
                return True
            seen = seen.__cause__ or seen.__context__
        return False

    # -- the probe -----------------------------------------------------------------------

    def alive(self, conn: Connection) -> bool:
        """Whether ``conn`` answers: its ``ping()`` (which leaves a transaction be),
        else ``select 1``."""
        try:
            ping = getattr(conn, "ping", None)
            if callable(ping):
                ping()
                return True
            cursor = conn.cursor()
            try:
                cursor.execute(self.cancel_check)
                cursor.fetchall()
            finally:
                cursor.close()
            return True
        except Exception:
            return False

    def idle_probe(self, conn: Connection) -> bool:
        """``alive`` on a connection outside any transaction, left outside one."""
        if not self.alive(conn):
            return False
        if callable(getattr(conn, "ping", None)):
            return True
        try:
            conn.rollback()  # the select may have opened a transaction
            return True
        except Exception:
            return False


def poll(fd: int) -> int:
    """What ``poll`` says of ``fd`` now, without waiting: readable, hung up, closed."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI | getattr(select, "POLLRDHUP", 0))
    return sum(events for _, events in poller.poll(0))


def find_socket(conn: Connection) -> Optional[tuple[str, ...]]:
    """Where ``conn`` keeps its socket: ``("fileno()",)`` when it has a
    ``fileno()`` method, else the attribute names leading to a ``socket.socket``
    (two levels at most); None when neither is found."""
    if callable(getattr(conn, "fileno", None)):
        try:
            if isinstance(conn.fileno(), int):
                return ("fileno()",)
        except Exception:
            pass
    return _search(conn, (), _SEARCH_DEPTH)


def _search(obj: Any, path: tuple[str, ...], depth: int) -> Optional[tuple[str, ...]]:
    try:
        attributes = dict(vars(obj))
    except TypeError:  # no __dict__ (a C extension's object, a slotted class)
        return None
    for name, value in attributes.items():
        if isinstance(value, socket.socket) and value.fileno() != -1:
            return (*path, name)
    if depth > 1:
        for name, value in attributes.items():
            if not isinstance(value, _NOT_SEARCHED):
                found = _search(value, (*path, name), depth - 1)
                if found is not None:
                    return found
    return None


DRIVER = GenericDriver
