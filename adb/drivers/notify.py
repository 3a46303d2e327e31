"""LISTEN/NOTIFY, a capability a driver offers or not (``Driver.notifications``).

``adb.listen`` keeps one connection outside the pool on which the server sends
notifications as they happen; this is what it asks of the driver for it. A
driver that cannot listen has ``notifications = None``, and ``listen()`` /
``notify()`` refuse at once, naming the server or the driver.
"""

from __future__ import annotations

import abc
from typing import Any, Optional, Sequence

#: a DB-API connection (``adb.drivers.base.Connection``)
Connection = Any


class Notifications(abc.ABC):
    """A driver's LISTEN/NOTIFY: open the listening connection, LISTEN and UNLISTEN
    on it, and read what has arrived without blocking. Every method but
    ``refusal`` runs in the listening thread (``adb.listen.Hub``), which owns the
    connection."""

    def refusal(self) -> Optional[str]:
        """Why this Database cannot LISTEN although its driver can (a pooler in
        between, say), in words; None when it can."""
        return None

    @abc.abstractmethod
    def connect(self) -> Connection:
        """Open the listening connection (outside the pool), set up to read
        notifications."""

    @abc.abstractmethod
    def fileno(self, conn: Connection) -> int:
        """The socket to wait on for notifications."""

    def backend_pid(self, conn: Connection) -> Optional[int]:
        """The server process serving ``conn``, for ``stats()``; None if unknown."""
        return None

    @abc.abstractmethod
    def set_channels(self, conn: Connection, channels: Sequence[str], listen: bool) -> None:
        """LISTEN (``listen``) or UNLISTEN ``channels`` on ``conn`` (names, unquoted)."""

    @abc.abstractmethod
    def read(self, conn: Connection) -> list[tuple[int, str, str]]:
        """Every notification that has arrived on ``conn``, in order, as ``(pid,
        channel, payload)``, without blocking; raises the driver's error when the
        connection is lost."""


__all__ = ["Notifications"]
