"""The protocols of one call: its claim, its job, its running state.

A call passes through three hands: the caller's thread queues a *job*, a worker
runs it, and the watchdog may cancel it while it runs. These are the objects
they share, each with a name instead of a bare list, tuple or integer.
"""

from __future__ import annotations

import enum
import threading
import weakref
from typing import Any, Optional, Tuple


class Claim:
    """Decides, once, whether a queued call runs or is given up.

    The worker that is about to start the call and the caller's side that gives
    up on it (its timeout, a close that fails queued calls) each ``take()`` the
    claim; exactly one of them gets True. Only calls with a timeout carry one.
    """

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def take(self) -> bool:
        """True for the first taker, False for every later one (any thread)."""
        return self._lock.acquire(False)


#: A queued call: one flat tuple ``(future, kind, claim, run_timeout, trace, *args)``.
#: The worker runs ``kind.run(session, *args)`` (``adb.jobs.Kind``) and hands
#: ``(future, ok, value)`` back;
#: ``claim`` is a Claim or None; ``run_timeout`` (seconds or None) is the
#: watchdog's limit; ``trace`` an ``adb.telemetry.Trace``, or None when the
#: Database has no telemetry (nor ``slow_call``). A flat tuple because 100,000 queued calls hold 100,000 of
#: them: a tuple subclass with named fields costs the loop 0.33 us more per call
#: (2.1 us in all), a nested args tuple 48 bytes. Only the engine builds one
#: (``adb.engine``, inline on the hot path: a builder function's call alone cost
#: 0.11 us of its 2.4); read one only through the names below.
Job = Tuple[Any, ...]
FUTURE, KIND, CLAIM, RUN_TIMEOUT, TRACE, ARGS = range(6)


class CallState(enum.Enum):
    """Where a running call stands between its worker and the watchdog."""

    RUNNING = "running"
    #: past its deadline or abandoned by its caller: cancel sent to the server
    CANCEL_SENT = "cancel sent"
    #: still running ``cancel_grace`` s after the cancel: its connection was cut
    CUT = "cut"


class RunningCall:
    """The call a worker is running, as the watchdog sees it.

    The worker creates one per call and drops it when the call returns; the
    watchdog only moves ``state`` forward (RUNNING -> CANCEL_SENT -> CUT) and acts
    on the connection only while the worker still runs this very call. With the
    cancel it sets ``cancel_done`` (absent until then: nothing per call), an Event
    set once the driver's cancel has returned, or was not sent after all.
    """

    __slots__ = ("future", "deadline", "job", "unit", "state", "cancelled_at", "cancel_done")
    cancel_done: threading.Event

    def __init__(self, future: Any, deadline: Optional[float], job: Optional[Job],
                 unit: Optional[list[Job]] = None) -> None:
        self.future = future
        self.deadline = deadline  # time.monotonic() past which it is cancelled, or None
        self.job = job  # what runs (None: a unit of several), for the watchdog's log
        self.unit = unit  # a unit of batched calls (autobatch): its jobs, else None
        self.state = CallState.RUNNING
        self.cancelled_at = 0.0

    def runs(self, future: object) -> bool:
        """True if this is the call of ``future``, or a unit that took it."""
        if self.future is future:
            return True
        return self.unit is not None and any(job[FUTURE] is future for job in self.unit)

    def statement(self) -> str:
        """What the call runs, for a log line: its SQL text (never its parameters),
        or what it is (``runInteraction``, a unit)."""
        job = self.job
        if job is None:
            return "a unit of batched calls"
        args = job[ARGS:]
        if len(args) > 1 and isinstance(args[1], (str, bytes)):
            text = args[1].decode("utf-8", "replace") if isinstance(args[1], bytes) else args[1]
            return " ".join(text.split())[:200]
        return str(getattr(args[0], "__name__", "a call")) if args else "a call"


#: who can cancel a running call for its caller: each pool's watchdog
#: (``adb.watchdog.Watchdog.cancel_given_up``), held weakly
_cancellers: "weakref.WeakSet[Any]" = weakref.WeakSet()
_cancellers_lock = threading.Lock()


def add_canceller(canceller: Any) -> None:
    """Register ``canceller`` (a watchdog) with ``cancel_given_up``."""
    with _cancellers_lock:
        _cancellers.add(canceller)


def cancel_given_up(future: Any) -> bool:
    """The caller blocked on ``future`` was interrupted (Ctrl-C in ``adb.sync``) and
    marked its call given up: have the call cancelled on the server now, from the
    caller's thread, if a worker of any pool runs it (True); False if none does
    (still queued, the call is skipped)."""
    with _cancellers_lock:
        cancellers = list(_cancellers)
    for canceller in cancellers:
        if canceller.cancel_given_up(future):
            return True
    return False


__all__ = ["add_canceller", "cancel_given_up", "Claim", "Job", "FUTURE", "KIND", "CLAIM", "RUN_TIMEOUT", "TRACE", "ARGS",
           "CallState", "RunningCall"]
