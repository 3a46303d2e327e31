"""adb.trio in trio's own terms (pytest-trio): calls from a nursery's tasks, cancel
scopes that give calls up (a queued call never runs, a running statement is
cancelled on the server), the binding to one run, and close. The whole spec runs
on it too, hosted on the asyncio tests' loop (``tests/trio_guest.py``)."""

import threading
import uuid

import pytest
import trio

import adb.sync
import adb.trio
from adb.errors import InterfaceError

from ..conftest import TARGETS, URLS, make_target

#: how the server shows a statement of ours running (an uncommon comment marks it)
RUNNING = {
    "postgresql": "select count(*) from pg_stat_activity where query like %s and state = 'active' "
                  "and pid <> pg_backend_pid()",
    "mysql": "select count(*) from information_schema.processlist where info like %s "
             "and id <> connection_id()",
}
SLEEP = {"postgresql": "select pg_sleep(30) /* adb-trio-{} */",
         "mysql": "select sleep(30) /* adb-trio-{} */"}


@pytest.fixture(params=TARGETS)
def target(request, tmp_path):
    return make_target(request.param, tmp_path)


@pytest.fixture(params=["postgresql", "psycopg", "mysql"])
def server(request, tmp_path):
    return make_target(request.param, tmp_path)


async def until(condition, what, limit=20.0):
    """Return once ``condition()`` holds; fail naming ``what`` after ``limit`` s."""
    deadline = trio.current_time() + limit
    while not condition():
        assert trio.current_time() < deadline, f"{what} never happened"
        await trio.sleep(0.01)


async def until_running(target, marker, count):
    """Return once the server shows ``count`` statements marked ``marker`` running."""
    def running():
        with adb.sync.Database(URLS[target.kind], pool_size=1) as admin:
            return admin.runQueryValue(RUNNING[target.kind], (f"%adb-trio-{marker}%",))
    deadline = trio.current_time() + 20
    while await trio.to_thread.run_sync(running) != count:
        assert trio.current_time() < deadline, f"the server never showed {count} running"
        await trio.sleep(0.01)


@pytest.mark.trio
async def test_a_nurserys_tasks_share_the_pool(target, table_name):
    async with adb.trio.Database(target.url, pool_size=4) as db:
        await db.runOperation(f"create table {table_name} (k int primary key, v varchar(10))")
        try:
            async with trio.open_nursery() as nursery:
                for k in range(100):
                    nursery.start_soon(db.runOperation,
                                       target.sql(f"insert into {table_name} values (%s, %s)"),
                                       (k, "v"))
            assert await db.runQueryValue(f"select count(*) from {table_name}") == 100
            async with db.transaction() as tx:
                await tx.runOperation(target.sql(f"delete from {table_name} where k < %s"), (50,))
            assert await db.runQueryValue(f"select count(*) from {table_name}") == 50
        finally:
            await db.runOperation(f"drop table {table_name}")


@pytest.mark.trio
async def test_a_cancelled_statement_is_cancelled_on_the_server(server):
    """The scope is cancelled once the server shows the statement running; the
    statement is then gone from the server, and the pool serves on."""
    # unique per run: CI's phases and interpreter sessions share the servers, and
    # another process's statement under a fixed marker would be counted as ours
    marker = f"cancel-{uuid.uuid4().hex[:10]}"
    async with adb.trio.Database(server.url, pool_size=1) as db:
        with trio.CancelScope() as scope:
            async def cancel_when_running():
                await until_running(server, marker, 1)
                scope.cancel()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_when_running)
                await db.runQuery(SLEEP[server.kind].format(marker))
                pytest.fail("the statement returned: it was never cancelled")
        assert scope.cancelled_caught
        await until_running(server, marker, 0)
        assert await db.runQueryValue("select 1") == 1


@pytest.mark.trio
async def test_a_call_given_up_in_the_queue_never_runs(target, table_name):
    """The only worker is held; an insert queued behind it is given up by its scope;
    released, the worker skips it."""
    async with adb.trio.Database(target.url, pool_size=1) as db:
        await db.runOperation(f"create table {table_name} (k int)")
        try:
            gate = threading.Event()
            held = db.runInteraction(lambda cursor: gate.wait(30))
            with trio.move_on_after(0) as scope:
                await db.runOperation(f"insert into {table_name} values (1)")
            assert scope.cancelled_caught
            gate.set()
            assert await held is True
            assert await db.runQueryValue(f"select count(*) from {table_name}") == 0
        finally:
            await db.runOperation(f"drop table {table_name}")


@pytest.mark.trio
async def test_a_cancelled_run_transaction_commits_nothing(target, table_name):
    async with adb.trio.Database(target.url, pool_size=2) as db:
        await db.runOperation(f"create table {table_name} (k int)")
        try:
            inside = trio.Event()

            async def fn(tx):
                await tx.runOperation(f"insert into {table_name} values (1)")
                inside.set()
                await trio.sleep_forever()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(db.runTransaction, fn)
                await inside.wait()
                nursery.cancel_scope.cancel()
            await until(lambda: db.stats()["pinned"] == 0, "the rollback")
            assert await db.runQueryValue(f"select count(*) from {table_name}") == 0
        finally:
            await db.runOperation(f"drop table {table_name}")


@pytest.mark.trio
async def test_a_cancelled_close_goes_on(target):
    db = adb.trio.Database(target.url, pool_size=2)
    assert await db.runQueryValue("select 1") == 1
    with trio.move_on_after(0):
        await db.close()
    assert db.closed
    await db.close()  # idempotent: waits for the same close
    assert db.stats()["alive"] == 0


def test_a_call_outside_a_trio_run_is_refused(tmp_path):
    db = adb.trio.Database(f"sqlite:///{tmp_path}/db.sqlite")
    with pytest.raises(InterfaceError, match="trio task"):
        db.runQuery("select 1")
    trio.run(db.close)


def test_the_next_run_takes_the_database_over(tmp_path):
    """A Database whose run ended serves the next run (test suites, notebooks); a
    second run while the first lives is refused."""
    db = adb.trio.Database(f"sqlite:///{tmp_path}/db.sqlite", pool_size=2)

    async def one(value):
        return await db.runQueryValue("select ?", (value,))

    assert trio.run(one, 1) == 1
    assert trio.run(one, 2) == 2
    refused = []

    async def first_run():
        other_started = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def other_thread():
            try:
                trio.run(one, 3)
            except InterfaceError as exc:
                refused.append(exc)
            trio.from_thread.run_sync(other_started.set, trio_token=token)
        await one(0)
        thread = threading.Thread(target=other_thread)
        thread.start()
        await other_started.wait()
        thread.join()
        await db.close()

    trio.run(first_run)
    assert refused and "another trio run" in str(refused[0])
