"""Retry policy, in one place: which failures allow running work again, and how long
to wait first.

Two loops run work again: a worker runs a standalone call again
(``Database(retries=N)``, ``adb.worker``) when its job's kind is retriable
(``Job.retriable``, ``adb.jobs``), and ``runTransaction`` runs a whole transaction again
(``adb.retry``). Both ask ``allows_retry`` whether the error lets them, and wait
``retry_wait`` in between. Pure logic: no threads, no I/O.
"""

from __future__ import annotations

import random
from typing import Callable

from .drivers.base import Driver
from .errors import ConnectionLost, Error, ServerUnavailable


def allows_retry(error: BaseException, driver: Driver, rolled_back: bool = False) -> bool:
    """True when ``error`` left nothing behind and may not recur: the server refused
    the work transiently (``Driver.is_transient``: a deadlock, a serialization
    failure, a busy SQLite file), or its connection was lost before anything could
    have run. ``rolled_back``: the work ran in a transaction that cannot have
    committed, so a lost connection undid whatever may have run."""
    if isinstance(error, ConnectionLost):
        return rolled_back or not error.may_have_run
    return not isinstance(error, Error) and driver.is_transient(error)


def retry_delay(attempt: int, initial: float = 0.01, maximum: float = 1.0,
                rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before running again what failed transiently ``attempt`` times:
    ``min(maximum, initial * 2**(attempt-1))``, less up to half of it at random, so
    two transactions that deadlocked each other do not collide again in step."""
    delay: float = min(maximum, initial * 2 ** (attempt - 1))
    return delay * (1 - 0.5 * rand())


def retry_wait(attempts: int, error: BaseException, connect_wait: Callable[[], float]) -> float:
    """Seconds to wait before running again what failed transiently ``attempts``
    times (a call, or runTransaction's function): the retry backoff, or the pool's
    connect backoff (``connect_wait()``) when no connection could be opened."""
    wait = retry_delay(attempts)
    if isinstance(error, ServerUnavailable):
        wait = max(wait, connect_wait())
    return wait


__all__ = ["allows_retry", "retry_delay", "retry_wait"]
