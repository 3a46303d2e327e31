"""BaseDatabase: the public API, written once for every front-end.

A front-end subclass supplies four things: how to make a future
(``_future``), what a call returns given its future (``_result``), whether a
future was abandoned by its caller (``_is_abandoned``, checked by the worker
before it starts), and ``close``. Everything else is here.
"""

import collections
import itertools
import logging
import os
import tempfile
import warnings
import weakref
from collections.abc import Mapping, Sequence

from . import drivers, ops, rows
from .errors import ForkError, InterfaceError, PoolClosed, PoolTimeout, QueueFull
from .pool import Pool, Worker
from .transaction import Transaction, TransactionContext, TxState
from .url import Target, make_target

log = logging.getLogger("adb")

DEFAULT_POOL_SIZE = 10
_names = itertools.count(1)
_live = weakref.WeakSet()


def _after_fork_in_child():
    for db in list(_live):
        db._refusal = ForkError(
            f"the Database {db.name!r} was created in process {db._pid} and cannot be used "
            f"in child process {os.getpid()}: create the Database after forking "
            "(e.g. after tornado's server.start(n))")


os.register_at_fork(after_in_child=_after_fork_in_child)


class BaseDatabase:
    """A pool of worker threads, each with one DB-API connection.

    :param url: ``postgresql://user:pw@host:port/db``, ``mysql://...``,
        ``sqlite:///path`` or ``sqlite://`` (memory); None with no ``driver``
        means a private SQLite file, removed on close (the embedded default).
    :param driver: a driver name (``"psycopg2"``, ``"pymysql"``, ``"sqlite3"``,
        or any importable PEP 249 module) for the keyword form; the remaining
        keywords go to the driver's ``connect()``.
    :param pool_size: number of worker threads and connections (default 10).
    :param row_factory: ``"tuple"`` (default), ``"dict"``, ``"namedtuple"`` or a
        callable ``(description, rows) -> list``.
    :param timeout: default seconds a call may wait for a free worker before it
        fails with ``PoolTimeout`` (it then never runs); None waits forever.
    :param name: a name for reprs, thread names and errors.
    :param on_connect: called with every new DB-API connection, in its worker
        thread, before it serves (session setup such as ``SET TIME ZONE``); it is
        called again after each reconnect.
    :param statement_timeout: default seconds a call may run; past it the call is
        cancelled on the server and fails with ``StatementTimeout``. None: no limit.
    :param max_queued: most calls that may wait for a worker; None: no limit.
    :param on_full: what a call does when ``max_queued`` calls already wait:
        ``"wait"`` (default; see ``wait_for_room``) or ``"raise"`` (``QueueFull``).
    :param max_lifetime: seconds after which a connection is replaced (between
        calls, never inside a transaction), less up to 5% jitter.
    :param max_idle: seconds a worker keeps an unused connection open.
    :param check_idle: run ``select 1`` before using a connection idle this long.
    """

    _blocking = False

    def __init__(self, url=None, *, driver=None, pool_size=None, row_factory=None,
                 timeout=None, name=None, on_connect=None, statement_timeout=None,
                 max_queued=None, on_full="wait", max_lifetime=None, max_idle=None,
                 check_idle=None, _pool_options=None, **connect_kwargs):
        target = make_target(url, driver, connect_kwargs)
        if on_connect is not None and not callable(on_connect):
            raise InterfaceError(f"on_connect must be callable, not {on_connect!r}")
        self._tempfile = None
        if target is None:
            fd, self._tempfile = tempfile.mkstemp(prefix="adb-", suffix=".db")
            os.close(fd)
            target = Target("sqlite3", {"database": self._tempfile})
        try:
            self._driver = driver_obj = drivers.load(target, on_connect)
            size = _check_pool_size(pool_size, driver_obj)
        except BaseException:
            self._close_end()  # the embedded default's file, if one was made
            raise
        self._row_factory = rows.resolve(row_factory)
        self._timeout = _check_timeout(timeout)
        self._statement_timeout = _check_timeout(statement_timeout, "statement_timeout")
        self._max_queued = _check_count(max_queued, "max_queued")
        if on_full not in ("wait", "raise"):
            raise InterfaceError(f"on_full must be 'wait' or 'raise', not {on_full!r}")
        self._on_full = on_full
        pool_options = {"max_lifetime": _check_timeout(max_lifetime, "max_lifetime"),
                        "max_idle": _check_timeout(max_idle, "max_idle"),
                        "check_idle": _check_timeout(check_idle, "check_idle"),
                        **(_pool_options or {})}
        self.name = name if name is not None else f"adb-{next(_names)}"
        self._pid = os.getpid()
        self._refusal = None  # set to the error to raise once closing or forked
        self._parked = _Parked()  # calls waiting for room (max_queued, on_full="wait")
        self._room_waiters = collections.deque()
        self._open_tx = weakref.WeakSet()
        self._pool = Pool(driver_obj, size, self.name, self._is_abandoned, **pool_options)
        self._shared = _Submitter(self._pool.submit)
        _live.add(self)
        log.debug("%r created", self)

    # -- what front-ends provide ---------------------------------------------------

    @staticmethod
    def _is_abandoned(future):
        return False

    def _future(self):
        raise NotImplementedError

    def _result(self, future, claim, timeout):
        raise NotImplementedError

    # -- the public API --------------------------------------------------------------

    @property
    def paramstyle(self):
        """The driver's PEP 249 paramstyle: ``'pyformat'`` (``%s``) or ``'qmark'`` (``?``)."""
        return self._driver.paramstyle

    @property
    def dbapi(self):
        """The driver module, for catching its exceptions (``db.dbapi.IntegrityError``)."""
        return self._driver.dbapi

    @property
    def closed(self):
        return self._pool.closing

    def runQuery(self, sql, params=None, tx=None, *, row_factory=None, timeout=None,
                 statement_timeout=None):
        """Run a query and return its rows as a list (rows shaped by the row factory)."""
        sql, params = _statement(sql, params)
        factory = self._row_factory if row_factory is None else rows.resolve(row_factory)
        return self._dispatch(tx, Worker.standalone, (ops.query, sql, params, factory), timeout,
                              statement_timeout)

    def runOperation(self, sql, params=None, tx=None, *, timeout=None, statement_timeout=None):
        """Run one statement, autocommitted unless ``tx`` is given; return its rowcount.

        ``runOperation((sql, params))`` (one tuple) also works, as in the 2011 adb.
        """
        sql, params = _statement(sql, params)
        return self._dispatch(tx, Worker.standalone, (ops.operation, sql, params), timeout,
                              statement_timeout)

    def runMany(self, sql, seq_of_params, tx=None, *, timeout=None, statement_timeout=None):
        """Run ``sql`` once per parameter set by the driver's bulk path, atomically.

        Returns the total rowcount. Outside ``tx`` all sets commit together or not at all.
        """
        sql, _ = _statement(sql, None)
        if isinstance(seq_of_params, (str, bytes)) or not hasattr(seq_of_params, "__iter__"):
            raise TypeError(
                f"runMany needs a sequence of parameter sets, not {type(seq_of_params).__name__}")
        seq = list(seq_of_params)
        for params in seq[:1]:
            _check_params(params)
        return self._dispatch(tx, Worker.atomic, (ops.many, sql, seq), timeout, statement_timeout)

    def runInteraction(self, fn, *args, **kwargs):
        """Run ``fn(cursor, *args, **kwargs)`` in a worker, inside one transaction.

        Commits if ``fn`` returns, rolls back and re-raises if it raises; returns
        what ``fn`` returns. ``fn`` runs in a worker thread: it must not touch the loop.
        """
        if not callable(fn):
            raise TypeError(f"runInteraction needs a callable, not {type(fn).__name__}")
        return self._call(Worker.atomic, (ops.interaction, fn, args, kwargs), None, None)

    def beginTransaction(self, *, timeout=None):
        """Pin a worker and open a transaction on it; return its handle."""
        tx = Transaction(self)
        self._open_tx.add(tx)
        return self._call(Worker.begin, (tx,), None, timeout)

    def commitTransaction(self, tx):
        """Commit ``tx`` and free its worker. A failed (aborted) transaction is
        rolled back instead and the call fails with TransactionError."""
        return self._finish(tx, True)

    def rollbackTransaction(self, tx):
        """Roll ``tx`` back and free its worker."""
        return self._finish(tx, False)

    def transaction(self, *, timeout=None):
        """``async with db.transaction() as tx``: commit on success, roll back on error."""
        return TransactionContext(self, timeout)

    def stats(self):
        """A snapshot of the pool: workers busy/idle/pinned, queued, completed, errors,
        connects, hand-back wake-ups (signalled, and timed while saturated), results settled
        and the largest batch settled at once."""
        stats = self._pool.stats()
        stats["name"] = self.name
        stats["closed"] = self._pool.closing
        stats["open_transactions"] = len(self._open_tx)
        handback = self._pool.handback
        for key in ("wakeups", "polls", "settled", "largest_batch"):
            stats[key] = getattr(handback, key, None)
        return stats

    def __repr__(self):
        state = "closed" if self._pool.closing else "open"
        return (f"<{type(self).__module__}.{type(self).__name__} {self.name!r} "
                f"{self._driver.target} pool_size={len(self._pool.workers)} {state}>")

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None and not pool.closing:
            warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self)
            pool.stop()

    # -- plumbing ----------------------------------------------------------------------

    def _dispatch(self, tx, fn, args, timeout, statement_timeout=None):
        if tx is None:
            return self._call(fn, args, None, timeout, statement_timeout)
        return self._call(Worker.in_transaction, args, self._tx_queue(tx), None, statement_timeout)

    def _interact_in(self, tx, fn, args, kwargs):
        return self._call(Worker.in_transaction, (ops.interaction, fn, args, kwargs),
                          self._tx_queue(tx), None)

    def _tx_queue(self, tx):
        if not isinstance(tx, Transaction):
            raise TypeError(
                f"tx must be a transaction handle from beginTransaction(), not {type(tx).__name__}")
        tx.check(self)
        return tx.queue

    def _finish(self, tx, commit):
        queue = self._tx_queue(tx)
        tx.state = TxState.ENDING
        self._open_tx.discard(tx)
        return self._call(Worker.finish, (tx, commit), queue, None)

    def _call(self, fn, args, queue, timeout, statement_timeout=None):
        """Queue one job and return what the front-end makes of its future."""
        if self._refusal is not None:
            raise self._refusal
        if timeout is None:
            timeout = self._timeout
        if statement_timeout is None:
            statement_timeout = self._statement_timeout
        else:
            _check_timeout(statement_timeout, "statement_timeout")
        claim = None
        if queue is None:
            if timeout is not None:
                claim = [True]
            queue = self._shared
            if self._max_queued is not None and self._pool.queue.qsize() >= self._max_queued:
                if self._on_full == "raise":
                    raise QueueFull(
                        f"the Database {self.name!r} already has {self._max_queued} calls waiting "
                        f"(max_queued={self._max_queued}); this call did not run")
                queue = self._overflow()
        future = self._future()
        queue.put((future, fn, claim, statement_timeout) + args)  # one tuple per queued call
        return self._result(future, claim, timeout)

    def _pool_timeout(self, timeout):
        """The PoolTimeout for a call that waited ``timeout`` s for a worker in vain."""
        stats = self._pool.stats()
        pinned = (f" ({stats['pinned']} of {stats['pool_size']} workers are pinned by "
                  "transactions)" if stats["pinned"] else "")
        return PoolTimeout(f"no worker of the Database {self.name!r} became free within "
                           f"{timeout} s{pinned}; the call did not run")

    def _overflow(self):
        """Where a call goes when ``max_queued`` calls wait (``on_full="wait"``): a
        caller-side queue that ``_admit`` empties into the pool's as room frees up."""
        return self._parked

    def _room(self):
        return self._max_queued is None or self._pool.queue.qsize() < self._max_queued

    def _admit(self):
        """Move parked calls into the pool's queue while there is room, then wake
        ``wait_for_room`` callers (loop thread, after each batch of results)."""
        parked, submit = self._parked, self._pool.submit
        while parked and self._room():
            submit(parked.popleft())
        waiters = self._room_waiters
        while waiters and not parked and self._room():
            self._wake(waiters.popleft())

    def wait_for_room(self):
        """Wait until fewer than ``max_queued`` calls wait for a worker.

        A producer that fires calls faster than the pool runs them awaits this
        before each call, so memory stays bounded however many calls it makes::

            for params in huge_iterable:
                await db.wait_for_room()
                pending.add(db.runOperation(sql, params))  # and discard finished ones
        """
        waiter = self._future()
        if not self._parked and self._room():
            self._wake(waiter)
        else:
            self._room_waiters.append(waiter)
        return waiter

    def _wake(self, waiter):
        raise NotImplementedError

    def _close_start(self):
        """Refuse new calls, roll back open transactions, let queued calls finish."""
        if self._pool.closing:
            return False
        self._refusal = PoolClosed(f"the Database {self.name!r} is closed")
        for tx in list(self._open_tx):
            tx.fail()
            tx.queue.put((None, Worker.abandon, None, None, "because the Database is closing"))
        self._pool.stop()
        return True

    def _close_end(self):
        """After the workers exited (loop thread): deliver what is left, drop the
        embedded default's file."""
        pool = getattr(self, "_pool", None)  # None: construction failed
        stop = getattr(pool and pool.handback, "stop", None)
        if stop is not None:
            stop()
        _live.discard(self)
        if self._tempfile:
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.remove(self._tempfile + suffix)
                except FileNotFoundError:
                    pass
            self._tempfile = None


_PLAIN_PARAMS = frozenset({tuple, list, dict})


class _Submitter:
    """``put(job)`` for the pool's shared work (hand-off to an idle worker or queue)."""

    __slots__ = ("put",)

    def __init__(self, submit):
        self.put = submit


class _Parked(collections.deque):
    put = collections.deque.append


def _statement(sql, params):
    if params is None and isinstance(sql, tuple) and len(sql) == 2:
        sql, params = sql  # the 2011 form: runOperation((sql, params))
    if not isinstance(sql, (str, bytes)):
        raise TypeError(f"SQL must be a str, not {type(sql).__name__}")
    if params is not None:
        _check_params(params)
    return sql, params


def _check_params(params):
    if type(params) in _PLAIN_PARAMS:  # the common case, without ABC checks
        return
    if isinstance(params, (str, bytes)):
        raise TypeError(
            f"parameters must be a tuple, list or dict, not {type(params).__name__} "
            f"(for one value write ({params!r},))")
    if not isinstance(params, (Sequence, Mapping)):
        raise TypeError(f"parameters must be a tuple, list or dict, not {type(params).__name__}")


def _check_pool_size(pool_size, driver):
    if pool_size is None:
        return driver.max_pool_size or DEFAULT_POOL_SIZE
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise InterfaceError(f"pool_size must be a positive integer, not {pool_size!r}")
    if driver.max_pool_size is not None and pool_size > driver.max_pool_size:
        raise InterfaceError(
            f"pool_size={pool_size} is impossible for {driver.target}: an in-memory SQLite "
            f"database lives in one connection; use pool_size=1 or a file (sqlite:///path.db)")
    return pool_size


def _check_timeout(timeout, name="timeout"):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InterfaceError(f"{name} must be a number of seconds >= 0, not {timeout!r}")
    return timeout


def _check_count(count, name):
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InterfaceError(f"{name} must be a positive integer, not {count!r}")
    return count


__all__ = ["BaseDatabase"]
