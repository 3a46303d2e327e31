"""The dispatch's hand-over between a caller and a worker going idle: no job is
ever left in the shared queue while a worker sleeps on its inbox.

The race needs a worker to register as idle just after the caller looked at the
idle stack and to look at the shared queue just before the caller's ``put``. With
the interpreter lock that window is a few bytecodes wide; on a free-threaded build
it lost one call in about 300,000 sequential calls (``tests/stress``). Here the
interleaving is forced: the idle stack answers "empty" to the caller's first look
and has the worker on it by the time the job is queued.
"""

from queue import SimpleQueue

from adb.dispatch import WAKE, Dispatch, Queued


class Sleeper:
    """A worker as the dispatch sees it: an inbox."""

    def __init__(self):
        self.inbox: SimpleQueue[Queued] = SimpleQueue()


class RegistersAfterTheFirstLook(list):
    """An idle stack whose first truth test answers from before ``worker``
    registered, and which holds it from then on: the worker registered, looked at
    the still-empty shared queue and went to sleep, all between the caller's look
    and its ``put``."""

    def __init__(self, worker):
        super().__init__()
        self.worker = worker
        self.looks = 0

    def __bool__(self):
        self.looks += 1
        if self.looks == 1:
            self.append(self.worker)
            return False
        return len(self) > 0


def test_a_job_queued_while_a_worker_registers_wakes_it():
    dispatch = Dispatch()
    worker = Sleeper()
    assert dispatch.queue.empty()  # what the worker saw when it looked
    dispatch.idle = RegistersAfterTheFirstLook(worker)
    job = ("the job",)
    dispatch.submit(job)
    assert dispatch.queue.get_nowait() == job  # the job waits in the shared queue
    # ... and the sleeping worker was sent to look there
    assert worker.inbox.get_nowait() is WAKE
    assert list(dispatch.idle) == []


def test_an_idle_worker_gets_the_job_itself():
    dispatch = Dispatch()
    first, last = Sleeper(), Sleeper()
    dispatch.add_idle(first)
    dispatch.add_idle(last)
    dispatch.submit(("a",))
    assert last.inbox.get_nowait() == ("a",)  # the most recently idle: a hot thread
    assert first.inbox.empty() and dispatch.queue.empty()
    assert dispatch.idle == [first]


def test_with_nobody_idle_the_job_waits_in_the_queue_and_nobody_is_woken():
    dispatch = Dispatch()
    dispatch.submit(("a",))
    assert dispatch.queue.get_nowait() == ("a",)
    assert dispatch.idle == []
