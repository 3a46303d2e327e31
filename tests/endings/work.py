"""The kinds of work a client does, each written the way an application writes it.

Three forms of the same kinds:

- ``ASYNC``: coroutines that await what the front-end returns: asyncio and
  Tornado futures, or Twisted Deferreds (the coroutine then runs under
  ``Deferred.fromCoroutine``, as Twisted code runs one), with ``async with
  db.transaction()`` and ``async with tx.savepoint()``;
- ``SYNC``: the same on ``adb.sync`` (``with``);
- ``DROPIN``: what the adbapi drop-in ``ConnectionPool`` offers (``runOperation``,
  ``runInteraction``, adb's ``beginTransaction``/``commitTransaction``, ``runMany``,
  ``copy_in``, ``stream``), awaited as Deferreds.

Each records its unit in the ledger before issuing it and its outcome when the
answer comes. An answer that means the caller gave up (cancelled, Ctrl-C,
SystemExit) is recorded and raised on, so the client ends as the application's
would.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from twisted.internet.defer import Deferred

from .ledger import ACK, GAVE_UP, NOT_RUN, Ledger, Unit, verdict
from .site import Site

#: every kind of work, and the ones each front-end can do
KINDS = ("standalone", "burst", "block", "explicit", "interaction", "run_transaction", "savepoint",
         "many", "copy", "stream", "abandon")
DROPIN_KINDS = ("standalone", "burst", "explicit", "interaction", "many", "copy", "stream", "abandon")
STREAM_ROWS = 300


class Undo(Exception):
    """Raised in a savepoint block to undo it."""


@dataclass
class Env:
    """What a client works with: the Database (or ConnectionPool), the site, the
    ledger, and the flag that tells clients to start no more work."""

    db: Any
    site: Site
    ledger: Ledger
    twisted: bool = False  # ASYNC on Twisted: a runTransaction function returns a Deferred
    trio: bool = False  # ASYNC on adb.trio: the clients are tasks of a trio run
    stop: threading.Event = field(default_factory=threading.Event)
    #: the pause point a client holds at for the ending (0: none), and how a pause
    #: is made on this front-end: () -> (what the client waits on, its release)
    hold_at: int = 0
    pause: Optional[Callable[[], tuple[Any, Callable[[], None]]]] = None
    held: bool = False
    release: Optional[Callable[[], None]] = None
    _passed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def hold(self) -> Any:
        """A pause point at the end of a transaction's body (where an application
        does other work before its commit: a call to another service): at the
        ``hold_at``-th point reached, the client waits there until the test has
        fired the ending, so an ending meets a transaction at exactly that spot.
        What to wait on, or None."""
        if not self.hold_at or self.pause is None:
            return None
        with self._lock:
            self._passed += 1
            if self._passed != self.hold_at:
                return None
        waiter, self.release = self.pause()
        self.held = True
        self.ledger.poke()
        return waiter

    def tokens(self, client: int, item: int, parts: str) -> list[str]:
        return [f"{self.site.table[-10:]}-{client}-{item}-{part}" for part in parts]

    def rows(self, tokens: list[str], item: int) -> list[tuple[str, int]]:
        return [(token, item) for token in tokens]


async def held(env: Env) -> None:
    """Wait at a pause point if this is the one the ending is fired at."""
    waiter = env.hold()
    if waiter is not None:
        await waiter


def held_sync(env: Env) -> None:
    waiter = env.hold()
    if waiter is not None:
        waiter.wait(60)


def body_failed(ledger: Ledger, unit: Unit, exc: BaseException) -> None:
    """A transaction whose body failed never committed: nothing of it may be there
    (what was odd about the error is still reported)."""
    ledger.settle(unit, NOT_RUN, verdict(exc)[1])


def answered(ledger: Ledger, unit: Unit, exc: BaseException) -> None:
    ledger.answer(unit, exc)
    if isinstance(exc, GAVE_UP):
        raise exc


def transaction_ended(ledger: Ledger, unit: Unit, exc: BaseException, body_done: bool) -> None:
    """A transaction unit's error: once its body was done, the commit's answer;
    before, the body's failure. A client that gave up goes on giving up."""
    if body_done:
        answered(ledger, unit, exc)
        return
    body_failed(ledger, unit, exc)
    if isinstance(exc, GAVE_UP):
        raise exc


# -- ASYNC: asyncio, Tornado, Twisted's Database ------------------------------------------


async def a_standalone(env: Env, c: int, i: int) -> None:
    [token] = env.tokens(c, i, "a")
    unit = env.ledger.issue("standalone", [token])
    try:
        await env.db.runOperation(env.site.insert_sql(), (token, i))
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


async def a_burst(env: Env, c: int, i: int) -> None:
    """Eight standalone inserts at once (what queues behind busy workers)."""
    await gather_all([a_standalone(env, c, 1000 + i * 10 + k) for k in range(8)], env)


async def gather_all(coroutines: list[Any], env: Env) -> None:
    """Run ``coroutines`` at once and wait for them all; a caller's give-up is
    raised once they have all answered."""
    if env.trio:  # a nursery: a child's give-up (its Cancelled) ends it as trio does
        import trio

        async def run(coroutine: Any) -> None:
            await coroutine
        async with trio.open_nursery() as nursery:
            for coroutine in coroutines:
                nursery.start_soon(run, coroutine)
        return
    if env.twisted:
        from twisted.internet import defer
        results = await defer.DeferredList([Deferred.fromCoroutine(co) for co in coroutines],
                                           consumeErrors=True)
        errors_ = [r.value for ok, r in results if not ok]
    else:
        import asyncio
        results = await asyncio.gather(*coroutines, return_exceptions=True)
        errors_ = [r for r in results if isinstance(r, BaseException)]
    for exc in errors_:
        raise exc


async def a_block(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "ab")
    unit = env.ledger.issue("block", tokens)
    sql, body_done = env.site.insert_sql(), False
    try:
        async with env.db.transaction() as tx:
            await tx.runOperation(sql, (tokens[0], i))
            await env.db.runOperation(sql, (tokens[1], i), tx)
            await held(env)
            body_done = True
    except BaseException as exc:
        transaction_ended(env.ledger, unit, exc, body_done)  # the commit, in the block's exit
    else:
        env.ledger.answer(unit, None)


async def a_explicit(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "abc")
    unit = env.ledger.issue("explicit", tokens)
    sql, tx = env.site.insert_sql(), None
    try:
        tx = await env.db.beginTransaction()
        await tx.runOperation(sql, (tokens[0], i))
        await env.db.runMany(sql, env.rows(tokens[1:], i), tx)
        await held(env)
    except BaseException as exc:
        body_failed(env.ledger, unit, exc)
        if tx is not None and not isinstance(exc, GAVE_UP):
            try:
                await tx.rollback()
            except Exception:
                pass
        if isinstance(exc, GAVE_UP):
            raise
        return
    try:
        await env.db.commitTransaction(tx)
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


def interaction(sql: str, rows: list[tuple[str, int]]) -> Callable[[Any], int]:
    """A ``runInteraction`` function: the rows inserted one by one on its cursor."""
    def insert(cursor: Any) -> int:
        for row in rows:
            cursor.execute(sql, row)
        return len(rows)
    return insert


async def a_interaction(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "ab")
    unit = env.ledger.issue("interaction", tokens)
    try:
        await env.db.runInteraction(interaction(env.site.insert_sql(), env.rows(tokens, i)))
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


async def a_run_transaction(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "ab")
    unit = env.ledger.issue("run_transaction", tokens)
    sql = env.site.insert_sql()

    async def body(tx: Any) -> None:
        await tx.runOperation(sql, (tokens[0], i))
        await tx.runOperation(sql, (tokens[1], i))
        await held(env)

    fn: Callable[[Any], Any] = (lambda tx: Deferred.fromCoroutine(body(tx))) if env.twisted else body
    try:
        await env.db.runTransaction(fn)
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


async def a_savepoint(env: Env, c: int, i: int) -> None:
    """A transaction with a savepoint undone (its token must never show) and one kept."""
    kept, undone, later = env.tokens(c, i, "abc")
    unit = env.ledger.issue("savepoint", [kept, undone, later])
    env.ledger.never(unit, [undone])
    sql, body_done = env.site.insert_sql(), False
    try:
        async with env.db.transaction() as tx:
            await tx.runOperation(sql, (kept, i))
            try:
                async with tx.savepoint():
                    await tx.runOperation(sql, (undone, i))
                    raise Undo()
            except Undo:
                pass
            async with tx.savepoint():
                await tx.runOperation(sql, (later, i))
            await held(env)
            body_done = True
    except BaseException as exc:
        transaction_ended(env.ledger, unit, exc, body_done)
    else:
        env.ledger.answer(unit, None)


async def a_many(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "abc")
    unit = env.ledger.issue("many", tokens)
    try:
        await env.db.runMany(env.site.insert_sql(), env.rows(tokens, i))
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


async def a_copy(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "abcd")
    unit = env.ledger.issue("copy", tokens)
    try:
        await env.db.copy_in(env.site.table, env.rows(tokens, i), ["token", "n"])
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


async def a_stream(env: Env, c: int, i: int) -> None:
    unit = env.ledger.issue("stream", [])
    seen = 0
    try:
        async for _ in env.db.stream(env.site.stream_sql(STREAM_ROWS), batch=50):
            seen += 1
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.settle(unit, ACK if seen == STREAM_ROWS else NOT_RUN,
                          None if seen == STREAM_ROWS else f"a stream ended after {seen} rows")


async def a_abandon(env: Env, c: int, i: int) -> None:
    """A transaction the application forgets: begun, written, never committed. Its
    handle is dropped (and rolled back when collected): its row must never show."""
    [token] = env.tokens(c, i, "a")
    unit = env.ledger.issue("abandon", [token])
    try:
        tx = await env.db.beginTransaction()
        await tx.runOperation(env.site.insert_sql(), (token, i))
        await held(env)
    except BaseException as exc:
        body_failed(env.ledger, unit, exc)
        if isinstance(exc, GAVE_UP):
            raise
        return
    env.ledger.settle(unit, NOT_RUN)


ASYNC = {name: globals()[f"a_{name}"] for name in KINDS}


async def run_async(env: Env, client: int, kinds: list[str], work: dict[str, Any]) -> None:
    """One client: its kinds of work in order, until told to stop."""
    for item, kind in enumerate(kinds):
        if env.stop.is_set():
            return
        await work[kind](env, client, item)


# -- SYNC: adb.sync --------------------------------------------------------------------


def s_standalone(env: Env, c: int, i: int) -> None:
    [token] = env.tokens(c, i, "a")
    unit = env.ledger.issue("standalone", [token])
    try:
        env.db.runOperation(env.site.insert_sql(), (token, i))
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


def s_burst(env: Env, c: int, i: int) -> None:
    """Eight standalone inserts, one after another (a blocking caller's burst)."""
    for k in range(8):
        s_standalone(env, c, 1000 + i * 10 + k)


def s_block(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "ab")
    unit = env.ledger.issue("block", tokens)
    sql, body_done = env.site.insert_sql(), False
    try:
        with env.db.transaction() as tx:
            tx.runOperation(sql, (tokens[0], i))
            env.db.runOperation(sql, (tokens[1], i), tx)
            held_sync(env)
            body_done = True
    except BaseException as exc:
        transaction_ended(env.ledger, unit, exc, body_done)
    else:
        env.ledger.answer(unit, None)


def s_explicit(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "abc")
    unit = env.ledger.issue("explicit", tokens)
    sql, tx = env.site.insert_sql(), None
    try:
        tx = env.db.beginTransaction()
        tx.runOperation(sql, (tokens[0], i))
        env.db.runMany(sql, env.rows(tokens[1:], i), tx)
        held_sync(env)
    except BaseException as exc:
        body_failed(env.ledger, unit, exc)
        if tx is not None and not isinstance(exc, GAVE_UP):
            try:
                tx.rollback()
            except Exception:
                pass
        if isinstance(exc, GAVE_UP):
            raise
        return
    try:
        env.db.commitTransaction(tx)
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


def s_interaction(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "ab")
    unit = env.ledger.issue("interaction", tokens)
    try:
        env.db.runInteraction(interaction(env.site.insert_sql(), env.rows(tokens, i)))
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


def s_run_transaction(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "ab")
    unit = env.ledger.issue("run_transaction", tokens)
    sql = env.site.insert_sql()

    def body(tx: Any) -> None:
        tx.runOperation(sql, (tokens[0], i))
        tx.runOperation(sql, (tokens[1], i))
        held_sync(env)
    try:
        env.db.runTransaction(body)
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


def s_savepoint(env: Env, c: int, i: int) -> None:
    kept, undone, later = env.tokens(c, i, "abc")
    unit = env.ledger.issue("savepoint", [kept, undone, later])
    env.ledger.never(unit, [undone])
    sql, body_done = env.site.insert_sql(), False
    try:
        with env.db.transaction() as tx:
            tx.runOperation(sql, (kept, i))
            try:
                with tx.savepoint():
                    tx.runOperation(sql, (undone, i))
                    raise Undo()
            except Undo:
                pass
            with tx.savepoint():
                tx.runOperation(sql, (later, i))
            held_sync(env)
            body_done = True
    except BaseException as exc:
        transaction_ended(env.ledger, unit, exc, body_done)
    else:
        env.ledger.answer(unit, None)


def s_many(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "abc")
    unit = env.ledger.issue("many", tokens)
    try:
        env.db.runMany(env.site.insert_sql(), env.rows(tokens, i))
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


def s_copy(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "abcd")
    unit = env.ledger.issue("copy", tokens)
    try:
        env.db.copy_in(env.site.table, env.rows(tokens, i), ["token", "n"])
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


def s_stream(env: Env, c: int, i: int) -> None:
    unit = env.ledger.issue("stream", [])
    seen = 0
    try:
        with env.db.stream(env.site.stream_sql(STREAM_ROWS), batch=50) as rows:
            for _ in rows:
                seen += 1
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.settle(unit, ACK if seen == STREAM_ROWS else NOT_RUN,
                          None if seen == STREAM_ROWS else f"a stream ended after {seen} rows")


def s_abandon(env: Env, c: int, i: int) -> None:
    [token] = env.tokens(c, i, "a")
    unit = env.ledger.issue("abandon", [token])
    try:
        tx = env.db.beginTransaction()
        tx.runOperation(env.site.insert_sql(), (token, i))
        held_sync(env)
    except BaseException as exc:
        body_failed(env.ledger, unit, exc)
        if isinstance(exc, GAVE_UP):
            raise
        return
    env.ledger.settle(unit, NOT_RUN)


SYNC = {name: globals()[f"s_{name}"] for name in KINDS}


def run_sync(env: Env, client: int, kinds: list[str]) -> None:
    for item, kind in enumerate(kinds):
        if env.stop.is_set():
            return
        SYNC[kind](env, client, item)


# -- DROPIN: the adbapi drop-in ConnectionPool (Deferreds, awaited in a coroutine) --------


async def d_standalone(env: Env, c: int, i: int) -> None:
    await a_standalone(env, c, i)  # runOperation(sql, params): the same call


async def d_interaction(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "ab")
    unit = env.ledger.issue("interaction", tokens)
    rows, sql = env.rows(tokens, i), env.site.insert_sql()

    def insert(txn: Any) -> None:  # adbapi's Transaction: execute() on its cursor
        for row in rows:
            txn.execute(sql, row)
    try:
        await env.db.runInteraction(insert)
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


async def d_explicit(env: Env, c: int, i: int) -> None:
    tokens = env.tokens(c, i, "abc")
    unit = env.ledger.issue("explicit", tokens)
    tx = None
    try:
        tx = await env.db.beginTransaction()
        await env.db.runMany(env.site.insert_sql(), env.rows(tokens, i), tx)
        await held(env)
    except BaseException as exc:
        body_failed(env.ledger, unit, exc)
        if tx is not None and not isinstance(exc, GAVE_UP):
            try:
                await env.db.rollbackTransaction(tx)
            except Exception:
                pass
        if isinstance(exc, GAVE_UP):
            raise
        return
    try:
        await env.db.commitTransaction(tx)
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.answer(unit, None)


async def d_stream(env: Env, c: int, i: int) -> None:
    unit = env.ledger.issue("stream", [])
    seen = 0
    try:
        stream = env.db.stream(env.site.stream_sql(STREAM_ROWS), batch=50)
        while True:
            batch = await stream.fetch()
            if not batch:
                break
            seen += len(batch)
    except BaseException as exc:
        answered(env.ledger, unit, exc)
    else:
        env.ledger.settle(unit, ACK if seen == STREAM_ROWS else NOT_RUN,
                          None if seen == STREAM_ROWS else f"a stream ended after {seen} rows")


async def d_abandon(env: Env, c: int, i: int) -> None:
    [token] = env.tokens(c, i, "a")
    unit = env.ledger.issue("abandon", [token])
    try:
        tx = await env.db.beginTransaction()
        await env.db.runMany(env.site.insert_sql(), [(token, i)], tx)
        await held(env)
    except BaseException as exc:
        body_failed(env.ledger, unit, exc)
        if isinstance(exc, GAVE_UP):
            raise
        return
    env.ledger.settle(unit, NOT_RUN)


DROPIN = {"standalone": d_standalone, "burst": a_burst, "interaction": d_interaction, "explicit": d_explicit,
          "many": a_many, "copy": a_copy, "stream": d_stream, "abandon": d_abandon}


def runner(front: str) -> Optional[dict[str, Any]]:
    """The work table of an async front-end (None: adb.sync, run in threads)."""
    return {"asyncio": ASYNC, "tornado": ASYNC, "twisted": ASYNC, "trio": ASYNC,
            "dropin": DROPIN}.get(front)
