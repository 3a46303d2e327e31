"""The generator: hypothesis strategies for (front-end, driver, work, options,
ending, moment), and which ending applies where (docs/failures.md has the table).

Every front-end x driver pair is a test of its own, so a brief run covers all
of them; within a pair the ending list is rotated by the pair's position, so the
first example of each pair (the one a one-example run makes) is a different
ending across pairs.
"""

from __future__ import annotations

from typing import Any, Optional

from hypothesis import strategies as st

from .scenario import Plan
from .work import DROPIN_KINDS, KINDS

FRONTS = ("asyncio", "tornado", "twisted", "sync", "dropin", "trio")
DRIVERS = ("sqlite", "postgresql", "psycopg", "mysql", "mysqldb")
#: kinds of work whose statements wait at the gate (copy_in and streams do not)
GATED = set(KINDS) - {"copy", "stream"}
#: kinds of work with a pause point at the end of a transaction's body (Env.hold)
HOLDING = {"block", "explicit", "run_transaction", "savepoint", "abandon"}

#: the endings fired in this process: ending -> the front-ends it applies to
IN_PROCESS = {
    "close": FRONTS,
    "close_start": ("dropin",),  # adbapi's start() after close()
    "cancel": ("asyncio", "tornado", "twisted", "dropin", "trio"),  # adb.sync: SIGINT, below
    "timeout": ("asyncio", "tornado", "twisted", "sync", "trio"),  # the drop-in takes no timeout=
    "statement_timeout": ("asyncio", "tornado", "twisted", "sync", "trio"),
    "kill": FRONTS,
    "restart": FRONTS,  # a private PostgreSQL, restarted -m fast
    "crash": FRONTS,  # the same, -m immediate
    "drop": ("asyncio", "tornado", "twisted", "sync", "trio"),
}
#: endings that need a server / a private PostgreSQL
SERVER_ONLY = {"kill", "restart", "crash"}
PRIVATE = {"restart", "crash"}
#: the endings of a real process (tests/endings/client.py): every front-end
IN_SUBPROCESS = ("sigint", "sigterm", "exit", "fork")


def in_process_endings(front: str, driver: str, private: bool) -> list[str]:
    """The in-process endings of ``front`` on ``driver`` (``private``: a private
    PostgreSQL can be made here)."""
    endings = []
    for ending, fronts in IN_PROCESS.items():
        if front not in fronts:
            continue
        if ending in SERVER_ONLY and driver == "sqlite":
            continue
        if ending in PRIVATE and (driver not in ("postgresql", "psycopg") or not private):
            continue
        endings.append(ending)
    return endings


def rotation(front: str, driver: str) -> int:
    return FRONTS.index(front) * len(DRIVERS) + DRIVERS.index(driver)


def turned(draw: st.DrawFn, options: list[Any], shift: int) -> Any:
    """One of ``options``, drawn, turned by ``shift``: the simplest draw (the one a
    one-example run makes) gives a different option on each front-end x driver."""
    return options[(draw(st.integers(0, len(options) - 1)) + shift) % len(options)]


@st.composite
def plans(draw: st.DrawFn, front: str, driver: str, endings: list[str]) -> Plan:
    """One in-process example on ``front`` x ``driver``. Every choice is drawn so
    that the simplest example is a busy one (several clients with mixed work, the
    ending in the middle of it), since CI runs few examples."""
    shift = rotation(front, driver)
    return draw(plan_of(front, driver, turned(draw, endings, shift), shift))


@st.composite
def process_plans(draw: st.DrawFn, front: str) -> Plan:
    """One example of a real process on ``front``: the driver and the ending turn
    with the front-end, so that CI's few examples cover each."""
    shift = FRONTS.index(front)
    driver = turned(draw, list(DRIVERS), shift)
    ending = turned(draw, list(IN_SUBPROCESS), shift + 1)
    return draw(plan_of(front, driver, ending, shift + 1))


@st.composite
def plan_of(draw: st.DrawFn, front: str, driver: str, ending: str, shift: int) -> Plan:
    """The work, options and moment of an example with this ending."""
    kinds = list(DROPIN_KINDS if front == "dropin" else KINDS)
    order = draw(st.permutations(kinds))
    sizes = draw(st.lists(st.integers(3, 6), min_size=2, max_size=4))
    clients = [tuple((order[c:] + order[:c])[:size]) if c % 2 == 0 else
               tuple((order[::-1][c:] + order[::-1][:c])[:size]) for c, size in enumerate(sizes)]
    clients = [tuple(draw(st.permutations(c))) for c in clients]
    if front == "sync" and ending in ("sigint", "sigterm", "exit"):
        clients = clients[:1]  # a script: one client, in the main thread
    pool_size = 1 + (draw(st.integers(0, 3)) + 1 + shift) % 4
    pipeline: Optional[bool] = None if front == "dropin" else turned(
        draw, [None, True, False], shift)
    autobatch = turned(draw, [None, 4, None, 16], shift // 3)
    gated = [c for c in clients if GATED & set(c)]
    server = driver != "sqlite"
    if ending == "timeout" and server:
        # every worker held at the gate, and a client more, whose calls must queue
        pool_size = max(1, min(pool_size, len(gated)))
        clients.append(("burst",) if front != "sync" else ("standalone",) * 3)
        gated = [c for c in clients if GATED & set(c)]
    must_run = ending in ("timeout", "statement_timeout")
    holds = sum(kind in HOLDING for c in clients for kind in c)
    way = "running" if must_run else turned(draw, ["hold", "running", "acks"], shift)
    if server and gated and way == "running":
        most = max(1, min(pool_size, len(gated)))
        moment = ("running", most - draw(st.integers(0, most - 1)))
    elif holds and way == "hold":
        moment = ("hold", 1 + draw(st.integers(0, holds - 1)))
    else:
        half = max(0, sum(len(c) for c in clients) // 2)
        moment = ("acks", half - draw(st.integers(0, half)))
    limit = turned(draw, [0.2, 0.5] if ending == "statement_timeout"
                   else [0.05, 0.2, 0.5], shift)
    graceful = front != "sync" or bool(turned(draw, [False, True], shift // 2))
    return Plan(front, driver, ending, tuple(clients), pool_size, pipeline, autobatch,
                moment, limit, graceful)
