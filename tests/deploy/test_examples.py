"""docs/examples/accounts_*.py, the three whole applications of docs/examples.md, each
run as the program it is (its own process group, a free port, DATABASE_URL) on
PostgreSQL and MariaDB, under HTTP load, and stopped by SIGTERM with a request held
in flight.

The load: writer threads create accounts (each name sent by two threads at once, so
one of the two gets 409) and transfer between them (some too large: 409); reader
threads page through the accounts. Once enough writes were acknowledged, the test
locks an account's row in a transaction of its own and sends a transfer from it:
the server shows that request waiting for the lock (pg_stat_activity /
information_schema), so it is in flight, and then the process gets SIGTERM. Once
the application has stopped accepting (a connect is refused), the lock is released.

What must hold: the held request is answered 201 after the SIGTERM; the process
exits within EXIT_BOUND with its clean status; no request got a 5xx; every write
acknowledged is in the table exactly once, and the balances are what the stored
transfers make of the opening balances; each name was created once, the others got
409; every full scan of the pages saw each account acknowledged before it began,
and none twice; bad page input got 400. Connections refused or cut once the stop
began are counted apart (the listening socket's backlog is dropped).
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlencode, urlsplit, urlunsplit

import pytest

import adb.sync

from ..conftest import URLS, require_server

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
#: each application, and the status its process ends with after a clean stop by
#: SIGTERM (uvicorn ends by the signal it caught, once its shutdown is done)
APPS = {"tornado": ("accounts_tornado.py", 0), "starlette": ("accounts_starlette.py", -15),
        "twisted": ("accounts_twisted.py", 0)}
KINDS = ["postgresql", "mysql"]
#: acknowledged writes before the stop: the load is well under way
ACKED_BEFORE_STOP = 100
WRITERS, READERS, PAGE = 4, 2, 7
SEEDS = [f"seed-{i:02}" for i in range(8)]
OPENING = {"held-a": 100, "held-b": 0, **{name: 100 for name in SEEDS}}
CREATED_WITH = 20  # the opening balance of each account the load creates
EXIT_BOUND = 20.0
#: generous bounds that only a hang fails
READY_BOUND = 30.0
SEEN_BOUND = 20.0


@dataclass
class Answer:
    status: int
    body: Any


class Refused(Exception):
    """No answer: the connection was refused, or cut before the answer."""


def call(port: int, method: str, path: str, body: Optional[dict[str, Any]] = None) -> Answer:
    """One request on a connection of its own; ``Refused`` when none was answered."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json", "Connection": "close"})
        reply = conn.getresponse()
        data = reply.read()
    except (ConnectionError, http.client.RemoteDisconnected) as exc:
        raise Refused(repr(exc)) from exc
    finally:
        conn.close()
    try:
        return Answer(reply.status, json.loads(data))
    except ValueError:
        return Answer(reply.status, data)


@dataclass
class Load:
    """What the clients sent and were told, shared by their threads (under ``lock``)."""

    port: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    created: dict[str, int] = field(default_factory=dict)  # name -> 201s
    conflicts: list[str] = field(default_factory=list)  # names answered 409
    transfers: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    statuses: collections.Counter[tuple[str, int]] = field(default_factory=collections.Counter)
    refused: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    scans: int = 0

    def under_way(self) -> bool:
        """ACKED_BEFORE_STOP writes acknowledged, a name refused, a scan done."""
        with self.lock:
            acked = sum(self.created.values()) + len(self.transfers)
            return acked >= ACKED_BEFORE_STOP and bool(self.conflicts) and self.scans > 0

    def send(self, what: str, method: str, path: str,
             body: Optional[dict[str, Any]] = None) -> Optional[Answer]:
        """The answer, recorded; None once the server takes no more (this thread stops)."""
        try:
            answer = call(self.port, method, path, body)
        except Refused as exc:
            with self.lock:
                self.refused.append(str(exc))
            return None
        with self.lock:
            self.statuses[(what, answer.status)] += 1
            if answer.status >= 500:
                self.problems.append(f"{what} {body or path}: {answer.status} {answer.body!r}")
        return answer


def writer(load: Load, pair: int, seed: int) -> None:
    """Creates the names of its pair (the other thread of the pair sends the same
    ones) and transfers between the accounts it knows; until the server is gone."""
    rng = random.Random(seed)
    for i in range(10_000):
        if load.stop.is_set():
            return
        if i % 2 == 0:
            name = f"p{pair}-{i // 2:04}"
            answer = load.send("create", "POST", "/accounts",
                               {"name": name, "balance": CREATED_WITH})
            if answer is None:
                return
            with load.lock:
                if answer.status == 201:
                    load.created[name] = load.created.get(name, 0) + 1
                elif answer.status == 409:
                    load.conflicts.append(name)
                else:
                    load.problems.append(f"create {name}: {answer.status} {answer.body!r}")
            continue
        with load.lock:
            known = SEEDS + sorted(load.created)
        source, target = rng.sample(known, 2)
        amount = rng.randint(1, 40)
        answer = load.send("transfer", "POST", "/transfers",
                           {"source": source, "target": target, "amount": amount})
        if answer is None:
            return
        with load.lock:
            if answer.status == 201:
                load.transfers[answer.body["id"]] = (source, target, amount)
            elif answer.status != 409:
                load.problems.append(f"transfer {source}->{target}: {answer.status} "
                                     f"{answer.body!r}")


def reader(load: Load) -> None:
    """Full scans of the pages, each checked: every account acknowledged before the
    scan began is in it, and none is in it twice."""
    while not load.stop.is_set():
        with load.lock:
            before = set(load.created) | set(OPENING)
        seen: list[str] = []
        after: Optional[str] = ""
        while after is not None:
            answer = load.send("page", "GET", "/accounts?" + urlencode(
                {"limit": PAGE, "after": after}))
            if answer is None:
                return
            if answer.status != 200:
                with load.lock:
                    load.problems.append(f"page after {after!r}: {answer.status}")
                return
            seen += [row["name"] for row in answer.body["accounts"]]
            after = answer.body["after"]
        with load.lock:
            load.scans += 1
            if len(seen) != len(set(seen)):
                load.problems.append(f"a scan saw {len(seen) - len(set(seen))} accounts twice")
            if before - set(seen):
                load.problems.append(f"a scan missed {sorted(before - set(seen))}")


def until(condition: Any, bound: float, what: str) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {bound} s")
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def refusing(port: int) -> bool:
    """True once nothing listens on ``port``: the application has stopped accepting."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # a full backlog's timeout: still listening
        pass
    return False


@pytest.fixture(scope="module", params=KINDS)
def database(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A database of this module's own on the server of ``kind``: its URL; dropped after."""
    kind = request.param
    require_server(kind)
    name = f"adb_examples_{uuid.uuid4().hex[:8]}"
    with adb.sync.Database(URLS[kind], pool_size=1) as admin:
        admin.runOperation(f"create database {name}")
    try:
        yield kind, urlunsplit(urlsplit(URLS[kind])._replace(path=f"/{name}"))
    finally:
        with adb.sync.Database(URLS[kind], pool_size=1) as admin:
            admin.runOperation(f"drop database {name}"
                               + (" with (force)" if kind == "postgresql" else ""))


def waiting_on(admin: adb.sync.Database, kind: str, holder: Any) -> int:
    """How many statements naming 'held-a' (the held transfer's) wait for the session
    ``holder``, which holds that row's lock. On MariaDB a statement that meets the lock
    while the optimizer reads the row by its key waits in the "Statistics" state,
    before InnoDB lists it as waiting: any such statement running in this module's
    database is waiting for it (another run's, in its own database, is not)."""
    if kind == "postgresql":
        sql = ("select count(*) from pg_stat_activity where %s = any(pg_blocking_pids(pid))"
               " and query like '%%held-a%%'")
    else:
        sql = ("select count(*) from information_schema.processlist where command = 'Query'"
               " and info like '%%held-a%%for update' and db = database()"
               " and id not in (%s, connection_id())")
    return admin.runQueryValue(sql, (holder,)) or 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("app", APPS)
def test_the_application_serves_and_stops_cleanly(app: str, database: tuple[str, str],
                                                  tmp_path: Path) -> None:
    kind, url = database
    script, clean_status = APPS[app]
    with adb.sync.Database(url, pool_size=1) as admin:
        admin.runOperation("drop table if exists accounts")
        admin.runOperation("drop table if exists transfers")
    port = free_port()
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, str(EXAMPLES / script)],
                                env=dict(os.environ, DATABASE_URL=url, PORT=str(port),
                                         PYTHONPATH=str(ROOT)),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            run(app, kind, url, port, proc, clean_status)
        except BaseException:
            print((tmp_path / "server.log").read_text(errors="replace")[-3000:])
            raise
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run(app: str, kind: str, url: str, port: int, proc: subprocess.Popen[bytes],
        clean_status: int) -> None:
    def ready() -> bool:
        assert proc.poll() is None, f"{app} exited with {proc.returncode} at start-up"
        try:
            return call(port, "GET", "/accounts").status == 200
        except (Refused, OSError):
            return False
    until(ready, READY_BOUND, f"{app} serving")
    for bad in ("abc", "0", "101", "-1", "1.5"):
        answer = call(port, "GET", f"/accounts?limit={bad}")
        assert answer.status == 400 and "limit" in answer.body["error"], (bad, answer)
    for name, balance in OPENING.items():
        assert call(port, "POST", "/accounts", {"name": name, "balance": balance}).status == 201
    assert call(port, "POST", "/accounts", {"name": "held-a", "balance": 1}).status == 409

    load = Load(port)
    threads = [threading.Thread(target=writer, args=(load, n // 2, n)) for n in range(WRITERS)]
    threads += [threading.Thread(target=reader, args=(load,)) for _ in range(READERS)]
    for thread in threads:
        thread.start()
    held: list[Answer | Refused] = []
    with adb.sync.Database(url, pool_size=1) as admin, \
            adb.sync.Database(url, pool_size=1) as lock_owner:
        try:
            until(lambda: load.under_way() or load.problems, SEEN_BOUND,
                  f"{ACKED_BEFORE_STOP} writes acknowledged, a 409 and a full scan")
            assert not load.problems, load.problems
            with lock_owner.transaction() as tx:
                holder = tx.runQueryValue("select pg_backend_pid()" if kind == "postgresql"
                                          else "select connection_id()")
                tx.runQuery("select balance from accounts where name = 'held-a' for update")
                sender = threading.Thread(target=lambda: held.append(send_held(port)))
                sender.start()
                until(lambda: held or waiting_on(admin, kind, holder) == 1, SEEN_BOUND,
                      "the held transfer waiting for the lock")
                assert held == [], f"the held transfer was answered at once: {held}"
                proc.send_signal(signal.SIGTERM)
                until(lambda: refusing(port), EXIT_BOUND, f"{app} refusing connections")
                assert held == [] and proc.poll() is None  # still in flight
            sender.join(EXIT_BOUND)
            assert held and isinstance(held[0], Answer), held
            assert held[0].status == 201, held[0]
            proc.wait(EXIT_BOUND)
        finally:
            load.stop.set()
            for thread in threads:
                thread.join(EXIT_BOUND)
        assert proc.returncode == clean_status, f"{app} exited with {proc.returncode}"
        check_tables(admin, load, held[0].body["id"])
    print(f"{app} on {kind}: {dict(load.statuses)}, {load.scans} scans, "
          f"{len(load.refused)} refused or cut after the stop")


def send_held(port: int) -> Answer | Refused:
    try:
        return call(port, "POST", "/transfers", {"source": "held-a", "target": "held-b",
                                                 "amount": 10})
    except Refused as exc:
        return exc


def check_tables(admin: adb.sync.Database, load: Load, held_id: str) -> None:
    """What the load was told against what the tables hold."""
    assert not load.problems, load.problems
    assert load.scans >= 1, "no full scan of the pages"
    assert load.statuses[("create", 409)] >= 1 and load.conflicts
    assert all(count == 1 for count in load.created.values()), load.created
    balances = dict(admin.runQuery("select name, balance from accounts"))
    assert set(load.created) <= set(balances), set(load.created) - set(balances)
    assert set(load.conflicts) <= set(balances)  # 409: the name was taken
    stored = {row[0]: (row[1], row[2], row[3])
              for row in admin.runQuery("select id, source, target, amount from transfers")}
    assert admin.runQueryValue("select count(*) from transfers") == len(stored)
    acknowledged = {**load.transfers, held_id: ("held-a", "held-b", 10)}
    for transfer_id, what in acknowledged.items():
        assert stored.get(transfer_id) == what, (transfer_id, what)
    expected = {name: OPENING.get(name, CREATED_WITH) for name in balances}
    for source, target, amount in stored.values():
        expected[source] -= amount
        expected[target] += amount
    assert balances == expected
    assert min(balances.values()) >= 0


def test_the_docs_page_shows_each_application_whole() -> None:
    """docs/examples.md embeds each file as it is (the site's snippets), and links it."""
    page = (ROOT / "docs" / "examples.md").read_text()
    for script, _ in APPS.values():
        assert f'--8<-- "examples/{script}"' in page, script
        assert f"](examples/{script})" in page, script
