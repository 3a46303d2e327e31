"""Stopping a running statement, a capability a driver offers or not
(``Driver.cancel``).

The watchdog (``adb.watchdog``) asks it, from a short-lived thread of its own,
to cancel a call that overran its ``statement_timeout`` or whose caller gave up,
and to cut the connection if the cancel had no effect in time. A driver without
it (``cancel = None``: a generic DB-API module) lets such a call run to its end.
"""

from __future__ import annotations

import abc
import socket
from typing import Any

#: a DB-API connection (``adb.drivers.base.Connection``)
Connection = Any


class Cancel(abc.ABC):
    """A driver's way to stop what a connection runs, from another thread than the
    one blocked on it: ask the server (``cancel``), or cut the connection
    (``abort``) so the blocked call fails now."""

    @abc.abstractmethod
    def cancel(self, conn: Connection) -> None:
        """Ask the server to cancel what ``conn`` is running."""

    @abc.abstractmethod
    def abort(self, conn: Connection) -> None:
        """Cut ``conn`` so a call blocked on it fails now."""


def shut_down(sock: socket.socket) -> None:
    """Shut ``sock`` down both ways: a call blocked reading it fails at once, and
    the socket itself stays its owner's to close."""
    sock.shutdown(socket.SHUT_RDWR)


__all__ = ["Cancel", "shut_down"]
