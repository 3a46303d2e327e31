"""Parts of the adbapi drop-in (``adb.twisted.ConnectionPool``) that need no Database.

- ``ThreadPoolView``: what ``ConnectionPool.threadpool`` is: adb's workers,
  answering what Twisted's ``ThreadPool`` answers (the metrics applications read,
  work given to it), read live from the pool.
- ``as_driver_error``: adb's ``ConnectionLost``/``ServerUnavailable``/
  ``ConnectionRejected`` as an error that is the driver's too
  (``psycopg2.OperationalError``...), which is what adbapi's users catch; one
  class per pair, made once.
- ``check_sizes``: ``cp_min``/``cp_max``, refused by their own names.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Optional, Protocol

from twisted.python import failure, log

try:
    from twisted._threads import AlreadyQuit
except ImportError:  # pragma: no cover - every Twisted adb supports has it
    class AlreadyQuit(Exception):  # type: ignore[no-redef]
        """Stands for Twisted's own where it has none."""

from . import errors
from .pool import Pool, PoolState


class PoolQuit(errors.PoolClosed, AlreadyQuit):
    """``start()`` on a drop-in pool after ``close()``: adb's PoolClosed, and the
    ``AlreadyQuit`` that Twisted's ThreadPool (so stock adbapi's ``start()``) raises
    there. The pool never starts again: make a new ConnectionPool."""


class Hosting(Protocol):
    """What the view needs of the Database under the pool (``adb.twisted._PoolDatabase``)."""

    name: str

    @property
    def workers(self) -> Pool: ...
    def hosted(self, pool: Any, fn: Callable[..., Any], args: tuple[Any, ...],
               kw: Optional[dict[str, Any]]) -> Any: ...
    def close_blocking(self) -> None: ...


_classes: dict[tuple[type[BaseException], type[errors.Error]], type[errors.Error]] = {}


def _error_class(driver_error: type[BaseException],
                 adb_error: type[errors.Error]) -> type[errors.Error]:
    """The class of an error that is both the driver's (what adbapi users catch)
    and adb's (``ConnectionLost``, ``ServerUnavailable``, ``ConnectionRejected``);
    one per pair, made once."""
    made = _classes.get((driver_error, adb_error))
    if made is None:
        name = f"{adb_error.__name__}[{driver_error.__module__}.{driver_error.__name__}]"
        made = _classes.setdefault((driver_error, adb_error), type(
            adb_error.__name__, (driver_error, adb_error),
            {"__module__": "adb.twisted", "__qualname__": name, "__doc__": adb_error.__doc__}))
    return made


def as_driver_error(error: errors.Error, dbapi: Any,
                    cause: Optional[BaseException]) -> BaseException:
    """``error`` (adb's ConnectionLost, ServerUnavailable or ConnectionRejected) as
    an instance of the driver's error too: of ``cause``'s class when the driver
    raised it, else of the driver's ``OperationalError``. It carries the driver
    error's ``args`` and attributes (``errno``...), adb's own (``may_have_run``,
    ``reason``), and adb's message as a note. ``error`` itself where the module has
    no such class."""
    driver_error = type(cause) if isinstance(cause, getattr(dbapi, "Error", ())) else \
        getattr(dbapi, "OperationalError", None)
    if not (isinstance(driver_error, type) and issubclass(driver_error, Exception)):
        return error
    try:
        cls = _error_class(driver_error, type(error))
    except TypeError:  # a class that cannot be combined (a C layout conflict)
        return error
    both = cls.__new__(cls)
    both.args = cause.args if isinstance(cause, driver_error) else error.args
    if cause is not None:
        try:
            vars(both).update(vars(cause))
        except TypeError:  # attributes in slots: args is what it carries
            pass
    for name, value in vars(error).items():
        if name != "__notes__":
            setattr(both, name, value)
    errors.add_note(both, str(error))
    return both


class ThreadPoolView:
    """``ConnectionPool.threadpool``: adb's workers, answering what Twisted's
    ``ThreadPool`` answers (``min``, ``max``, ``threads``, ``working``,
    ``waiters``, ``workers``, ``started``, ``joined``, ``q.qsize()``: what
    applications read for their metrics), each read live from the pool. Work
    given to it (``callInThread``, ``callInThreadWithCallback``) runs in a worker.
    ``name`` is None, as adbapi names no thread pool; ``min`` and ``max`` are the
    pool's ``cp_min`` and ``cp_max`` (adb starts ``max`` threads at once)."""

    name = None

    def __init__(self, db: Hosting, owner: Any, minimum: int, maximum: int) -> None:
        self._db = db
        self._owner = weakref.ref(owner)  # the ConnectionPool, whose connect() work may use
        self.min = minimum
        self.max = maximum

    @property
    def started(self) -> bool:
        """True while the workers run (from ``start()`` to ``stop()``)."""
        return self._db.workers.state is PoolState.RUNNING

    @property
    def joined(self) -> bool:
        """True once ``stop()`` has been called."""
        return self._db.workers.stopping()

    @property
    def threads(self) -> list[threading.Thread]:
        """The worker threads started so far."""
        return [w.thread for w in self._db.workers.workers if w.thread.ident is not None]

    @property
    def workers(self) -> int:
        """How many worker threads are alive."""
        return sum(w.thread.is_alive() for w in self._db.workers.workers)

    @property
    def working(self) -> list[None]:
        """One None per worker running a call (Twisted's form: its length is the count)."""
        return [None] * sum(w.busy for w in self._db.workers.workers)

    @property
    def waiters(self) -> list[None]:
        """One None per live worker waiting for work."""
        return [None] * (self.workers - len(self.working))

    @property
    def q(self) -> Backlog:
        """What ``q.qsize()`` counts: calls queued, not yet taken by a worker."""
        return Backlog(self._db.workers.dispatch)

    def start(self) -> None:
        """Start the worker threads (``ConnectionPool.start`` calls this).

        :raises PoolQuit: the pool was closed: as Twisted's ThreadPool raises
            AlreadyQuit there, so ``ConnectionPool.start()`` raises and ``running``
            stays False; calls made on the pool fail with PoolClosed.
        """
        try:
            self._db.workers.start()
        except errors.PoolClosed as exc:
            raise PoolQuit(*exc.args) from None

    def stop(self) -> None:
        """Let queued calls run, close every worker's connection, join the threads
        (``ConnectionPool.finalClose`` calls this; blocking)."""
        self._db.close_blocking()

    def callInThread(self, func: Callable[..., object], *args: Any, **kw: Any) -> None:
        """Run ``func(*args, **kw)`` in a worker; what it raises is logged."""
        self.callInThreadWithCallback(None, func, *args, **kw)

    def callInThreadWithCallback(self, onResult: Optional[Callable[[bool, Any], object]],
                                 func: Callable[..., Any], *args: Any, **kw: Any) -> None:
        """Run ``func(*args, **kw)`` in a worker, then ``onResult(True, result)`` or
        ``onResult(False, Failure)`` there (Twisted's contract). Once the pool is
        closed ``func`` never runs, and ``onResult(False, Failure(PoolClosed))``
        comes at once (Twisted's stopped ThreadPool calls nothing: a Deferred of
        ``deferToThreadPool`` would never fire). ``connect()`` in ``func`` is that
        worker's connection."""
        owner = self._owner()
        if owner is None:  # the pool is gone, and its caller with it
            return
        never_ran = self._db.hosted(owner, with_callback, (onResult, func, args, kw), None)
        never_ran.addErrback(_not_run, onResult)

    def dumpStats(self) -> None:
        """Log the counts, as Twisted's ``ThreadPool.dumpStats`` does."""
        log.msg(f"waiters: {self.waiters}")
        log.msg(f"workers: {self.working}")
        log.msg(f"total: {self.threads}")

    def __repr__(self) -> str:
        return f"<ThreadPoolView of {self._db.name!r}: {self.workers} workers>"


class Waiting(Protocol):
    """Where the pool's shared calls wait (``adb.dispatch.Dispatch``), as counted here."""

    def queued(self) -> int: ...


class Backlog:
    """``ThreadPoolView.q``: a queue's ``qsize()``, counting the calls that wait."""

    def __init__(self, dispatch: Waiting) -> None:
        self._dispatch = dispatch

    def qsize(self) -> int:
        queued: int = self._dispatch.queued()
        return queued


def with_callback(on_result: Optional[Callable[[bool, Any], object]], func: Callable[..., Any],
                   args: tuple[Any, ...], kw: dict[str, Any]) -> None:
    """``callInThreadWithCallback``'s work, in the worker."""
    try:
        result, ok = func(*args, **kw), True
    except BaseException:
        result, ok = failure.Failure(), False  # type: ignore[no-untyped-call,unused-ignore]
    if on_result is not None:
        on_result(ok, result)
    elif not ok:
        log.err(result)  # type: ignore[no-untyped-call,unused-ignore]


def _not_run(reason: failure.Failure,
             on_result: Optional[Callable[[bool, Any], object]]) -> None:
    """Work given to the thread pool failed outside ``func`` (``with_callback``
    reports ``func``'s own outcome): the pool closed before it ran, and
    ``on_result`` hears of that; else ``on_result`` itself raised, and that is
    logged, as Twisted's ThreadPool logs it."""
    if on_result is not None and reason.check(errors.PoolClosed):  # type: ignore[no-untyped-call,unused-ignore]
        on_result(False, reason)
    else:
        log.err(reason)  # type: ignore[no-untyped-call,unused-ignore]


def check_sizes(cp_min: object, cp_max: object) -> None:
    """``cp_min`` and ``cp_max`` as adb can use them, or an InterfaceError naming them."""
    for name, value, least in (("cp_min", cp_min, 0), ("cp_max", cp_max, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise errors.InterfaceError(
                f"{name} must be {'an integer >= 0' if least == 0 else 'a positive integer'}, "
                f"not {value!r}")


__all__ = ["Backlog", "Hosting", "PoolQuit", "ThreadPoolView", "as_driver_error", "check_sizes",
           "with_callback"]
