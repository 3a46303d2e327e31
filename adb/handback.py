"""Batched hand-back of results from worker threads to one loop thread.

A naive ``call_soon_threadsafe`` per result wakes the loop (a syscall) once per
call. Here workers append to a deque and only the first appender after a drain
schedules a wake-up; the loop thread then settles the whole batch.

Why no wake-up is lost: a worker appends *before* it reads the flag, and a
drain clears the flag *before* it empties the deque. A worker that finds the
flag set therefore knows that some drain has not cleared it yet; that drain
clears it after this append and so takes the item. Under the GIL (and the
per-object locks of free-threaded builds) these steps are sequentially
consistent.
"""

from collections import deque


class BatchedHandback:
    """Deliver ``(future, ok, value)`` to a loop thread, one wake-up per batch.

    ``schedule(fn)`` must be thread-safe and run ``fn`` on the loop thread
    (``loop.call_soon_threadsafe``, ``reactor.callFromThread``);
    ``settle(future, ok, value)`` runs on the loop thread for every result, and
    ``after()``, if given, once after each batch.
    """

    def __init__(self, schedule, settle, after=None):
        self._after = after  # called on the loop thread after each drain
        self._pending = deque()
        self._scheduled = False
        self._schedule = schedule
        self._settle = settle
        self.wakeups = 0
        self.settled = 0
        self.largest_batch = 0

    def __call__(self, future, ok, value):
        """Queue one result (worker thread)."""
        self._pending.append((future, ok, value))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._schedule(self._drain)
            except RuntimeError:  # the loop is closed: nobody is left to deliver to
                self._scheduled = False

    def _drain(self):
        """Settle every queued result (loop thread)."""
        self._scheduled = False
        self.wakeups += 1
        popleft, settle = self._pending.popleft, self._settle
        count = 0
        while True:
            try:
                future, ok, value = popleft()
            except IndexError:
                break
            settle(future, ok, value)
            count += 1
        self.settled += count
        if count > self.largest_batch:
            self.largest_batch = count
        if self._after is not None:
            self._after()
