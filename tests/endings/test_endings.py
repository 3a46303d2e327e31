"""Generated schedules of work ended every way a program ends it, checked on the server.

One test per front-end x driver (in this process) and one per front-end (a real
process: SIGINT, SIGTERM, the interpreter's exit, a fork). CI makes one example
each, derandomized: about a minute in all. A long run is one command:

    ADB_ENDINGS_EXAMPLES=40 python -m pytest tests/endings -p no:cacheprovider

(examples per test; random, not derandomized). docs/failures.md has the table of
endings and the last long run.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from benchmarks import privateserver

from . import scenario
from .plans import DRIVERS, FRONTS, IN_SUBPROCESS, in_process_endings, plans, process_plans
from .process import START, run_process

EXAMPLES = int(os.environ.get("ADB_ENDINGS_EXAMPLES", "0"))
#: only these endings (comma-separated), e.g. ADB_ENDINGS_ONLY=close,sigint
ONLY = {e for e in os.environ.get("ADB_ENDINGS_ONLY", "").split(",") if e}
PRIVATE_WHY = privateserver.unavailable("postgresql")


def examples_settings(per_example_s: float) -> settings:
    """Two derandomized examples per test in CI; ``ADB_ENDINGS_EXAMPLES`` random ones."""
    return settings(max_examples=EXAMPLES or 2, derandomize=not EXAMPLES, database=None,
                    deadline=None, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck))


def timeout_for(per_example_s: float) -> int:
    """The test's bound: a minute, and ``per_example_s`` for each of its examples."""
    return int(60 + per_example_s * (EXAMPLES or 2))


class Private:
    """The private PostgreSQL of the restart endings, made on first use."""

    def __init__(self) -> None:
        self.server: Any = None

    def get(self) -> Any:
        if self.server is None:
            self.server = privateserver.create("postgresql")
        return self.server


@pytest.fixture(scope="module")
def private_pg():
    holder = Private()
    yield holder
    if holder.server is not None:
        privateserver.remove(holder.server)


def report(plan, outcome) -> str:
    return (f"{plan}\nfindings:\n  " + "\n  ".join(outcome.findings)
            + f"\nfigures: {outcome.figures}")


@pytest.mark.timeout(timeout_for(40 + scenario.PROGRESS + scenario.LATE))
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("front", FRONTS)
def test_work_ended_in_process(front, driver, tmp_path_factory, private_pg):
    """Every in-process ending of ``front`` on ``driver``: what every client was
    told agrees with the rows, nothing of the work runs on after it, every call
    settles, the threads end, adb's log stays quiet."""
    endings = [e for e in in_process_endings(front, driver, PRIVATE_WHY is None)
               if not ONLY or e in ONLY]
    if not endings:
        pytest.skip(f"no in-process ending of {sorted(ONLY)} applies to {front}")

    @examples_settings(40)
    @given(plan=plans(front, driver, endings))
    def check(plan):
        private = private_pg.get() if plan.ending in ("restart", "crash") else None
        tmp = str(tmp_path_factory.mktemp("endings"))
        outcome = asyncio.run(scenario.run(plan, tmp, private))
        print(plan.ending, plan.moment, outcome.figures)
        assert not outcome.findings, report(plan, outcome)
    check()


@pytest.mark.timeout(timeout_for(START + 90))
@pytest.mark.parametrize("front", FRONTS)
def test_a_program_ended(front, tmp_path_factory):
    """A real program on ``front`` ended by SIGINT, SIGTERM, its own exit or a
    fork: it exits in time, nothing of its work outlives it on the server, and
    what it was told agrees with the rows."""
    if ONLY and not ONLY & set(IN_SUBPROCESS):
        pytest.skip(f"no program ending among {sorted(ONLY)}")

    @examples_settings(90)
    @given(plan=process_plans(front).filter(lambda p: not ONLY or p.ending in ONLY))
    def check(plan):
        tmp = str(tmp_path_factory.mktemp("endings"))
        outcome = run_process(plan, tmp)
        print(plan.ending, plan.driver, plan.moment, outcome.figures)
        assert not outcome.findings, report(plan, outcome)
    check()
