"""Whether this worker thread is running a caller's ``runInteraction`` function.

``adb.ops.interaction`` marks it; ``adb.savepoint(cursor)`` asks, since a
savepoint needs the transaction such a function always runs in.
"""

from __future__ import annotations

import threading


class _Running(threading.local):
    running = False


RUNNING = _Running()


def interacting() -> bool:
    """True inside the function ``runInteraction`` runs (in this worker thread),
    which always runs in a transaction."""
    return RUNNING.running


__all__ = ["RUNNING", "interacting"]
