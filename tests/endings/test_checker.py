"""The checker's own rule for answers after an ending (``scenario.settle_clients``):
a call unanswered for a whole bound is a finding, told apart as late or lost, while
clients that keep being answered may take longer than the bound in all. The bounds
are shrunk here; the clients are plain tasks issuing units to a real ledger."""

import asyncio
import glob
import time
from types import SimpleNamespace
from typing import Any

import pytest

from . import process, scenario
from .client import CHILD_HANGS
from .ledger import ACK, Ledger


class Tasks:
    """The part of ``scenario.Clients`` that ``settle_clients`` uses, over tasks."""

    def __init__(self, *coroutines):
        self.futures = [asyncio.ensure_future(c) for c in coroutines]

    async def wait(self, within):
        await asyncio.wait(self.futures, timeout=within)
        return [i for i, f in enumerate(self.futures) if not f.done()]

    def cancel(self):
        for future in self.futures:
            future.cancel()


@pytest.fixture
def shrunk(monkeypatch):
    monkeypatch.setattr(scenario, "BOUND", 0.5)
    monkeypatch.setattr(scenario, "PROGRESS", 5.0)
    monkeypatch.setattr(scenario, "LATE", 2.0)


async def settle(*clients):
    """What ``settle_clients`` finds of ``clients`` (functions of the ledger)."""
    ledger = Ledger()
    # stand-ins for the plan, the example's environment and its clients
    plan: Any = SimpleNamespace(ending="kill")
    env: Any = SimpleNamespace(site=SimpleNamespace(gate_closed=False), ledger=ledger)
    tasks: Any = Tasks(*(client(ledger) for client in clients))
    out = scenario.Outcome()
    await scenario.settle_clients(plan, env, tasks, out)
    return out.findings


async def answered_after(ledger, seconds):
    unit = ledger.issue("insert", ["t"])
    await asyncio.sleep(seconds)
    ledger.settle(unit, ACK)


async def steady(ledger):
    """Forty calls, each answered in 0.05 s: 2 s in all, four times the bound."""
    for _ in range(40):
        await answered_after(ledger, 0.05)


async def never(ledger):
    ledger.issue("insert", ["t"])
    await asyncio.Event().wait()


async def test_clients_answered_all_along_may_take_longer_than_the_bound(shrunk):
    assert await settle(steady, steady) == []


async def test_a_call_never_answered_is_found_lost(shrunk):
    findings = await settle(steady, never)
    assert len(findings) == 1
    assert "1 call(s) waited more than 0.5 s for their answer" in findings[0]
    assert "0 of them had their answer (late), 1 still had none (lost)" in findings[0]


async def test_a_call_answered_past_the_bound_is_found_late(shrunk):
    findings = await settle(steady, lambda ledger: answered_after(ledger, 1.0))
    assert len(findings) == 1
    assert "1 call(s) waited more than 0.5 s" in findings[0]
    assert "1 of them had their answer (late), 0 still had none (lost)" in findings[0]


async def test_clients_still_going_past_progress_are_found(shrunk, monkeypatch):
    monkeypatch.setattr(scenario, "PROGRESS", 1.0)
    findings = await settle(steady)
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
