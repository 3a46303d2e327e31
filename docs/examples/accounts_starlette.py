"""Accounts and transfers over HTTP: a Starlette application in asyncpg's shape, on adb.

    DATABASE_URL=mysql://root@127.0.0.1/test PORT=8888 python docs/examples/accounts_starlette.py

- ``POST /accounts`` ``{"name": "ann", "balance": 100}``: 201; 409 if the name is taken.
- ``POST /transfers`` ``{"source": "ann", "target": "bob", "amount": 5}``: both
  balances and the transfer's row in one transaction; 201, 404 for an unknown
  account, 409 when the source has too little.
- ``GET /accounts?after=ann&limit=20``: a page of accounts by name, and the
  ``after`` of the next page (keyset pagination: no row twice, none skipped); 400 for
  a bad ``limit``.

One Database for the application, made in the lifespan (where asyncpg's
``create_pool`` went), the tables made if missing. On SIGTERM uvicorn stops
accepting, gives the requests in flight ``GRACE`` seconds (then cancels them, and
adb cancels their statements on the server), runs the lifespan's end, which closes
the Database, and ends the process by the signal it got, as a clean stop under
uvicorn does (exit status 143 in a shell, -15 from ``subprocess``).
"""

import contextlib
import os
import uuid

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.routing import Route

from adb import Database

URL = os.environ.get("DATABASE_URL", "postgresql://root@127.0.0.1/test")
PORT = int(os.environ.get("PORT", "8888"))
GRACE = 10  # seconds the requests in flight get at a stop
SCHEMA = [
    "create table if not exists accounts (name varchar(40) primary key, balance int not null)",
    ("create table if not exists transfers (id char(32) primary key, source varchar(40) not null,"
     " target varchar(40) not null, amount int not null)"),
]


@contextlib.asynccontextmanager
async def lifespan(app):
    db = Database(URL, pool_size=8, row_factory="dict")
    async with db:  # closed when the server stops, after the requests in flight
        for statement in SCHEMA:
            await db.runOperation(statement)
        app.state.db = db
        yield


async def fields(request, **kinds):
    """The JSON body's fields, each of its kind; 400 naming the first one wrong."""
    try:
        data = await request.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise HTTPException(400, "the body must be a JSON object")
    for name, kind in kinds.items():
        if not isinstance(data.get(name), kind) or isinstance(data[name], bool):
            raise HTTPException(400, f"{name}: expected {kind.__name__}")
    return [data[name] for name in kinds]


async def create_account(request):
    db = request.app.state.db
    name, balance = await fields(request, name=str, balance=int)
    if not 0 < len(name) <= 40 or balance < 0:
        raise HTTPException(400, "name: 1 to 40 characters; balance >= 0")
    try:
        await db.runOperation("insert into accounts (name, balance) values (%s, %s)",
                              (name, balance))
    except db.dbapi.IntegrityError:  # asyncpg's UniqueViolationError: the name is taken
        raise HTTPException(409, "the name is taken")
    return JSONResponse({"name": name, "balance": balance}, 201)


async def list_accounts(request):
    after = request.query_params.get("after", "")
    limit = request.query_params.get("limit", "20")
    if not limit.isdecimal() or not 1 <= int(limit) <= 100:
        raise HTTPException(400, "limit must be a whole number, 1 to 100")
    rows = await request.app.state.db.runQuery(
        "select name, balance from accounts where name > %s order by name limit %s",
        (after, int(limit)))
    after = rows[-1]["name"] if len(rows) == int(limit) else None
    return JSONResponse({"accounts": rows, "after": after})


async def transfer(request):
    db = request.app.state.db
    source, target, amount = await fields(request, source=str, target=str, amount=int)
    if amount <= 0 or source == target:
        raise HTTPException(400, "amount > 0, between two accounts")
    transfer_id = uuid.uuid4().hex
    async with db.transaction() as tx:  # commits, or rolls back on an error
        balances = {}
        for name in sorted((source, target)):  # locked in name order: no deadlocks
            balances[name] = await tx.runQueryValue(
                "select balance from accounts where name = %s for update", (name,))
        if None in balances.values():
            raise HTTPException(404, "no such account")
        if balances[source] < amount:
            raise HTTPException(409, "the source has too little")
        await tx.runOperation("update accounts set balance = balance - %s where name = %s",
                              (amount, source))
        await tx.runOperation("update accounts set balance = balance + %s where name = %s",
                              (amount, target))
        await tx.runOperation("insert into transfers values (%s, %s, %s, %s)",
                              (transfer_id, source, target, amount))
    return JSONResponse({"id": transfer_id}, 201)


async def error(request, exc):
    return JSONResponse({"error": exc.detail}, exc.status_code)


app = Starlette(routes=[Route("/accounts", create_account, methods=["POST"]),
                        Route("/accounts", list_accounts, methods=["GET"]),
                        Route("/transfers", transfer, methods=["POST"])],
                exception_handlers={HTTPException: error}, lifespan=lifespan)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=PORT, timeout_graceful_shutdown=GRACE)
