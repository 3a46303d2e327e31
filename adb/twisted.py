"""The Twisted front-end: Deferreds, and a drop-in for ``twisted.enterprise.adbapi``.

``ConnectionPool`` takes adbapi's constructor and methods, so switching is one
import; ``Database`` is adb's own API (the same as every other front-end)
returning Deferreds. Results reach the reactor thread in batches: one
``reactor.callFromThread`` per batch, not per result. Works on the default
reactor and on the asyncio reactor (sharing a loop with Tornado).
"""

import threading

from twisted.enterprise import adbapi
from twisted.internet import defer
from twisted.python import failure, log

from . import errors
from .core import BaseDatabase
from .handback import BatchedHandback
from .pool import Worker
from .url import DRIVER_ALIASES, Target


class ConnectionLost(errors.ConnectionLost, adbapi.ConnectionLost):
    """The connection broke under a call (catchable as adbapi's ConnectionLost too)."""


def _settle(deferred, ok, value):
    if not deferred.called:  # cancelled or timed out meanwhile
        if ok:
            deferred.callback(value)
        else:
            deferred.errback(failure.Failure(value, type(value), value.__traceback__))


def _is_abandoned(deferred):
    return deferred.called


class Database(BaseDatabase):
    __doc__ = BaseDatabase.__doc__ + """
    :param reactor: the reactor to deliver results on (default: the global one).

    Every method returns a ``Deferred``; cancelling one that has not started
    removes it from the queue.
    """

    def __init__(self, url=None, *, reactor=None, **kwargs):
        if reactor is None:
            from twisted.internet import reactor
        self.reactor = reactor
        self._closed_deferreds = None
        super().__init__(url, **kwargs)
        # looked up per wake-up, so a reactor can be swapped for a test double
        after = self._admit if self._max_queued is not None else None
        self._pool.handback = BatchedHandback(
            lambda fn: self.reactor.callFromThread(fn), _settle, after,
            lambda seconds, fn: self.reactor.callLater(seconds, fn), self._pool.saturated)
        self._pool.lost_error = ConnectionLost

    @staticmethod
    def _wake(waiter):
        _settle(waiter, True, None)

    _future = defer.Deferred
    _is_abandoned = staticmethod(_is_abandoned)

    def _result(self, deferred, claim, timeout):
        if claim is not None:
            self.reactor.callLater(timeout, _expire, deferred, claim, self, timeout)
        return deferred

    def close(self, timeout=None):
        """Stop taking calls, let queued calls finish, roll back open transactions,
        close every connection; the Deferred fires once the threads have exited.
        Idempotent. With ``timeout``, calls still queued then fail with PoolClosed."""
        done = defer.Deferred()
        if self._closed_deferreds is None:
            self._closed_deferreds = []
            self._pool.on_exit = lambda: self.reactor.callFromThread(self._closed)
            self._close_start()
            if timeout is not None:
                self.reactor.callLater(timeout, self._pool.fail_queued, errors.PoolClosed(
                    f"the Database {self.name!r} closed before this call could run"))
        if self._closed_deferreds is True:
            done.callback(None)
        else:
            self._closed_deferreds.append(done)
        return done

    def _closed(self):
        """On the reactor thread once every worker exited."""
        self._pool.join()
        self._close_end()
        waiting, self._closed_deferreds = self._closed_deferreds, True
        for deferred in waiting:
            deferred.callback(None)


def _expire(deferred, claim, db, timeout):
    try:
        claim.pop()
    except IndexError:
        return
    if not deferred.called:
        deferred.errback(db._pool_timeout(timeout))


class _Connection:
    """What ``runWithConnection`` passes: the DB-API connection, with ``close()``
    ignored (closing a pooled connection would strand its worker, as in adbapi)."""

    def __init__(self, conn):
        self._connection = conn

    def close(self):
        pass

    def __getattr__(self, name):
        return getattr(self._connection, name)


def _with_connection(cursor, driver, func, args, kwargs):
    conn = cursor.connection  # PEP 249's optional extension; all three drivers have it
    cursor.close()
    return func(_Connection(conn), *args, **kwargs)


# adbapi's runQuery/runOperation take ``(*args, **kw)`` for ``cursor.execute``; the
# queued job carries them flat, ``kw`` only when given: 100,000 calls in flight then
# hold no empty dict and no extra tuple each (~110 bytes a call).

def _execute(cursor, kwargs, args):
    if kwargs:
        cursor.execute(*args, **kwargs)
    else:
        cursor.execute(*args)


def _query(cursor, driver, kwargs, *args):
    _execute(cursor, kwargs, args)
    return driver.fetchall(cursor)


def _operation(cursor, driver, kwargs, *args):
    _execute(cursor, kwargs, args)


class ConnectionPool:
    """A drop-in for ``twisted.enterprise.adbapi.ConnectionPool`` on adb's core.

    ``ConnectionPool(dbapiName, *connargs, **connkw)`` with ``cp_min``, ``cp_max``,
    ``cp_name``, ``cp_noisy``, ``cp_openfun``, ``cp_reconnect``, ``cp_good_sql``,
    ``cp_reactor``, as adbapi documents them. ``cp_max`` workers are started by
    ``start()`` (called when the reactor runs), ``cp_min`` of them connect at once.
    Plus adb's ``runMany``, ``beginTransaction``/``commitTransaction``/
    ``rollbackTransaction`` and ``stats()``.
    """

    CP_ARGS = "min max name noisy openfun reconnect good_sql".split()
    min = 3
    max = 5
    name = None
    noisy = False
    openfun = None
    reconnect = False
    good_sql = "select 1"
    running = False
    shutdownID = None
    startID = None

    def __init__(self, dbapiName, *connargs, **connkw):
        reactor = connkw.pop("cp_reactor", None)
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        for arg in self.CP_ARGS:
            if f"cp_{arg}" in connkw:
                setattr(self, arg, connkw.pop(f"cp_{arg}"))
        self.min = min(self.min, self.max)  # as adbapi: cp_max wins over a larger cp_min
        self.max = max(self.min, self.max)
        self.dbapiName = dbapiName
        self.connargs = connargs
        self.connkw = connkw
        target = Target(DRIVER_ALIASES.get(dbapiName, dbapiName), dict(connkw), connargs)
        self._db = _PoolDatabase(self, target)
        self.dbapi = self._db.dbapi
        self.startID = reactor.callWhenRunning(self._start)

    def _on_connect(self, conn):
        if self.noisy:
            log.msg(f"adbapi connecting: {self.dbapiName}")
        if self.openfun is not None:
            self.openfun(conn)

    @property
    def connections(self):
        """Worker thread id -> its DB-API connection (adbapi exposes the same)."""
        return self._db._pool.connections

    @property
    def threadpool(self):
        """The workers (adb's own; adbapi has a ThreadPool here)."""
        return self._db._pool

    def _start(self):
        self.startID = None
        return self.start()

    def start(self):
        """Start the workers; the reactor calls this when it starts running."""
        if not self.running:
            self._db._pool.start()
            self.shutdownID = self._reactor.addSystemEventTrigger(
                "during", "shutdown", self.finalClose)
            self.running = True

    def runInteraction(self, interaction, *args, **kw):
        """``interaction(cursor, *args, **kw)`` in a worker, in one transaction:
        committed if it returns, rolled back if it raises. Returns a Deferred."""
        return self._db.runInteraction(interaction, *args, **kw)

    def runWithConnection(self, func, *args, **kw):
        """``func(connection, *args, **kw)`` in a worker; committed if it returns,
        rolled back if it raises. ``connection.close()`` is ignored."""
        return self._db._call(Worker.atomic, (_with_connection, func, args, kw), None, None)

    def runQuery(self, *args, **kw):
        """``cursor.execute(*args, **kw)`` then ``fetchall()``; a Deferred of the rows.

        One statement is its own transaction (autocommitted by the driver), which
        is what adbapi's begin/execute/commit amounts to, minus two round trips."""
        return self._db._call(Worker.standalone, (_query, kw or None) + args, None, None)

    def runOperation(self, *args, **kw):
        """``cursor.execute(*args, **kw)``, committed; a Deferred of None."""
        return self._db._call(Worker.standalone, (_operation, kw or None) + args, None, None)

    def runMany(self, sql, seq_of_params, tx=None):
        return self._db.runMany(sql, seq_of_params, tx)

    def beginTransaction(self, *, timeout=None):
        return self._db.beginTransaction(timeout=timeout)

    def commitTransaction(self, tx):
        return self._db.commitTransaction(tx)

    def rollbackTransaction(self, tx):
        return self._db.rollbackTransaction(tx)

    def stats(self):
        return self._db.stats()

    def close(self):
        """Close every connection and stop the workers (blocking, as adbapi's)."""
        if self.shutdownID:
            self._reactor.removeSystemEventTrigger(self.shutdownID)
            self.shutdownID = None
        if self.startID:
            self._reactor.removeSystemEventTrigger(self.startID)
            self.startID = None
        self.finalClose()

    def finalClose(self):
        """Stop the workers after the queued calls, close their connections, join."""
        self.shutdownID = None
        self.running = False
        db = self._db
        if db._close_start():
            db._pool.join()
            db._close_end()

    def connect(self):
        """A new DB-API connection for the calling thread (blocking; adbapi's
        escape hatch for code running in threads of its own)."""
        conn = self._db._driver.connect()
        self.connections[threading.get_ident()] = conn
        return conn

    def disconnect(self, conn):
        """Close a connection that ``connect()`` gave this thread."""
        if self.connections.get(threading.get_ident()) is not conn:
            raise errors.InterfaceError(
                "disconnect(): that connection was not opened by connect() in this thread")
        del self.connections[threading.get_ident()]
        if self.noisy:
            log.msg(f"adbapi closing: {self.dbapiName}")
        self._db._driver.close(conn)

    def __repr__(self):
        return f"<adb.twisted.ConnectionPool {self._db!r}>"


class _PoolDatabase(Database):
    """The Database under a ConnectionPool: adbapi's sizes, hooks and reconnect."""

    def __init__(self, owner, target):
        size = owner.max
        from .drivers import load
        if load(target).max_pool_size == 1:
            size = 1  # adbapi users do open ":memory:" with cp_max=5
        super().__init__(target, reactor=owner._reactor, pool_size=size,
                         name=owner.name, on_connect=owner._on_connect,
                         _pool_options={"warm": owner.min, "start": False})
        if owner.reconnect:
            self._pool.check_sql = owner.good_sql
