"""The checker's own rule for answers after an ending (``scenario.settle_clients``):
a call unanswered for a whole bound is a finding, told apart as late or lost, while
clients that keep being answered may take longer than the bound in all. The bounds
are shrunk here; the clients are plain tasks issuing units to a real ledger.

Time is a clock of the test's own, which only the rule's waits move: each wait runs
every client up to each answer due within it, in order. What the rule finds is then
decided by the clients' timetable alone, never by how busy the machine is (a loaded CI
had once stalled the loop past the shrunk bound and turned a steady client into a
stuck one)."""

import asyncio
import glob
import heapq
import itertools
import math
import time
from types import SimpleNamespace
from typing import Any

import pytest

from . import process, scenario
from .client import CHILD_HANGS
from .ledger import ACK, Ledger


class Clock:
    """The time ``settle_clients`` reads and the clients sleep on."""

    def __init__(self):
        self.now = 0.0
        self._sleepers: list = []  # heap of (due, order, future)
        self._order = itertools.count()

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._order), future))
        return future

    async def advance(self, seconds):
        """Move to ``now + seconds``, waking each sleeper at its own time and letting
        it run to its next sleep before the clock moves on."""
        end = self.now + seconds
        await asyncio.sleep(0)  # clients not yet started take their first step
        while self._sleepers and self._sleepers[0][0] <= end:
            self.now, _, future = heapq.heappop(self._sleepers)
            if not future.cancelled():
                future.set_result(None)
                await asyncio.sleep(0)  # the woken client runs first: it was woken first
        self.now = end


class Tasks:
    """The part of ``scenario.Clients`` that ``settle_clients`` uses, over tasks."""

    def __init__(self, clock, *coroutines):
        self.clock = clock
        self.futures = [asyncio.ensure_future(c) for c in coroutines]

    async def wait(self, within):
        await self.clock.advance(within)
        return [i for i, f in enumerate(self.futures) if not f.done()]

    def cancel(self):
        for future in self.futures:
            future.cancel()


@pytest.fixture
def clock(monkeypatch):
    """Shrunk bounds, and the rule reading the test's clock."""
    monkeypatch.setattr(scenario, "BOUND", 0.5)
    monkeypatch.setattr(scenario, "PROGRESS", 5.0)
    monkeypatch.setattr(scenario, "LATE", 2.0)
    clock = Clock()
    monkeypatch.setattr(scenario, "time", SimpleNamespace(monotonic=clock.monotonic))
    return clock


async def settle(clock, *clients):
    """What ``settle_clients`` finds of ``clients`` (functions of the ledger and clock)."""
    ledger = Ledger()
    # stand-ins for the plan, the example's environment and its clients
    plan: Any = SimpleNamespace(ending="kill")
    env: Any = SimpleNamespace(site=SimpleNamespace(gate_closed=False), ledger=ledger)
    tasks: Any = Tasks(clock, *(client(ledger, clock) for client in clients))
    out = scenario.Outcome()
    await scenario.settle_clients(plan, env, tasks, out)
    assert all(f.done() for f in tasks.futures), "the rule left a client running"
    return out.findings


def issue(ledger, clock):
    unit = ledger.issue("insert", ["t"])
    unit.issued = clock.now  # the ledger stamps real time; the rule reads the clock's
    return unit


async def answered_after(ledger, clock, seconds):
    unit = issue(ledger, clock)
    await clock.sleep(seconds)
    ledger.settle(unit, ACK)


async def steady(ledger, clock):
    """Forty calls, each answered in 0.05 s: 2 s in all, four times the bound."""
    for _ in range(40):
        await answered_after(ledger, clock, 0.05)


async def never(ledger, clock):
    issue(ledger, clock)
    await clock.sleep(math.inf)


async def test_clients_answered_all_along_may_take_longer_than_the_bound(clock):
    assert await settle(clock, steady, steady) == []
    assert clock.now >= 2.0  # they did take longer than the bound, four times over


async def test_a_call_never_answered_is_found_lost(clock):
    findings = await settle(clock, steady, never)
    assert len(findings) == 1
    assert "1 call(s) waited more than 0.5 s for their answer" in findings[0]
    assert "0 of them had their answer (late), 1 still had none (lost)" in findings[0]


async def test_a_call_answered_past_the_bound_is_found_late(clock):
    findings = await settle(clock, steady, lambda ledger, clock: answered_after(ledger, clock, 1.0))
    assert len(findings) == 1
    assert "1 call(s) waited more than 0.5 s" in findings[0]
    assert "1 of them had their answer (late), 0 still had none (lost)" in findings[0]


async def test_a_call_answered_just_within_the_bound_is_no_finding(clock):
    assert await settle(clock, steady, lambda ledger, clock: answered_after(ledger, clock, 0.45)) == []


async def test_clients_still_going_past_progress_are_found(clock, monkeypatch):
    monkeypatch.setattr(scenario, "PROGRESS", 1.0)
    findings = await settle(clock, steady)
    assert len(findings) == 1 and "still going 1.0 s after the ending" in findings[0]


def test_a_forked_child_that_never_exits_is_a_finding_and_ends_with_the_program(
        monkeypatch, tmp_path):
    """The child holds the program's stderr open; the run still ends, says so, and
    leaves no child behind (``process.end_group``)."""
    monkeypatch.setenv(CHILD_HANGS, "1")
    monkeypatch.setattr(process, "EXIT", 3.0)
    monkeypatch.setattr(process, "MOMENT", 1.0)
    plan = scenario.Plan(front="sync", driver="sqlite", ending="fork", clients=(("standalone", "burst"),),
                pool_size=2, pipeline=None, autobatch=None, moment=("acks", 1))
    outcome = process.run_process(plan, str(tmp_path))
    assert any("the forked child had not exited" in f for f in outcome.findings), outcome
    group = outcome.figures.get("group")
    assert group is not None
    # nothing of the program's group runs on: killed, a zombie at most until reaped
    # (the bound only guards against a hang: a SIGKILLed process cannot stay)
    deadline = time.monotonic() + 30
    while _running_in_group(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running_in_group(group)


def _running_in_group(group: int) -> list[int]:
    """The processes of process group ``group`` that are not zombies (Linux /proc)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                after_name = f.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        state, pgrp = after_name[0], int(after_name[2])
        if pgrp == group and state != "Z":
            found.append(int(stat.split("/")[2]))
    return found
