"""Focused tests for defects the endings checker found, each fixed in adb."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import pytest

import adb
from adb.drivers import _gil
from benchmarks import privateserver


@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg"])
async def test_an_idle_connection_ended_by_an_immediate_shutdown_is_replaced(private_postgresql, scheme):
    """``pg_ctl restart -m immediate`` (and a crash of another backend) makes every
    backend send a NoticeResponse of SQLSTATE 57P01 (57P02) as a WARNING, not an
    ErrorResponse, before it exits. The idle check read that first 'N' as a
    harmless notice and kept the dead connection, so the next call failed with
    ConnectionLost(may_have_run=True) although it never reached the server
    (docs/failures.md rule 3: a connection that died while idle costs nothing)."""
    url = private_postgresql.url.replace("postgresql", scheme, 1)
    db = adb.Database(url, pool_size=2)
    await asyncio.gather(*(db.runQuery("select pg_sleep(0.05)") for _ in range(4)))
    assert db.stats()["connected"] == 2
    await asyncio.get_running_loop().run_in_executor(
        None, privateserver.restart, private_postgresql, "immediate")
    results = await asyncio.gather(*(db.runQuery("select 1") for _ in range(20)))
    assert results == [[(1,)]] * 20  # each dead connection replaced before use
    assert db.stats()["connects"] >= 4
    await db.close()


def test_the_shutdown_notice_is_told_from_other_notices():
    """The check reads the notice's SQLSTATE: class 57P ends the session, others do not."""
    from adb.drivers._libpq import ends_session

    def notice(code: bytes) -> bytes:
        body = b"SWARNING\x00VWARNING\x00C" + code + b"\x00Msome text\x00\x00"
        return b"N" + (len(body) + 4).to_bytes(4, "big") + body
    assert ends_session(notice(b"57P01")) and ends_session(notice(b"57P02"))
    assert not ends_session(notice(b"01000"))  # a plain warning
    assert not ends_session(notice(b"57P01")[:8])  # cut before its code: not known
    assert not ends_session(b"A\x00\x00\x00\x05x")  # a notification


@pytest.mark.parametrize("driver", ["postgresql", "psycopg", "mysql"])
async def test_a_rollback_whose_connection_died_succeeds(driver, tmp_path):
    """A transaction left idle (no statement since) whose session is killed, then
    rolled back: the rollback did what it was asked (a transaction dies with its
    connection), so it returns, as docs/failures.md says of a killed transaction's
    rollback. It raised the driver's OperationalError instead (found by the checker's
    own gate transaction across a private server's restart)."""
    from .site import Site, thread_ids
    site = Site(driver, str(tmp_path))
    site.create()
    db = adb.Database(site.url, pool_size=1, name=site.table)
    try:
        tx = await db.beginTransaction()
        await tx.runOperation(site.insert_sql(), ("never", 1))
        assert site.kill_all(thread_ids(db._engine.pool.connections.values())) >= 1
        await asyncio.get_running_loop().run_in_executor(None, site.wait_quiet, 10.0, True)
        await tx.rollback()  # no error: nothing of it committed, and none could be
        assert tx.state is adb.TxState.ROLLED_BACK
        assert site.tokens() == []
        assert await db.runQuery("select 1") == [(1,)]  # a new connection serves
    finally:
        await db.close()
        site.drop()


def interaction_insert(sql):
    def insert(cursor):
        cursor.execute(sql, ("i", 1))
    return insert


@pytest.mark.parametrize("call", ["runMany", "runInteraction"])
@pytest.mark.parametrize("driver", ["postgresql", "psycopg", "mysql"])
async def test_a_call_in_its_own_transaction_whose_backend_is_killed_says_it_may_have_run(
        driver, call, tmp_path):
    """``runMany`` and ``runInteraction`` run in a transaction of their own. When the
    connection broke under one, the worker first tried a ROLLBACK, which failed on
    the dead connection and dropped it, and then no longer saw a broken connection:
    the caller got the driver's bare OperationalError (AdminShutdown...) instead of
    ``ConnectionLost(may_have_run=True)``, the answer the rules promise (found by the
    checker with a private server restarted under runMany). The statement waits at
    the test's gate (a row lock the test holds), so the kill lands while it runs."""
    from adb.errors import ConnectionLost
    from .site import Site, thread_ids
    site = Site(driver, str(tmp_path))
    site.create()
    db = adb.Database(site.url, pool_size=1, name=site.table)
    loop = asyncio.get_running_loop()
    try:
        await db.runQuery("select 1")
        site.close_gate()
        if call == "runMany":
            pending = asyncio.ensure_future(db.runMany(site.insert_sql(), [("m", 1), ("n", 2)]))
        else:
            pending = asyncio.ensure_future(db.runInteraction(interaction_insert(site.insert_sql())))
        assert await loop.run_in_executor(None, site.wait_running, 1, 10.0) == 1
        ids = thread_ids(db._engine.pool.connections.values())
        assert await loop.run_in_executor(None, site.kill_all, ids) >= 1
        with pytest.raises(ConnectionLost) as info:
            await pending
        assert info.value.may_have_run is True
        site.open_gate()
        assert site.tokens() == []  # killed while it waited: nothing committed
        assert await db.runQuery("select 1") == [(1,)]
    finally:
        await db.close()
        site.drop()


#: a blocking call is given up by Ctrl-C, not cancelled: tests/endings' programs
@pytest.mark.parametrize("front, how", [
    (front, how) for front in ["asyncio", "tornado", "twisted", "sync"]
    for how in ["timeout", "cancel"] if (front, how) != ("sync", "cancel")])
async def test_run_transaction_given_up_while_it_waits_for_a_worker_settles(front, how, tmp_path):
    """``runTransaction`` whose begin never got a worker (its ``timeout=`` ran out, or
    its caller cancelled it) went on to roll back the transaction it never began:
    that rollback waited for a worker that would never take it, so the call never
    settled, not even once the pool was free again (found by the checker: clients
    still waiting 20 s after a cancel, and after ``timeout=``). It now fails with
    PoolTimeout, or is cancelled, at once, and the pool serves on."""
    from twisted.internet.defer import CancelledError as DeferredCancelled
    from adb.errors import PoolTimeout
    from ..conftest import FRONTS, ev
    db = FRONTS[front](f"sqlite:///{tmp_path}/rt.db", pool_size=1,
                       **({"timeout": 0.2} if how == "timeout" else {}))
    loop = asyncio.get_running_loop()
    try:
        holder = await ev(db.beginTransaction())  # the only worker is pinned

        def body(tx):
            return tx.runQuery("select 1")
        if front == "sync":
            with pytest.raises(PoolTimeout):
                await loop.run_in_executor(None, db.runTransaction, body)
        else:
            async def coroutine_body(tx):
                return await tx.runQuery("select 1")
            pending = db.runTransaction(body if front == "twisted" else coroutine_body)
            waiter = asyncio.ensure_future(ev(pending))
            expected: tuple[type[BaseException], ...]
            if how == "cancel":
                for _ in range(500):  # until its begin waits in the queue (no worker is free)
                    if db.stats()["queued"]:
                        break
                    await asyncio.sleep(0.01)
                assert db.stats()["queued"] == 1
                pending.cancel()
                expected = (asyncio.CancelledError, DeferredCancelled)
            else:
                expected = (PoolTimeout,)
            done, _ = await asyncio.wait([waiter], timeout=5)
            assert done, "runTransaction never settled"
            assert isinstance(waiter.exception() if not waiter.cancelled()
                              else asyncio.CancelledError(), expected)
        await ev(holder.rollback())
        assert await ev(db.runQuery("select 2", timeout=5)) == [(2,)]  # the pool serves on
    finally:
        await ev(db.close())


@pytest.mark.skipif(_gil.FREE_THREADED, reason="on a free-threaded build reference counting "
                    "alone does not free what this test drops (some objects are freed only "
                    "by the collector there), so its premise does not hold")
@pytest.mark.parametrize("how", ["killed", "timed out", "written"])
@pytest.mark.parametrize("driver", ["postgresql", "psycopg", "mysql"])
@pytest.mark.parametrize("front", ["asyncio", "tornado", "sync", "twisted"])
async def test_a_dropped_handle_frees_its_worker_without_the_collector(front, driver, how, tmp_path):
    """A transaction handle the application drops without ending it, after its
    connection broke under a statement (``killed``), after its statement ran past
    ``statement_timeout=`` (``timed out``) or after a write that succeeded
    (``written``), is rolled back when it is collected (docs/usage.md), which must
    happen when its last reference goes. Cycles adb made kept it alive until the
    cyclic collector ran, and its worker pinned: the error handed back has the
    driver's error as its cause, whose traceback holds the worker's frames
    (``execute``, ``serve``), whose locals held the call's job and future, which
    holds the error; through the error's own traceback, the caller's frames and the
    handle (found by the checker: a pool of one starved for 20 s behind a forgotten
    transaction, asyncio and Tornado). The cyclic collector is off here, so only
    reference counting can free the handle; the next call on the pool of one must
    get its worker at once. The call is awaited where it is made: a frame of the
    application's that keeps the future in a local while the error passes through
    it makes a cycle of its own, which adb cannot break (docs/usage.md)."""
    import gc
    import threading
    from adb.errors import ConnectionLost, StatementTimeout
    failure = StatementTimeout if how == "timed out" else ConnectionLost
    # how the statement at the closed gate ends: its session killed, or its own timeout
    limit = {"statement_timeout": 0.2} if how == "timed out" else {}
    from ..conftest import FRONTS, ev
    from .site import Site, thread_ids
    site = Site(driver, str(tmp_path))
    site.create()
    db = FRONTS[front](site.url, pool_size=1, timeout=5, name=site.table)
    loop = asyncio.get_running_loop()
    dropped = threading.Event()

    def kill_under_statement() -> None:
        site.wait_running(1, 10)
        site.kill_all(thread_ids(db._engine.pool.connections.values()))

    def forgotten_blocking() -> None:  # adb.sync: begins, writes, drops the handle
        tx = db.beginTransaction()
        weakref.finalize(tx, dropped.set)
        if how == "written":
            tx.runOperation(site.insert_sql(), ("x", 1))
            return
        site.close_gate()
        killer = threading.Thread(target=kill_under_statement)
        if how == "killed":
            killer.start()
        try:
            tx.runOperation(site.insert_sql(), ("x", 1), **limit)
        except failure:
            pass
        finally:
            if how == "killed":
                killer.join()
            site.open_gate()

    async def forgotten() -> None:  # the others: begins, writes, drops the handle
        tx = await ev(db.beginTransaction())
        weakref.finalize(tx, dropped.set)
        if how == "written":
            await ev(tx.runOperation(site.insert_sql(), ("x", 1)))
            return
        site.close_gate()
        killer = loop.run_in_executor(None, kill_under_statement if how == "killed" else str)
        try:  # awaited where it is made: no frame of the test's holds the call
            await awaitable(tx.runOperation(site.insert_sql(), ("x", 1), **limit))
        except failure:
            pass
        await killer
        site.open_gate()

    def awaitable(call: Any) -> Any:
        return call.asFuture(loop) if front == "twisted" else call
    await ev(db.runQuery("select 1"))
    gc.disable()
    try:
        if front == "sync":
            await loop.run_in_executor(None, forgotten_blocking)
        else:
            await forgotten()
        # the worker lets go of the call's last references once it has handed it back,
        # as the caller may already be running on: waited for, not raced
        assert await loop.run_in_executor(None, dropped.wait, 10), \
            "the dropped handle is still alive: a reference cycle holds it"
        assert await ev(db.runQuery("select 1")) == [(1,)]  # the worker was freed at once
        assert site.tokens() == []  # rolled back
    finally:
        gc.enable()
        await ev(db.close())
        site.drop()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("driver", ["postgresql", "psycopg", "mysql"])
def test_ctrl_c_in_a_blocking_call_a_unit_took_cancels_it_before_the_interrupt_goes_on(
        driver, tmp_path, caplog):
    """Ctrl-C in an ``adb.sync`` call that an autobatch unit took: the interrupted
    thread must cancel its statement on the server before the KeyboardInterrupt goes
    on, as it does for a call running alone, so nothing of it commits after the user
    saw the interrupt. It looked only for a worker running that very call, found
    none (a unit runs as one, under no single call), and let the unit run on: the
    interrupted call's row committed once the unit went through. Now the unit is
    cancelled; the other callers' calls, which nobody gave up, are run again each
    alone and succeed, and the interrupted one is not run again. The unit is forced:
    the one worker is held (a runInteraction waiting on an Event) until all four
    calls are queued, so the next job it takes heads a unit of them, which waits at
    the test's gate; the interrupt comes once the server shows it there."""
    import logging
    import signal
    import threading
    from .site import Site
    site = Site(driver, str(tmp_path))
    site.create()
    db = adb.sync.Database(site.url, pool_size=1, autobatch=4, name=site.table)
    main = threading.get_ident()
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    release = threading.Event()
    others = [threading.Thread(target=db.runOperation, args=(site.insert_sql(), (f"o{n}", n)))
              for n in range(3)]

    def hold(cursor: Any) -> None:
        release.wait(30)

    def interrupt() -> None:  # the unit at the gate, then Ctrl-C
        for _ in range(2000):
            if db.stats()["queued"] == 4:  # the three others and the main thread's
                break
            threading.Event().wait(0.005)
        release.set()
        if site.wait_running(1, 20):
            signal.pthread_kill(main, signal.SIGINT)
    try:
        db.runQuery("select 1")
        site.close_gate()
        holder = threading.Thread(target=db.runInteraction, args=(hold,))
        holder.start()
        for thread in others:
            thread.start()
        for _ in range(2000):  # the three others queued behind the held worker
            if db.stats()["queued"] == 3:
                break
            threading.Event().wait(0.005)
        assert db.stats()["queued"] == 3
        poke = threading.Thread(target=interrupt)
        poke.start()
        with caplog.at_level(logging.INFO, logger="adb"):
            with pytest.raises(KeyboardInterrupt):
                db.runOperation(site.insert_sql(), ("main", 9))
        poke.join(30)
        # the cancel went out from the interrupted thread, before the interrupt went on
        assert [r.threadName for r in caplog.records
                if "its caller was interrupted" in r.getMessage()] == ["MainThread"]
        site.open_gate()
        holder.join(30)
        for thread in others:
            thread.join(30)
        assert sorted(site.tokens()) == ["o0", "o1", "o2"]  # never the interrupted call's
        assert db.stats()["units"] >= 1
    finally:
        signal.signal(signal.SIGINT, handler)
        release.set()
        site.open_gate()
        db.close()
        site.drop()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("end", ["commit", "close"])
@pytest.mark.parametrize("driver", ["sqlite", "postgresql", "mysql"])
def test_a_call_in_a_transaction_racing_its_end_is_answered(driver, end, tmp_path):
    """A call made in a transaction from one thread while another thread commits it
    (or closes the Database, which rolls it back): the call was checked (the
    transaction still open), then its end went ahead and its worker let go of the
    transaction, then the call was queued on the transaction's queue, which no
    worker reads any more: the caller waited forever. The interleaving is forced:
    the call is held just after its check (where it makes its future) until the end
    has returned. It must be answered, with TransactionError (the transaction had
    ended), and the worker must serve on."""
    import threading
    from adb.errors import PoolClosed, TransactionError
    from .site import Site
    site = Site(driver, str(tmp_path))
    site.create()
    db = adb.sync.Database(site.url, pool_size=1, name=site.table)
    part = db._engine.transactions  # where a call in a transaction makes its future
    reached, go = threading.Event(), threading.Event()
    make_future = part._new_future
    caller: dict[str, Any] = {}

    def held_future() -> Any:  # the call's thread, past its check: wait for the end
        if threading.current_thread().name == "racing-call":
            reached.set()
            go.wait(20)
        return make_future()

    def call(tx: Any) -> None:
        try:
            caller["value"] = tx.runOperation(site.insert_sql(), ("late", 1))
        except BaseException as exc:
            caller["error"] = exc
    try:
        tx = db.beginTransaction()
        tx.runOperation(site.insert_sql(), ("early", 1))
        part._new_future = held_future
        racing = threading.Thread(target=call, args=(tx,), name="racing-call", daemon=True)
        racing.start()
        assert reached.wait(20)
        if end == "commit":
            tx.commit()
        else:
            db.close()
        go.set()
        racing.join(10)
        assert not racing.is_alive(), "the call made as its transaction ended was never answered"
        assert isinstance(caller.get("error"), (TransactionError, PoolClosed)), caller
        if end == "commit":
            part._new_future = make_future
            assert db.runQuery("select 1") == [(1,)]
            assert site.tokens() == ["early"]
        else:
            assert site.tokens() == []
    finally:
        go.set()
        part._new_future = make_future
        db.close()
        site.drop()
