"""The engine's lifecycle: the close sequence, a fork, the interpreter's exit, a
Database dropped unclosed, and the embedded default's file.

``Lifecycle`` owns one engine's ``CloseState``, the futures its closes wait on,
the close's timer and the embedded file. It stops the other parts through their
public methods: the calls part refuses new calls (``Calls.refuse``), the
transactions part has every open transaction rolled back (``abandon_all``), the
pool and the listening hub stop. Every lifecycle of this process is in ``_live``,
which the fork and exit hooks below walk. A replica's engine has a lifecycle of
its own; the primary's engine closes them together.
"""

from __future__ import annotations

import atexit
import enum
import os
import tempfile
import threading
import time
import weakref
from typing import Any, Callable, Generic, Optional

from .. import dropwatch
from ..admission import Admission
from ..errors import ForkError, PoolClosed
from ..frontend import Cancellable, F, FrontEnd
from ..handback import Handback
from ..options import check_timeout
from ..pool import Pool, PoolState, give_up_all_at_exit
from ..txrecord import EndedBy
from .calls import Calls
from .listening import Listening
from .transactions import Transactions

_live: weakref.WeakSet[Lifecycle[Any]] = weakref.WeakSet()

#: seconds the exit handler waits, in all, for cancels already on their way
EXIT_CANCEL_WAIT = 5.0


class CloseState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # refusing calls; the workers finish what was accepted
    CLOSED = "closed"    # every worker thread has ended; every accepted call is settled


def _after_fork_in_child() -> None:
    """Every Database of the parent refuses calls in a forked child, and the child lets
    go of the parent's connections without a word on them (``_let_go``)."""
    for lifecycle in list(_live):
        lifecycle.after_fork()


def _let_go(connections: Any) -> None:
    """In a forked child: point each of the parent's connection sockets at /dev/null in
    this process, so that nothing the child does with the connection objects (a
    collection, the interpreter's exit: psycopg2 sends its goodbye to the server when a
    connection is deallocated) reaches the server or breaks the parent's session. The
    parent's sockets are untouched; the child's copies are closed."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for conn in connections:
            fd = _socket_fd(conn)
            if fd is not None:
                try:
                    os.dup2(devnull, fd)
                except OSError:
                    pass
    finally:
        os.close(devnull)


def _socket_fd(conn: Any) -> Optional[int]:
    """The file descriptor of a DB-API connection's socket, or None (sqlite3, or a
    connection already closed)."""
    for owner in (conn, getattr(conn, "_sock", None)):  # psycopg2, psycopg; PyMySQL
        fileno = getattr(owner, "fileno", None)
        if fileno is not None:
            try:
                fd = fileno()
            except Exception:
                return None
            return fd if isinstance(fd, int) and fd >= 0 else None
    return None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    """The interpreter exits with Databases of this process open (no ``close()``):
    each is closed without waiting (``Lifecycle.close_at_exit``), so that no
    statement it still runs outlives the process and commits after it; a forked
    child's Databases are its parent's, and left alone."""
    deadline = time.monotonic() + EXIT_CANCEL_WAIT
    for lifecycle in list(_live):
        if not lifecycle.forked:
            lifecycle.close_at_exit(deadline)
    # and the pools of Databases let go of unclosed, which still run what they took
    give_up_all_at_exit(deadline)
    # what was open is ended: a handle collected in the teardown calls nothing now
    dropwatch.stop()


atexit.register(_at_exit)


class EmbeddedFile:
    """The embedded default's database: a private SQLite file, made here and removed
    with its journal files when the Database closes or its constructor fails, or
    else once its pool is gone (every worker ended) or the process exits: a Database
    never closed leaves no file behind either."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="adb-", suffix=".db")
        os.close(fd)
        self.pid = os.getpid()

    def remove_with(self, pool: Pool) -> None:
        weakref.finalize(pool, _remove_files, self.path, self.pid)

    def remove(self) -> None:
        _remove_files(self.path, self.pid)


def _remove_files(path: str, pid: int) -> None:
    """Remove the embedded file and its journal files, in the process that made them
    only: a forked child that exits (a gunicorn worker) leaves its parent's file."""
    if os.getpid() != pid:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


class Lifecycle(Generic[F]):
    """How one engine ends (see the module docstring).

    :param embedded: the embedded default's file, removed when it closes, or None.
    """

    def __init__(self, name: str, frontend: FrontEnd[F], calls: Calls[F],
                 transactions: Transactions[F], listening: Listening[F], pool: Pool,
                 admission: Optional[Admission], handback: Handback,
                 embedded: Optional[EmbeddedFile]) -> None:
        self.name = name
        self.pid = os.getpid()
        self._frontend = frontend
        self._calls = calls
        self._transactions = transactions
        self._listening = listening
        self._pool = pool
        self._admission = admission
        self._handback = handback
        self._embedded = embedded
        self._state = CloseState.OPEN
        self._close_futures: list[F] = []
        self._close_timer: Optional[Cancellable] = None
        self._lock = threading.Lock()
        self._dropped = False  # its Database was collected unclosed (``drop``)
        if embedded is not None:
            embedded.remove_with(pool)
        _live.add(self)

    @property
    def closed(self) -> bool:
        """True from the moment the close begins."""
        return self._state is not CloseState.OPEN

    @property
    def forked(self) -> bool:
        """True in a child forked from the process that made this engine."""
        return self.pid != os.getpid()

    def after_fork(self) -> None:
        """In a forked child (the fork hook): let go of the parent's connections, and
        refuse every call from now on."""
        _let_go(self._pool.connections.values())
        listening = self._listening.connection()
        if listening is not None:
            _let_go([listening])
        self._calls.refuse(ForkError(
            f"the Database {self.name!r} was created in process {self.pid} and cannot be "
            f"used in child process {os.getpid()}: create the Database after forking "
            "(e.g. after tornado's server.start(n))"))

    def close_in_child(self) -> None:
        """``close()`` in a forked child, at once: the child owns no worker (threads do
        not survive a fork) and must not touch the parent's connections (let go of at
        the fork, ``_let_go``) nor its embedded file; it only stops counting this
        engine as open."""
        with self._lock:
            self._state = CloseState.CLOSED
            self._close_futures = []
        self._calls.refuse(PoolClosed.refused(self.name))
        _live.discard(self)

    def closing(self, timeout: Optional[float] = None) -> F:
        """Close; return a future settled on the loop thread once every worker thread
        has ended and every call the Database accepted has been settled.

        1. New calls and ``wait_for_room`` fail with PoolClosed.
        2. Open transactions roll back (their workers are told to abandon them).
        3. Parked calls (``max_queued``) join the queue; room waiters get PoolClosed.
        4. The workers run every queued call, then exit (a STOP per worker, queued last).
        5. With ``timeout`` (seconds), calls still queued then fail with PoolClosed;
           calls already running are waited for.
        6. The watchdog joins the worker threads, fails anything that slipped in
           behind the STOPs, and ``_closed`` runs on the loop thread.
        Idempotent: every call returns a future settled at the same moment.
        """
        done = self._frontend.new_future()
        with self._lock:
            closed = self._state is CloseState.CLOSED
            if not closed:
                self._close_futures.append(done)
        if closed:
            self._frontend.settle(done, True, None)
            return done
        limit = check_timeout(timeout)
        if self.stop_accepting() and limit is not None:
            self._close_timer = self._frontend.call_later(limit, self._close_timed_out)
        return done

    def close_blocking(self) -> None:
        """The close sequence on the calling thread, without the front-end's loop
        (the adbapi drop-in: adbapi's ``close()`` blocks, and runs while the reactor
        shuts down)."""
        self.stop_accepting()
        self._pool.wait_stopped()
        self._closed()

    def close_at_exit(self, deadline: float) -> None:
        """The interpreter exits with this engine open: the close sequence without
        its wait. New calls fail, open transactions roll back (``EndedBy.EXIT``),
        queued calls fail with PoolClosed (they never run), and every running
        statement is cancelled on the server from this thread; cancels already on
        their way are waited for until ``deadline``. The workers end as the
        process does. A pool never started has nothing to stop."""
        if self._state is CloseState.CLOSED or self._pool.state is PoolState.NEW:
            return
        self.stop_accepting(EndedBy.EXIT)
        self._pool.give_up_at_exit(deadline)

    def stop_accepting(self, by: EndedBy = EndedBy.CLOSE) -> bool:
        """Steps 1-4 of the close sequence; False if an earlier close already took them.
        ``by``: what closes it (``close()``, or the interpreter's exit)."""
        with self._lock:
            if self._state is not CloseState.OPEN:
                return False
            self._state = CloseState.CLOSING
        self._calls.refuse(PoolClosed.at_exit(self.name) if by is EndedBy.EXIT
                           else PoolClosed.refused(self.name))
        self._transactions.abandon_all(by)
        if self._admission is not None:
            self._admission.close()
        self._pool.stop()
        self._listening.stop()
        return True

    def _close_timed_out(self) -> None:
        self._close_timer = None  # fired: a Twisted DelayedCall may not be cancelled now
        self._pool.fail_queued(PoolClosed.before_run(self.name))

    def workers_exited(self) -> None:
        """Every worker thread has ended (watchdog thread): finish on the loop thread,
        if a close waits."""
        if self._dropped:  # nobody closes it: its file goes with its workers
            self._remove_embedded()
        if self._close_futures:
            try:
                self._frontend.call_soon_threadsafe(self._closed)
            except RuntimeError:  # the loop is closed: nobody waits for the close
                pass

    def _closed(self) -> None:
        """The last step (loop thread, or the watchdog's on a blocking front-end):
        stop hand-back polling, end the listeners, drop the embedded default's file,
        settle every close future. Once."""
        with self._lock:
            if self._state is CloseState.CLOSED:
                return
            self._state = CloseState.CLOSED
            futures, self._close_futures = self._close_futures, []
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        self._handback.stop()
        self._listening.close()
        _live.discard(self)
        self._remove_embedded()
        for future in futures:
            self._frontend.settle(future, True, None)

    def drop(self, _open: CloseState = CloseState.OPEN,
             _getpid: Callable[[], int] = os.getpid) -> bool:
        """Its Database was collected unclosed: stop everything without waiting.
        True if it was still running (the Database then warns). In a forked child
        nothing runs: the parent's Database is its own to close. (The defaults are
        bound at import: a Database collected at interpreter exit may run this
        after the module's globals were cleared.)"""
        if self._state is not _open or self.pid != _getpid():
            return False
        try:
            if self._pool.stopping():
                return False
        except AttributeError:  # at exit, adb's modules already cleared: nothing to stop
            return False
        self._dropped = True
        if self._admission is not None:
            self._admission.close()  # parked calls run; their callers may still wait
        self._pool.stop()
        self._listening.stop()
        return True

    def _remove_embedded(self) -> None:
        if self._embedded is not None:
            self._embedded.remove()


__all__ = ["CloseState", "EXIT_CANCEL_WAIT", "EmbeddedFile", "Lifecycle"]
