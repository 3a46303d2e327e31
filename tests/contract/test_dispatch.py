"""The dispatch's hand-over between a caller and a worker going idle: no job is
ever left in the shared queue while a worker sleeps on its inbox.

The race needs a worker to register as idle just after the caller looked at the
idle stack and to look at the shared queue just before the caller's ``put``. With
the interpreter lock that window is a few bytecodes wide; on a free-threaded build
it lost one call in about 300,000 sequential calls (``tests/stress``). Here the
interleaving is forced: the shared queue lets the worker register as idle just
before it takes the caller's job (a queue subclass: the compiled build calls its
methods as the pure one does).
"""

from queue import SimpleQueue

from adb.dispatch import WAKE, Dispatch, Queued
from adb.jobs import Connect


def job(name):
    """A job standing for a call named ``name`` (it never runs; the compiled build
    checks a job's type)."""
    return Connect(name, None, None, None)


class Sleeper:
    """A worker as the dispatch sees it: an inbox."""

    def __init__(self):
        self.inbox: SimpleQueue[Queued] = SimpleQueue()


class WorkerRegistersBeforeThePut(SimpleQueue):
    """The shared queue, at the moment the caller (who found nobody idle) puts its
    job: ``worker`` has just registered as idle, having looked at this still-empty
    queue, and is going to sleep on its inbox."""

    def __init__(self, dispatch, worker):
        super().__init__()
        self.dispatch, self.worker = dispatch, worker

    def put(self, item, block=True, timeout=None):
        assert self.empty()  # what the worker saw when it looked
        self.dispatch.add_idle(self.worker)
        super().put(item, block, timeout)


def test_a_job_queued_while_a_worker_registers_wakes_it():
    dispatch = Dispatch()
    worker = Sleeper()
    dispatch.queue = WorkerRegistersBeforeThePut(dispatch, worker)
    queued = job("the job")
    dispatch.submit(queued)
    assert dispatch.queue.get_nowait() is queued  # the job waits in the shared queue
    # ... and the sleeping worker was sent to look there
    assert worker.inbox.get_nowait() is WAKE
    assert list(dispatch.idle) == []


def test_an_idle_worker_gets_the_job_itself():
    dispatch = Dispatch()
    first, last = Sleeper(), Sleeper()
    dispatch.add_idle(first)
    dispatch.add_idle(last)
    queued = job("a")
    dispatch.submit(queued)
    assert last.inbox.get_nowait() is queued  # the most recently idle: a hot thread
    assert first.inbox.empty() and dispatch.queue.empty()
    assert dispatch.idle == [first]


def test_with_nobody_idle_the_job_waits_in_the_queue_and_nobody_is_woken():
    dispatch = Dispatch()
    queued = job("a")
    dispatch.submit(queued)
    assert dispatch.queue.get_nowait() is queued
    assert dispatch.idle == []
