"""Pipelined standalone calls: one round trip for the calls queued behind a worker.

A worker that takes a standalone ``runQuery``, ``runOperation`` or row/value
helper while more wait in the shared queue takes (without blocking) up to
``pipeline`` of them and hands them to its driver's ``pipelines.run``, which sends
them all before reading any result (``Database(pipeline=)``, ``?pipeline=off``;
``adb.options.pipeline_depth``). The contract, which every path keeps exactly:

- Each statement keeps the meaning it has alone: its own implicit transaction
  (psycopg 3: libpq's pipeline mode with a Sync after each statement; PyMySQL:
  a multi-statement message, whose statements after a failing one have not run
  and are sent again, so each runs exactly once), its own result, rowcount and
  error with the driver's own type. A failing statement affects no neighbour.
- Only statements that are certainly one read or DML statement join
  (``Driver.pipelines.safe``): a caller's text never runs as more statements
  than it would alone. Calls with a ``statement_timeout`` run alone, so the
  watchdog's cancel always hits the statement that overran; so do calls with a
  ``timeout`` (a call a pipeline takes has started, and its wait could no longer
  run out while the statements before it run), and every call once the pool is
  closing: no pipeline forms after ``close()``; one already sent is in flight and
  finishes like a running call (so ``close(timeout)`` may let calls finish that
  one by one would still have been queued, and fail with PoolClosed).
- What follows an error is what follows it alone (``Worker.failed``): a
  connection that broke gives ``ConnectionLost``, a transient error is retried
  with ``retries``, a placeholder of another paramstyle gets its note. If the
  connection breaks during the pipeline, each call whose answer was read before
  it broke gets that answer, and every other call of it (and only those) gets
  ``ConnectionLost(may_have_run=True)``; if none could be opened, each runs alone.
- Each call has its own span (``adb.telemetry``), started when the pipeline is
  sent and ended with its own outcome.
"""

from __future__ import annotations

from queue import Empty
from typing import TYPE_CHECKING, Any, Optional, Protocol

from .call import Job, RunningCall
from .drivers.pipelines import PipelineBroken
from .errors import InterfaceError
from .jobs import Statement
from .session import Session

if TYPE_CHECKING:
    from collections import deque
    from queue import SimpleQueue

    from .dispatch import Queued
    from .session import Crew



class Host(Protocol):
    """The worker running a pipeline, as the pipeline sees it (``adb.worker.Worker``)."""

    crew: Crew
    session: Session

    def admit(self, job: Job) -> bool: ...
    def execute(self, job: Job) -> None: ...
    def failed(self, job: Job, error: BaseException,
               running: RunningCall) -> tuple[Any, bool]: ...
    def running(self, call: Optional[RunningCall]) -> None: ...
    def tally(self, completed: int, errors: int) -> None: ...
    def lost(self, jobs: list[Statement], error: BaseException, what: str) -> None: ...


class Pipeliner:
    """One worker's pipelines: which queued calls join one, and running it."""

    #: SQL texts whose ``pipelines.safe`` verdict is kept (templates repeat)
    CACHE_LIMIT = 1024

    def __init__(self, host: Host, queue: SimpleQueue[Queued], later: deque[Queued],
                 depth: int) -> None:
        self.host = host
        self.queue = queue
        self.later = later  # calls taken that may not join, served next
        self.depth = depth
        #: group commit takes the operations that may join a unit (``autobatch``)
        self.batching = host.crew.config.autobatch > 1
        self.driver = host.crew.driver
        pipelining = self.driver.pipelines
        if pipelining is None:
            raise InterfaceError(f"{self.driver.name} cannot pipeline")
        self.pipelining = pipelining  # the driver's (``Driver.pipelines``)
        self.telemetry = host.crew.config.telemetry
        self.safe: dict[object, bool] = {}
        self.pipelines = self.pipelined = 0

    def eligible(self, job: Statement) -> bool:
        """True when ``job`` may join a pipeline: a standalone read or DML call (a
        pipelinable kind, whose op reads only its own statement's outcome off its
        cursor) with no ``statement_timeout`` and no ``timeout`` (a call taken into a
        pipeline has started: its wait is over), whose text is certainly one statement."""
        if job.run_timeout is not None or job.claim is not None or not job.pipelinable:
            return False
        sql = job.sql
        safe = self.safe.get(sql)
        if safe is None:
            if len(self.safe) >= self.CACHE_LIMIT:
                self.safe.clear()
            safe = self.safe[sql] = self.pipelining.safe(sql)
        return safe

    def serve(self, first: Job) -> None:
        """A standalone call taken while others wait: alone, or at the head of a
        pipeline of those queued behind it."""
        host = self.host
        if not isinstance(first, Statement) or not self.eligible(first) \
                or host.crew.stopping():  # a closing pool: one by one
            return host.execute(first) if host.admit(first) else None
        if not host.admit(first):
            return None
        jobs = self.gather(first)
        if len(jobs) == 1:
            return host.execute(first)
        return self.run(jobs)

    def gather(self, first: Statement) -> list[Statement]:
        """``first`` and up to ``depth - 1`` more eligible standalone calls taken from
        the shared queue, in queue order, without waiting. A queued job of another
        kind (or a STOP, or an operation group commit takes) ends the gathering and is
        served next; a pipelinable call that must run alone is served next too, and
        gathering goes on."""
        queue, later, batching = self.queue, self.later, self.batching
        jobs = [first]
        while len(jobs) < self.depth and not queue.empty():
            try:
                job = queue.get_nowait()
            except Empty:
                break
            if not isinstance(job, Statement) or not job.pipelinable \
                    or (batching and job.batchable):
                later.append(job)
                break
            if not self.eligible(job):
                later.append(job)
            elif self.host.admit(job):
                jobs.append(job)
        return jobs

    def run(self, jobs: list[Statement]) -> None:
        """Send ``jobs`` as one pipeline and give each caller its own outcome."""
        host, session = self.host, self.host.session
        try:
            conn = session.connection()
        except BaseException:  # as alone: each call tries to connect, and fails, on its own
            for job in jobs:
                host.execute(job)
            return None
        spans = self.start_spans(jobs)
        host.running(running := RunningCall(None, None, None))
        error: Optional[BaseException] = None
        try:
            answers = self.pipelining.run(
                conn, [(job.sql, job.params) for job in jobs])
        except PipelineBroken as broken:  # the connection failed after some answers were read
            answers, error = broken.answered, broken.error
        except BaseException as exc:  # the connection failed under it: any may have run
            answers, error = [], exc
        read = jobs[:len(answers)]
        outcomes = [self.outcome(job, answer, running) for job, answer in zip(read, answers)]
        host.running(None)
        self.pipelines += 1
        self.pipelined += len(jobs)
        self.end_spans(read, spans, outcomes)
        host.tally(len(read), sum(1 for _, ok in outcomes if not ok))
        host.crew.handback.many([(job.future, ok, value) for job, (value, ok)
                                 in zip(read, outcomes) if job.future is not None])
        if error is not None:  # only the statements whose answers were not read are in doubt
            unread = jobs[len(answers):]
            self.end_spans(unread, None if spans is None else spans[len(answers):],
                           [(error, False)] * len(unread))
            host.lost(unread, error, f"a pipeline of {len(jobs)} calls")
        return None

    def outcome(self, job: Statement, answer: Any, running: RunningCall) -> tuple[Any, bool]:
        """What ``job``'s op makes of its statement's answer, as it would alone."""
        try:
            return job.op(answer, self.driver, job.sql, job.params, job.row_factory), True
        except BaseException as exc:
            return self.host.failed(job, exc, running)

    def start_spans(self, jobs: list[Statement]) -> Optional[list[Any]]:
        telemetry = self.telemetry
        if telemetry is None:
            return None
        return [None if job.trace is None else telemetry.start(job.trace) for job in jobs]

    def end_spans(self, jobs: list[Statement], spans: Optional[list[Any]],
                  outcomes: list[tuple[Any, bool]]) -> None:
        telemetry = self.telemetry
        if telemetry is None or spans is None:
            return
        for job, span, (value, ok) in zip(jobs, spans, outcomes):
            if span is not None:
                telemetry.end(job.trace, span, ok, value)


__all__ = ["Host", "Pipeliner"]
