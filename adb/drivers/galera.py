"""Cluster awareness for MySQL and MariaDB: a Galera node's own word on whether
it serves, and the choice among a URL's hosts (``PyMySQLDriver.cluster``).

A URL with a host list (``mysql://a,b,c/db``) or ``target_session_attrs`` asks
for a choice: each new connection goes to the first host that serves and has the
session attributes asked for. Where the URL asks nothing, the PyMySQL driver
offers no ``Cluster`` (``cluster = None``) and asks the server nothing more.
A read replica's monitor reads the same Galera state (``galera_state``).
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple, Optional

#: a DB-API connection or cursor (``adb.drivers.base``)
Connection = Any
Cursor = Any

#: ``target_session_attrs`` (libpq's name) for a host list: what a host must be to be used
SESSION_ATTRS = ("any", "read-write", "read-only")


class GaleraState(NamedTuple):
    """A Galera node's own word on whether it serves (``wsrep_*`` status)."""

    state: str  # wsrep_local_state_comment: Synced, Donor/Desynced, Joining, ...
    ready: str  # wsrep_ready: ON once the node takes queries

    @property
    def serves(self) -> bool:
        """It takes queries (a desynced donor too): a host list may use it."""
        return self.ready == "ON"

    @property
    def synced(self) -> bool:
        """It serves and is up to date with the cluster: it may serve replica reads."""
        return self.serves and self.state == "Synced"

    def __str__(self) -> str:
        return f"{self.state}, wsrep_ready={self.ready}"


def galera_state(cursor: Cursor) -> Optional[GaleraState]:
    """The node's Galera state, or None on a server with wsrep off (or no Galera)."""
    cursor.execute("show global variables like 'wsrep_on'")
    row = cursor.fetchone()
    if row is None or row[1] != "ON":
        return None
    status = {}
    for name in ("wsrep_local_state_comment", "wsrep_ready"):
        cursor.execute(f"show global status like '{name}'")
        found = cursor.fetchone()
        status[name] = found[1] if found else "?"
    return GaleraState(status["wsrep_local_state_comment"], status["wsrep_ready"])


class Cluster(abc.ABC):
    """Which server a new connection may stay on, where the URL gives a choice
    (a host list) or a demand (``target_session_attrs``): the driver opens its
    hosts in order and keeps the first connection this does not refuse."""

    @abc.abstractmethod
    def refusal(self, conn: Connection) -> Optional[str]:
        """Why ``conn``'s server is not to be used, in words; None to use it.
        Raises the driver's error when the server cannot even say."""


class GaleraCluster(Cluster):
    """A MySQL or MariaDB server is refused when it is a Galera node out of its
    cluster (not ``wsrep_ready``), or lacks the ``target_session_attrs`` asked
    for (``read-write``, ``read-only``: by ``@@global.read_only``)."""

    def __init__(self, session_attrs: str) -> None:
        self.session_attrs = session_attrs

    def refusal(self, conn: Connection) -> Optional[str]:
        with conn.cursor() as cursor:
            galera = galera_state(cursor)
            if galera is not None and not galera.serves:
                return f"the Galera node does not serve: {galera}"
            if self.session_attrs == "any":
                return None
            cursor.execute("select @@global.read_only")
            read_only = bool(cursor.fetchone()[0])
        if read_only == (self.session_attrs == "read-only"):
            return None
        return f"the server is {'read-only' if read_only else 'read-write'}, " \
               f"not {self.session_attrs} (target_session_attrs)"


__all__ = ["Cluster", "GaleraCluster", "GaleraState", "SESSION_ATTRS", "galera_state"]
