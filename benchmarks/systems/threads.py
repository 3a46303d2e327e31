"""Plain blocking threads: each caller thread of the blocking world uses its own
driver connection, no pool in between. What an async design has to beat; with one
caller (seed 001) it is the blocking driver alone."""

import contextlib
import threading

from ..worlds import Done
from .common import Calls, connect


@contextlib.asynccontextmanager
async def open_threads(spec, world, min_size):
    spare = [connect(spec) for _ in range(spec.pool_size if min_size is None else min_size)]
    opened = list(spare)
    local = threading.local()
    lock = threading.Lock()

    def cursor():
        cur = getattr(local, "cursor", None)
        if cur is None:
            with lock:
                conn = spare.pop() if spare else None
            if conn is None:
                conn = connect(spec)
                with lock:
                    opened.append(conn)
            cur = local.cursor = conn.cursor()
        return cur

    def execute(sql, params=None):
        cur = cursor()
        cur.execute(sql) if params is None else cur.execute(sql, params)
        return Done(cur.rowcount)

    def query(sql, params=None):
        cur = cursor()
        cur.execute(sql) if params is None else cur.execute(sql, params)
        return Done(cur.fetchall())
    try:
        yield Calls(execute, query, world.map, spec.paramstyle())
    finally:
        for conn in opened:
            conn.close()
