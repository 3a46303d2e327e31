"""Plain blocking threads: each caller thread of the blocking world uses its own
driver connection, no pool in between. What an async design has to beat; with one
caller (seed 001) it is the blocking driver alone. In the gevent world the same
opener runs on greenlets, each with its own cooperative connection; the DBUtils
opener puts ``PooledDB`` between the threads and the connections."""

from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Any, AsyncIterator, Callable, Iterable, Optional

from ..worlds import Done, World
from .common import Calls, Connection, Rows, RunSpec, TxCalls, connect

#: a DB-API cursor (untyped across drivers)
Cursor = Any
#: one of the three calls below, on a given cursor
OnCursor = Callable[[Cursor, str, Any], Any]


@contextlib.asynccontextmanager
async def open_threads(spec: RunSpec, world: World,
                       min_size: Optional[int]) -> AsyncIterator[Calls]:
    """Each caller thread takes a connection of its own on its first call (one of
    the ``min_size`` opened up front while they last, else a new one)."""
    spare = [connect(spec) for _ in range(spec.pool_size if min_size is None else min_size)]
    opened = list(spare)
    owners: dict[threading.Thread, Connection] = {}
    local = threading.local()
    lock = threading.Lock()

    def cursor() -> Cursor:
        cur = getattr(local, "cursor", None)
        if cur is None:
            with lock:
                conn = spare.pop() if spare else _left_by_an_ended_thread(owners)
            if conn is None:
                conn = connect(spec)
                with lock:
                    opened.append(conn)
            owners[threading.current_thread()] = conn
            cur = local.cursor = conn.cursor()
        return cur

    def execute(sql: str, params: Any = None) -> Done[int]:
        return Done(_rowcount(cursor(), sql, params))

    def query(sql: str, params: Any = None) -> Done[Any]:
        return Done(_rows(cursor(), sql, params))

    def many(sql: str, seq_of_params: Iterable[Any]) -> Done[int]:
        return Done(_many(cursor(), sql, seq_of_params))
    try:
        yield Calls(execute, query, world, spec.paramstyle(), many=many,
                    transaction=lambda: _transaction(cursor(), TxCalls(execute, query, many)),
                    stream=lambda sql, batch, batches: _stream(
                        cursor().connection, spec.driver, sql, batch, batches))
    finally:
        for conn in opened:
            conn.close()


@contextlib.asynccontextmanager
async def _stream(conn: Connection, driver: str, sql: str, batch: int,
                  batches: bool) -> AsyncIterator[Rows]:
    """The rows of ``sql`` through the driver's way of reading a big result on this
    caller's connection: psycopg2's named (server-side) cursor, in a transaction of
    its own; PyMySQL's unbuffered ``SSCursor``; sqlite3's cursor, which steps
    through the result as it is fetched. ``batch`` rows per ``fetchmany``: the
    rows one by one, or the batches."""
    if driver == "psycopg2":
        conn.autocommit = False  # a named cursor lives in a transaction
        cur = conn.cursor(name="bulk_stream")
    elif driver == "pymysql":
        import pymysql.cursors
        cur = conn.cursor(pymysql.cursors.SSCursor)
    else:
        cur = conn.cursor()
    try:
        cur.execute(sql)
        fetched = _batches(cur, batch)
        yield fetched if batches else itertools.chain.from_iterable(fetched)
    finally:
        cur.close()
        if driver == "psycopg2":
            conn.rollback()
            conn.autocommit = True


def _batches(cur: Cursor, batch: int) -> Iterable[Any]:
    """``cur.fetchmany(batch)`` until one comes back empty (``[]``, or ``()`` from
    PyMySQL's SSCursor); the loop over them in C."""
    fetched = iter(lambda: cur.fetchmany(batch), None)  # never None: takewhile ends it
    return itertools.takewhile(bool, fetched)


def _left_by_an_ended_thread(owners: dict[threading.Thread, Connection]) -> Optional[Connection]:
    """The connection of a caller thread that has ended (a scenario's second
    ``map`` starts new callers: bigdata's two phases), or None."""
    for thread, conn in list(owners.items()):
        if not thread.is_alive():
            del owners[thread]
            return conn
    return None


@contextlib.asynccontextmanager
async def _transaction(cur: Cursor, calls: TxCalls) -> AsyncIterator[TxCalls]:
    """BEGIN ... COMMIT on this thread's own connection (it runs in autocommit)."""
    cur.execute("begin")
    try:
        yield calls
    except BaseException:
        cur.execute("rollback")
        raise
    cur.execute("commit")


@contextlib.asynccontextmanager
async def open_dbutils(spec: RunSpec, world: World,
                       min_size: Optional[int]) -> AsyncIterator[Calls]:
    """The classic threaded pool: DBUtils' ``PooledDB`` of pool_size connections
    (opened up front, autocommit), each call checking one out and back in;
    ``transaction()`` keeps one for a whole transaction. ``ping=0`` and
    ``reset=False``: by default DBUtils pings at every checkout and rolls back at
    every return, which on PyMySQL are two more round trips per call."""
    from dbutils.pooled_db import PooledDB
    pool = PooledDB(lambda: connect(spec), mincached=spec.pool_size,
                    maxconnections=spec.pool_size, blocking=True, reset=False, ping=0)

    def checked_out(run: OnCursor) -> Callable[..., Done[Any]]:
        """A call that checks a connection out, runs ``run(cursor, sql, params)``
        and checks it back in."""
        def call(sql: str, params: Any = None) -> Done[Any]:
            conn = pool.connection()
            try:
                with contextlib.closing(conn.cursor()) as cur:
                    return Done(run(cur, sql, params))
            finally:
                conn.close()  # back to the pool
        return call

    @contextlib.asynccontextmanager
    async def transaction() -> AsyncIterator[TxCalls]:
        conn = pool.connection()
        try:
            with contextlib.closing(conn.cursor()) as cur:
                def on_cur(run: OnCursor) -> Callable[..., Done[Any]]:
                    return lambda sql, params=None: Done(run(cur, sql, params))
                async with _transaction(cur, TxCalls(on_cur(_rowcount), on_cur(_rows),
                                                     on_cur(_many))) as calls:
                    yield calls
        finally:
            conn.close()
    try:
        yield Calls(checked_out(_rowcount), checked_out(_rows), world, spec.paramstyle(),
                    many=checked_out(_many), transaction=transaction)
    finally:
        pool.close()


def _execute(cur: Cursor, sql: str, params: Any) -> Cursor:
    if params is None:
        cur.execute(sql)
    else:
        cur.execute(sql, params)
    return cur


def _rowcount(cur: Cursor, sql: str, params: Any) -> int:
    return _execute(cur, sql, params).rowcount


def _rows(cur: Cursor, sql: str, params: Any) -> Any:
    return _execute(cur, sql, params).fetchall()


def _many(cur: Cursor, sql: str, seq_of_params: Iterable[Any]) -> int:
    cur.executemany(sql, seq_of_params)
    return cur.rowcount
