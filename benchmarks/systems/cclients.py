"""The physical limit: the servers' own C benchmark clients, same inserts, same concurrency.

pgbench and mysqlslap cannot number rows per call, so the key comes from a
server-side sequence starting at 0 (one ``nextval`` per insert): the rows and
their contents are exactly those every other system writes (into the scenario's
table), and the harness verifies them the same way.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import tempfile
from typing import Callable

from .common import Figures, RunSpec, connect


def run(spec: RunSpec, table: str) -> Figures:
    """parallel-insert's N inserts into ``table`` by pgbench or mysqlslap, with
    ``pool_size`` clients."""
    conn = connect(spec)
    cursor = conn.cursor()
    runner: Callable[[RunSpec, str, int, int], float]
    if spec.kind == "postgresql":
        cursor.execute("drop sequence if exists bench_ids")
        cursor.execute("create sequence bench_ids minvalue 0 start 0")
        runner = _pgbench
    else:
        cursor.execute("create or replace sequence bench_ids minvalue 0 start with 0")
        runner = _mysqlslap
    conn.close()
    clients = spec.pool_size
    seconds = 0.0
    for count, per in _split(spec.rows, clients):
        seconds += runner(spec, table, count, per)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": seconds, "ok_calls": spec.rows, "rows_per_s": spec.rows / seconds,
            "peak_rss_mb": peak,
            "client": runner.__name__.lstrip("_")}


def _split(rows: int, clients: int) -> list[tuple[int, int]]:
    """(clients, calls per client) batches covering exactly ``rows`` calls."""
    batches = [(clients, rows // clients)] if rows >= clients else []
    if rows % clients:
        batches.append((rows % clients, 1))
    return batches


def _pgbench(spec: RunSpec, table: str, clients: int, per_client: int) -> float:
    kw = spec.connect_kwargs()
    env = dict(os.environ, PGPASSWORD=str(kw.get("password", "")))
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(f"insert into {table} (userid, data) "
                     "select v, v::text from (select nextval('bench_ids') as v) s;\n")
    try:
        out = subprocess.run(
            ["pgbench", "-n", "-f", script.name, "-c", str(clients), "-j", str(min(clients, 2)),
             "-t", str(per_client), "-h", str(kw.get("host", "127.0.0.1")),
             "-p", str(kw.get("port", 5432)), "-U", str(kw.get("user", "postgres")),
             str(kw.get("database", "postgres"))],
            capture_output=True, text=True, env=env, check=True).stdout
    finally:
        os.unlink(script.name)
    tps = float(_found(r"tps = ([\d.]+) \(without initial connection time\)", out))
    return clients * per_client / tps


def _mysqlslap(spec: RunSpec, table: str, clients: int, per_client: int) -> float:
    kw = spec.connect_kwargs()
    args = ["mysqlslap", "-h", str(kw.get("host", "127.0.0.1")), "-P", str(kw.get("port", 3306)),
            "-u", str(kw.get("user", "root")), f"--create-schema={kw.get('database', 'test')}",
            "--no-drop", f"--concurrency={clients}", "--iterations=1",
            f"--number-of-queries={clients * per_client}",
            f"--query=insert into {table} (userid, data) "
            "select v, v from (select nextval(bench_ids) as v) s"]
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
