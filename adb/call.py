"""The protocols of one call: its claim, its job, its running state.

A call passes through three hands: the caller's thread queues a *job*, a worker
runs it, and the watchdog may cancel it while it runs. These are the objects
they share, each with a name instead of a bare list, tuple or integer.
"""

from __future__ import annotations

import enum
import threading
import weakref
from typing import Any, ClassVar, Optional, Sequence


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


class Job:
    """A queued call: who waits for it, its limits, and what runs.

    Every kind of job is a subclass declared in ``adb.jobs``, with the fields its
    work needs and its own ``run(session)``; only the engine makes them
    (``adb.engine``). The four fields every job has:

    - ``future``: what its caller waits on (None: nobody waits, a detached job; or
      it has run, and its worker let go of it);
    - ``claim``: a Claim, for a call with a ``timeout`` (else None);
    - ``run_timeout``: the watchdog's limit in seconds (None: none);
    - ``trace``: an ``adb.telemetry.Trace``, or None without telemetry.

    What a worker may do with a job is a class attribute of its kind, never a
    test of which function it runs:

    - ``retriable``: ``Database(retries=N)`` may run it again after a transient
      failure that took no effect (``adb.transient``);
    - ``rerunnable``: it may run once more after failing unsent on a connection the
      driver has just made fit (``Driver.pooler_symptom``);
    - ``batchable``: it may join a group-commit unit (``autobatch``);
    - ``pipelinable``: it may join a pipeline of standalone statements;
    - ``ends_transaction``: it runs even when its caller gave up, since nothing else
      would end the transaction and free the worker;
    - ``sticky``: its worker goes idle before handing back its outcome, so that the
      caller's next call lands on it (the drop-in's calls: ``Worker.go_idle``).

    A class per kind rather than the flat tuple this once was: measured on the
    compiled wheel, it costs no more instructions per call and no more memory
    per call in flight (docs/performance.md, "Job kinds").
    """

    label: ClassVar[str] = "job"
    retriable: ClassVar[bool] = False
    rerunnable: ClassVar[bool] = False
    batchable: ClassVar[bool] = False
    pipelinable: ClassVar[bool] = False
    ends_transaction: ClassVar[bool] = False
    sticky: ClassVar[bool] = False

    __slots__ = ("future", "claim", "run_timeout", "trace")

    def __init__(self, future: Any, claim: Optional[Claim], run_timeout: Optional[float],
                 trace: Any) -> None:
        self.future = future
        self.claim = claim
        self.run_timeout = run_timeout
        self.trace = trace

    def run(self, session: Any) -> Any:
        """Do the job's work on ``session`` (an ``adb.session.Session``), in the
        worker's thread; what its caller gets."""
        raise NotImplementedError(f"{type(self).__name__} declares no run()")

    def text(self) -> Optional[Any]:
        """The SQL text the job runs, if it runs one statement (else None)."""
        return None

    def what(self) -> str:
        """What the job runs, for a log line: its SQL text (never its parameters),
        or what it is."""
        text = self.text()
        if isinstance(text, (str, bytes)):
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            return " ".join(text.split())[:200]
        return self.label

    def __repr__(self) -> str:
        return f"<{type(self).__name__} job: {self.what()}>"


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
                 unit: Optional[Sequence[Job]] = None) -> None:
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
        return self.unit is not None and any(job.future is future for job in self.unit)

    def statement(self) -> str:
        """What the call runs, for a log line: its SQL text (never its parameters),
        or what it is (``runInteraction``, a unit)."""
        return "a unit of batched calls" if self.job is None else self.job.what()


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


__all__ = ["add_canceller", "cancel_given_up", "Claim", "Job", "CallState", "RunningCall"]
