"""Accounts and transfers over HTTP: a Tornado application in torndb's shape, on adb.

    DATABASE_URL=mysql://root@127.0.0.1/test PORT=8888 python docs/examples/accounts_tornado.py

- ``POST /accounts`` ``{"name": "ann", "balance": 100}``: 201; 409 if the name is taken.
- ``POST /transfers`` ``{"source": "ann", "target": "bob", "amount": 5}``: both
  balances and the transfer's row in one transaction; 201, 404 for an unknown
  account, 409 when the source has too little.
- ``GET /accounts?after=ann&limit=20``: a page of accounts by name, and the
  ``after`` of the next page (keyset pagination: no row twice, none skipped); 400 for
  a bad ``limit``.

One Database for the application, made at start-up, the tables made if missing. On
SIGTERM (or Ctrl-C): stop accepting, give the requests in flight ``GRACE`` seconds, then close
the Database (which lets the calls it accepted finish) and exit with status 0.
"""

import asyncio
import json
import os
import signal
import uuid

import tornado.web

from adb.tornado import Database

URL = os.environ.get("DATABASE_URL", "postgresql://root@127.0.0.1/test")
PORT = int(os.environ.get("PORT", "8888"))
GRACE = 10.0  # seconds the requests in flight get at a stop
SCHEMA = [
    "create table if not exists accounts (name varchar(40) primary key, balance int not null)",
    ("create table if not exists transfers (id char(32) primary key, source varchar(40) not null,"
     " target varchar(40) not null, amount int not null)"),
]


class Handler(tornado.web.RequestHandler):
    """JSON in and out; in flight from ``initialize`` to ``on_finish``."""

    @property
    def db(self):
        return self.application.db

    def initialize(self):
        self.application.in_flight.enter()

    def on_finish(self):
        self.application.in_flight.leave()

    def body(self, **fields):
        """The JSON body's ``fields``, each of its type: 400 naming the first wrong one."""
        try:
            data = json.loads(self.request.body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise tornado.web.HTTPError(400, reason="the body must be a JSON object")
        for name, kind in fields.items():
            if not isinstance(data.get(name), kind) or isinstance(data[name], bool):
                raise tornado.web.HTTPError(400, reason=f"{name}: expected {kind.__name__}")
        return [data[name] for name in fields]

    def write_error(self, status_code, **kwargs):
        """Every error as ``{"error": what went wrong}``."""
        error = kwargs.get("exc_info", (None, None, None))[1]
        reason = getattr(error, "reason", None)  # an HTTPError's own; else no details
        self.finish({"error": reason or "internal error"})


class Accounts(Handler):
    async def post(self):
        name, balance = self.body(name=str, balance=int)
        if not 0 < len(name) <= 40 or balance < 0:
            raise tornado.web.HTTPError(400, reason="name: 1 to 40 characters; balance >= 0")
        try:
            await self.db.runOperation("insert into accounts (name, balance) values (%s, %s)",
                                       (name, balance))
        except self.db.dbapi.IntegrityError:  # the primary key: the name is taken
            raise tornado.web.HTTPError(409, reason="the name is taken")
        self.set_status(201)
        self.write({"name": name, "balance": balance})

    async def get(self):
        after = self.get_query_argument("after", "")
        limit = self.get_query_argument("limit", "20")
        if not limit.isdecimal() or not 1 <= int(limit) <= 100:
            raise tornado.web.HTTPError(400, reason="limit must be a whole number, 1 to 100")
        rows = await self.db.runQuery(
            "select name, balance from accounts where name > %s order by name limit %s",
            (after, int(limit)))
        after = rows[-1].name if len(rows) == int(limit) else None
        self.write({"accounts": rows, "after": after})


class Transfers(Handler):
    async def post(self):
        source, target, amount = self.body(source=str, target=str, amount=int)
        if amount <= 0 or source == target:
            raise tornado.web.HTTPError(400, reason="amount > 0, between two accounts")
        transfer = uuid.uuid4().hex
        async with self.db.transaction() as tx:  # commits, or rolls back on an error
            balances = {}
            for name in sorted((source, target)):  # locked in name order: no deadlocks
                balances[name] = await tx.runQueryValue(
                    "select balance from accounts where name = %s for update", (name,))
            if None in balances.values():
                raise tornado.web.HTTPError(404, reason="no such account")
            if balances[source] < amount:
                raise tornado.web.HTTPError(409, reason="the source has too little")
            await tx.runOperation("update accounts set balance = balance - %s where name = %s",
                                  (amount, source))
            await tx.runOperation("update accounts set balance = balance + %s where name = %s",
                                  (amount, target))
            await tx.runOperation("insert into transfers values (%s, %s, %s, %s)",
                                  (transfer, source, target, amount))
        self.set_status(201)
        self.write({"id": transfer})


class InFlight:
    """How many requests are being served; ``idle`` is set when none is."""

    def __init__(self):
        self.count = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def enter(self):
        self.count += 1
        self.idle.clear()

    def leave(self):
        self.count -= 1
        if self.count == 0:
            self.idle.set()


class Application(tornado.web.Application):
    """The handlers, one Database for them all, and the count of requests in flight."""

    def __init__(self, db):
        super().__init__([("/accounts", Accounts), ("/transfers", Transfers)])
        self.db = db
        self.in_flight = InFlight()


async def main():
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    db = Database(URL, pool_size=8, row_factory="attrdict", statement_timeout=GRACE)
    for statement in SCHEMA:
        await db.runOperation(statement)
    app = Application(db)
    server = app.listen(PORT, "127.0.0.1")
    print(f"serving on http://127.0.0.1:{PORT}/", flush=True)
    await stop.wait()
    server.stop()  # 1. accept no more connections
    try:  # 2. let the requests in flight finish, for GRACE seconds at most
        await asyncio.wait_for(app.in_flight.idle.wait(), GRACE)
    except asyncio.TimeoutError:
        print(f"{app.in_flight.count} requests still in flight", flush=True)
    await server.close_all_connections()  # the idle keep-alive ones
    await db.close()  # 3. the calls it accepted finish; then the connections close


if __name__ == "__main__":
    asyncio.run(main())
