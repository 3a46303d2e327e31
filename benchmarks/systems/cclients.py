"""The physical limit: the servers' own C benchmark clients, same inserts, same concurrency.

pgbench and mysqlslap cannot number rows per call, so the key comes from a
server-side sequence starting at 0 (one ``nextval`` per insert): the rows and
their contents are exactly those every other system writes, and the harness
verifies them the same way.
"""

import os
import re
import resource
import subprocess
import tempfile

from ..scenarios import parallel_insert as pi
from .common import connect


def run(spec):
    conn = connect(spec)
    cursor = conn.cursor()
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
        seconds += runner(spec, count, per)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": seconds, "ok_calls": spec.rows, "rows_per_s": spec.rows / seconds,
            "peak_rss_mb": peak,
            "client": runner.__name__.lstrip("_")}


def _split(rows, clients):
    """(clients, calls per client) batches covering exactly ``rows`` calls."""
    batches = [(clients, rows // clients)] if rows >= clients else []
    if rows % clients:
        batches.append((rows % clients, 1))
    return batches


def _pgbench(spec, clients, per_client):
    kw = spec.connect_kwargs()
    env = dict(os.environ, PGPASSWORD=str(kw.get("password", "")))
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(f"insert into {pi.TABLE} (userid, data) "
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
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", out).group(1))
    return clients * per_client / tps


def _mysqlslap(spec, clients, per_client):
    kw = spec.connect_kwargs()
    args = ["mysqlslap", "-h", str(kw.get("host", "127.0.0.1")), "-P", str(kw.get("port", 3306)),
            "-u", str(kw.get("user", "root")), f"--create-schema={kw.get('database', 'test')}",
            "--no-drop", f"--concurrency={clients}", "--iterations=1",
            f"--number-of-queries={clients * per_client}",
            f"--query=insert into {pi.TABLE} (userid, data) "
            "select v, v from (select nextval(bench_ids) as v) s"]
    env = dict(os.environ, MYSQL_PWD=str(kw.get("password", "")))
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout
    return float(re.search(r"Average number of seconds to run all queries: ([\d.]+)", out).group(1))
