"""Admission under ``max_queued`` as pure logic: a list stands in for the pool's
queue (adb's own plumbing, no database behaviour), futures are plain records, and a
job is a real one (the compiled build checks its type) whose future is its name."""

import threading
from typing import Any, cast

import pytest

from adb.admission import Admission
from adb.dispatch import Dispatch
from adb.errors import PoolClosed, QueueFull
from adb.jobs import Connect


class FakePool:
    """The two things Admission asks of the dispatch: submit a job, count the queued."""

    def __init__(self) -> None:
        self.jobs: list[Any] = []

    def submit(self, job: Connect) -> None:
        self.jobs.append(job.future)  # kept by name

    def queued(self) -> int:
        return len(self.jobs)


def job(name: str) -> Connect:
    """A job standing for a call named ``name`` (it never runs)."""
    return Connect(name, None, None, None)


def settle_into(record):
    def settle(future, ok, value):
        record.append((future, ok, value))
    return settle


def make(limit=2, on_full="wait"):
    settled: list[tuple[Any, bool, Any]] = []
    pool = FakePool()
    # Admission uses only the dispatch's submit() and queued(), which FakePool has
    admission = Admission("db-x", limit, on_full, cast(Dispatch, pool), settle_into(settled))
    return admission, pool, settled


def test_calls_queue_while_there_is_room_then_park_in_order():
    admission, pool, _ = make(limit=2)
    for name in "abcde":
        admission.put(job(name))
    assert pool.jobs == ["a", "b"]
    assert admission.parked == 3
    pool.jobs.pop(0)          # a worker took "a"
    admission.after()
    assert pool.jobs == ["b", "c"] and admission.parked == 2
    pool.jobs.clear()
    admission.after()
    assert pool.jobs == ["d", "e"] and admission.parked == 0


def test_a_call_never_overtakes_parked_ones():
    admission, pool, _ = make(limit=1)
    admission.put(job("a"))
    admission.put(job("b"))           # parked
    pool.jobs.clear()          # room now, but "b" waits first
    admission.put(job("c"))
    assert pool.jobs == [] and admission.parked == 2
    admission.after()
    assert pool.jobs == ["b"]


def test_raise_mode_names_the_limit():
    admission, pool, _ = make(limit=1, on_full="raise")
    admission.put(job("a"))
    with pytest.raises(QueueFull, match=r"'db-x' already has 1 calls waiting \(max_queued=1\)"):
        admission.put(job("b"))
    assert pool.jobs == ["a"] and admission.parked == 0


def test_room_waiters_wake_only_when_nothing_is_parked_and_there_is_room():
    admission, pool, settled = make(limit=1)
    admission.wait("w0")
    assert settled == [("w0", True, None)]  # room at once
    admission.put(job("a"))
    admission.put(job("b"))
    admission.wait("w1")
    assert admission.waiting == 1
    pool.jobs.clear()
    admission.after()                        # "b" takes the room: w1 still waits
    assert admission.waiting == 1 and pool.jobs == ["b"]
    pool.jobs.clear()
    admission.after()
    assert settled[-1] == ("w1", True, None) and admission.waiting == 0


def test_room_waiters_also_wait_for_results_not_yet_delivered():
    """Results waiting for the loop thread hold memory too: past ``limit`` of them a
    room waiter waits for a delivery (``after()``), though the queue is empty. Calls
    themselves still queue (``put``): the limit on them is the queue's."""
    admission, pool, settled = make(limit=2)
    undelivered = [2]
    admission.watch_deliveries(lambda: undelivered[0])
    admission.wait("w")
    assert settled == [] and admission.waiting == 1 and pool.jobs == []
    admission.put(job("a"))
    assert pool.jobs == ["a"] and admission.parked == 0
    pool.jobs.clear()
    undelivered[0] = 1      # the loop delivered one: fewer than the limit wait
    admission.after()
    assert settled == [("w", True, None)] and admission.waiting == 0


def test_close_submits_parked_calls_and_fails_waiters():
    admission, pool, settled = make(limit=1)
    for name in "abc":
        admission.put(job(name))
    admission.wait("w")
    admission.close()
    assert pool.jobs == ["a", "b", "c"]    # accepted, so handed to the pool to run
    (future, ok, error), = settled
    assert future == "w" and not ok and isinstance(error, PoolClosed)
    with pytest.raises(PoolClosed, match="db-x"):
        admission.put(job("d"))
    admission.wait("late")
    assert settled[-1][0] == "late" and isinstance(settled[-1][2], PoolClosed)


def test_a_waiter_settled_at_once_may_call_back_in_without_deadlock():
    """Twisted runs a Deferred's callbacks inside callback(): settling must happen
    outside Admission's lock, or the next call from that callback deadlocks."""
    admission, pool, _ = make(limit=5)

    def settle(future, ok, value):
        admission.put(job("from-callback"))
    admission._settle = settle
    done = threading.Event()

    def wait():
        admission.wait("w")
        done.set()
    threading.Thread(target=wait, daemon=True).start()
    assert done.wait(5), "wait() deadlocked on its own lock"
    assert pool.jobs == ["from-callback"]
