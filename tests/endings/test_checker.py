"""The checker's own rule for answers after an ending (``scenario.settle_clients``):
a call unanswered for a whole bound is a finding, told apart as late or lost, while
clients that keep being answered may take longer than the bound in all. The bounds
are shrunk here; the clients are plain tasks issuing units to a real ledger."""

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from . import scenario
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
