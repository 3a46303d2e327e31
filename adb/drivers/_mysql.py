"""What the two MySQL drivers (PyMySQL, mysqlclient) share: what the server does,
whichever client asks.

``MySQLDriver`` holds it: connect keywords and host lists (Galera, ``target_session_attrs``),
the errors a connect can only meet again, which errors are transient or end the
connection, replicas, transactions and isolation, streams, ``autobatch``'s messages,
``KILL QUERY`` (``KillQuery``) and bulk loads (``MySQLCopy``: multi-row INSERTs or
``LOAD DATA LOCAL`` fed through a pipe). A client's module says how it opens a
connection and reads what the shared code needs from one.
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
from typing import Any, Iterable, NamedTuple, Optional, Sequence

from ..copytext import RowReader, mysql_value_text
from ..errors import InterfaceError
from ..sqltext import Path, without_terminator
from .base import ISOLATION_LEVELS, Connection, Cursor, Driver, ReplicaPosition, answers
from .cancel import Cancel
from .copy import InsertCopy, column_list
from .galera import SESSION_ATTRS, GaleraCluster, galera_state

#: MySQL errors after which a connect can only fail again, and what adb calls them
_REJECTIONS = {1044: "the server refused access to the database",
               1045: "the server refused the credentials",
               1698: "the server refused the credentials",
               1049: "the server has no such database",
               1251: "the server refuses the client's authentication method",
               2059: "the authentication plugin cannot be loaded"}

#: connect keywords given as integers (a URL gives them as text)
_INT_KEYS = {"connect_timeout", "read_timeout", "write_timeout", "local_infile",
             "max_allowed_packet", "client_flag"}
#: MySQL/MariaDB error numbers of transient failures: 1213 deadlock (also a Galera
#: certification conflict), 1205 lock wait timeout, 1020 record changed since it
#: was read (MariaDB's snapshot isolation), 1047 a Galera node not yet ready
_TRANSIENT_ERRNOS = frozenset({(1213,), (1205,), (1020,), (1047,)})
#: the errors after which the connection is gone: 2006 server gone away, 2013 lost
#: during a query, 2014 commands out of sync, 2055 lost (a system error), 1927
#: MariaDB's killed connection, 4031 its idle timeout
_DISCONNECTS = frozenset({(2006,), (2013,), (2014,), (2055,), (1927,), (4031,)})
#: the smallest ``max_allowed_packet`` a server takes: a shorter command is never too long
MIN_PACKET_LIMIT = 1024
#: the server's own error for a packet over ``max_allowed_packet`` (ER_NET_PACKET_TOO_LARGE)
_PACKET_TOO_LARGE = 1153


class MySQLDriver(Driver):
    """What the MySQL drivers share: what the server does whichever client asks.
    A subclass opens one connection (``_open_one``) and says what its client
    does differently (the client-specific hooks below)."""

    autocommit = True
    #: CLIENT.MULTI_STATEMENTS on every connection: only with ``autobatch``
    multi_statements = False
    #: the hosts to try in order (several from a multi-host URL), and what one must be
    hosts: list[tuple[Optional[str], Optional[int]]] = [(None, None)]
    session_attrs = "any"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.copy = MySQLCopy(self)
        self.cancel = KillQuery(self)
        if self.session_attrs != "any" or len(self.hosts) > 1:  # a choice, or a demand
            self.cluster = GaleraCluster(self.session_attrs)

    @classmethod
    def keywords(cls, dbapi: Any) -> Optional[frozenset[str]]:
        """``connect()``'s own, the MySQLdb-era spellings, and libpq's
        ``target_session_attrs`` for a host list."""
        own = super().keywords(dbapi)
        return None if own is None else own | {"dbname", "db", "passwd", "target_session_attrs"}

    def check(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.connect_args:
            raise InterfaceError(f"{self.dbapi.__name__}.connect() takes keywords only "
                                 "(host=, user=, ...)")
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
        """A connection to the first host of the list that accepts one and that
        the ``cluster`` (if the URL asks for a choice) does not refuse: a Galera
        node out of its cluster, a server without the ``target_session_attrs``
        asked for (each client itself takes one host)."""
        failures = []
        for host, port in self.hosts:
            try:
                conn = self._open_one(host, port)
            except self.dbapi.OperationalError as exc:
                failures.append((host, port, exc))
                continue
            try:
                refusal = None if self.cluster is None else self.cluster.refusal(conn)
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

    def probe(self, timeout: float) -> bool:
        """Does any host of the list send its handshake (MySQL's server speaks first)?
        A socket path (``unix_socket``) cannot be probed here: it says no."""
        return any(answers(host, port or 3306, b"", timeout) for host, port in self.hosts
                   if "unix_socket" not in self.connect_kwargs)

    def rejection(self, exc: BaseException) -> Optional[str]:
        """Access denied (1044, 1045, 1698), an unknown database (1049), an
        authentication plugin the server refuses (1251, 2059); a value the client itself
        refuses (a TypeError or ValueError from ``connect``)."""
        if isinstance(exc, (TypeError, ValueError)):
            return f"an option value is refused ({exc})"
        code = exc.args[0] if isinstance(exc, self.dbapi.OperationalError) and exc.args else None
        cause = _REJECTIONS.get(code) if isinstance(code, int) else None
        return None if cause is None else f"{cause} ({exc.args[1] if len(exc.args) > 1 else exc})"

    def replica_position(self, conn: Connection) -> ReplicaPosition:
        """A Galera node serves while it is Synced (its lag is what flow control
        allows: 0 here); a replication replica while both its threads run, its lag
        ``Seconds_Behind_Master``; any other server is up to date."""
        with conn.cursor() as cursor:
            galera = galera_state(cursor)
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

    def fetchall(self, cursor: Cursor) -> list[Any]:
        return list(cursor.fetchall())

    def is_disconnect(self, exc: BaseException, conn: Connection) -> bool:
        dbapi = self.dbapi
        if isinstance(exc, dbapi.InterfaceError):  # the client closed the connection
            return True
        if isinstance(exc, dbapi.InternalError) and "Packet sequence" in str(exc):
            return True  # PyMySQL lost its place in the protocol
        return isinstance(exc, dbapi.OperationalError) and exc.args[:1] in _DISCONNECTS

    def is_transient(self, exc: BaseException) -> bool:
        dbapi = self.dbapi
        return isinstance(exc, (dbapi.OperationalError, dbapi.InternalError)) \
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

    def begin_read_only(self, conn: Connection) -> None:
        with conn.cursor() as cursor:
            cursor.execute("START TRANSACTION READ ONLY")

    isolation_levels = frozenset(ISOLATION_LEVELS)

    def begin_transaction(self, conn: Connection, isolation: Optional[str],
                          read_only: bool) -> None:
        """``SET TRANSACTION ISOLATION LEVEL`` (it applies to the next transaction
        only), then ``START TRANSACTION`` (``READ ONLY`` if asked)."""
        if isolation is None:
            return (self.begin_read_only if read_only else self.begin)(conn)
        with conn.cursor() as cursor:
            cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation.upper()}")
            cursor.execute("START TRANSACTION READ ONLY" if read_only else "START TRANSACTION")
        return None

    def stream_cursor(self, conn: Connection) -> Cursor:
        """An unbuffered ``SSCursor`` (both clients name it so): rows are read off the
        socket as they are fetched."""
        cursors = importlib.import_module(f"{self.dbapi.__name__}.cursors")
        return conn.cursor(cursors.SSCursor)

    def fetch_stream(self, cursor: Cursor, size: int) -> list[Any]:
        return list(cursor.fetchmany(size))

    def enable_autobatch(self) -> None:
        self.multi_statements = True

    def path_of(self, sql: str) -> Path:
        """Any self-contained DML goes in a message (``#`` starts a comment here too)."""
        return self.message_safe(sql, ("--", "#"))

    def run_message(self, conn: Connection,
                    statements: list[tuple[str, Any]]) -> Optional[list[int]]:
        """``START TRANSACTION; s1; ...; sN; COMMIT`` in one message, each statement
        rendered by the client's own escaping (``mogrify``, what ``execute`` does) and
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
                self.rollback_ignoring_errors(conn)
                raise
        finally:
            cursor.close()
        return counts

    # -- client-specific ---------------------------------------------------------------

    def _open_one(self, host: Optional[str], port: Optional[int]) -> Connection:
        """One connection to ``host``/``port`` (None: the connect keywords' own)."""
        raise NotImplementedError

    def side_of(self, conn: Connection) -> Side:
        """Where ``conn``'s server is and its id there, for a cancel from another thread."""
        raise NotImplementedError

    def cut(self, conn: Connection) -> None:
        """Shut ``conn``'s socket down, from another thread than the one blocked on it."""
        raise NotImplementedError

    @staticmethod
    def warning_count(cursor: Cursor) -> int:
        """The warnings of the statement ``cursor`` ran last."""
        raise NotImplementedError


class Side(NamedTuple):
    """Where a connection's server is and the connection's id there (``MySQLDriver.side_of``)."""

    host: str
    port: int
    thread_id: int


class KillQuery(Cancel):
    """MySQL has no in-band cancel: ``KILL QUERY`` from a side connection to the
    server the connection went to; a connection is cut by shutting its socket down
    (``MySQLDriver.side_of`` and ``cut``: how the client tells)."""

    def __init__(self, driver: MySQLDriver) -> None:
        self.driver = driver

    def cancel(self, conn: Connection) -> None:
        """KILL QUERY from a side connection to the server ``conn`` went to."""
        side = self.driver.side_of(conn)
        killer = self.driver.dbapi.connect(**{**self.driver.connect_kwargs, "host": side.host,
                                              "port": side.port, "connect_timeout": 5})
        try:
            with killer.cursor() as cursor:
                cursor.execute("KILL QUERY %s", (side.thread_id,))
        finally:
            killer.close()

    def abort(self, conn: Connection) -> None:
        self.driver.cut(conn)


class MySQLCopy(InsertCopy):
    """Bulk loads by ``LOAD DATA LOCAL INFILE`` where the Database allows it
    (``local_infile=1``), else multi-row INSERTs; values rendered as MySQL reads them."""

    render_value = staticmethod(mysql_value_text)

    def __init__(self, driver: MySQLDriver) -> None:
        super().__init__(driver)
        self.mysql = driver

    @property
    def local_infile(self) -> bool:
        """True when the connections may send files (``local_infile=1``)."""
        return bool(self.mysql.connect_kwargs.get("local_infile"))

    def copy_rows(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  rows: Iterable[Sequence[Any]]) -> int:
        """One ``LOAD DATA LOCAL INFILE`` reading a pipe that a thread fills with the
        rows' text as it renders them (``PipeFeed``), when the Database was opened
        with ``local_infile=1`` (about twice the rate of multi-row INSERTs here):
        rendering overlaps the server's work and nothing is written to disk.
        Otherwise the client's multi-row INSERTs. (A file to load is parsed into rows
        first, by ``copy_text``: MariaDB reads some escapes of the text format,
        ``\\f \\v`` and octal, differently from PostgreSQL.)"""
        if not self.local_infile:
            return super().copy_rows(cursor, table, columns, rows)
        conn = cursor.connection
        with PipeFeed(RowReader(rows, self.render_value, encoding="utf-8")) as feed:
            try:
                cursor.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} "
                               f"CHARACTER SET utf8mb4{column_list(columns)}", (feed.path,))
            except BaseException as exc:
                feed.stop()
                if not isinstance(exc, self.mysql.dbapi.Error) and self.mysql.is_closed(conn):
                    # a client's end of a file it failed to send can trip on its closed socket
                    raise self.mysql.dbapi.OperationalError(
                        2013, f"Lost connection to server during LOAD DATA ({exc!r})") from exc
                raise
            feed.finish()
        return self.check_loaded(cursor, table, feed.reader.count)

    def check_loaded(self, cursor: Cursor, table: str, expected: int) -> int:
        """The count of a LOAD DATA just run. With LOCAL the server turns a bad row
        into a warning and goes on, so any warning, or a count short of
        ``expected``, fails the load (the transaction then rolls back)."""
        count: int = cursor.rowcount
        if self.mysql.warning_count(cursor) or count != expected:
            cursor.execute("SHOW WARNINGS LIMIT 5")
            said = "; ".join(f"{level} {code}: {message}"
                             for level, code, message in cursor.fetchall())
            raise self.mysql.dbapi.DataError(
                f"LOAD DATA loaded {count} of {expected} rows into {table} ({said})")
        return count


class PipeFeed:
    """A pipe that a thread fills from a ``RowReader``, for a LOAD DATA to read by
    its path (``/dev/fd/N``, the pipe's read end): the rows are rendered while the
    server loads what came before, at most a pipe's buffer ahead.

    ``finish`` waits for the thread and raises what the source raised (the
    statement has then loaded only the rows before it, and the transaction is
    rolled back). ``stop`` ends the feed early: closing the read end makes the
    thread's next write fail, so it stops whether or not the statement ever
    opened the pipe."""

    def __init__(self, reader: RowReader) -> None:
        self.reader = reader
        self.error: Optional[BaseException] = None
        self.read_end, self.write_end = os.pipe()
        self.path = f"/dev/fd/{self.read_end}"
        self.thread = threading.Thread(target=self.feed, name="adb-load-feed", daemon=True)

    def __enter__(self) -> PipeFeed:
        self.thread.start()
        return self

    def feed(self) -> None:
        try:
            with os.fdopen(self.write_end, "wb") as pipe:
                while piece := self.reader.read():
                    pipe.write(piece)
        except BrokenPipeError:
            pass  # stopped: the statement is not reading
        except BaseException as exc:  # the source's error, for finish to raise
            self.error = exc

    def stop(self) -> None:
        self.close_read_end()
        self.thread.join()

    def finish(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error

    def close_read_end(self) -> None:
        if self.read_end >= 0:
            os.close(self.read_end)
            self.read_end = -1

    def __exit__(self, *exc: object) -> None:
        self.stop()


def packet_too_large(size: int, limit: int, error_class: type[Exception]) -> Exception:
    """The error for a command of ``size`` bytes, too long for the server's ``limit``: the
    client's OperationalError (``error_class``) with the server's code for it,
    ``may_have_run`` False."""
    error = error_class(
        _PACKET_TOO_LARGE,
        f"the statement is {size} bytes, too long for the server's max_allowed_packet "
        f"({limit} bytes): it was not sent and did not run, and the connection stays "
        "usable; send smaller values (several statements, or runMany) or raise "
        "max_allowed_packet on the server")
    error.may_have_run = False  # type: ignore[attr-defined]
    return error


def keep_alive(sock: socket.socket) -> None:
    """TCP keepalive on a connection's socket, so that a peer that vanished without a
    word is noticed within a minute; a Unix socket has no such options and no need."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


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
