r"""The physical limit: the servers' own C benchmark clients, same inserts, same concurrency.

pgbench and mysqlslap cannot number rows per call, so the key comes from a
server-side sequence, ``adb_bench_ids``, starting at 0 (one ``nextval`` per insert;
dropped after the run): the rows and
their contents are exactly those every other system writes (into the scenario's
table), and the harness verifies them the same way.

Two modes: one statement per round trip (``run``), and messages of ``MESSAGE``
one-row inserts (``run_pipelined``), the most a C client batches here: pgbench
pipelines them (``\startpipeline`` ... ``\endpipeline``: one Sync, so one implicit
transaction per message) as prepared statements (``-M prepared``: 2-2.5x the rate
of ``-M extended`` here, which parses and plans every insert), mysqlslap sends them as one
multi-statement query wrapped in ``START TRANSACTION`` ... ``COMMIT``. Each is the
shape of what adb's group commit sends (``autobatch=64``): a message of 64
statements, one commit.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import tempfile
from typing import Callable, NamedTuple

from .common import Figures, RunSpec, connect

#: statements per message in the pipelined mode: adb-asyncio-autobatch's unit size
MESSAGE = 64


class Round(NamedTuple):
    """One invocation of a C client: ``clients`` connections, each sending
    ``messages`` messages of ``size`` inserts."""

    clients: int
    messages: int
    size: int

    @property
    def rows(self) -> int:
        return self.clients * self.messages * self.size


Client = Callable[[RunSpec, str, Round], float]


def run(spec: RunSpec, table: str) -> Figures:
    """parallel-insert's N inserts into ``table`` by pgbench or mysqlslap, with
    ``pool_size`` clients, one statement per round trip."""
    return _run(spec, table, 1)


def run_pipelined(spec: RunSpec, table: str) -> Figures:
    """The same inserts in messages of ``MESSAGE`` (see the module doc)."""
    return _run(spec, table, MESSAGE)


def _run(spec: RunSpec, table: str, size: int) -> Figures:
    conn = connect(spec)
    cursor = conn.cursor()
    client: Client
    if spec.kind == "postgresql":
        cursor.execute("drop sequence if exists adb_bench_ids")
        cursor.execute("create sequence adb_bench_ids minvalue 0 start 0")
        client = _pgbench
    else:
        cursor.execute("create or replace sequence adb_bench_ids minvalue 0 start with 0")
        client = _mysqlslap
    conn.close()
    try:
        seconds = sum(client(spec, table, one) for one in plan(spec.rows, spec.pool_size, size))
    finally:  # the benchmark leaves no sequence of its own behind
        conn = connect(spec)
        conn.cursor().execute("drop sequence if exists adb_bench_ids")
        conn.close()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": seconds, "ok_calls": spec.rows, "rows_per_s": spec.rows / seconds,
            "peak_rss_mb": peak, "client": client.__name__.lstrip("_"),
            "statements_per_message": size}


def plan(rows: int, clients: int, size: int) -> list[Round]:
    """Rounds covering exactly ``rows`` inserts: full messages of ``size`` on every
    client, then what is left in one shorter message per client, then one insert
    on each of a few clients."""
    rounds = []
    full = rows // (clients * size)
    if full:
        rounds.append(Round(clients, full, size))
    rest = rows - full * clients * size
    if rest >= clients:
        rounds.append(Round(clients, 1, rest // clients))
    if rest % clients:
        rounds.append(Round(rest % clients, 1, 1))
    return rounds


def _insert(table: str, sequence: str, cast: str) -> str:
    return (f"insert into {table} (userid, data) "
            f"select v, v{cast} from (select nextval({sequence}) as v) s")


def _pgbench(spec: RunSpec, table: str, one: Round) -> float:
    kw = spec.connect_kwargs()
    env = dict(os.environ, PGPASSWORD=str(kw.get("password", "")))
    if one.size == 1:
        insert, mode = _insert(table, "'adb_bench_ids'", "::text") + ";\n", []
    else:  # prepared: parsed and planned once per connection, the fastest pgbench allows
        insert = (f"insert into {table} (userid, data) "
                  "values (nextval('adb_bench_ids'), currval('adb_bench_ids')::text);\n")
        mode = ["-M", "prepared"]
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(insert if one.size == 1
                     else "\\startpipeline\n" + insert * one.size + "\\endpipeline\n")
    try:
        out = subprocess.run(
            ["pgbench", "-n", *mode, "-f", script.name, "-c", str(one.clients),
             "-j", str(min(one.clients, 2)), "-t", str(one.messages),
             "-h", str(kw.get("host", "127.0.0.1")), "-p", str(kw.get("port", 5432)),
             "-U", str(kw.get("user", "postgres")), str(kw.get("database", "postgres"))],
            capture_output=True, text=True, env=env, check=True).stdout
    finally:
        os.unlink(script.name)
    tps = float(_found(r"tps = ([\d.]+) \(without initial connection time\)", out))
    return one.clients * one.messages / tps


def _mysqlslap(spec: RunSpec, table: str, one: Round) -> float:
    kw = spec.connect_kwargs()
    insert = _insert(table, "adb_bench_ids", "")
    # no --delimiter: the whole --query is one message (mysqlslap connects with
    # CLIENT_MULTI_STATEMENTS), counted as one query
    query = insert if one.size == 1 else \
        "START TRANSACTION;" + ";".join([insert] * one.size) + ";COMMIT"
    args = ["mysqlslap", "-h", str(kw.get("host", "127.0.0.1")), "-P", str(kw.get("port", 3306)),
            "-u", str(kw.get("user", "root")), f"--create-schema={kw.get('database', 'test')}",
            "--no-drop", f"--concurrency={one.clients}", "--iterations=1",
            f"--number-of-queries={one.clients * one.messages}", f"--query={query}"]
    env = dict(os.environ, MYSQL_PWD=str(kw.get("password", "")))
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout
    return float(_found(r"Average number of seconds to run all queries: ([\d.]+)", out))


def _found(pattern: str, out: str) -> str:
    """The first group of ``pattern`` in a client's output; an error quoting the
    output if it is not there."""
    match = re.search(pattern, out)
    if match is None:
        raise RuntimeError(f"no {pattern!r} in the client's output: {out[-300:]}")
    return match.group(1)
