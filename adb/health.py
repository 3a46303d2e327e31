"""Connection health policy: backoff between failed connects, recycling ages
(the retry backoff is ``adb.transient``'s).

Pure logic with an injectable clock and random source: no threads, no I/O.
"""

from __future__ import annotations

import random
import time
from typing import Callable, Optional


class Backoff:
    """Exponential backoff with jitter between failed connection attempts.

    After the n-th consecutive failure the next attempt waits
    ``min(maximum, initial * 2**(n-1))`` seconds, less up to 25% jitter so that
    many pools do not reconnect in step. A success resets it.
    """

    def __init__(self, initial: float = 0.1, maximum: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        self.initial, self.maximum = initial, maximum
        self.clock, self.rand = clock, rand
        self.failures = 0
        self.not_before = 0.0
        self.delay = 0.0
        self.last_error: Optional[str] = None

    def wait_left(self) -> float:
        """Seconds until the next attempt is allowed (0 when it is)."""
        return max(0.0, self.not_before - self.clock())

    def failed(self, error: str) -> float:
        """Record a failed attempt; return the delay before the next one."""
        self.failures += 1
        self.last_error = error
        delay: float = min(self.maximum, self.initial * 2 ** (self.failures - 1))
        delay *= 1 - 0.25 * self.rand()
        self.delay, self.not_before = delay, self.clock() + delay
        return delay

    def still_down(self) -> None:
        """A probe found the server still silent or gone: the current wait starts
        again from now, so a probe slower than the wait does not use it up."""
        self.not_before = max(self.not_before, self.clock() + self.delay)

    def succeeded(self) -> int:
        """Record a success; return how many failures preceded it."""
        failures, self.failures, self.not_before = self.failures, 0, 0.0
        return failures


def lifetime(max_lifetime: Optional[float],
             rand: Callable[[], float] = random.random) -> Optional[float]:
    """This connection's lifetime: ``max_lifetime`` less up to 5% jitter, or None."""
    if max_lifetime is None:
        return None
    return max_lifetime * (1 - 0.05 * rand())
