"""The engine's calls: every job bound for the shared queue, and what a call that
waited in vain for a worker gets.

``Calls`` owns the Database's limits for a call (the wait for a worker, the
statement's run time), the refusal every call gets once the Database is closing
or its process forked (written only through ``refuse``), and the way onto the
shared queue: straight to the dispatch, or through admission under
``max_queued``, or to an idle worker for ``timeout=0``. The other parts queue
their shared jobs through ``shared`` (a transaction's begin) and check
``check_open``; nothing else reads its attributes.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Optional

from ..admission import Admission
from ..call import Claim, Job
from ..dispatch import Dispatch
from ..errors import PoolTimeout
from ..frontend import F, FrontEnd
from ..jobs import Connect, Hosted, plain_job
from ..op import Op
from ..options import check_statement_timeout, check_timeout
from ..pool import Pool
from ..telemetry import CONNECT, Telemetry, What
from ..txrecord import TxRecord


class Calls(Generic[F]):
    """Calls outside any transaction, and the shared queue's entry for the other parts.

    :param name: the Database's name, for errors.
    :param frontend: how its callers wait.
    :param timeout: the Database's wait for a worker (None: no limit).
    :param statement_timeout: the Database's limit on a statement's run time.
    :param telemetry: its Telemetry, or None.
    :param dispatch: where jobs wait for a worker.
    :param admission: ``max_queued``'s parking, or None.
    :param pool: the workers (asked how many are free, and for the timeout message).
    """

    def __init__(self, name: str, frontend: FrontEnd[F], timeout: Optional[float],
                 statement_timeout: Optional[float], telemetry: Optional[Telemetry],
                 dispatch: Dispatch, admission: Optional[Admission], pool: Pool) -> None:
        self.name = name
        self.frontend = frontend
        self.timeout = timeout
        self.statement_timeout = statement_timeout
        self.telemetry = telemetry
        #: raised by every call once closing, or in a forked child (``refuse``)
        self.refusal: Optional[BaseException] = None
        self._dispatch = dispatch
        self._admission = admission
        self._pool = pool
        self._put: Callable[[Job], None] = dispatch.submit if admission is None else admission.put
        self._new_future = frontend.new_future
        self._returned = frontend.returned
        outcomes = frontend.outcomes
        #: a blocking front-end's wait and give-up (``Outcomes``); None: futures go back
        self._take = None if outcomes is None else outcomes.take
        self._give_up = None if outcomes is None else outcomes.give_up
        #: the common call (the Database's own limits) needs no claim and no trace
        self._plain = timeout is None and telemetry is None

    def refuse(self, error: BaseException) -> None:
        """Every call from now on raises ``error`` (the close, a fork)."""
        self.refusal = error

    def check_open(self) -> None:
        """Raise what every call gets once the Database is closing (or forked)."""
        if self.refusal is not None:
            raise self.refusal

    def standalone(self, op: Op, args: tuple[Any, ...], timeout: Any = None,
                   statement_timeout: Any = None, what: What = "") -> Any:
        """Run ``op`` on a free worker outside any transaction; what the caller gets.
        ``what`` the call is, for its telemetry. ``timeout`` and ``statement_timeout``
        are the caller's, unchecked (``Any``: a compiled build would refuse a wrong
        type with its own TypeError before ``check_timeout`` could name the option)."""
        if self.refusal is not None:
            raise self.refusal
        kind = op.standalone
        assert kind is not None, f"{op} runs only inside a transaction"
        if timeout is None and statement_timeout is None and self._plain:
            # the common call, on the shortest path: no claim, no trace
            future = self._new_future()
            self._put(plain_job(kind, future, self.statement_timeout, op.fn, args))
            return future if self._take is None else self._outcome(future)
        return self.shared(kind, (op.fn, args), what, timeout=timeout,
                           statement_timeout=statement_timeout)

    def _outcome(self, future: Any) -> Any:
        """A blocking front-end's common call: wait for its one ``(ok, value)``; the
        value, or raise the exception. Waited for here rather than in the front-end,
        whose function would be a Python frame (or a generic call) on every call. A
        wait interrupted (Ctrl-C) gives the call up (the front-end's ``give_up``)."""
        take, give_up = self._take, self._give_up
        assert take is not None and give_up is not None  # a blocking front-end's
        try:
            outcome: tuple[bool, Any] = take(future)
        except BaseException:
            give_up(future)
            raise
        ok, value = outcome
        if ok:
            return value
        try:
            raise value
        finally:  # interpreted, the error's traceback holds this frame: no cycle back
            value = None

    def hosted(self, fn: Callable[..., Any], args: tuple[Any, ...], what: What) -> Any:
        """Run ``fn(session, *args)`` on a free worker, ``session`` its ``WorkerSession``
        (``adb.frontend``); what the caller gets (the adbapi drop-in's calls)."""
        self.check_open()
        return self.shared(Hosted, (fn, args), what)

    def connect(self, timeout: Any) -> Any:
        """A worker opens its connection now (or checks the one it has); what
        ``connect()`` gives: None, or the real error (rejected, unreachable)."""
        self.check_open()
        return self.shared(Connect, (), CONNECT, timeout=timeout)

    def shared(self, kind: type[Job], fields: tuple[Any, ...], what: What, *,
               timeout: Any = None, statement_timeout: Any = None,
               tx: Optional[TxRecord] = None, give: Optional[Callable[..., Any]] = None) -> Any:
        """Queue a job of ``kind`` (its own ``fields`` after the four every job has) for a
        free worker, with the Database's limits or the call's own (``timeout``,
        ``statement_timeout``; ``tx``: the transaction it begins, for its telemetry),
        and return what ``give`` (by default the front-end's ``returned``) makes of
        its future."""
        if statement_timeout is None:
            statement_timeout = self.statement_timeout
        else:  # 0: no limit, whatever the Database's
            statement_timeout = check_statement_timeout(statement_timeout)
        put, claim = self._put, None
        timeout = self.timeout if timeout is None else check_timeout(timeout)
        if timeout is not None:
            if timeout:
                claim = Claim()
            else:  # 0: an idle worker takes it now, or it fails now; nothing expires
                put, timeout = self._put_idle, None
        future = self._new_future()
        put(kind(future, claim, statement_timeout, self.trace(what, tx), *fields))
        return (give or self._returned)(future, claim, timeout, self)

    def trace(self, what: What, tx: Optional[TxRecord]) -> Any:
        """A call's trace for its telemetry (None without telemetry)."""
        return None if self.telemetry is None else self.telemetry.trace(what, tx)

    def _put_idle(self, job: Job) -> None:
        """``timeout=0``: hand the job to an idle worker (one waiting for work, or one
        free but for its connect, as a new pool's are), or fail it at once with
        PoolTimeout (it never runs): a call that will not wait for a busy pool."""
        if self._dispatch.submit_idle(job):
            return
        if self._pool.free_workers() > self._dispatch.queued():
            self._put(job)
        else:
            self.frontend.settle(job.future, False, self.pool_timeout(0))

    def expire(self, future: F, claim: Claim, timeout: float) -> None:
        """A call's wait for a worker ran out (loop thread): unless a worker took it
        first, it never runs and fails with PoolTimeout."""
        if claim.take():
            self.frontend.settle(future, False, self.pool_timeout(timeout))

    def pool_timeout(self, timeout: Optional[float]) -> PoolTimeout:
        """The PoolTimeout for a call that waited ``timeout`` s for a worker in vain."""
        stats = self._pool.stats()
        pinned = (f" ({stats['pinned']} of {stats['pool_size']} workers are pinned by "
                  "transactions)" if stats["pinned"] else "")
        return PoolTimeout(f"no worker of the Database {self.name!r} became free within "
                           f"{timeout} s{pinned}; the call did not run")

    def wait_for_room(self) -> Any:
        """What ``wait_for_room`` gives: settled once fewer than ``max_queued`` calls wait
        for a worker and fewer than ``max_queued`` results for the loop (``Admission``)."""
        self.check_open()
        waiter = self._new_future()
        if self._admission is None:
            self.frontend.settle(waiter, True, None)
        else:
            self._admission.wait(waiter)
        return self._returned(waiter, None, None, self)


__all__ = ["Calls"]
