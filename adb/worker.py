"""One worker: a thread that runs jobs on its session's connection.

A worker takes shared jobs from its pool's ``Dispatch``; one whose session begins
a transaction is *pinned*: until the transaction ends it reads only that
transaction's private queue, so its statements run in order on one connection.
The connection and what is tied to it belong to the worker's ``Session``
(``adb.session``); the worker owns the loop: which job runs next, whether its
caller still wants it, running it, retrying it, handing its outcome back, and
group commit. Nothing here knows about event loops: results go to the pool's
hand-back.

Pipelines (``Database(pipeline=)``, on psycopg 3 and PyMySQL): a worker that
takes a standalone read or DML call while more wait sends them together, each
still its own statement, transaction and outcome (``adb.pipeline``: the contract).
What follows a call's error is ``failed``, alone or in a pipeline.

Group commit (``Database(autobatch=N)``): a worker that takes a standalone
``runOperation`` while more wait in the shared queue takes up to N of them and
runs them as one *unit*: one round trip and one commit instead of N. Which
statements may join is ``adb.sqltext``'s policy, decided per statement by the
driver. The contract, which every path keeps exactly:

- Each caller gets what it would have got alone: its own rowcount (read from
  its own statement's result, or fixed by the statement's form and checked, see
  ``drivers.psycopg2``), and on success a committed statement.
- A unit is atomic. If any statement of it fails (or its commit does), the unit
  is rolled back and its calls run again one by one, so the failing one gets its
  own error with the driver's own type and the others succeed. A unit that
  rolled back left no effect, so nothing runs twice.
- If the connection breaks during a unit, every call of that unit (and only
  those) gets ``ConnectionLost(may_have_run=True)``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from queue import Empty, SimpleQueue
from typing import Any, NamedTuple, Optional

from . import transient
from .call import CallState, Job, RunningCall
from .dispatch import STOP, WAKE, Queued
from .errors import Error, PoolClosed, add_note, name_attempts
from .jobs import Statement
from .pipeline import Pipeliner
from .session import Crew, PoolConfig, Session
from .sqltext import NOT_GIVEN, Path, placeholder_hint

log = logging.getLogger("adb")


class Counters(NamedTuple):
    """What one worker has done, for ``stats()``."""

    completed: int
    errors: int
    connects: int
    recycled: int
    units: int
    batched: int
    unit_fallbacks: int
    retries: int


class Unit:
    """The calls one worker runs as one (group commit), and the path they take
    together: a message if every statement may go in one, else one transaction."""

    __slots__ = ("jobs", "path")

    def __init__(self, first: Statement, path: Path) -> None:
        self.jobs = [first]
        self.path = path

    def add(self, job: Statement, path: Path) -> None:
        self.jobs.append(job)
        if path is Path.TRANSACTION:
            self.path = path

    def deadline(self) -> Optional[float]:
        """When the unit's earliest ``statement_timeout`` runs out, or None."""
        timeouts = [job.run_timeout for job in self.jobs if job.run_timeout is not None]
        return time.monotonic() + min(timeouts) if timeouts else None


class Worker:
    """One thread and its session. All methods run in that thread, except that the
    watchdog reads ``conn`` and ``current`` and may cancel the running statement.
    Others only read what the properties and ``counters()`` show."""

    def __init__(self, crew: Crew, index: int) -> None:
        self.crew = crew
        self.index = index
        self.session = Session(crew, index)
        config = crew.config
        self._handback = crew.handback
        self._is_abandoned = crew.is_abandoned
        self._dispatch = crew.dispatch
        self._queue = crew.dispatch.queue
        self._config = config
        self._telemetry = config.telemetry
        self._cold = True  # it has not slept yet (``next_job``)
        self._busy = False
        self._current: Optional[RunningCall] = None  # the running call, for the watchdog
        self._completed = self._errors = 0
        self._units = self._batched = self._unit_fallbacks = self._retries = 0
        self.inbox: SimpleQueue[Queued] = SimpleQueue()  # jobs handed to this worker while idle
        self._later: deque[Queued] = deque()  # jobs taken while gathering a unit, served next
        self._listed = False  # listed idle before handing back its last call's outcome
        #: this worker's pipelines of standalone calls (``adb.pipeline``), or None
        self.pipeliner = Pipeliner(self, self._queue, self._later, config.pipeline) \
            if config.pipeline > 1 else None
        self.thread = threading.Thread(
            target=self.run, name=f"{config.name}-worker-{index}", daemon=True)

    # -- what others read ------------------------------------------------------------

    @property
    def conn(self) -> Any:
        """The connection, or None (read by the watchdog to cancel or cut a call)."""
        return self.session.conn

    @property
    def current(self) -> Optional[RunningCall]:
        """The call running now, or None (read by the watchdog)."""
        return self._current

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def pinned(self) -> bool:
        """True while a transaction pins this worker."""
        return self.session.tx_queue is not None

    @property
    def streaming(self) -> bool:
        """True while a stream is open on this worker's connection."""
        return self.session.stream is not None

    def counters(self) -> Counters:
        session = self.session
        return Counters(self._completed, self._errors, session.connects, session.recycled,
                        self._units, self._batched, self._unit_fallbacks, self._retries)

    # -- the loop --------------------------------------------------------------------

    def run(self) -> None:
        session = self.session
        job: Optional[Queued] = None
        # the worker's own settings first: a job kind's flags are class attributes,
        # which compiled code reads through a dictionary lookup
        batching = self._config.autobatch > 1
        try:
            self.warm_up()
            while True:
                job = session.pinned_job() if session.tx_queue is not None else self.next_job()
                if job is WAKE:
                    continue
                if job is STOP:
                    break
                try:
                    if batching and job.batchable and isinstance(job, Statement):
                        self.serve_batchable(job)
                    elif self.pipeliner is not None and job.pipelinable \
                            and not self._queue.empty():
                        self.pipeliner.serve(job)
                    else:
                        self.serve(job)
                except Exception:  # a bug of adb's own: keep the worker alive
                    log.exception("%s: worker %d failed on a job", self._config.name, self.index)
                job = None  # hold no reference to a finished job while blocked
        finally:
            session.disconnect()
            self.crew.worker_exited(self)

    def next_job(self) -> Queued:
        """The next shared job: one handed to this worker, else one from the shared
        queue, else register as idle and sleep until a caller hands one over.

        Idle workers form a stack, so the most recently busy (hot) thread gets the
        next call instead of whichever thread the kernel would wake. A worker that
        registered before handing back its last outcome (``go_idle``) is on top
        already. A worker re-checks the shared queue after registering, so a job
        queued while it was registering is never stranded."""
        if self._listed:
            self._listed = False
        else:
            if self._later:
                return self._later.popleft()
            for source in (self.inbox, self._queue):
                if not source.empty():  # a burst leaves the inbox empty: no Empty raised per job
                    try:
                        return source.get_nowait()
                    except Empty:  # another worker took it first
                        pass
            if self._cold:  # its first sleep: below the workers that have served
                self._cold = False
                self._dispatch.add_cold(self)
            else:
                self._dispatch.add_idle(self)
        job: Optional[Queued] = None
        if not self._queue.empty():  # tested first: no Empty raised per sleep
            try:
                job = self._queue.get_nowait()
            except Empty:  # another worker took it first
                pass
        if job is None:
            max_idle = self._config.max_idle
            try:
                if max_idle is None or self.session.conn is None:
                    return self.inbox.get()
                return self.inbox.get(timeout=max_idle)
            except Empty:
                self.session.disconnect("idle for max_idle")
                job = WAKE
        self._dispatch.remove_idle(self)
        return job

    def go_idle(self) -> None:
        """Register as idle now, before handing back the outcome of the call just run,
        when nothing else waits for this worker (``execute`` saw no shared job queued;
        none handed to it, no transaction pinning it). The caller's next call, made as that
        outcome arrives (a callback, the next line after an ``await``), then finds
        this worker on top of the idle stack: sequential calls stay on one worker and
        one connection every time, not only when this thread wins the race to
        register before the caller's next call (adbapi applications that use what an
        earlier call left on the session, docs/adbapi.md). Only the drop-in's
        calls do this: adb's own Database keeps its hand-back as it was (on the
        gathered-call benchmark, going idle first cost its asyncio front 2.6% more
        instructions per call)."""
        if not self._later and self.inbox.empty() and self.session.tx_queue is None:
            self._dispatch.add_idle(self)
            self._listed = True

    def warm_up(self) -> None:
        """Connect before the first job so it pays no connect; failures wait for a job."""
        if self.index >= self._config.warm or self.crew.stopping():
            return
        try:
            self.session.connection()
        except Exception as exc:
            self.crew.warm_up_failed(self.index, exc)

    def serve(self, job: Job) -> None:
        if self.admit(job):
            self.execute(job, last=True)
        del job  # a finished frame keeps its locals: see ``execute``

    def admit(self, job: Job) -> bool:
        """Claim ``job`` for running; False (and skip it) if its caller gave up,
        unless it ends a transaction: a commit or rollback whose caller gave up still
        runs, or nothing would end its transaction and free this worker."""
        future, claim = job.future, job.claim
        if (claim is not None and not claim.take()) \
                or (future is not None and self._is_abandoned(future)
                    and not job.ends_transaction):
            self._handback.nudge()  # given up before it started: it may make room
            return False
        if self.crew.exiting and not job.ends_transaction:
            return self.refuse_at_exit(job)
        return True

    def refuse_at_exit(self, job: Job) -> bool:
        """The interpreter exits (``Pool.give_up_at_exit``): a call not started yet
        never starts (its statement would outlive the process on the server): it
        fails with PoolClosed, as the queued calls the exit failed. False."""
        if job.future is not None:
            self._handback(job.future, False, PoolClosed.at_exit(self._config.name))
        return False

    def execute(self, job: Job, last: bool = False) -> None:
        """Run an admitted job on the session and hand its outcome back; ``last``: no
        other job taken with it waits (the worker may go idle first, ``go_idle``)."""
        future, run_timeout, trace = job.future, job.run_timeout, job.trace
        telemetry = self._telemetry
        span = None if trace is None or telemetry is None else telemetry.start(trace)
        self._busy = True
        deadline = None if run_timeout is None else time.monotonic() + run_timeout
        self._current = running = RunningCall(future, deadline, job)
        session = self.session
        value: Any
        try:
            value, ok = job.run(session), True
        except BaseException as exc:  # everything goes back to the caller
            value, ok = self.failed(job, exc, running)
        self._current = None
        if running.state is not CallState.RUNNING:
            value, ok = session.after_cancel(value, ok, running, run_timeout)
        self._busy = False
        self._completed += 1
        if not ok:
            self._errors += 1
        if span is not None and telemetry is not None:
            telemetry.end(trace, span, ok, value)
        if future is not None:
            if last and job.sticky and self._queue.empty():
                self.go_idle()
            self._handback(future, ok, value)
        # a driver error's traceback holds this frame, and through its f_back its
        # callers' (``serve``), and the finished frame of ``job.run`` (interpreted;
        # compiled, it has none): a finished frame keeps its locals. An error handed
        # back with that error as its cause would otherwise hold itself, through them,
        # its job and its future (which holds the error), in a cycle only the cyclic
        # collector frees, and with it whatever its own traceback holds in the caller's
        # frames: a transaction handle, whose worker stays pinned until then. The job
        # is done: it lets go of its future, and this frame of the rest
        job.future = None
        del value, future, job, running

    def failed(self, job: Job, exc: BaseException, running: RunningCall) -> tuple[Any, bool]:
        """What the caller of ``job`` gets after its statement raised ``exc``: the
        connection checked, a pooler's symptom cured and the call run again, a
        transient failure retried (``retries``), a hint added (``explain``)."""
        value, ok = self.session.after_error(exc, running), False
        # pooler_symptom first: it notes the cure on the error (and applies it) whatever
        # the kind, and only a rerunnable call runs again on the cured connection
        if self.crew.driver.pooler_symptom(value) and job.rerunnable:
            value, ok = self.rerun(job, value, running)
        elif job.retriable and self._config.retries:
            value, ok = self.retry(job, value, running)
        if not ok and not isinstance(value, Error):
            self.explain(value, job)
        return value, ok

    def running(self, call: Optional[RunningCall]) -> None:
        """``call`` (a pipeline's) runs now, or (None) nothing does (for the watchdog)."""
        self._current = call
        self._busy = call is not None

    def tally(self, completed: int, errors: int) -> None:
        """Count calls a pipeline completed, and how many of them failed."""
        self._completed += completed
        self._errors += errors

    # -- retries of standalone calls (Database(retries=N)) ------------------------------

    def retry(self, job: Job, error: BaseException, running: RunningCall) -> tuple[Any, bool]:
        """Run a standalone call again while it fails transiently having taken no
        effect, up to ``retries`` more times, waiting ``transient.retry_wait`` in
        between; return its outcome. The last error, when they run out, names the
        attempts. A caller who gave up, a watchdog that acted or a closing pool ends
        the retries."""
        attempts = 1
        while attempts <= self._config.retries and self.may_retry(error, running):
            self._retries += 1
            time.sleep(transient.retry_wait(attempts, error, self.crew.connect_wait))
            attempts += 1
            try:
                return job.run(self.session), True
            except BaseException as exc:
                    error = self.session.after_error(exc, running)
        if attempts > 1:
            name_attempts(error, attempts, "the call", self._config.retries)
        return error, False

    def rerun(self, job: Job, error: BaseException, running: RunningCall) -> tuple[Any, bool]:
        """Run once more a standalone call that failed without running, on a
        connection the driver has just made fit (``Driver.pooler_symptom``)."""
        try:
            return job.run(self.session), True
        except BaseException as exc:
            return self.session.after_error(exc, running), False

    def explain(self, error: BaseException, job: Job) -> None:
        """Add a note to a driver's error where adb sees its likely cause: placeholders
        of another paramstyle (``adb.sqltext.placeholder_hint``)."""
        params = job.params if isinstance(job, Statement) else NOT_GIVEN
        hint = placeholder_hint(job.text(), self.crew.driver.paramstyle, params)
        if hint is not None:
            add_note(error, hint)

    def may_retry(self, error: BaseException, running: RunningCall) -> bool:
        """True when the call may run again: its caller still waits, no watchdog
        acted, the pool is not closing, and ``error`` allows it
        (``transient.allows_retry``)."""
        if running.state is not CallState.RUNNING or self.crew.stopping() \
                or (running.future is not None and self._is_abandoned(running.future)):
            return False
        return transient.allows_retry(error, self.crew.driver)

    # -- group commit: a unit of standalone operations ----------------------------------

    def serve_batchable(self, job: Statement) -> None:
        """A standalone operation: alone, or at the head of a unit of the operations
        queued behind it."""
        if self._queue.empty():
            return self.serve(job)
        path = self.crew.driver.batch_path(job.sql)
        if path is Path.ALONE:
            return self.serve(job)
        if not self.admit(job):
            return None
        unit = self.gather(job, path)
        if len(unit.jobs) == 1:
            return self.execute(job, last=True)
        return self.run_unit(unit)

    def gather(self, first: Statement, path: Path) -> Unit:
        """The unit ``first`` (admitted, its statement on ``path``) heads: it and up to
        ``autobatch - 1`` more standalone operations taken from the shared queue,
        in queue order.

        A queued call that may not join (a non-batchable job, a STOP) ends the
        gathering and waits in ``_later``, served next; a batchable call whose
        statement must run alone waits there too, and gathering goes on. Calls whose
        callers gave up are skipped as a worker skips them anyway.
        """
        queue, later, path_of = self._queue, self._later, self.crew.driver.batch_path
        known, limit = path_of.paths, self._config.autobatch
        unit = Unit(first, path)
        jobs = unit.jobs
        while len(jobs) < limit and not queue.empty():
            try:
                job = queue.get_nowait()
            except Empty:
                break
            if not isinstance(job, Statement) or not job.batchable:  # STOP, WAKE, other work
                later.append(job)
                break
            path = known.get(job.sql) or path_of(job.sql)
            if path is Path.ALONE:
                later.append(job)
            elif self.admit(job):
                unit.add(job, path)
        return unit

    def run_unit(self, unit: Unit) -> None:
        """Run ``unit`` as one and hand each call its own outcome (see the module doc)."""
        driver, jobs, session = self.crew.driver, unit.jobs, self.session
        started = time.perf_counter()
        self._busy = True
        self._current = running = RunningCall(None, unit.deadline(), None, jobs)
        conn = error = None
        counts: list[int] = []
        try:
            conn = session.connection()
            statements = [(job.sql, job.params) for job in jobs]
            counts = driver.run_unit(conn, statements, unit.path)
        except BaseException as exc:  # everything goes back to the callers
            error = exc
        self._current = None
        self._busy = False
        self._units += 1
        if error is not None and conn is not None \
                and (running.state is CallState.CUT or driver.is_disconnect(error, conn)):
            self.trace_unit(jobs, started, False, error)
            return self.lost(jobs, error, f"a unit of {len(jobs)} batched calls (autobatch)")
        session.check_after_cancel(running)
        if error is None:
            self.trace_unit(jobs, started, True, None)
            self._batched += len(jobs)
            self._completed += len(jobs)
            self._handback.many([(job.future, True, count) for job, count in zip(jobs, counts)])
        else:
            self.one_by_one(jobs, error)

    def trace_unit(self, jobs: list[Statement], started: float, ok: bool, error: Any) -> None:
        """Spans for the calls of a unit that ran as one (``adb.telemetry``)."""
        if self._telemetry is not None:
            self._telemetry.unit([job.trace for job in jobs], ok, error, started)

    def lost(self, jobs: list[Statement], error: BaseException, what: str) -> None:
        """The connection broke under ``jobs`` sent together (``what``: a unit, a
        pipeline): any of their statements may have run."""
        self.session.disconnect(f"{type(error).__name__} during {what}")
        self._completed += len(jobs)
        self._errors += len(jobs)
        name = self._config.name
        for job in jobs:
            lost = self._config.lost_error(
                f"the connection of {name!r} to {self.crew.driver.target} broke while it ran "
                f"this call in {what} "
                f"({type(error).__name__}: {str(error).strip()[:200]}); the statement may have run",
                may_have_run=True)
            lost.__cause__ = error
            self._handback(job.future, False, lost)

    def one_by_one(self, jobs: list[Statement], error: BaseException) -> None:
        """The unit failed with ``error`` and was rolled back: run each call alone, so
        each caller gets its own outcome (the failing one its own error). A call
        whose caller gave up meanwhile (an interrupted ``adb.sync`` caller, whose
        cancel ended the unit) is not run again; once the interpreter exits (its
        cancel ended the unit), none is, and each gets the unit's error: a statement
        sent now would outlive the process on the server."""
        self._unit_fallbacks += 1
        exiting = self.crew.exiting
        for job in jobs:
            future = job.future
            if future is not None and self._is_abandoned(future):
                self._handback.nudge()
            elif exiting:
                self._handback(future, False, error)
            else:
                self.execute(job)


__all__ = ["Counters", "Crew", "PoolConfig", "Unit", "Worker"]
