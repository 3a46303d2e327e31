"""Retried transactions: ``db.runTransaction(fn, *args, retries=N, **kwargs)``.

Under ``SERIALIZABLE``, deadlocks and multi-primary clusters the server aborts
a transaction that did nothing wrong, and the remedy is to run it again from its
start. ``transaction`` is that loop, written once as steps (``adb.steps``) for
every front-end: begin, ``fn(tx, *args, **kwargs)``, commit; on a transient
failure roll back, wait (``transient.retry_wait``) and run ``fn`` again.

What is run again, and what never is:

- a transient error the driver names (``Driver.is_transient``: serialization
  failure, deadlock, lock wait timeout, a Galera certification conflict, a busy
  SQLite database), raised by ``fn``'s calls or by the commit: the server
  rolled the transaction back, so nothing of it remains;
- ``ConnectionLost`` before the commit: an uncommitted transaction dies with its
  connection; ``ServerUnavailable`` at the begin: nothing was sent at all;
- never a commit whose connection broke (``may_have_run=True`` at the commit):
  the server may have committed, only the caller can find out, and the error
  says so. Never any other error, which ``fn`` would only meet again.

When the retries run out the last error is raised, naming the attempts
(``adb.errors.name_attempts``). ``fn`` may run several times: whatever it does
besides its calls on ``tx`` must be safe to repeat.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple, Optional, Protocol

from .drivers.base import Driver
from .errors import ConnectionLost, add_note, name_attempts
from .frontend import Waiting
from .steps import Steps
from .transaction import Transaction
from .transient import allows_retry, retry_wait

#: how many times runTransaction runs ``fn`` again when neither the call nor the
#: Database (``retries=``) says
DEFAULT_RETRIES = 3


class Mode(NamedTuple):
    """How each run's transaction begins: its isolation level (None: the server's
    default) and whether it only reads."""

    isolation: Optional[str] = None
    read_only: bool = False


class Retrier(Protocol):
    """What the loop uses of its engine (``adb.engine.Engine``)."""

    driver: Driver
    frontend: Any

    def begin_pending(self, read_only: bool, timeout: Optional[float],
                      isolation: Optional[str] = None) -> tuple[Transaction, Any]: ...
    def end(self, tx: Transaction, commit: bool) -> Any: ...
    def check_ended(self, tx: Transaction) -> None: ...
    def delay(self, seconds: float) -> Any: ...
    def count_retry(self) -> None: ...
    def connect_wait(self) -> float: ...


def transaction(engine: Retrier, fn: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any], retries: int, mode: Mode = Mode()) -> Steps:
    """The steps of one ``runTransaction``: its result, or its last error."""
    attempt = 1
    while True:
        tx: Optional[Transaction] = None
        committing = False
        try:
            pending, begun = engine.begin_pending(mode.read_only, None, mode.isolation)
            yield begun
            tx = pending  # begun: from here on it is this run's to end
            result = yield from _outcome(engine.frontend.waiting, fn(tx, *args, **kwargs))
            if tx.active:  # fn may have ended it itself
                committing = True
                yield engine.end(tx, True)
            else:  # ... or something else did (a close): then it did not commit
                engine.check_ended(tx)
            return result
        except GeneratorExit:  # dropped unfinished: the handle's drop watch rolls back
            raise
        except BaseException as exc:
            error = exc
        # a begin that failed, timed out or was given up on began nothing to end: its
        # handle's end would wait for a worker that never takes its transaction
        if tx is not None and tx.active:
            try:
                yield engine.end(tx, False)
            except Exception:  # its connection is gone: so is the transaction
                pass
        if not again(engine.driver, error, committing, attempt, retries):
            raise error
        engine.count_retry()
        yield engine.delay(retry_wait(attempt, error, engine.connect_wait))
        attempt += 1


def again(driver: Driver, error: BaseException, committing: bool, attempt: int,
          retries: int) -> bool:
    """True when the transaction that failed with ``error`` on its ``attempt``-th run
    is to run again; False when ``error`` is to be raised (annotated when a
    transient failure outlasted the retries or a commit's outcome is unknown)."""
    if isinstance(error, ConnectionLost) and committing and error.may_have_run:
        add_note(error, "adb: runTransaction did not run it again: the connection broke "
                        "during its commit, so it may have committed (may_have_run=True)")
        return False
    if not allows_retry(error, driver, rolled_back=not committing):
        return False
    if attempt > retries:
        name_attempts(error, attempt, "runTransaction's function", retries)
        return False
    return True


def _outcome(waiting: Waiting, result: Any) -> Steps:
    """``fn``'s result: awaited if it is an awaitable (a coroutine, a Deferred),
    which a blocking front-end refuses and an asyncio one requires."""
    if inspect.isawaitable(result):
        if waiting is Waiting.BLOCKS:
            getattr(result, "close", lambda: None)()  # a coroutine never run: no warning
            raise TypeError("adb.sync's runTransaction runs a plain function, but fn returned "
                            f"{type(result).__name__}: pass a function that blocks")
        return (yield result)
    if waiting is Waiting.AWAITS:
        raise TypeError("runTransaction needs a coroutine function here (async def fn(tx, "
                        f"...)), but fn returned {type(result).__name__}")
    return result


__all__ = ["DEFAULT_RETRIES", "Mode", "again", "transaction"]
