"""PyMySQL, for MySQL and MariaDB.

Connections run in autocommit mode; transactions use ``begin()``/``commit()``.
``executemany`` of an ``INSERT ... VALUES`` is rewritten by PyMySQL into multi-row
inserts, its bulk fast path.
"""

from __future__ import annotations

import socket
import tempfile
from typing import Any, Iterable, NamedTuple, Optional, Sequence

from ..copytext import lines, mysql_value_text
from ..errors import InterfaceError
from ..sqltext import Path, without_terminator
from ..target import Family
from .base import (Connection, Cursor, Driver, DriverInfo, ReplicaPosition, TextRows, chunked,
                   column_list, readable)

#: rows per ``LOAD DATA`` of a bulk load (one temporary file each)
LOAD_CHUNK = 20000

#: ``target_session_attrs`` (libpq's name) for a host list: what a host must be to be used
SESSION_ATTRS = ("any", "read-write", "read-only")

_INT_KEYS = {"connect_timeout", "read_timeout", "write_timeout", "local_infile",
             "max_allowed_packet", "client_flag"}


class PyMySQLDriver(Driver):
    info = DriverInfo("pymysql", Family.MYSQL, ("pymysql",), default=True, extra="mysql")
    autocommit = True
    #: CLIENT.MULTI_STATEMENTS on every connection: only with ``autobatch``
    multi_statements = False
    #: the hosts to try in order (several from a multi-host URL), and what one must be
    hosts: list[tuple[Optional[str], Optional[int]]] = [(None, None)]
    session_attrs = "any"

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.connect_args:
            raise InterfaceError("pymysql.connect() takes keywords only (host=, user=, ...)")
        for key in _INT_KEYS & set(kwargs):
            kwargs[key] = _as_int(key, kwargs[key])
        self.hosts = _host_list(kwargs)
        self.session_attrs = kwargs.pop("target_session_attrs", "any")
        if self.session_attrs not in SESSION_ATTRS:
            raise InterfaceError(f"mysql target_session_attrs={self.session_attrs!r}: "
                                 f"expected one of {', '.join(SESSION_ATTRS)}")
        for alias, key in (("dbname", "database"), ("db", "database"), ("passwd", "password")):
            if alias in kwargs:  # MySQLdb-era spellings
                kwargs[key] = kwargs.pop(alias)
        kwargs.setdefault("charset", "utf8mb4")
        kwargs["autocommit"] = True
        return super().check(kwargs)

    def open(self) -> Connection:
        """A connection to the first host of the list that accepts one, serves
        (a Galera node out of its cluster does not) and has the
        ``target_session_attrs`` asked for (PyMySQL itself takes one host)."""
        failures = []
        for host, port in self.hosts:
            try:
                conn = self._open_one(host, port)
            except self.dbapi.OperationalError as exc:
                failures.append((host, port, exc))
                continue
            try:
                refusal = self._refusal(conn)
            except self.dbapi.Error as exc:  # e.g. 1047: the node is not ready
                refusal = str(exc)
            if refusal is None:
                return conn
            conn.close()
            failures.append((host, port, self.dbapi.OperationalError(2003, refusal)))
        if len(failures) == 1:
            raise failures[0][2]
        raise self.dbapi.OperationalError(2003, "no host of the list accepted a connection: "
                                          + "; ".join(f"{h}:{p}: {e}" for h, p, e in failures))

    def _open_one(self, host: Optional[str], port: Optional[int]) -> Connection:
        # PyMySQL's connect_timeout covers the TCP connect, not the handshake: bound
        # the handshake with a read timeout, lifted again once connected
        timeout = self.connect_kwargs.get("connect_timeout", 10)
        kwargs = {"read_timeout": timeout, **self.connect_kwargs}
        if host is not None:
            kwargs["host"] = host
        if port is not None:
            kwargs["port"] = port
        if self.multi_statements:
            from pymysql.constants import CLIENT
            kwargs["client_flag"] = kwargs.get("client_flag", 0) | CLIENT.MULTI_STATEMENTS
        conn = self.dbapi.connect(*self.connect_args, **kwargs)
        if "read_timeout" not in self.connect_kwargs:
            conn._read_timeout = None
            conn._sock.settimeout(None)
        sock = conn._sock  # a peer that vanished without a word is noticed within a minute
        for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, option):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        return conn

    def _refusal(self, conn: Connection) -> Optional[str]:
        """Why ``conn``'s server is not to be used: out of its Galera cluster, or
        without the session attributes asked for. Asked only where there is a
        choice (a host list) or a demand (``target_session_attrs``)."""
        if self.session_attrs == "any" and len(self.hosts) == 1:
            return None
        with conn.cursor() as cursor:
            galera = _galera_state(cursor)
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

    def replica_position(self, conn: Connection) -> ReplicaPosition:
        """A Galera node serves while it is Synced (its lag is what flow control
        allows: 0 here); a replication replica while both its threads run, its lag
        ``Seconds_Behind_Master``; any other server is up to date."""
        with conn.cursor() as cursor:
            galera = _galera_state(cursor)
            if galera is not None:
                if not galera.synced:
                    raise self.dbapi.OperationalError(1047, f"the Galera node is not synced: "
                                                            f"{galera}")
                return ReplicaPosition()
            cursor.execute("show slave status")
            status = cursor.fetchone()
            if status is None:
                return ReplicaPosition()
            row = dict(zip([d[0] for d in cursor.description], status))
        lag = row.get("Seconds_Behind_Master")
        if lag is None or row.get("Slave_IO_Running") != "Yes" \
                or row.get("Slave_SQL_Running") != "Yes":
            raise self.dbapi.OperationalError(
                2013, "replication is not running (Slave_IO_Running="
                f"{row.get('Slave_IO_Running')}, Slave_SQL_Running={row.get('Slave_SQL_Running')})")
        return ReplicaPosition(lag=float(lag))

    def begin(self, conn: Connection) -> None:
        conn.begin()

    def is_closed(self, conn: Connection) -> bool:
        return not conn.open

    def peer_gone(self, conn: Connection) -> bool:
        return readable(conn._sock.fileno())

    def cancel(self, conn: Connection) -> None:
        """KILL QUERY from a side connection (MySQL has no in-band cancel)."""
        side = self.dbapi.connect(**{**self.connect_kwargs, "host": conn.host,
                                     "port": conn.port, "connect_timeout": 5})
        try:
            with side.cursor() as cursor:
                cursor.execute("KILL QUERY %s", (conn.thread_id(),))
        finally:
            side.close()

    def socket_of(self, conn: Connection) -> Any:
        return conn._sock

    def fetchall(self, cursor: Cursor) -> list[Any]:
        return list(cursor.fetchall())

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        err = self.dbapi.err
        if isinstance(exc, err.InterfaceError):
            return True
        if isinstance(exc, err.InternalError) and "Packet sequence" in str(exc):
            return True
        return isinstance(exc, err.OperationalError) and exc.args[:1] in (
            (2006,), (2013,), (2014,), (1927,), (4031,))

    def is_transient(self, exc: BaseException) -> bool:
        err = self.dbapi.err
        return isinstance(exc, (err.OperationalError, err.InternalError)) \
            and exc.args[:1] in _TRANSIENT_ERRNOS

    def rolled_back(self, exc: BaseException, conn: Connection) -> bool:
        """InnoDB rolls the whole transaction back on a deadlock (and a Galera
        certification conflict, reported as one); after a lock wait timeout only
        with ``innodb_rollback_on_timeout``, so the server is asked."""
        if not self.is_transient(exc):
            return False
        if exc.args[:1] == (1213,):
            return True
        try:
            with conn.cursor() as cursor:
                cursor.execute("select @@in_transaction")
                return not cursor.fetchone()[0]
        except Exception:  # the session is gone: so is its transaction
            return True

    # -- streams and bulk loads --------------------------------------------------------

    #: an unbuffered result must be read to its end before the connection runs anything else
    stream_exclusive = True
    render_value = staticmethod(mysql_value_text)

    def begin_read_only(self, conn: Connection) -> None:
        with conn.cursor() as cursor:
            cursor.execute("START TRANSACTION READ ONLY")

    def stream_cursor(self, conn: Connection) -> Cursor:
        """An unbuffered ``SSCursor``: rows are read off the socket as they are fetched."""
        from pymysql.cursors import SSCursor
        return conn.cursor(SSCursor)

    def fetch_stream(self, cursor: Cursor, size: int) -> list[Any]:
        return list(cursor.fetchmany(size))

    def close_stream(self, cursor: Cursor, exhausted: bool, keep_transaction: bool) -> bool:
        """An unbuffered result not read to its end blocks the connection: closing
        the cursor reads (and drops) every row left, however many millions. So a
        stream closed early in a transaction of its own drops its connection (one
        reconnect); in the caller's transaction, which must go on, it reads the rest."""
        if exhausted or keep_transaction:
            return super().close_stream(cursor, exhausted, keep_transaction)
        if isinstance(cursor, TextRows):
            cursor = cursor.cursor
        result = cursor._result  # forget the unread rows, or collecting these reads them
        if result is not None:
            result.unbuffered_active = False
        cursor.connection = None
        return True

    @property
    def local_infile(self) -> bool:
        """True when the connections may send files (``local_infile=1``)."""
        return bool(self.connect_kwargs.get("local_infile"))

    def copy_rows(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  rows: Iterable[Sequence[Any]]) -> int:
        """``LOAD DATA LOCAL INFILE`` per chunk (about twice the rate of multi-row
        INSERTs here) when the Database was opened with ``local_infile=1``;
        otherwise PyMySQL's multi-row INSERTs. (A file to load is parsed into rows
        first, by ``copy_text``: MariaDB reads some escapes of the text format,
        ``\\f \\v`` and octal, differently from PostgreSQL.)"""
        if not self.local_infile:
            return super().copy_rows(cursor, table, columns, rows)
        total = 0
        for chunk in chunked(rows, LOAD_CHUNK):
            text = "".join(lines(chunk, self.render_value))
            total += self.load_data(cursor, table, columns, text, len(chunk))
        return total

    def load_data(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  text: str, expected: int) -> int:
        """Load one piece of text through a temporary file. With LOCAL the server
        turns a bad row into a warning and goes on, so any warning, or a count
        short of ``expected``, fails the load (the transaction then rolls back)."""
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".tsv") as piece:
            piece.write(text)
            piece.flush()
            cursor.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} "
                           f"CHARACTER SET utf8mb4{column_list(columns)}", (piece.name,))
        count: int = cursor.rowcount
        if cursor.warning_count or count != expected:
            cursor.execute("SHOW WARNINGS LIMIT 5")
            said = "; ".join(f"{level} {code}: {message}"
                             for level, code, message in cursor.fetchall())
            raise self.dbapi.err.DataError(
                f"LOAD DATA loaded {count} of {expected} rows into {table} ({said})")
        return count

    def enable_autobatch(self) -> None:
        self.multi_statements = True

    def path_of(self, sql: str) -> Path:
        """Any self-contained DML goes in a message (``#`` starts a comment here too)."""
        return self.message_safe(sql, ("--", "#"))

    def run_message(self, conn: Connection,
                    statements: list[tuple[str, Any]]) -> Optional[list[int]]:
        """``START TRANSACTION; s1; ...; sN; COMMIT`` in one message, each statement
        rendered by PyMySQL's own escaping (``mogrify``, what ``execute`` does) and
        its affected rows read with ``nextset()``. The server stops at the first
        failing statement, so COMMIT is never reached then: the unit is rolled back."""
        cursor = conn.cursor()
        try:
            body = ";".join(cursor.mogrify(without_terminator(sql), params)
                            for sql, params in statements)
            if len(body) > self.max_message:
                return None
            try:
                cursor.execute(f"START TRANSACTION;{body};COMMIT")
                counts: list[int] = []
                for _ in statements:
                    cursor.nextset()
                    counts.append(cursor.rowcount)
                cursor.nextset()  # the COMMIT's
            except BaseException:
                self.rollback_quietly(conn)
                raise
        finally:
            cursor.close()
        return counts


#: MySQL/MariaDB error numbers of transient failures: 1213 deadlock (also a Galera
#: certification conflict), 1205 lock wait timeout, 1020 record changed since it
#: was read (MariaDB's snapshot isolation), 1047 a Galera node not yet ready
_TRANSIENT_ERRNOS = frozenset({(1213,), (1205,), (1020,), (1047,)})


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


def _galera_state(cursor: Cursor) -> Optional[GaleraState]:
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


def _host_list(kwargs: dict[str, Any]) -> list[tuple[Optional[str], Optional[int]]]:
    """The hosts to try in order: libpq's comma-separated ``host``/``port`` form
    (what a multi-host URL gives) or one host. ``open`` sets each in turn."""
    host, port = kwargs.get("host"), kwargs.get("port")
    if not isinstance(host, str) or "," not in host:
        if port is not None:
            kwargs["port"] = _as_int("port", port)
        return [(host, kwargs.get("port"))]
    hosts = host.split(",")
    ports = [_as_int("port", p) for p in str(port or 3306).split(",")]
    if len(ports) == 1:
        ports *= len(hosts)
    if len(ports) != len(hosts) or not all(hosts):
        raise InterfaceError(f"mysql host={host!r} port={port!r}: give one port, or one for "
                             "each host, and no empty host")
    return list(zip(hosts, ports))


def _as_int(key: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InterfaceError(f"mysql {key}={value!r} is not an integer") from None


DRIVER = PyMySQLDriver
