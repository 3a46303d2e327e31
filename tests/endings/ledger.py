"""What every client was told, and the check of it against the rows on the server.

A *unit* is one thing the application did and got one answer for: a standalone
insert, a transaction (block, explicit, ``runInteraction``, ``runTransaction``), a
``runMany``, a ``copy_in``, a stream (no tokens: it only has to settle). Each unit's
tokens are registered before it is issued and its outcome when the answer comes:

- ``ack``: it returned: every token of it is in the table exactly once;
- ``not_run``: it failed saying it did not run (``may_have_run`` False,
  ``PoolClosed``, ``PoolTimeout``, ``TransactionError``, a transaction whose body
  failed and so never committed): none of its tokens is there;
- ``maybe``: it failed saying it may have run (``may_have_run`` True, a caller who
  gave up: cancelled, interrupted): all of its tokens or none, each at most once;
- ``unknown``: no answer came (a process that died, a call a closed drop-in pool
  dropped): as ``maybe``, except for the calls the rules say never ran (``dropped``:
  absent);
- ``never``: tokens of a savepoint the client rolled back: never in the table.

Units are atomic: a transaction's tokens are all there or none. Tokens found that
no unit issued are reported too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import trio
from twisted.internet import defer

from adb import errors

ACK, NOT_RUN, MAYBE, UNKNOWN, NEVER, DROPPED = "ack", "not_run", "maybe", "unknown", "never", "dropped"
#: the outcomes a unit ends with (UNKNOWN: none yet)
SETTLED = (ACK, NOT_RUN, MAYBE, DROPPED)
#: what a caller gets when it gave up on a call (its own cancel, Ctrl-C, SystemExit,
#: its coroutine closed by a program shutting down)
GAVE_UP = (asyncio.CancelledError, concurrent.futures.CancelledError, defer.CancelledError,
           trio.Cancelled, KeyboardInterrupt, SystemExit, GeneratorExit)
#: adb's errors that say the call never ran
NEVER_RAN = (errors.PoolClosed, errors.PoolTimeout, errors.QueueFull, errors.TransactionError)


def verdict(exc: Optional[BaseException]) -> tuple[str, Optional[str]]:
    """The outcome a call's answer gives, and what was unexpected about it (None:
    nothing). ``exc`` is what the call raised (None: it returned)."""
    if exc is None:
        return ACK, None
    if isinstance(exc, GAVE_UP):
        return MAYBE, None
    if isinstance(exc, (errors.ConnectionLost, errors.StatementTimeout)):
        return (MAYBE if exc.may_have_run else NOT_RUN), None
    if isinstance(exc, NEVER_RAN):
        return NOT_RUN, None
    # anything else: the application cannot tell; the check says which it was
    return MAYBE, f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:200]}"


@dataclass
class Unit:
    id: int
    kind: str
    tokens: list[str]
    outcome: str = UNKNOWN
    error: Optional[str] = None
    never: list[str] = field(default_factory=list)  # tokens of rolled-back savepoints
    forced: bool = False  # settled by the test, not by an answer: later answers ignored
    issued: float = field(default_factory=time.monotonic)
    answered: Optional[float] = None  # when it settled (time.monotonic())


class Ledger:
    """Every unit of one example, filled from any thread."""

    def __init__(self) -> None:
        self.units: dict[int, Unit] = {}
        self.unexpected: list[str] = []
        self._ids = itertools.count()
        self._changed = threading.Condition()

    def issue(self, kind: str, tokens: list[str], unit_id: Optional[int] = None) -> Unit:
        """Register a unit before it is issued."""
        unit = Unit(next(self._ids) if unit_id is None else unit_id, kind, list(tokens))
        with self._changed:
            self.units[unit.id] = unit
        return unit

    def settle(self, unit: Unit, outcome: str, error: Optional[str] = None) -> None:
        with self._changed:
            if unit.forced:
                return
            if unit.outcome != UNKNOWN:
                self.unexpected.append(f"{unit.kind} #{unit.id} settled twice: "
                                       f"{unit.outcome}, then {outcome}")
                return
            unit.outcome, unit.error, unit.answered = outcome, error, time.monotonic()
            if error is not None:
                self.unexpected.append(f"{unit.kind}: {error}")
            self._changed.notify_all()

    def force(self, unit: Unit, outcome: str) -> None:
        """Settle ``unit`` for a call that got no answer (the test gave up waiting):
        what the give-up makes of it later is no answer of adb's."""
        with self._changed:
            unit.outcome, unit.forced = outcome, True
            self._changed.notify_all()

    def answer(self, unit: Unit, exc: Optional[BaseException]) -> None:
        """Settle ``unit`` with the outcome a call's answer (``exc``) gives."""
        outcome, odd = verdict(exc)
        self.settle(unit, outcome, odd)

    def never(self, unit: Unit, tokens: list[str]) -> None:
        """``tokens`` were written in ``unit`` and undone by a savepoint rollback."""
        with self._changed:
            unit.never.extend(tokens)
            unit.tokens = [t for t in unit.tokens if t not in tokens]

    def poke(self) -> None:
        """Wake whoever waits in ``wait_for`` (a client ended)."""
        with self._changed:
            self._changed.notify_all()

    def count(self, *outcomes: str, but: tuple[str, ...] = ()) -> int:
        """Units with tokens settled with one of ``outcomes`` (but none of kind ``but``)."""
        with self._changed:
            return sum(u.outcome in outcomes for u in self.units.values()
                       if u.tokens and u.kind not in but)

    def wait_for(self, predicate: Callable[[], bool], within: float) -> bool:
        """Block until ``predicate()`` (asked each time a unit settles) holds."""
        deadline = time.monotonic() + within
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def slowest_since(self, moment: float) -> Optional[tuple[float, str]]:
        """The longest wait for an answer after ``moment`` (a unit issued before it
        counts from it): seconds and the unit, or None when none was answered."""
        with self._changed:
            waits = [(u.answered - max(u.issued, moment), f"{u.kind} #{u.id}")
                     for u in self.units.values() if u.answered is not None and u.answered > moment]
        return max(waits, default=None)

    def unsettled(self) -> list[Unit]:
        with self._changed:
            return [u for u in self.units.values() if u.outcome == UNKNOWN]

    def check(self, present: list[str], allow_unknown: bool) -> dict[str, Any]:
        """Compare with the tokens in the table; a list of findings (empty: it held)
        and the figures."""
        counts: dict[str, int] = {}
        for token in present:
            counts[token] = counts.get(token, 0) + 1
        findings: list[str] = list(self.unexpected)
        issued: set[str] = set()
        figures = {ACK: 0, NOT_RUN: 0, MAYBE: 0, UNKNOWN: 0, DROPPED: 0, "rows": len(present),
                   "maybe_ran": 0}
        for unit in self.units.values():
            issued.update(unit.tokens, unit.never)
            if not unit.tokens and not unit.never:
                if unit.outcome == UNKNOWN and not allow_unknown:
                    findings.append(f"{unit.kind} #{unit.id} never settled")
                continue
            figures[unit.outcome] += 1
            there = [t for t in unit.tokens if t in counts]
            doubled = [t for t in there if counts[t] > 1]
            what = f"{unit.kind} #{unit.id} ({unit.outcome}{': ' + unit.error if unit.error else ''})"
            if doubled:
                findings.append(f"{what}: {len(doubled)} token(s) written more than once")
            if unit.outcome == ACK and len(there) < len(unit.tokens):
                findings.append(f"{what} was acknowledged but {len(unit.tokens) - len(there)} "
                                f"of its {len(unit.tokens)} row(s) are missing")
            if unit.outcome in (NOT_RUN, DROPPED) and there:
                findings.append(f"{what} said it did not run, but {len(there)} of its "
                                f"{len(unit.tokens)} row(s) are there")
            if unit.outcome in (MAYBE, UNKNOWN):
                if there and len(there) < len(unit.tokens):
                    findings.append(f"{what}: only {len(there)} of its {len(unit.tokens)} rows "
                                    "are there (a unit is all or nothing)")
                figures["maybe_ran"] += bool(there)
                if unit.outcome == UNKNOWN and not allow_unknown:
                    findings.append(f"{what} never settled")
            undone = [t for t in unit.never if t in counts]
            if undone:
                findings.append(f"{what}: {len(undone)} row(s) of a rolled-back savepoint are there")
        stray = set(counts) - issued
        if stray:
            findings.append(f"{len(stray)} row(s) nobody issued: {sorted(stray)[:3]}")
        return {"findings": findings, **figures}
