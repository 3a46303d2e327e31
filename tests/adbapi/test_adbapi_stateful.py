"""Twisted's adbapi and adb's drop-in under random sequences of calls (hypothesis).

A ``RuleBasedStateMachine`` drives the two ``ConnectionPool`` classes side by side,
each on a real reactor (Twisted's asyncio reactor on the machine's own loop) with
the same ``cp_min``/``cp_max``, on sqlite3, psycopg2 (PostgreSQL) and PyMySQL
(MariaDB): ``runQuery``, ``runOperation``, ``runInteraction`` and
``runWithConnection``, one after another, chained from each other's callbacks, and
concurrently, touching state that lives on a connection (a session variable, a
temporary table, the last generated key) and state that does not (a table's rows).

What the two must agree on is checked exactly: each call's result or PEP 249
error where it does not depend on the connection serving it, and the rows
committed. What depends on the connection (which one serves a call: adbapi
rotates over its threads, the drop-in keeps sequential calls on the worker that
just finished, docs/adbapi.md "What differs") is checked against a model of
each connection's session: every connection is numbered by ``cp_openfun`` in a
temporary table, every call reports the number of the connection it ran on, and
what it saw of the session must be what that connection's earlier calls left
there, on both sides. With ``cp_max=1`` (one connection) the records must be
equal outright. On the drop-in, calls made one after another must land on one
connection every time.

CI runs a few examples; ``ADB_STATEFUL_EXAMPLES=N`` runs N per driver
(docs/failures.md).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from twisted.internet.asyncioreactor import AsyncioSelectorReactor
from twisted.internet.defer import Deferred

from ..conftest import require_server
from .test_adbapi_differential import KINDS, SIDES, Env

EXAMPLES = int(os.environ.get("ADB_STATEFUL_EXAMPLES", "0"))
VIA = st.sampled_from(["interaction", "connection"])
READ_VIA = st.sampled_from(["query", "interaction", "connection"])
CALLS = st.lists(st.sampled_from(["query", "operation", "interaction", "connection"]),
                 min_size=2, max_size=6)


@dataclass
class Side:
    """One side's pool, its tables, and what the machine saw of it."""

    env: Env
    pool: Any = None
    reactor: Any = None
    numbers: Any = field(default_factory=itertools.count)
    sessions: dict[int, dict[str, Any]] = field(default_factory=dict)  # connection -> state
    last_who: Optional[int] = None  # the connection of the last call made alone
    whos: list[int] = field(default_factory=list)  # every connection a call ran on
    record: list[Any] = field(default_factory=list)  # what the application saw, in order
    noted: dict[str, Any] = field(default_factory=dict)  # what a function noted before failing

    def session(self, who: int) -> dict[str, Any]:
        return self.sessions.setdefault(who, {"var": None, "temp": None})


class Dialect:
    """The SQL of one driver for the session state the machine touches."""

    def __init__(self, env: Env) -> None:
        self.kind = env.kind
        self.p = env.p
        self.table = env.table

    def who(self) -> str:
        return "(select n from adb_who)"

    def temporary(self, name: str, if_not_exists: bool = False) -> str:
        """A temporary table of one integer; on SQLite without a rowid, so that
        inserting into it leaves ``last_insert_rowid()`` alone."""
        exists = "if not exists " if if_not_exists else ""
        if self.kind == "sqlite":
            return f"create temporary table {exists}{name} (n integer primary key) without rowid"
        return f"create temporary table {exists}{name} (n integer)"

    def temporary_insert(self) -> str:
        """One more row in ``adb_tmp`` (on SQLite, a key of its own)."""
        if self.kind == "sqlite":
            return "insert into adb_tmp (n) values ((select count(*) from adb_tmp))"
        return "insert into adb_tmp (n) values (1)"

    def set_var(self, k: int) -> str:
        return {"sqlite": f"pragma cache_size = {-1000 - k}",
                "postgresql": f"set adb.v = '{k}'",
                "mysql": f"set @adb_v = {k}"}[self.kind]

    def var(self) -> str:
        return {"sqlite": "(select cache_size from pragma_cache_size())",
                "postgresql": "current_setting('adb.v', true)",
                "mysql": "@adb_v"}[self.kind]

    def var_value(self, k: Optional[int]) -> Any:
        """What ``var()`` reads after ``set_var(k)`` (None: never set)."""
        if self.kind == "sqlite":
            return -2000 if k is None else -1000 - k
        if self.kind == "postgresql":
            return None if k is None else str(k)
        return k

    def last_id(self) -> str:
        return {"sqlite": "last_insert_rowid()", "postgresql": "lastval()",
                "mysql": "last_insert_id()"}[self.kind]

    def create_rows(self) -> str:
        key = {"sqlite": "integer primary key", "postgresql": "serial primary key",
               "mysql": "integer auto_increment primary key"}[self.kind]
        return f"create table {self.table} (id {key}, who integer, v integer)"

    def insert(self, v: int) -> str:
        return f"insert into {self.table} (who, v) values ({self.who()}, {v})"


def openfun(side: Side, dialect: Dialect) -> Callable[[Any], None]:
    """cp_openfun: number each new connection in a temporary table of its own."""
    def opened(conn: Any) -> None:
        cursor = conn.cursor()
        cursor.execute(dialect.temporary("adb_who"))
        cursor.execute(f"insert into adb_who values ({next(side.numbers)})")
        cursor.close()
        conn.commit()
    return opened


def run_sql(cursor: Any, sql: str) -> list[tuple[Any, ...]]:
    cursor.execute(sql)
    return [tuple(row) for row in cursor.fetchall()] if cursor.description else []


class AdbapiMachine(RuleBasedStateMachine):
    """The same calls on stock adbapi and on the drop-in; see the module doc."""

    kind = "sqlite"
    tmp_path: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.sides = {name: Side(Env(self.kind, self.tmp_path, name)) for name in SIDES}
        self.dialect = Dialect(self.sides["adbapi"].env)
        self.values = itertools.count(1)
        self.one_connection = False

    # -- running ---------------------------------------------------------------------

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, 60))

    async def outcome(self, side: Side, d: Deferred) -> Any:
        """What a call fired with, or {"raised": its PEP 249 class}."""
        try:
            return await d.asFuture(self.loop)
        except Exception as exc:
            return {"raised": side.env.error(exc)}

    def both(self, call: Callable[[Side], Any]) -> dict[str, Any]:
        """``call(side)`` (a coroutine) on each side, one after the other."""
        return {name: self.run(call(side)) for name, side in self.sides.items()}

    # -- what the functions given to the pool do ---------------------------------------

    def in_pool(self, side: Side, via: str, steps: Callable[[Any], Any]) -> Deferred:
        """``steps(cursor)`` in runInteraction or runWithConnection (a cursor of its own)."""
        if via == "interaction":
            return side.pool.runInteraction(steps)

        def on_connection(conn: Any) -> Any:
            cursor = conn.cursor()
            try:
                return steps(cursor)
            finally:
                cursor.close()
        return side.pool.runWithConnection(on_connection)

    def noting_who(self, side: Side, then: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Steps that note the connection's number first (kept if ``then`` fails)."""
        def steps(cursor: Any) -> Any:
            side.noted["who"] = who = run_sql(cursor, f"select {self.dialect.who()}")[0][0]
            return [who, then(cursor)]
        return steps

    def call(self, side: Side, via: str, sql: str) -> Deferred:
        """``select <who>, <sql>`` through ``via``: a Deferred of [who, value]."""
        d = self.dialect
        if via == "query":
            return side.pool.runQuery(f"select {d.who()}, {sql}").addCallback(
                lambda rows: list(rows[0]))
        return self.in_pool(side, via, self.noting_who(
            side, lambda cursor: run_sql(cursor, f"select {sql}")[0][0]))

    # -- set-up ----------------------------------------------------------------------

    @initialize(cp=st.sampled_from([(1, 1), (1, 2), (2, 2), (1, 3), (3, 3)]))
    def start(self, cp: tuple[int, int]) -> None:
        cp_min, cp_max = cp
        self.one_connection = cp_max == 1

        async def start(side: Side) -> None:
            side.reactor = AsyncioSelectorReactor(self.loop)
            side.env.reactor = side.reactor
            side.env.outside(self.dialect.create_rows().replace(self.dialect.table, side.env.table))
            side.pool = side.env.pool(cp_min=cp_min, cp_max=cp_max, cp_openfun=openfun(side, self.dialect))
        self.both(start)

    def teardown(self) -> None:
        async def stop(side: Side) -> None:
            if side.pool is not None:
                side.pool.close()
            side.env.drop_table()
            if side.reactor is not None:
                side.reactor.removeReader(side.reactor.waker)
                side.reactor.waker.connectionLost(None)
        try:
            self.both(stop)
        finally:
            self.loop.close()

    # -- checking --------------------------------------------------------------------

    def saw(self, side: Side, who: Optional[int], alone: bool, what: Any) -> None:
        """Note that a call ran on connection ``who`` (None: it failed before saying)
        and saw ``what``; on the drop-in, a call made alone runs where the last one did."""
        if who is not None:
            side.whos.append(who)
            if alone and side.env.side == "adb" and side.last_who is not None:
                assert who == side.last_who, "the drop-in moved a sequential call to another connection"
            side.last_who = who if alone else None
        elif not alone:
            side.last_who = None
        side.record.append(what)

    def agree(self, outcomes: dict[str, Any]) -> None:
        """Where the outcome does not depend on the connection, the sides agree."""
        assert outcomes["adbapi"] == outcomes["adb"]

    # -- the rules -------------------------------------------------------------------

    @rule(k=st.integers(0, 99), via=VIA)
    def set_variable(self, k: int, via: str) -> None:
        """SET a session variable; the connection that ran it keeps it."""
        def run(side: Side) -> Any:
            d = self.in_pool(side, via, self.noting_who(
                side, lambda cursor: run_sql(cursor, self.dialect.set_var(k))))
            return self.outcome(side, d)
        for name, (who, _) in self.both(run).items():
            side = self.sides[name]
            side.session(who)["var"] = k
            self.saw(side, who, True, ["set", k])

    @rule(via=READ_VIA)
    def read_variable(self, via: str) -> None:
        """Read the session variable: what this connection's last SET left, or the default."""
        outcomes = self.both(lambda side: self.outcome(side, self.call(side, via, self.dialect.var())))
        for name, (who, value) in outcomes.items():
            side = self.sides[name]
            assert value == self.dialect.var_value(side.session(who)["var"]), (name, who)
            self.saw(side, who, True, ["var", value])

    @rule(via=VIA)
    def create_temporary(self, via: str) -> None:
        """A temporary table on the connection that runs this (if it has none yet)."""
        sql = self.dialect.temporary("adb_tmp", if_not_exists=True)
        outcomes = self.both(lambda side: self.outcome(side, self.in_pool(
            side, via, self.noting_who(side, lambda cursor: run_sql(cursor, sql)))))
        for name, (who, _) in outcomes.items():
            side = self.sides[name]
            state = side.session(who)
            state["temp"] = state["temp"] or 0
            self.saw(side, who, True, ["temp table"])

    @rule(via=VIA)
    def use_temporary(self, via: str) -> None:
        """Insert into the temporary table and count its rows: the driver's error
        where this connection has none."""
        def steps(cursor: Any) -> Any:
            cursor.execute(self.dialect.temporary_insert())
            return run_sql(cursor, "select count(*) from adb_tmp")[0][0]

        def run(side: Side) -> Any:
            side.noted.clear()
            return self.outcome(side, self.in_pool(side, via, self.noting_who(side, steps)))
        outcomes = self.both(run)
        errors = {}
        for name, outcome in outcomes.items():
            side = self.sides[name]
            who = side.noted["who"]
            state = side.session(who)
            if state["temp"] is None:
                assert isinstance(outcome, dict), (name, outcome)
                errors[name] = outcome
            else:
                state["temp"] += 1
                assert outcome == [who, state["temp"]], (name, outcome, state)
            self.saw(side, who, True, ["temp rows", outcome])
        if len(errors) == 2:
            self.agree(errors)

    @rule(via=st.sampled_from(["operation", "interaction", "connection"]))
    def insert_row(self, via: str) -> None:
        """Insert a row (its generated key; the row notes its connection's number)."""
        v = next(self.values)

        def run(side: Side) -> Any:
            sql = self.dialect.insert(v).replace(self.dialect.table, side.env.table)
            if via == "operation":
                return self.outcome(side, side.pool.runOperation(sql))
            return self.outcome(side, self.in_pool(side, via, lambda cursor: run_sql(cursor, sql)))
        self.agree({name: outcome if via == "operation" else None
                    for name, outcome in self.both(run).items()})
        for side in self.sides.values():
            self.saw(side, self.row_who(side, v), True, ["inserted", v])

    @rule(via=READ_VIA)
    def last_key(self, via: str) -> None:
        """``lastval()``/``LAST_INSERT_ID()``/``last_insert_rowid()`` in a call of its
        own: the key of this connection's last insert (PostgreSQL: an error before
        its first)."""
        def run(side: Side) -> Any:
            side.noted.clear()
            return self.outcome(side, self.call(side, via, self.dialect.last_id()))
        for name, outcome in self.both(run).items():
            side = self.sides[name]
            who = outcome[0] if isinstance(outcome, list) else side.noted.get("who")
            self.check_last_key(side, who, outcome)
            self.saw(side, who, True, ["last key", outcome])

    @rule(calls=CALLS)
    def chain(self, calls: list[str]) -> None:
        """Calls made each from the previous one's callback (an insert, then reads of
        the variable and the last key): on the drop-in, all on one connection."""
        values = [next(self.values) for _ in calls]

        async def run(side: Side) -> list[Any]:
            seen: list[Any] = []
            done: Deferred = Deferred()

            def step(result: Any, index: int) -> None:
                if index:
                    seen.append(result)
                if index == len(calls):
                    done.callback(seen)
                    return
                try:
                    d = self.chained(side, calls[index], values[index])
                except Exception as exc:  # a bug of the test's own: fail, do not hang
                    done.errback(exc)
                else:
                    d.addBoth(step, index + 1)
            step(None, 0)
            return await done.asFuture(self.loop)
        before = {name: self.last_keys(side) for name, side in self.sides.items()}
        for name, seen in self.both(run).items():
            side, keys = self.sides[name], before[name]
            for kind, v, (who, value) in zip(calls, values, seen):
                if kind == "operation":
                    who = self.row_who(side, v)
                    keys[who] = side.env.outside(
                        f"select id from {side.env.table} where v = {v}")[0][0]
                elif kind == "interaction":
                    assert value == self.dialect.var_value(side.session(who)["var"]), (name, value)
                else:
                    self.check_last_key(side, who, value, keys)
                self.saw(side, who, True, [kind, value if kind != "operation" else "inserted"])
        if self.one_connection:
            self.agree({name: side.record for name, side in self.sides.items()})

    def chained(self, side: Side, kind: str, v: int) -> Deferred:
        """One call of ``chain`` (``v``: the value an insert writes): a Deferred of
        [who, what it saw]."""
        if kind == "operation":
            sql = self.dialect.insert(v).replace(self.dialect.table, side.env.table)
            return side.pool.runOperation(sql).addCallback(lambda _: [None, v])
        if kind == "interaction":
            return self.call(side, "interaction", self.dialect.var())
        side.noted.clear()
        def raised(failure: Any) -> Any:
            return [side.noted.get("who"), {"raised": side.env.error(failure.value)}]
        return self.call(side, kind, self.dialect.last_id()).addErrback(raised)

    @rule(n=st.integers(2, 6))
    def concurrent(self, n: int) -> None:
        """``n`` calls at once (inserts and reads of the variable): each reads what its
        own connection holds; every row is committed on both sides."""
        values = [next(self.values) for _ in range(n)]

        async def run(side: Side) -> list[Any]:
            table = side.env.table
            calls = []
            for i, v in enumerate(values):
                if i % 2:
                    calls.append(self.outcome(side, side.pool.runOperation(
                        self.dialect.insert(v).replace(self.dialect.table, table))))
                else:
                    calls.append(self.outcome(side, self.call(side, "query", self.dialect.var())))
            return list(await asyncio.gather(*calls))
        for name, outcomes in self.both(run).items():
            side = self.sides[name]
            for i, outcome in enumerate(outcomes):
                if i % 2:
                    assert outcome is None, (name, outcome)
                    self.saw(side, self.row_who(side, values[i]), False, ["inserted"])
                else:
                    who, value = outcome
                    assert value == self.dialect.var_value(side.session(who)["var"]), (name, outcome)
                    self.saw(side, who, False, ["var", value])

    # -- helpers of the checks ---------------------------------------------------------

    def row_who(self, side: Side, v: int) -> int:
        """The connection that inserted the row of value ``v`` (read from outside)."""
        return side.env.outside(f"select who from {side.env.table} where v = {v}")[0][0]

    def last_keys(self, side: Side) -> dict[int, int]:
        """Each connection's latest generated key (its inserts run in key order)."""
        return dict(side.env.outside(f"select who, max(id) from {side.env.table} group by who"))

    def check_last_key(self, side: Side, who: Optional[int], outcome: Any,
                       keys: Optional[dict[int, int]] = None) -> None:
        """``outcome`` of a last-key read on ``who``: that connection's latest insert
        (``keys``: each connection's latest key then; default: now)."""
        last = None if who is None else (self.last_keys(side) if keys is None else keys).get(who)
        if isinstance(outcome, dict):  # PostgreSQL before this session's first insert
            assert self.kind == "postgresql" and last is None, (side.env.side, who, outcome)
            return
        value = outcome[1] if isinstance(outcome, list) else outcome
        assert value == (last if last is not None else 0), (side.env.side, who, outcome, keys)

    @invariant()
    def same_rows(self) -> None:
        """Both sides committed the same rows (keys and values; not which connection)."""
        if all(side.pool is not None for side in self.sides.values()):
            rows = {name: side.env.outside(f"select id, v from {side.env.table} order by id")
                    for name, side in self.sides.items()}
            self.agree({name: sorted(v for _, v in r) for name, r in rows.items()})
            self.agree({name: len(r) for name, r in rows.items()})
            if self.one_connection:
                self.agree({name: side.record for name, side in self.sides.items()})


@pytest.mark.parametrize("kind", list(KINDS))
def test_adbapi_and_adb_agree_on_random_calls(kind: str, tmp_path: Any) -> None:
    if kind != "sqlite":
        require_server(kind)
    machine = type(f"{kind}Machine", (AdbapiMachine,), {"kind": kind, "tmp_path": tmp_path})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=EXAMPLES or 4, stateful_step_count=8 if not EXAMPLES else 20,
        deadline=None, database=None, suppress_health_check=list(HealthCheck),
        derandomize=not EXAMPLES))
