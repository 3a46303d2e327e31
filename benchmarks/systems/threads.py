"""Plain blocking threads: pool_size threads, one driver connection each,
taking rows from one queue. What an async design has to beat."""

import time

from ..scenarios import parallel_insert as pi
from .common import connect, job_queue, run_in_threads


def run(spec):
    connections = [connect(spec) for _ in range(spec.pool_size)]
    sql = pi.statement("qmark" if spec.kind == "sqlite" else "format")
    jobs = job_queue(pi.params(spec.rows), spec.pool_size)
    done = [0] * spec.pool_size

    def worker(index):
        cursor = connections[index].cursor()
        get, execute = jobs.get, cursor.execute
        while True:
            params = get()
            if params is None:
                return
            execute(sql, params)
            done[index] += 1
    start = time.perf_counter()
    run_in_threads(spec.pool_size, worker)
    seconds = time.perf_counter() - start
    for conn in connections:
        conn.close()
    return {"seconds": seconds, "ok_calls": sum(done)}


def run_sequential(spec):
    """The blocking driver alone, one connection, no threads: the floor for seed 001."""
    from ..scenarios import sequential as seq
    conn = connect(spec)
    cursor = conn.cursor()
    style = "qmark" if spec.kind == "sqlite" else "format"
    insert, select = seq.statement(style), seq.select_statement(style)

    def select_one(key):
        cursor.execute(select, (key,))
        return cursor.fetchall()
    try:
        return seq.run_blocking(spec.rows, lambda p: cursor.execute(insert, p), select_one)
    finally:
        conn.close()
