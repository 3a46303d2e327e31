"""What a user must be able to trust: a password never in an error, on_connect run
as written or refused, a transaction's end explained, a Database used only from its
loop's thread."""

import asyncio
import threading
import warnings
from urllib.parse import quote

import pytest

import adb
import adb.sync
from adb.errors import ConnectionRejected, InterfaceError, TransactionError

from ..conftest import FRONTS, URLS, blocking, ev, require_server


# -- 1. a password that is not percent-encoded -----------------------------------------

@pytest.mark.parametrize("password", ["se#cret99", "p@ss:w/rd", "ab?cdef", "ab[cdef", "ab]cdef",
                                      "12#34567", "1234/567", "p@ss?k=v@xyz", "ab\uff03cdef"])
@pytest.mark.parametrize("scheme", ["mysql", "postgresql", "postgresql+psycopg"])
def test_a_raw_special_password_is_refused_without_a_fragment(scheme, password):
    """A '#', '?', '/' or '[' in a raw password cuts the host part short: the error
    says to percent-encode it and masks everything before the last '@'."""
    url = f"{scheme}://root:{password}@127.0.0.1/test"
    with pytest.raises(InterfaceError) as info:
        adb.sync.Database(url)
    message = str(info.value)
    assert "percent-encode" in message and "urllib.parse.quote(password, safe='')" in message
    assert f"'{scheme}://***@127.0.0.1/test'" in message
    assert "port" not in message
    for fragment in {password[i:i + 4] for i in range(len(password) - 3)}:
        assert fragment not in message


@pytest.mark.parametrize("password", ["se#cret99", "p@ss:w/rd", "ab[cdef"])
def test_the_same_password_percent_encoded_is_taken(password):
    db = adb.sync.Database(f"mysql://root:{quote(password, safe='')}@127.0.0.1/test")
    try:
        assert db._engine.driver.connect_kwargs["password"] == password
    finally:
        db.close()


@pytest.mark.parametrize("password", ["abc/defgh", "abc@defgh", "abc%zdefgh"])
@pytest.mark.parametrize("how", ["positional", "dsn"])
def test_a_libpq_uri_with_a_raw_special_password_is_refused(how, password):
    """libpq reads its URI's host from the first '@', and quotes a bad %-escape."""
    dsn = f"postgresql://root:{password}@127.0.0.1:5432/test"
    args, kwargs = ((dsn,), {}) if how == "positional" else ((), {"dsn": dsn})
    from adb.url import target_for
    with pytest.raises(InterfaceError, match="percent-encode") as info:
        target_for("psycopg2", kwargs, args)
    assert "defgh" not in str(info.value) and "abc" not in str(info.value)


def test_an_at_sign_in_a_query_value_must_be_encoded():
    """It reads the same as a password cut short by '?': refused, with the remedy."""
    with pytest.raises(InterfaceError, match="%40"):
        adb.sync.Database("postgresql://root@127.0.0.1/test?application_name=me@host")
    db = adb.sync.Database("postgresql://root@127.0.0.1/test?application_name=me%40host")
    try:
        assert db.runQueryValue("show application_name") == "me@host"
    finally:
        db.close()


def test_a_bad_port_with_clear_credentials_still_says_port():
    with pytest.raises(InterfaceError, match=r"bad port .*'mysql://root:\*\*\*@h:bad/test'"):
        adb.sync.Database("mysql://root:p@ss@h:bad/test")


# -- 3. on_connect: a plain function, whose failure is its own -------------------------

async def _async_setup(conn):
    pass


class _AsyncCallable:
    async def __call__(self, conn):
        pass


@pytest.mark.parametrize("fn", [_async_setup, _AsyncCallable()])
@pytest.mark.parametrize("front", list(FRONTS))
async def test_a_coroutine_function_on_connect_is_refused_at_construction(front, fn):
    with pytest.raises(InterfaceError) as info:
        FRONTS[front]("sqlite://", on_connect=fn)
    assert "on_connect" in str(info.value) and "worker thread" in str(info.value)
    assert "plain function" in str(info.value)


@pytest.mark.parametrize("front", list(FRONTS))
async def test_an_awaitable_on_connect_result_is_refused(front):
    """A plain function returning a coroutine: refused when it runs, nothing left
    never awaited."""
    require_server("postgresql")
    db = FRONTS[front](URLS["postgresql"], pool_size=1, on_connect=lambda conn: _async_setup(conn))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            with pytest.raises(ConnectionRejected) as info:
                await ev(db.runQuery("select 1"))
        assert "on_connect returned coroutine" in str(info.value)
        assert "worker thread" in str(info.value)
    finally:
        await ev(db.close())


class SetupFailed(Exception):
    pass


@pytest.mark.parametrize("front", list(FRONTS))
async def test_an_on_connect_that_raises_is_reported_as_itself(front):
    require_server("postgresql")
    runs = []

    def setup(conn):
        runs.append(1)
        raise SetupFailed("no such schema: app")

    db = FRONTS[front](URLS["postgresql"], pool_size=1, on_connect=setup)
    try:
        for _ in range(3):  # no back-off: each call tries again, and says why
            with pytest.raises(ConnectionRejected) as info:
                await ev(db.runQuery("select 1"))
            exc = info.value
            assert isinstance(exc.__cause__, SetupFailed)
            assert "on_connect raised SetupFailed: no such schema: app" in str(exc)
            assert "cannot connect" not in str(exc) and "next attempt" not in str(exc)
        assert len(runs) >= 3
    finally:
        await ev(db.close())


async def test_an_on_connect_that_works_still_runs():
    require_server("postgresql")
    db = adb.Database(URLS["postgresql"], pool_size=1,
                      on_connect=lambda conn: conn.cursor().execute("set application_name = 'setup'"))
    try:
        assert await db.runQueryValue("show application_name") == "setup"
    finally:
        await db.close()


# -- 4. a transaction rolled back by close() says so ----------------------------------

@pytest.mark.parametrize("front", ["asyncio", "sync", "twisted"])
async def test_a_transaction_rolled_back_by_close_says_so(front):
    require_server("postgresql")
    db = FRONTS[front](URLS["postgresql"], pool_size=2)
    tx = await ev(db.beginTransaction())
    assert await ev(tx.runQueryValue("select 1")) == 1
    await ev(db.close())
    with pytest.raises(TransactionError) as info:
        await ev(tx.runQuery("select 1"))
    message = str(info.value)
    assert "rolled back because the Database was closed" in message
    assert "begin a new transaction" in message


async def test_a_transaction_ended_by_its_owner_still_reads_finished():
    db = adb.Database("sqlite://")
    try:
        tx = await db.beginTransaction()
        await tx.commit()
        with pytest.raises(TransactionError, match="is finished; begin a new transaction"):
            await tx.runQuery("select 1")
    finally:
        await db.close()


# -- 5. an asyncio Database is used from its loop's thread ----------------------------

@pytest.mark.parametrize("front", ["asyncio", "tornado"])
async def test_a_call_from_a_plain_thread_is_refused(front):
    db = FRONTS[front]("sqlite://")
    try:
        assert await db.runQueryValue("select 1") == 1
        outcome = []

        def from_thread():
            try:
                outcome.append(db.runQueryValue("select 2"))
            except InterfaceError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=from_thread)
        thread.start()
        thread.join()
        (exc,) = outcome
        assert isinstance(exc, InterfaceError), exc
        assert "run_coroutine_threadsafe" in str(exc) and "adb.sync" in str(exc)
        # the remedy works
        loop = asyncio.get_running_loop()
        value = await asyncio.to_thread(
            lambda: asyncio.run_coroutine_threadsafe(_value(db), loop).result(5))
        assert value == 3
    finally:
        await db.close()


async def _value(db):
    return await db.runQueryValue("select 3")


def test_a_database_made_before_its_loop_runs_is_used_on_it():
    loop = asyncio.new_event_loop()
    try:
        db = adb.Database("sqlite://", loop=loop)
        assert loop.run_until_complete(db.runQueryValue("select 1")) == 1
        loop.run_until_complete(db.close())
    finally:
        loop.close()


def test_a_database_whose_loop_closed_moves_to_the_next():
    db = adb.Database("sqlite://")
    assert asyncio.run(_value(db)) == 3
    assert asyncio.run(_value(db)) == 3
    asyncio.run(db.close())
