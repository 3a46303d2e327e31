"""The driver interface: what adb needs to know about one DB-API module.

A driver knows its module's quirks and nothing about threads or event loops.
Every method except ``__init__``/``check`` runs in a worker thread, on the
connection that worker owns.
"""

import dataclasses
import inspect
import select
import socket

from ..errors import InterfaceError


class Driver:
    """Defaults for a PEP 249 module; subclasses override what differs.

    The defaults suit a module whose connections start a transaction implicitly
    and need ``commit()``: adb then commits after every standalone call.
    """

    #: True when connections run each statement in its own transaction
    autocommit = False
    #: lets the pool size be forced (an in-memory SQLite database lives in one connection)
    max_pool_size = None

    def __init__(self, dbapi, target, on_connect=None):
        self.dbapi = dbapi
        self.name = target.driver
        self.target = target
        self.connect_args = tuple(target.args)
        self.connect_kwargs = self.check(dict(target.kwargs))
        self.target = dataclasses.replace(target, kwargs=self.connect_kwargs, args=self.connect_args)
        self.on_connect = on_connect

    @property
    def paramstyle(self):
        return self.dbapi.paramstyle

    def check(self, kwargs):
        """Validate and normalise connect keywords at construction; return them."""
        _check_signature(self.dbapi.connect, kwargs, self.name)
        return kwargs

    def connect(self):
        """Open one connection (in the worker thread that will own it) and set it up."""
        conn = self.open()
        if self.on_connect is not None:
            try:
                self.on_connect(conn)
            except BaseException:
                self.close(conn)
                raise
        return conn

    def open(self):
        """Open and configure one DB-API connection; subclasses add their settings."""
        return self.dbapi.connect(*self.connect_args, **self.connect_kwargs)

    def is_closed(self, conn):
        """True when ``conn`` is known to be closed (checked before every call
        outside a transaction, so it must be cheap: no system call)."""
        return False

    def peer_gone(self, conn):
        """True when the server has dropped ``conn`` while it was idle (checked before
        a call on a connection idle a while: one non-blocking system call)."""
        return False

    def cancel(self, conn):
        """Ask the server to cancel what ``conn`` is running (from another thread)."""
        raise NotImplementedError(f"{self.name} cannot cancel a running statement")

    def abort(self, conn):
        """Cut ``conn`` so a call blocked on it fails now (from another thread)."""
        sock = self.socket_of(conn)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)

    def socket_of(self, conn):
        """The connection's socket (for ``abort``), or None."""
        return None

    def close(self, conn):
        try:
            conn.close()
        except Exception:  # a broken connection may fail to close; it is gone either way
            pass

    def begin(self, conn):
        """Start an explicit transaction."""

    def commit(self, conn):
        conn.commit()

    def rollback(self, conn):
        conn.rollback()

    def failed_transaction(self, conn):
        """True when the server has aborted the open transaction (commit would not commit)."""
        return False

    def fetchall(self, cursor):
        return cursor.fetchall()

    def executemany(self, cursor, sql, seq_of_params):
        """Run ``sql`` once per parameter set, by the driver's fastest path; return rowcount."""
        cursor.executemany(sql, seq_of_params)
        return cursor.rowcount

    def is_disconnect(self, exc, conn):
        """True when ``exc`` means ``conn`` is unusable and must be replaced."""
        return False


def _check_signature(connect, kwargs, name):
    """Reject keywords that ``connect`` cannot take, naming them."""
    try:
        params = inspect.signature(connect).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    accepted = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise InterfaceError(
            f"{name}.connect() does not accept {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(sorted(accepted))}")


def readable(fd):
    """True when an idle connection's socket has something to read: on a
    connection nobody is using, that is the server saying goodbye (or EOF)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))
