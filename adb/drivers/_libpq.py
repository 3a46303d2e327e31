"""What the two libpq drivers (psycopg2 and psycopg) share: the same protocol,
sockets and connection options, whichever Python wrapper drives them."""

from __future__ import annotations

import itertools
import os
import socket
from typing import Any, Callable, Optional, Sequence

from ..errors import InterfaceError
from .base import Driver, Pooler, ReplicaPosition, answers, readable
from .cancel import Cancel
from .copy import column_list
from .notify import Notifications

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


#: libpq's connection parameters (PostgreSQL 15's list, and those added since up to
#: 17), where the libpq at hand cannot be asked (``keywords``)
KEYWORDS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name",
    "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
    "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "sslnegotiation", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
    "gssdelegation", "service", "target_session_attrs", "load_balance_hosts", "require_auth"})


def keywords(own: frozenset[str], listed: Optional[frozenset[str]] = None) -> frozenset[str]:
    """What a libpq driver's ``connect()`` takes: libpq's connection parameters (as
    the driver's own libpq lists them, ``listed``, where it could be asked) and the
    wrapper's ``own``. Each driver asks its own libpq: asking another wrapper's
    would import it (psycopg 3 costs a psycopg2 pool 150 ms and 11 MB at start-up)."""
    return (listed or frozenset()) | KEYWORDS | own


#: what libpq says when a connect can only fail again, and what adb calls it
REJECTIONS = (
    ("password authentication failed", "the server refused the credentials"),
    ("no password supplied", "the server asks for a password and none was given"),
    ("does not exist", ""),  # a role or a database: the message says which
    ("no pg_hba.conf entry", "the server's pg_hba.conf admits no such connection"),
    ("invalid sslmode", "an option value is refused"),
    ("invalid integer value", "an option value is refused"),
    ("invalid port", "an option value is refused"),
    ("invalid connection option", "an option is refused"),
    ("bad value for", "an option value is refused"),
    ("ssl was required", "the server does not support SSL, which sslmode requires"),
)


#: PostgreSQL's SSLRequest: a running server answers it with one byte (S or N) at
#: once, before any login, and then the probe hangs up
SSL_REQUEST = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")


def probe(kwargs: dict[str, Any], timeout: float) -> bool:
    """``Driver.probe`` for libpq: does any host of the connect keywords answer an
    SSLRequest? (A multi-host target is back once one of its hosts is.)"""
    hosts = str(kwargs.get("host") or "localhost").split(",")
    ports = str(kwargs.get("port") or 5432).split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    return any(answers(h.strip(), int(p), SSL_REQUEST, timeout) for h, p in zip(hosts, ports)
               if p.strip().isdigit())


#: what libpq's messages about connect arguments it cannot parse say: each quotes the
#: text it refused, which can be any part of the connection string, the password too
UNPARSABLE = ("connection info string", "percent-encoded", " in uri", "uri query parameter",
              "unexpected spaces found", "invalid connection option", "invalid dsn")


def unparsable(exc: BaseException) -> bool:
    """Is ``exc`` libpq's refusal of connect arguments it cannot parse?"""
    lowered = str(exc).lower()
    return any(fragment in lowered for fragment in UNPARSABLE)


def masked(message: str) -> str:
    """libpq's ``message`` with what it quotes (from its first ``"`` to its last)
    as ``"***"``."""
    first, last = message.find('"'), message.rfind('"')
    if first < 0:
        return message
    return message[:first] + '"***"' + (message[last + 1:] if last > first else "")


def rejection(exc: BaseException, kwargs: dict[str, Any], args: Sequence[Any]) -> Optional[str]:
    """``Driver.rejection`` for libpq, whose connect arguments are ``args`` and
    ``kwargs``: the cause, read from libpq's message (for arguments it cannot parse,
    what it quotes masked where they may hold a password)."""
    if unparsable(exc):
        return f"libpq cannot parse the connect arguments ({_refusal(exc, kwargs, args)})"
    message = " ".join(str(exc).split())
    lowered = message.lower()
    for fragment, cause in REJECTIONS:
        if fragment in lowered:
            detail = message.split("FATAL:", 1)[-1].strip()
            return f"{cause} ({detail})" if cause else detail
    return None


#: connection options whose values libpq would refuse only at connect: checked first
CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby",
                             "prefer-standby"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
}
INTEGERS = ("port", "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
            "keepalives_count", "tcp_user_timeout")


def check_values(kwargs: dict[str, Any], dsn: str = "") -> None:
    """InterfaceError, naming the option and the value, for a value libpq refuses
    at connect time: a choice outside its list, an integer that is not one (a port
    may be a comma-separated list, one per host); and, naming only the option, a
    NUL character, which no libpq string can hold (psycopg2 fails every connect
    with a ValueError, as if the server were away; psycopg would cut the value short)."""
    for key, value in (*kwargs.items(), ("dsn", dsn)):
        if isinstance(value, str) and "\0" in value:
            raise InterfaceError(f"the PostgreSQL connection option {key}= holds a NUL "
                                 "character, which libpq cannot take")
    for key, allowed in CHOICES.items():
        if key in kwargs and str(kwargs[key]) not in allowed:
            raise InterfaceError(f"PostgreSQL {key}={kwargs[key]!r} is not one of "
                                 f"{', '.join(allowed)}")
    for key in INTEGERS:
        if key in kwargs and not all(part.strip().lstrip("-").isdigit()
                                     for part in str(kwargs[key]).split(",")):
            raise InterfaceError(f"PostgreSQL {key}={kwargs[key]!r} is not an integer")


def check_parses(parse: Callable[[], object], refusal: type[BaseException],
                 kwargs: dict[str, Any], args: Sequence[Any]) -> None:
    """Run the driver's libpq parse of its connect arguments (``parse``); its
    ``refusal`` (the driver's ProgrammingError) becomes an InterfaceError with libpq's
    message. That message quotes the text libpq refused, which can be any part of a
    DSN, the password too (a raw ``%00`` in a URI's password: ``forbidden value %00 in
    percent-encoded value: "..."``): so where the arguments may hold a password, what
    it quotes is masked, and the error is raised outside the ``except``, so that
    libpq's own message is not its context either."""
    try:
        parse()
    except refusal as exc:
        error = InterfaceError(f"bad PostgreSQL connection option: {_refusal(exc, kwargs, args)}")
    else:
        return
    raise error


def rejection_cause(exc: BaseException) -> Optional[BaseException]:
    """``Driver.rejection_cause`` for libpq: none for arguments it cannot parse,
    whose message may quote the password."""
    return None if unparsable(exc) else exc


def _refusal(exc: BaseException, kwargs: dict[str, Any], args: Sequence[Any]) -> str:
    """libpq's refusal of the connect arguments ``args`` and ``kwargs``, on one line,
    what it quotes masked where they may hold a password."""
    message = " ".join(str(exc).split())
    return masked(message) if _may_hold_password(kwargs, args) else message


def _may_hold_password(kwargs: dict[str, Any], args: Sequence[Any]) -> bool:
    """Could these connect arguments hold a password: a password keyword, a DSN
    (positional, or ``dsn=``) naming one, or a URI with credentials?"""
    dsn = str(args[0]) if args else str(kwargs.get("dsn", ""))
    return (any("password" in str(key) for key in kwargs) or "password" in dsn.lower()
            or ("://" in dsn and "@" in dsn))


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
    closes; an immediate shutdown (``pg_ctl -m immediate``, or a crash of another
    backend) with a notice ('N') of SQLSTATE class 57P, then closes. Any other
    notification ('A'), notice or parameter change ('S') is harmless.
    """
    if not readable(fd):
        return False
    sock = socket.socket(fileno=os.dup(fd))
    try:
        waiting = sock.recv(4096, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.close()
    return waiting[:1] in (b"", b"E") or ends_session(waiting)


def ends_session(message: bytes) -> bool:
    """True when ``message`` (the bytes waiting on a socket) begins with a
    NoticeResponse whose SQLSTATE is of class 57P (operator intervention: admin or
    crash shutdown), which a backend sends as its last word before it exits."""
    if message[:1] != b"N" or len(message) < 5:
        return False
    body = message[5:1 + int.from_bytes(message[1:5], "big")]
    for field in body.split(b"\x00"):  # each field: its type byte, then its text
        if field[:1] == b"C":
            return field[1:4] == b"57P"
    return False


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


def begin_transaction(driver: Any, conn: Any, isolation: Optional[str],
                      read_only: bool) -> None:
    """A transaction whose isolation level or read-only mode ``SET TRANSACTION``, its
    first statement, sets (a plain one when neither is asked for)."""
    driver.begin(conn)
    modes = ([f"ISOLATION LEVEL {isolation.upper()}"] if isolation else []) \
        + (["READ ONLY"] if read_only else [])
    if not modes:
        return
    cursor = conn.cursor()
    try:
        cursor.execute("SET TRANSACTION " + ", ".join(modes))
    finally:
        cursor.close()


def begin_read_only(driver: Any, conn: Any) -> None:
    """A transaction that only reads."""
    begin_transaction(driver, conn, None, True)


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


class LibpqNotifications(Notifications):
    """LISTEN/NOTIFY on a libpq connection, as both drivers share it; each reads
    the arrived notifications its own way (``read``)."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def refusal(self) -> Optional[str]:
        """A transaction pooler hands each transaction a different server
        connection, and a LISTEN lives in one server session."""
        if self.driver.pooler is not Pooler.TRANSACTION:
            return None
        return ("listen() cannot work through a transaction pooler (pooler='transaction'): "
                "LISTEN belongs to one server session, and the pooler gives each transaction "
                "whichever server connection is free, so notifications would go to another "
                "client or nowhere. Listen through a Database connected to the server itself "
                "(or to a session pooler); notify() works here")

    def connect(self) -> Any:
        """A connection as the pool's are made (``on_connect`` runs on it too)."""
        return self.driver.connect()

    def set_channels(self, conn: Any, channels: Sequence[str], listen: bool) -> None:
        """One round trip of ``LISTEN "a"; LISTEN "b"`` (or UNLISTEN): a simple query,
        no parameters, each name quoted."""
        verb = "LISTEN" if listen else "UNLISTEN"
        cursor = conn.cursor()
        try:
            cursor.execute("; ".join(f"{verb} {quote_ident(c)}" for c in channels))
        finally:
            cursor.close()

    def fileno(self, conn: Any) -> int:
        fd: int = conn.fileno()
        return fd

    def backend_pid(self, conn: Any) -> Optional[int]:
        pid: Optional[int] = conn.info.backend_pid
        return pid


class LibpqCancel(Cancel):
    """Both libpq drivers cut a connection by shutting its socket down; each sends
    its cancel its own way (``cancel``)."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def abort(self, conn: Any) -> None:
        shut_down(conn.fileno())
