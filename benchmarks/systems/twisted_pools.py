"""Twisted: adb's ConnectionPool and stock adbapi, on the default or asyncio reactor.

A reactor runs once per process, which the harness guarantees (one process per run).
"""

import time

from ..scenarios import parallel_insert as pi


def _install_asyncio_reactor():
    import asyncio

    from twisted.internet import asyncioreactor
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    asyncioreactor.install(loop)


def _pool_args(spec):
    kwargs = spec.connect_kwargs()
    if spec.driver == "sqlite3":
        kwargs["check_same_thread"] = False
    return (spec.driver,), kwargs


def run_reactor(main):
    """Run ``main()`` (a Deferred or coroutine giving a dict of figures) on the
    reactor, stop it, and return the dict; an error in ``main`` is raised here."""
    from twisted.internet import defer, reactor
    result = {}

    def start():
        d = defer.ensureDeferred(main())
        d.addCallbacks(result.update, lambda f: result.setdefault("error", f.getErrorMessage()))
        d.addBoth(lambda _: reactor.stop())
    reactor.callWhenRunning(start)
    reactor.run()
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


def _run(spec, pool_class, **pool_kw):
    from twisted.internet import defer
    args, kwargs = _pool_args(spec)
    pool = pool_class(*args, cp_min=spec.pool_size, cp_max=spec.pool_size, **pool_kw, **kwargs)
    sql = pi.statement("qmark" if spec.kind == "sqlite" else "format")
    rows = pi.params(spec.rows)

    async def main():
        try:
            await defer.gatherResults([pool.runQuery("select 1") for _ in range(spec.pool_size * 2)])
            start = time.perf_counter()
            done = await defer.gatherResults([pool.runOperation(sql, p) for p in rows])
            result = {"seconds": time.perf_counter() - start, "ok_calls": len(done)}
            if hasattr(pool, "stats"):
                result["wakeups"] = pool.stats()["wakeups"]
            return result
        finally:
            pool.close()
    return run_reactor(main)


def adb_default(spec):
    from adb.twisted import ConnectionPool
    return _run(spec, ConnectionPool)


def adb_asyncio(spec):
    _install_asyncio_reactor()
    return adb_default(spec)


def adbapi_default(spec):
    from twisted.enterprise.adbapi import ConnectionPool
    if spec.kind == "sqlite":
        from .common import sqlite_settings
        return _run(spec, ConnectionPool, cp_openfun=sqlite_settings)
    return _run(spec, ConnectionPool)


def adbapi_asyncio(spec):
    _install_asyncio_reactor()
    return adbapi_default(spec)


def adbapi_autocommit(spec):
    from twisted.enterprise.adbapi import ConnectionPool

    def autocommit(conn):
        if spec.driver == "pymysql":
            conn.autocommit(True)
        else:
            conn.autocommit = True
    return _run(spec, ConnectionPool, cp_openfun=autocommit)


def _sequential(spec, pool_class, **pool_kw):
    from ..scenarios import sequential as seq
    args, kwargs = _pool_args(spec)
    pool = pool_class(*args, cp_min=1, cp_max=spec.pool_size, **pool_kw, **kwargs)
    style = "qmark" if spec.kind == "sqlite" else "format"

    async def main():
        insert, select = seq.statement(style), seq.select_statement(style)
        try:
            await pool.runQuery("select 1")
            return await seq.run_async(spec.rows, lambda p: pool.runOperation(insert, p),
                                       lambda key: pool.runQuery(select, (key,)))
        finally:
            pool.close()
    return run_reactor(main)


def adb_default_sequential(spec):
    from adb.twisted import ConnectionPool
    return _sequential(spec, ConnectionPool)


def adbapi_default_sequential(spec):
    from twisted.enterprise.adbapi import ConnectionPool
    return _sequential(spec, ConnectionPool)
