"""Test targets: real PostgreSQL, MariaDB/MySQL and SQLite.

Server URLs default to this project's development machine and can be changed
with ADB_TEST_POSTGRESQL_URL and ADB_TEST_MYSQL_URL. Without a server the tests
that need it are skipped with a message saying how to get one, except under
CI=true, where a missing server fails them.
"""

import inspect
import os
import socket
import uuid
from urllib.parse import urlsplit

import pytest
import pytest_asyncio

import adb
import adb.sync
import adb.tornado

URLS = {
    "postgresql": os.environ.get("ADB_TEST_POSTGRESQL_URL", "postgresql://root@127.0.0.1:5432/test"),
    "mysql": os.environ.get("ADB_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
}
HOW_TO_START = {
    "postgresql": "start PostgreSQL on 127.0.0.1:5432 with a 'test' database "
                  "(`bash .ci/start-servers`) or set ADB_TEST_POSTGRESQL_URL",
    "mysql": "start MariaDB/MySQL on 127.0.0.1:3306 with a 'test' database "
             "(`bash .ci/start-servers`) or set ADB_TEST_MYSQL_URL",
}
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_reachable = {}


def server_kwargs(kind):
    """The server's URL as driver connect() keywords (host, port, user, password, database)."""
    parts = urlsplit(URLS[kind])
    return {"host": parts.hostname, "port": parts.port, "user": parts.username,
            **({"password": parts.password} if parts.password else {}),
            "database": parts.path.lstrip("/")}


def require_server(kind):
    """Skip (or, in CI, fail) unless the server for ``kind`` answers on TCP."""
    if kind not in _reachable:
        parts = urlsplit(URLS[kind])
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=2).close()
            _reachable[kind] = True
        except OSError:
            _reachable[kind] = False
    if not _reachable[kind]:
        message = f"no {kind} server at {urlsplit(URLS[kind]).netloc}: {HOW_TO_START[kind]}"
        if IN_CI:
            pytest.fail(message + " (CI=true: server-backed tests must run)")
        pytest.skip(message)


class Target:
    """One database to test against: its kind, URL and placeholder."""

    def __init__(self, kind, url):
        self.kind = kind
        self.url = url
        self.p = "?" if kind == "sqlite" else "%s"

    def sql(self, text):
        """Write statements with %s; this gives the driver's own placeholder."""
        return text.replace("%s", self.p)

    def __repr__(self):
        return self.kind


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def target(request, tmp_path):
    kind = request.param
    if kind == "sqlite":
        return Target(kind, f"sqlite:///{tmp_path}/test.db")
    require_server(kind)
    return Target(kind, URLS[kind])


@pytest.fixture
def pg_url():
    require_server("postgresql")
    return URLS["postgresql"]


@pytest.fixture
def mysql_url():
    require_server("mysql")
    return URLS["mysql"]


@pytest.fixture
def table_name():
    return "adb_t_" + uuid.uuid4().hex[:10]


FRONTS = {
    "asyncio": adb.Database,
    "tornado": adb.tornado.Database,
    "sync": adb.sync.Database,
}


async def ev(value):
    """The value of a call on any front-end: await futures, pass plain values."""
    return await value if inspect.isawaitable(value) else value


async def close(db):
    await ev(db.close())


@pytest.fixture(params=list(FRONTS))
def front(request):
    return request.param


@pytest_asyncio.fixture
async def db(front, target, table_name):
    """A Database on ``front`` x ``target`` with an empty table ``table_name``
    (userid int primary key, data varchar(100))."""
    database = FRONTS[front](target.url, pool_size=4)
    database.target = target
    database.table = table_name
    await ev(database.runOperation(f"drop table if exists {table_name}"))
    await ev(database.runOperation(
        f"create table {table_name} (userid int not null primary key, data varchar(100))"))
    yield database
    if not database.closed:
        await ev(database.runOperation(f"drop table if exists {table_name}"))
        await close(database)
    else:
        cleanup = adb.sync.Database(target.url, pool_size=1)
        cleanup.runOperation(f"drop table if exists {table_name}")
        cleanup.close()



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skipped test is a failed test: every server-backed test must run."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true: {report.longrepr}"
