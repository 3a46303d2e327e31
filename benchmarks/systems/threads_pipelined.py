"""The honest Python limit of group commit: bare threads sending messages of inserts.

Ten plain Python threads (``pool_size``), each on a connection of its own, take
messages of ``MESSAGE`` one-row inserts from one queue and send each in one
round trip with one commit: on PostgreSQL through psycopg 3's pipeline mode
(``BEGIN``, the inserts as prepared statements, ``COMMIT``, one Sync), on
MariaDB as one PyMySQL multi-statement query, ``START TRANSACTION; ...;
COMMIT``. The same shape as ``c-client-pipelined`` and as adb's ``autobatch=64``
units, with no event loop, no pool, no future per call: what Python itself
costs per row when nothing else is in the way. The rows are seed 000's
``(i, str(i))``, and the harness verifies them as for every other system.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Protocol

from .cclients import MESSAGE
from .common import Figures, RunSpec, connect

#: one message of rows: ``(userid, data)`` each
Message = list[tuple[int, str]]
#: what each server's threads use, in the report's ``client`` field
CLIENTS = {"postgresql": "psycopg 3 pipeline", "mysql": "PyMySQL multi-statement"}


class Sender(Protocol):
    """One thread's connection and the way it sends a message (one round trip, one commit)."""

    def send(self, message: Message) -> None: ...

    def close(self) -> None: ...


class PsycopgPipeline:
    """psycopg 3 in pipeline mode, outside autocommit: each message is ``BEGIN``,
    its inserts (prepared on the connection once), ``COMMIT`` and one Sync, whose
    results are read together."""

    def __init__(self, spec: RunSpec, table: str) -> None:
        self.conn = connect(RunSpec(spec.scenario, _with_driver(spec.url, "psycopg"),
                                    spec.rows, spec.pool_size, spec.options), autocommit=False)
        self.cursor = self.conn.cursor()
        self.sql = f"insert into {table} (userid, data) values (%s, %s)"
        self.block = self.conn.pipeline()
        self.block.__enter__()

    def send(self, message: Message) -> None:
        execute, sql = self.cursor.execute, self.sql
        for row in message:
            execute(sql, row, prepare=True)
        self.conn.commit()  # in pipeline mode: COMMIT, then Sync, and every result read

    def close(self) -> None:
        self.block.__exit__(None, None, None)
        self.conn.close()


class PyMySQLMessage:
    """PyMySQL with multi-statement queries: each message one query, ``START
    TRANSACTION; insert; ...; COMMIT``, every result read with ``nextset``."""

    def __init__(self, spec: RunSpec, table: str) -> None:
        import pymysql
        from pymysql.constants import CLIENT
        self.conn = pymysql.connect(autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS,
                                    **spec.connect_kwargs())
        self.cursor = self.conn.cursor()
        self.sql = f"insert into {table} (userid, data) values (%s, %s)"

    def send(self, message: Message) -> None:
        mogrify, sql, cursor = self.cursor.mogrify, self.sql, self.cursor
        cursor.execute("START TRANSACTION;" + ";".join([mogrify(sql, row) for row in message])
                       + ";COMMIT")
        while cursor.nextset():
            pass

    def close(self) -> None:
        self.conn.close()


SENDERS: dict[str, Callable[[RunSpec, str], Sender]] = {
    "postgresql": PsycopgPipeline, "mysql": PyMySQLMessage}


def _with_driver(url: str, driver: str) -> str:
    """``url`` with its scheme's driver set: ``postgresql+driver://...``."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+')[0]}+{driver}://{rest}"


def messages(rows: int) -> list[Message]:
    """Seed 000's rows, ``MESSAGE`` to a message."""
    return [[(i, str(i)) for i in range(start, min(start + MESSAGE, rows))]
            for start in range(0, rows, MESSAGE)]


def run(spec: RunSpec, table: str) -> Figures:
    """parallel-insert's N inserts into ``table`` by ``pool_size`` threads sending
    messages of ``MESSAGE``; each thread connects and warms up before the clock."""
    work: queue.SimpleQueue[Message] = queue.SimpleQueue()
    for message in messages(spec.rows):
        work.put(message)
    connections = [SENDERS[spec.kind](spec, table) for _ in range(spec.pool_size)]
    sent = [0] * len(connections)
    errors: list[BaseException] = []
    start = threading.Barrier(len(connections) + 1)

    def worker(index: int) -> None:
        start.wait()
        try:
            while True:
                try:
                    message = work.get_nowait()
                except queue.Empty:
                    return
                connections[index].send(message)
                sent[index] += len(message)
        except BaseException as exc:  # reported by the run, never lost with the thread
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(i,), name=f"pipelined-{i}")
               for i in range(len(connections))]
    for thread in threads:
        thread.start()
    try:
        start.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - began
    finally:
        for conn in connections:
            conn.close()
    if errors:
        raise errors[0]
    return {"seconds": seconds, "ok_calls": sum(sent), "rows_per_s": sum(sent) / seconds,
            "statements_per_message": MESSAGE, "client": CLIENTS[spec.kind]}
