"""adb's own exceptions.

Driver errors (``psycopg2.IntegrityError``, ``pymysql.err.ProgrammingError``,
``sqlite3.OperationalError``...) reach the caller unchanged; the classes here are
only for failures that belong to adb itself. Every message names the Database.
"""

from __future__ import annotations

from typing import Optional


class Error(Exception):
    """Base class of every exception raised by adb itself.

    ``delivered``: when the error ended a stream, how many rows had reached its
    consumer (set by the stream); None otherwise.
    """

    delivered: Optional[int] = None


class InterfaceError(Error, ValueError):
    """A bad URL, bad option or bad argument, detected before anything ran."""


class ConnectionRejected(InterfaceError):
    """The server (or the driver) rejected the connection for a cause that trying
    again will not cure: credentials it refuses, a database it does not have, an
    option value it will not take. Nothing ran; adb neither retries it nor backs off.
    ``reason`` says which, in words; the driver's error is the ``__cause__``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class PoolClosed(Error):
    """The Database is closed (or closing) and takes no more work.

    Every PoolClosed adb raises is built by one of the class methods below, so
    the same situation always reads the same way."""

    @classmethod
    def refused(cls, name: str) -> PoolClosed:
        """For a new call (or room waiter) once ``close()`` has begun."""
        return cls(f"the Database {name!r} is closed")

    @classmethod
    def closing(cls, name: str) -> PoolClosed:
        """For a transaction a worker was about to begin during the close."""
        return cls(f"the Database {name!r} is closing")

    @classmethod
    def before_run(cls, name: str) -> PoolClosed:
        """For an accepted call still queued when the close gave up waiting for it."""
        return cls(f"the Database {name!r} closed before this call could run")

    @classmethod
    def at_exit(cls, name: str) -> PoolClosed:
        """For a call made, or still queued, once the interpreter began to exit with
        the Database open (``adb.engine``'s exit handler closed it)."""
        return cls(f"the Database {name!r} was closed because the interpreter exited")

    @classmethod
    def restarted(cls, name: str) -> PoolClosed:
        """For ``start()`` on a pool already stopped (the adbapi drop-in's)."""
        return cls(f"the Database {name!r} is closed and cannot start again: "
                   "make a new one")

    @classmethod
    def waiting_for_room(cls, name: str) -> PoolClosed:
        """For a caller of ``wait_for_room()`` when the close begins."""
        return cls(f"the Database {name!r} closed while this caller waited for room")


class PoolTimeout(Error):
    """No worker became free for the call within its timeout; it never ran."""


class QueueFull(Error):
    """More calls are queued than ``max_queued`` allows; this one never ran."""


class TransactionError(Error):
    """A transaction handle was used after it finished, or on the wrong Database."""


class ConnectionLost(Error):
    """The connection broke under a call.

    ``may_have_run`` tells whether the statement may have reached the server
    (and so may have taken effect); adb never re-runs such a statement itself.
    """

    def __init__(self, message: str, may_have_run: bool = True) -> None:
        super().__init__(message)
        self.may_have_run = may_have_run


class StreamTimeout(Error):
    """A stream's consumer asked for nothing for ``idle_timeout`` seconds: the stream
    was closed and its worker freed; ``delivered`` rows had reached the consumer."""


class ForkError(Error):
    """The Database was created in another process; create it after forking."""


class ServerUnavailable(ConnectionLost):
    """No connection could be opened (server down, refused, unreachable, bad login).

    The call never reached the server (``may_have_run`` is False), so it is safe
    to retry; adb backs off between connection attempts and fails calls quickly
    meanwhile instead of hanging.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, may_have_run=False)


class ReplicaUnavailable(ServerUnavailable):
    """A ``replica=True`` read found no replica fit to serve it (down, or lagging
    past ``max_replica_lag``) and the Database says ``replica_fallback="raise"``.
    The read never ran."""


class StatementTimeout(Error):
    """The call ran past its ``statement_timeout`` and was cancelled on the server
    (SQLite, which has none: interrupted).

    ``may_have_run`` is False when the cancel was confirmed (the statement took no
    effect), True when the connection had to be cut instead.
    """

    def __init__(self, message: str, may_have_run: bool = False) -> None:
        super().__init__(message)
        self.may_have_run = may_have_run


def name_attempts(exc: BaseException, attempts: int, what: str, retries: int) -> None:
    """Say on ``exc``, the last error of ``what`` after ``attempts`` runs that each
    failed transiently, that adb's retries ran out: ``exc.adb_attempts`` and a note
    in its traceback (Python 3.11+). The error keeps its own type (a driver's
    ``SerializationFailure`` stays one), so callers catch what they always caught."""
    try:
        setattr(exc, "adb_attempts", attempts)
    except AttributeError:  # an exception class with __slots__
        pass
    add_note(exc, f"adb: {what} ran {attempts} times and failed each time on a transient "
                  f"error; retries={retries} ran out and this is the last error")


def add_note(exc: BaseException, text: str) -> None:
    """Add ``text`` to ``exc``'s traceback (``BaseException.add_note``, Python
    3.11+); on 3.10 to its ``__notes__`` list, which tracebacks show from 3.11 on."""
    note = getattr(exc, "add_note", None)
    if note is not None:
        note(text)
        return
    try:
        exc.__notes__ = [*getattr(exc, "__notes__", []), text]  # type: ignore[attr-defined]
    except AttributeError:  # an exception class with __slots__: the message says enough
        pass
