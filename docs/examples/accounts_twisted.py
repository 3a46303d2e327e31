"""Accounts and transfers over HTTP: a twisted.web application in adbapi's shape, on
adb's drop-in ``ConnectionPool``.

    DATABASE_URL=mysql://root@127.0.0.1/test PORT=8888 python docs/examples/accounts_twisted.py

- ``POST /accounts`` ``{"name": "ann", "balance": 100}``: 201; 409 if the name is taken.
- ``POST /transfers`` ``{"source": "ann", "target": "bob", "amount": 5}``: both
  balances and the transfer's row in one ``runInteraction`` (one transaction); 201,
  404 for an unknown account, 409 when the source has too little.
- ``GET /accounts?after=ann&limit=20``: a page of accounts by name, and the
  ``after`` of the next page (keyset pagination: no row twice, none skipped); 400 for
  a bad ``limit``.

One pool for the application, made at start-up, the tables made if missing; the
switch from adbapi is the import. On SIGTERM (or Ctrl-C) the reactor stops: before
it does, the application stops listening and gives the requests in flight ``GRACE``
seconds; then the pool closes (its shutdown trigger, as adbapi's: the calls running
finish, each bounded by the server's statement timeout) and the process exits with
status 0.
"""

import json
import os
import sys
import uuid
from urllib.parse import unquote, urlsplit

from twisted.internet import defer, reactor
from twisted.protocols import policies
from twisted.python import log
from twisted.web import resource, server

from adb.twisted import ConnectionPool  # was: from twisted.enterprise.adbapi import ...

URL = os.environ.get("DATABASE_URL", "postgresql://root@127.0.0.1/test")
PORT = int(os.environ.get("PORT", "8888"))
GRACE = 10  # seconds the requests in flight get at a stop
SCHEMA = [
    "create table if not exists accounts (name varchar(40) primary key, balance int not null)",
    ("create table if not exists transfers (id char(32) primary key, source varchar(40) not null,"
     " target varchar(40) not null, amount int not null)"),
]


def pool_from_url(url):
    """adbapi's ConnectionPool(module, **connect keywords) for a postgresql:// or
    mysql:// URL; each statement bounded by the server (GRACE seconds)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "mysql"):
        raise SystemExit(f"DATABASE_URL must be postgresql:// or mysql://, not {parts.scheme}://")
    kw = {"host": parts.hostname, "user": unquote(parts.username or ""),
          "database": parts.path[1:]}
    kw.update({"port": parts.port} if parts.port else {})
    kw.update({"password": unquote(parts.password)} if parts.password else {})
    if parts.scheme == "mysql":
        return ConnectionPool("pymysql", init_command=f"set max_statement_time = {GRACE}",
                              cp_min=2, cp_max=8, **kw)
    return ConnectionPool("psycopg2", options=f"-c statement_timeout={GRACE * 1000}",
                          cp_min=2, cp_max=8, **kw)


class Refused(Exception):
    """A request answered with ``status`` (4xx) and ``message``."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def fields(request, **kinds):
    """The JSON body's fields, each of its kind; 400 naming the first one wrong."""
    try:
        data = json.loads(request.content.read())
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise Refused(400, "the body must be a JSON object")
    for name, kind in kinds.items():
        if not isinstance(data.get(name), kind) or isinstance(data[name], bool):
            raise Refused(400, f"{name}: expected {kind.__name__}")
    return [data[name] for name in kinds]


async def create_account(pool, request):
    name, balance = fields(request, name=str, balance=int)
    if not 0 < len(name) <= 40 or balance < 0:
        raise Refused(400, "name: 1 to 40 characters; balance >= 0")
    try:
        await pool.runOperation("insert into accounts (name, balance) values (%s, %s)",
                                (name, balance))
    except pool.dbapi.IntegrityError:  # the primary key: the name is taken
        raise Refused(409, "the name is taken")
    return 201, {"name": name, "balance": balance}


async def list_accounts(pool, request):
    after = request.args.get(b"after", [b""])[0].decode(errors="replace")
    limit = request.args.get(b"limit", [b"20"])[0].decode(errors="replace")
    if not limit.isdecimal() or not 1 <= int(limit) <= 100:
        raise Refused(400, "limit must be a whole number, 1 to 100")
    rows = await pool.runQuery(
        "select name, balance from accounts where name > %s order by name limit %s",
        (after, int(limit)))
    after = rows[-1][0] if len(rows) == int(limit) else None
    return 200, {"accounts": [{"name": n, "balance": b} for n, b in rows], "after": after}


def move(txn, transfer_id, source, target, amount):
    """The transfer, in a pool thread: committed if it returns, rolled back if it raises."""
    balances = {}
    for name in sorted((source, target)):  # locked in name order: no deadlocks
        txn.execute("select balance from accounts where name = %s for update", (name,))
        row = txn.fetchone()
        balances[name] = row[0] if row else None
    if None in balances.values():
        raise Refused(404, "no such account")
    if balances[source] < amount:
        raise Refused(409, "the source has too little")
    txn.execute("update accounts set balance = balance - %s where name = %s", (amount, source))
    txn.execute("update accounts set balance = balance + %s where name = %s", (amount, target))
    txn.execute("insert into transfers values (%s, %s, %s, %s)",
                (transfer_id, source, target, amount))


async def transfer(pool, request):
    source, target, amount = fields(request, source=str, target=str, amount=int)
    if amount <= 0 or source == target:
        raise Refused(400, "amount > 0, between two accounts")
    transfer_id = uuid.uuid4().hex
    await pool.runInteraction(move, transfer_id, source, target, amount)
    return 201, {"id": transfer_id}


async def not_found(pool, request):
    raise Refused(404, "no such resource")


ROUTES = {(b"POST", b"/accounts"): create_account, (b"GET", b"/accounts"): list_accounts,
          (b"POST", b"/transfers"): transfer}


class Counter:
    """How many things are open; ``empty()`` is a Deferred that fires once none is."""

    def __init__(self):
        self.count = 0
        self.waiters = []

    def up(self):
        self.count += 1

    def down(self, passed=None):
        self.count -= 1
        if self.count == 0:
            waiters, self.waiters = self.waiters, []
            for waiter in waiters:
                waiter.callback(None)
        return passed

    def empty(self):
        if self.count == 0:
            return defer.succeed(None)
        self.waiters.append(defer.Deferred())
        return self.waiters[-1]


class Api(resource.Resource):
    """Every request: its route's answer as JSON; ``requests`` counts those in flight."""

    isLeaf = True

    def __init__(self, pool):
        super().__init__()
        self.pool = pool
        self.requests = Counter()

    def render(self, request):
        route = ROUTES.get((request.method, request.path), not_found)
        self.requests.up()
        closed = []  # the client's connection closed before the answer
        request.notifyFinish().addErrback(closed.append)
        done = defer.ensureDeferred(route(self.pool, request))
        done.addErrback(self.failed)
        done.addCallback(lambda answer: closed or self.respond(request, *answer))
        done.addBoth(self.requests.down)
        return server.NOT_DONE_YET

    @staticmethod
    def failed(failure):
        if failure.check(Refused):
            return failure.value.status, {"error": str(failure.value)}
        log.err(failure, "request failed")
        return 500, {"error": "internal error"}

    @staticmethod
    def respond(request, status, body):
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        request.write(json.dumps(body).encode())
        request.finish()


class Connections(policies.WrappingFactory):
    """The site's connections, counted: a stop closes them once their answers are out
    (the reactor's own shutdown would cut them, answers unsent)."""

    def __init__(self, site):
        super().__init__(site)
        self.open = Counter()

    def registerProtocol(self, protocol):
        super().registerProtocol(protocol)
        self.open.up()

    def unregisterProtocol(self, protocol):
        super().unregisterProtocol(protocol)
        self.open.down()

    def close(self):
        """Close each connection after what it has still to send; fires once all are."""
        for protocol in list(self.protocols):
            protocol.loseConnection()
        return self.open.empty()


async def start(pool):
    for statement in SCHEMA:
        await pool.runOperation(statement)
    api = Api(pool)
    connections = Connections(server.Site(api))
    port = reactor.listenTCP(PORT, connections, interface="127.0.0.1")
    reactor.addSystemEventTrigger("before", "shutdown",
                                  lambda: defer.ensureDeferred(drain(port, api, connections)))
    print(f"serving on http://127.0.0.1:{PORT}/", flush=True)


async def drain(port, api, connections):
    """Before the reactor stops (and the pool closes): stop listening, let the
    requests in flight finish (GRACE seconds at most), then close the connections."""
    await port.stopListening()
    try:
        await api.requests.empty().addTimeout(GRACE, reactor)
    except defer.TimeoutError:
        print(f"{api.requests.count} requests still in flight", flush=True)
    try:
        await connections.close().addTimeout(GRACE, reactor)
    except defer.TimeoutError:
        print(f"{connections.open.count} connections not closed", flush=True)


def main():
    log.startLogging(sys.stdout)
    pool = pool_from_url(URL)  # starts with the reactor; closes as the reactor stops
    failed = []
    started = defer.ensureDeferred(start(pool))
    started.addErrback(lambda failure: (failed.append(failure), reactor.stop()))
    reactor.run()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
