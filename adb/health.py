"""Connection health policy: backoff between failed connects, recycling ages.

Pure logic with an injectable clock and random source: no threads, no I/O.
"""

import random
import time


class Backoff:
    """Exponential backoff with jitter between failed connection attempts.

    After the n-th consecutive failure the next attempt waits
    ``min(maximum, initial * 2**(n-1))`` seconds, less up to 25% jitter so that
    many pools do not reconnect in step. A success resets it.
    """

    def __init__(self, initial=0.1, maximum=10.0, clock=time.monotonic, rand=random.random):
        self.initial, self.maximum = initial, maximum
        self.clock, self.rand = clock, rand
        self.failures = 0
        self.not_before = 0.0
        self.last_error = None

    def wait_left(self):
        """Seconds until the next attempt is allowed (0 when it is)."""
        return max(0.0, self.not_before - self.clock())

    def failed(self, error):
        """Record a failed attempt; return the delay before the next one."""
        self.failures += 1
        self.last_error = error
        delay = min(self.maximum, self.initial * 2 ** (self.failures - 1))
        delay *= 1 - 0.25 * self.rand()
        self.not_before = self.clock() + delay
        return delay

    def succeeded(self):
        """Record a success; return how many failures preceded it."""
        failures, self.failures, self.not_before = self.failures, 0, 0.0
        return failures


def lifetime(max_lifetime, rand=random.random):
    """This connection's lifetime: ``max_lifetime`` less up to 5% jitter, or None."""
    if max_lifetime is None:
        return None
    return max_lifetime * (1 - 0.05 * rand())
