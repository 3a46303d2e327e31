"""The faults scenario's accounting: what every call of a fault program said
(``Ledger``), and the calls that record it (``Run``: an insert with a unique
token, an echo, a transaction, the probes after a fault, the wait for every call
to settle). The scenario checks the ledger against the rows it finds on the
server; nothing here decides what a fault is.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any, Awaitable, Optional

from .systems.common import Options
from .systems.fault_pools import Boom, FaultPool


class Ledger:
    """Outcomes of one run's calls: tokens reported written, not run, or maybe run;
    transactions (their tokens all present or all absent); echoes and failures."""

    def __init__(self) -> None:
        self.ok: set[str] = set()
        self.not_run: set[str] = set()
        self.maybe: set[str] = set()
        self.transactions: list[tuple[list[str], bool]] = []  # (tokens, committed)
        self.rolled_back: set[str] = set()  # tokens of blocks that raised (must be absent)
        self.calls = self.wrong = self.poisoned = self.refused = self.twice = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.pending: set[asyncio.Future[Any]] = set()

    def failed(self, token: Optional[str], exc: BaseException) -> None:
        """A call that raised: its token did not run (adb's may_have_run False) or may have."""
        self.errors[type(exc).__name__] += 1
        if token is not None:
            (self.not_run if getattr(exc, "may_have_run", True) is False else self.maybe).add(token)

    def check(self, present: list[str]) -> dict[str, int]:
        """Lost, doubled and wrong rows, from the tokens found in the table."""
        counts = collections.Counter(present)
        doubled = sum(1 for n in counts.values() if n > 1)
        lost = len(self.ok - set(counts))
        wrong = len((self.not_run | self.rolled_back) & set(counts))
        for tokens, committed in self.transactions:
            found = [t in counts for t in tokens]
            if any(found) and not all(found):
                wrong += 1  # half a transaction
            elif committed and not all(found):
                lost += len(tokens)
        return {"lost": lost, "doubled": doubled, "wrong_rows": wrong}


class Run:
    """One program's run of one pool: its SQL, its ledger, and the server-side checks."""

    def __init__(self, pool: FaultPool, kind: str, table: str, options: Options) -> None:
        self.pool, self.kind, self.table, self.options = pool, kind, table, options
        self.ledger = Ledger()
        self.seconds = float(options.get("fault_seconds") or 2.0)
        self.max_calls = int(options.get("fault_calls") or 1000)
        self.serials = iter(range(10**9))
        self.served = True  # False: this loop is one the pool never served (program 5)

    # -- SQL ---------------------------------------------------------------------------
    def insert_sql(self) -> str:
        return f"insert into {self.table} (token, n) values (%s, %s)"

    def slow_insert_sql(self) -> str:
        if self.kind == "postgresql":
            return f"insert into {self.table} (token, n) select %s, 1 from pg_sleep(%s)"
        return f"insert into {self.table} (token, n) select %s, sleep(%s)"

    def echo_sql(self) -> str:
        return "select cast(%s as text)" if self.kind == "postgresql" else "select cast(%s as char)"

    def fault(self, background: bool) -> None:
        """A failed call: poison where it should have been served (``background``),
        or, where this loop was never served at all (program 5), a refusal."""
        if background and self.served:
            self.ledger.poisoned += 1
        elif background:
            self.ledger.refused += 1

    def token(self, prefix: str) -> str:
        return f"{prefix}{next(self.serials)}"

    # -- calls -------------------------------------------------------------------------
    def spawn(self, coroutine: Awaitable[Any]) -> asyncio.Future[Any]:
        """A call as a task the ledger watches until it settles."""
        task = asyncio.ensure_future(coroutine)
        self.ledger.pending.add(task)
        task.add_done_callback(self.ledger.pending.discard)
        return task

    async def bounded(self, call: Awaitable[Any], timeout: Optional[float]) -> Any:
        """``call``'s result; past ``timeout`` the caller gives up (TimeoutError) and
        the call is cancelled, left for ``settle`` to count if it never ends (unlike
        ``wait_for``, which would wait for a cancellation that never completes)."""
        if timeout is None:
            return await call
        task = self.spawn(call)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            raise asyncio.TimeoutError()
        return task.result()

    async def insert(self, prefix: str, timeout: Optional[float] = None,
                     background: bool = False) -> bool:
        """One token insert (under ``wait_for`` when ``timeout``); True if it succeeded.
        ``background``: a caller that should never fail (its failure poisons)."""
        token = self.token(prefix)
        self.ledger.calls += 1
        try:
            await self.bounded(self.pool.execute(self.insert_sql(), (token, 0)), timeout)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and cancelling():
                self.ledger.maybe.add(token)
                raise
            self.ledger.failed(token, exc)
            self.fault(background)
            return False
        self.ledger.ok.add(token)
        return True

    async def echo(self, timeout: Optional[float] = None, background: bool = False) -> bool:
        """``select 'value'``: another value back is a wrong result."""
        value = self.token("e")
        self.ledger.calls += 1
        try:
            rows = await self.bounded(self.pool.fetch(self.echo_sql(), (value,)), timeout)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and cancelling():
                raise
            self.ledger.failed(None, exc)
            self.fault(background)
            return False
        if rows != [(value,)]:
            self.ledger.wrong += 1
            self.fault(background)
            return False
        return True

    async def transaction(self, prefix: str, steps: int, slow: float = 0.0, gap: float = 0.0,
                          fail: bool = False) -> Optional[BaseException]:
        """A transaction of ``steps`` token inserts (the last one sleeping ``slow``
        seconds on the server); recorded committed, or all-or-nothing."""
        tokens = [self.token(prefix) for _ in range(steps)]
        sql: list[tuple[str, tuple[Any, ...]]] = [(self.insert_sql(), (t, 0)) for t in tokens]
        if slow:
            sql[-1] = (self.slow_insert_sql(), (tokens[-1], slow))
        self.ledger.calls += 1
        try:
            await self.pool.transaction(sql, gap, fail)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, Boom):
                self.ledger.rolled_back.update(tokens)
            else:
                self.ledger.errors[type(exc).__name__] += 1
                self.ledger.transactions.append((tokens, False))
            return exc
        self.ledger.transactions.append((tokens, True))
        return None

    async def released_open(self, prefix: str) -> Optional[BaseException]:
        """A token insert after an explicit BEGIN, ``Boom`` raised with the
        transaction open (``FaultPool.release_open``): the token must never appear."""
        token = self.token(prefix)
        self.ledger.calls += 1
        try:
            await self.pool.release_open([(self.insert_sql(), (token, 0))])
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, Boom):
                self.ledger.rolled_back.add(token)
            else:
                self.ledger.failed(token, exc)
            return exc
        return None

    # -- after the fault ---------------------------------------------------------------
    async def recovery(self, within: float = 10.0) -> float:
        """Seconds until five echoes in a row succeed (``within`` if they never do,
        which poisons)."""
        start = time.monotonic()
        streak = 0
        while streak < 5:
            if time.monotonic() - start > within:
                self.fault(True)
                return within
            ok = await self.echo(timeout=2.0)
            streak = streak + 1 if ok else 0
            if not ok:
                await asyncio.sleep(0.05)
        return time.monotonic() - start

    async def probes(self, count: int = 10) -> None:
        """The next callers, once the pool serves again: each must succeed."""
        async def one() -> None:
            await self.insert("p", timeout=5.0, background=True)
            await self.echo(timeout=5.0, background=True)
        await asyncio.gather(*(one() for _ in range(count)))

    async def settle(self, within: float) -> int:
        """Wait up to ``within`` s for every call; the number still pending."""
        pending = set(self.ledger.pending)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=within)
        for task in pending:
            task.cancel()
        return len(pending)


def cancelling() -> bool:
    """Whether the running task itself is being cancelled (not a call under wait_for)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0 if hasattr(task, "cancelling") else False


def count_double_settles(ledger: Ledger) -> None:
    """Count, on the running loop, every 'settled twice' the loop reports."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if type(exc).__name__ in ("InvalidStateError", "AlreadyCalledError"):
            ledger.twice += 1
        elif previous is not None:
            previous(loop, context)
    loop.set_exception_handler(handler)
