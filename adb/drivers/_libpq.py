"""What the two libpq drivers (psycopg2 and psycopg) share: the same protocol,
sockets and connection options, whichever Python wrapper drives them."""

from __future__ import annotations

import itertools
import os
import socket
from typing import Any, Optional, Sequence

from .base import Pooler, ReplicaPosition, column_list, readable

#: both libpq drivers work through PostgreSQL poolers such as pgbouncer, in either
#: mode: PostgreSQL's cancel request names the client connection's own key, which
#: the pooler maps to the server connection running the statement
POOLERS = frozenset(Pooler)

#: the check after a cancel: ``pg_sleep(0)`` looks at pending interrupts, where
#: ``select 1`` runs without ever looking, so a cancel still pending in the backend
#: fails the check instead of the next caller's statement
CANCEL_CHECK = "select pg_sleep(0)"

#: a server that never answers cannot hang a connect; a peer that vanished
#: without a word is noticed within about a minute
CONNECT_DEFAULTS = (("connect_timeout", 10), ("keepalives", 1), ("keepalives_idle", 30),
                    ("keepalives_interval", 10), ("keepalives_count", 3))


def with_defaults(kwargs: dict[str, Any], dsn: str = "") -> dict[str, Any]:
    """``kwargs`` with adb's connect and keepalive defaults where neither they nor
    the positional DSN string say otherwise."""
    for key, value in CONNECT_DEFAULTS:
        if key not in dsn:
            kwargs.setdefault(key, value)
    return kwargs


def peer_gone(fd: int) -> bool:
    """True when the server has closed an idle connection on socket ``fd``.

    Something readable on an idle connection is the end of the stream or a
    message: a terminated backend says goodbye with an ErrorResponse ('E') and
    closes; a notification ('A'), notice ('N') or parameter change ('S') is harmless.
    """
    if not readable(fd):
        return False
    sock = socket.socket(fileno=os.dup(fd))
    try:
        first = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.close()
    return first in (b"", b"E")


def shut_down(fd: int) -> None:
    """Shut the socket ``fd`` down both ways, so a call blocked on it fails now;
    the descriptor itself stays the driver's to close."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()


#: where a hot standby's WAL stands, as byte positions: received, and replayed
#: (both NULL on a server not in recovery: a primary, or a promoted standby)
REPLICA_POSITION_SQL = """
    select (pg_last_wal_receive_lsn() - '0/0'::pg_lsn)::int8,
           (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8"""


def replica_position(conn: Any) -> ReplicaPosition:
    """How far ``conn``'s server has received and replayed its primary's WAL (both
    libpq drivers; the connection is in autocommit mode: no transaction is left open)."""
    cursor = conn.cursor()
    try:
        cursor.execute(REPLICA_POSITION_SQL)
        received, replayed = cursor.fetchone()
    finally:
        cursor.close()
    if received is None or replayed is None:
        return ReplicaPosition()
    return ReplicaPosition(received=int(received), replayed=int(replayed))


_stream_names = itertools.count(1)


def begin_read_only(driver: Any, conn: Any) -> None:
    """A transaction that only reads: ``SET TRANSACTION`` is its first statement."""
    driver.begin(conn)
    cursor = conn.cursor()
    try:
        cursor.execute("SET TRANSACTION READ ONLY")
    finally:
        cursor.close()


def stream_cursor(driver: Any, conn: Any) -> Any:
    """A named (server-side) cursor: each fetch is a ``FETCH`` of one batch."""
    return conn.cursor(name=f"adb_stream_{next(_stream_names)}")


def copy_from_sql(table: str, columns: Any) -> str:
    """``COPY table (columns) FROM STDIN``, in the text format."""
    return f"COPY {table}{column_list(columns)} FROM STDIN"


#: SQLSTATEs of transient failures: serialization_failure, deadlock_detected,
#: lock_not_available (lock_timeout, NOWAIT); PostgreSQL aborts the transaction
#: on each, so running it again from the start is the remedy
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})


# -- LISTEN/NOTIFY (adb.listen) ------------------------------------------------------

def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier: exactly that name, whatever it holds."""
    return '"' + name.replace('"', '""') + '"'


def listen_channels(driver: Any, conn: Any, channels: Sequence[str], listen: bool) -> None:
    """One round trip of ``LISTEN "a"; LISTEN "b"`` (or UNLISTEN): a simple query,
    no parameters, each name quoted."""
    verb = "LISTEN" if listen else "UNLISTEN"
    cursor = conn.cursor()
    try:
        cursor.execute("; ".join(f"{verb} {quote_ident(c)}" for c in channels))
    finally:
        cursor.close()


def listen_fileno(driver: Any, conn: Any) -> int:
    fd: int = conn.fileno()
    return fd


def backend_pid(driver: Any, conn: Any) -> Optional[int]:
    pid: Optional[int] = conn.info.backend_pid
    return pid
