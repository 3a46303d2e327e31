"""Test targets: real PostgreSQL, MariaDB/MySQL and SQLite.

Server URLs default to this project's development machine and can be changed
with ADB_TEST_POSTGRESQL_URL and ADB_TEST_MYSQL_URL (the MongoDB benchmarks'
server with ADB_MONGO_URL). Without a server the tests
that need it are skipped with a message saying how to get one, except under
CI=true, where a missing server fails them.
"""

import asyncio
import atexit
import fcntl
import importlib
import inspect
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

import pytest
import pytest_asyncio

import adb
import adb.sync
import adb.url
import adb.tornado
import adb.trio
import adb.twisted
import benchmarks.mongo
from benchmarks import privateserver
from twisted.internet.asyncioreactor import AsyncioSelectorReactor
from twisted.internet.defer import Deferred, ensureDeferred

from . import trio_guest

URLS = {
    "postgresql": os.environ.get("ADB_TEST_POSTGRESQL_URL", "postgresql://root@127.0.0.1:5432/test"),
    "mysql": os.environ.get("ADB_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    # the benchmarks' MongoDB scenarios only: ADB_MONGO_URL, else what .ci/start-mongo started
    "mongodb": benchmarks.mongo.default_url(),
}
HOW_TO_START = {
    "postgresql": "start PostgreSQL on 127.0.0.1:5432 with a 'test' database "
                  "(`bash .ci/start-servers`) or set ADB_TEST_POSTGRESQL_URL",
    "mysql": "start MariaDB/MySQL on 127.0.0.1:3306 with a 'test' database "
             "(`bash .ci/start-servers`) or set ADB_TEST_MYSQL_URL",
    "mongodb": "start the MongoDB stand-in (`bash .ci/start-mongo`, which needs Node.js 20 "
               "and npm) or set ADB_MONGO_URL",
}
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: the first line of a program a test sends Ctrl-C to: SIGINT raises KeyboardInterrupt
#: there, as in a terminal, even when the tests run under a parent that ignores SIGINT
#: (a job started with `&` in a script, or under nohup), which a child inherits and
#: Python then leaves ignored
CTRL_C = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
_reachable: dict[str, bool] = {}


def server_kwargs(kind: str) -> dict[str, Any]:
    """The server's URL as driver connect() keywords (host, port, user, password, database)."""
    return server_kwargs_of(URLS[kind])


def own_database(kind: str, prefix: str) -> str:
    """The server's URL with its database replaced by a new one, ``prefix`` and a
    random part, dropped when this process exits: a database of this process's own,
    where a shared table name, a count of logins or a kill of every session of the
    database cannot meet another program's (CI's phases and pytest-xdist's
    processes run the same tests side by side on one server)."""
    require_server(kind)
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with adb.sync.Database(URLS[kind], pool_size=1) as admin:
        admin.runOperation(f"create database {name}")
    atexit.register(_drop_database, kind, name)
    return urlunsplit(urlsplit(URLS[kind])._replace(path=f"/{name}"))


def _drop_database(kind: str, name: str) -> None:
    """Drop a database of ``own_database``'s, at exit, on a driver's own connection:
    adb.sync's workers are threads, and Python 3.12.1 (the matrix's) starts none
    in an exit handler. A failure is said, not raised: the run's result stands."""
    kwargs = server_kwargs(kind)
    try:
        if kind == "mysql":
            conn = importlib.import_module("pymysql").connect(autocommit=True, **kwargs)
            statements = ["set lock_wait_timeout = 10", f"drop database if exists {name}"]
        else:
            try:  # psycopg2 is not there on a free-threaded Python
                driver = importlib.import_module("psycopg2")
            except ImportError:
                driver = importlib.import_module("psycopg")
            kwargs["dbname"] = kwargs.pop("database")
            conn = driver.connect(**kwargs)
            conn.autocommit = True
            statements = [f"drop database if exists {name} with (force)"]
        try:
            cursor = conn.cursor()
            for statement in statements:
                cursor.execute(statement)
        finally:
            conn.close()
    except Exception as exc:
        print(f"tests: database {name} was left on the {kind} server: {exc}", file=sys.stderr)


def server_kwargs_of(url: str) -> dict[str, Any]:
    """``url`` as driver connect() keywords (host, port, user, password, database)."""
    parts = urlsplit(url)
    return {"host": parts.hostname, "port": parts.port, "user": parts.username,
            **({"password": parts.password} if parts.password else {}),
            "database": parts.path.lstrip("/")}


def require_server(kind: str) -> None:
    """Skip (or, in CI, fail) unless the server for ``kind`` answers on TCP."""
    if kind not in _reachable:
        parts = urlsplit(URLS[kind])
        try:
            # no port in the URL: port 0, refused like the None it stands for
            socket.create_connection((parts.hostname, parts.port or 0), timeout=2).close()
            _reachable[kind] = True
        except OSError:
            _reachable[kind] = False
    if not _reachable[kind]:
        message = f"no {kind} server at {urlsplit(URLS[kind]).netloc}: {HOW_TO_START[kind]}"
        if IN_CI:
            pytest.fail(message + " (CI=true: server-backed tests must run)")
        pytest.skip(message)


class Target:
    """One database to test against: its server kind, URL, driver and placeholder."""

    def __init__(self, kind: str, url: str, name: Optional[str] = None) -> None:
        self.kind = kind
        self.url = url
        self.name = name or kind
        self.driver = adb.url.parse_url(url).driver
        self.p = "?" if kind == "sqlite" else "%s"

    def sql(self, text: str) -> str:
        """Write statements with %s; this gives the driver's own placeholder."""
        return text.replace("%s", self.p)

    def __repr__(self) -> str:
        return self.name


def psycopg_url() -> str:
    """The PostgreSQL test server's URL, for psycopg 3 (``postgresql+psycopg://``)."""
    return dialect_url("postgresql", "psycopg")


#: every driver the spec runs on: name -> server kind
TARGETS = {"postgresql": "postgresql", "psycopg": "postgresql", "mysql": "mysql",
           "mysqldb": "mysql", "sqlite": "sqlite"}
#: the targets on a driver other than their family's default: name -> the URL's dialect
DIALECTS = {"psycopg": "psycopg", "mysqldb": "mysqldb"}
#: modules no extra installs, as they build against system headers: module -> what
#: pip installs (after ``.ci/install-headers``), once, by the first test that needs it
BUILT_HERE = {"MySQLdb": "mysqlclient>=2.2"}


#: the drivers that pipeline standalone calls (``Database(pipeline=)``), each with
#: the URL query that turns it the other way from its default: the contract suite
#: (test_spec) and the fault tests run both ways on them
PIPELINE_VARIANTS = {"psycopg/pipeline=on": "postgresql", "mysql/pipeline=off": "mysql"}


def with_dialect(url: str, dialect: Optional[str]) -> str:
    """``url`` on the driver ``dialect`` names (None: as it is): ``postgresql+psycopg://``,
    ``mysql+mysqldb://``."""
    if dialect is None:
        return url
    scheme, rest = url.split("://", 1)
    return scheme.split("+")[0] + f"+{dialect}://" + rest


def dialect_url(kind: str, dialect: Optional[str]) -> str:
    """The test server's URL for ``kind``, on the driver ``dialect`` names."""
    return with_dialect(URLS[kind], dialect)


def target_url(driver: str) -> str:
    """The test server's URL for ``driver`` (a key of TARGETS), its module built first
    where no extra installs it (mysqlclient)."""
    if driver == "mysqldb":
        need_module("MySQLdb")
    return dialect_url(TARGETS[driver], DIALECTS.get(driver))


def need_module(module: str) -> Any:
    """Import ``module``; one of BUILT_HERE is installed first where it is missing
    (one process at a time: the tests run in several). Where that cannot be done the
    test is skipped saying why, and fails under CI=true."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if module not in BUILT_HERE:
            raise
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(sys.prefix, ".adb-test-install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        importlib.invalidate_caches()
        try:
            return importlib.import_module(module)
        except ImportError:
            subprocess.run(["bash", os.path.join(root, ".ci", "install-headers")], check=False)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", BUILT_HERE[module]],
                           check=False)
            importlib.invalidate_caches()
    try:
        return importlib.import_module(module)
    except ImportError:
        why = (f"{module} is not installed and could not be built here (bash "
               f".ci/install-headers && pip install '{BUILT_HERE[module]}')")
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


def mysql_thread_id(conn: Any) -> int:
    """MariaDB's id of a PyMySQL or mysqlclient connection. mysqlclient refuses a call
    on a connection another thread is using: its id is the one adb read when it
    opened it (``_adb_side``, ``adb.drivers.mysqldb.adb_connection``)."""
    side = getattr(conn, "_adb_side", None)
    return int(side.thread_id if side is not None else conn.thread_id())


def make_target(name: str, tmp_path: Any) -> Target:
    """The Target of ``name``: a key of TARGETS, or of PIPELINE_VARIANTS (a driver's
    name, ``/``, a URL query): the same driver with that query in its URL."""
    driver, _, query = name.partition("/")
    kind = TARGETS[driver]
    if kind == "sqlite":
        return Target(kind, f"sqlite:///{tmp_path}/test.db")
    require_server(kind)
    url = target_url(driver)
    if query:
        url += ("&" if "?" in url else "?") + query
    return Target(kind, url, driver)


@pytest.fixture(params=list(TARGETS))
def target(request, tmp_path):
    return make_target(request.param, tmp_path)


@pytest.fixture(scope="module")
def private_postgresql():
    """A PostgreSQL server of a test module's own (``benchmarks.privateserver``), so
    its restarts never end anyone else's sessions on the shared server."""
    why = privateserver.unavailable("postgresql")
    if why:
        pytest.skip(f"the restart tests need a private PostgreSQL: {why}")
    server = privateserver.create("postgresql")
    yield server
    privateserver.remove(server)


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


_reactors: list[AsyncioSelectorReactor] = []


def loop_reactor() -> AsyncioSelectorReactor:
    """A real Twisted reactor driven by the running test's own event loop (Twisted's
    asyncio reactor, not installed as the global one, never run: Deferreds fire on
    the loop); its waker is closed after the test."""
    reactor = AsyncioSelectorReactor(asyncio.get_running_loop())
    _reactors.append(reactor)
    return reactor


def twisted_database(*url: Any, **kwargs: Any) -> adb.twisted.Database:
    """The Twisted front-end on ``loop_reactor()``, so a spec test awaits its
    Deferreds like any other front-end's futures."""
    return adb.twisted.Database(*url, reactor=loop_reactor(), **kwargs)


@pytest.fixture(autouse=True)
def _close_reactor_wakers():
    """Each test reactor opens a waker pipe; close it after the test."""
    yield
    while _reactors:
        reactor = _reactors.pop()
        reactor.removeReader(reactor.waker)
        reactor.waker.connectionLost(None)


def trio_database(*url: Any, **kwargs: Any) -> adb.trio.Database:
    """The trio front-end in a trio run hosted by the running test's loop
    (``tests/trio_guest.py``), so a spec test awaits its calls through ``ev``."""
    trio_guest.guest()
    return adb.trio.Database(*url, **kwargs)


#: each front-end's Database (or a factory for one): name -> callable(url, **kwargs)
FRONTS: dict[str, Callable[..., Any]] = {
    "asyncio": adb.Database,
    "tornado": adb.tornado.Database,
    "sync": adb.sync.Database,
    "twisted": twisted_database,
}
#: the front-ends of the core contract (``.ci/noxfile.py`` CORE): adb.trio too, hosted on
#: the test's loop; a module of it asks for them with ``front = fronts_fixture(ALL_FRONTS)``
ALL_FRONTS: dict[str, Callable[..., Any]] = {**FRONTS, "trio": trio_database}


def blocking(db: Any) -> bool:
    """True for a Database of the blocking front-end (its calls return values)."""
    return isinstance(db, adb.sync.Database)


def with_pool_options(front_class: type, **options: Any) -> Any:
    """``front_class`` with adb's protected pool options set (``adb.options.PoolOptions``:
    ``start``, ``warm``, ``fit_size``, ``check_sql``, ``cancel_grace``)."""
    class Tuned(front_class):
        def _pool_options(self) -> Any:
            return dict(options)
    Tuned.__name__ = Tuned.__qualname__ = front_class.__name__
    Tuned.__module__ = front_class.__module__
    return Tuned


async def ev(value: Any) -> Any:
    """The value of a call on any front-end: await futures and Deferreds, pass plain
    values. In a test that hosts a trio run, a TrioFuture or a coroutine (adb.trio's
    ``close()``, the test's own block) is awaited in a task of that run."""
    if isinstance(value, Deferred):
        return await value.asFuture(asyncio.get_running_loop())
    if trio_guest.in_trio_task():  # already in a task of the hosted run: await as it is
        return await value if inspect.isawaitable(value) else value
    if trio_guest.current_guest() is not None \
            and (isinstance(value, adb.trio.TrioFuture) or inspect.iscoroutine(value)):
        return await trio_guest.run_in_trio(value)
    return await value if inspect.isawaitable(value) else value


async def in_front(db: Any, block: Any) -> Any:
    """Run ``block`` (a test's coroutine of ``async with`` and ``async for`` on ``db``)
    where ``db``'s awaitables are awaited: Twisted's coroutine runner for Deferreds, a
    task of the hosted trio run for adb.trio, else here."""
    if isinstance(db, adb.twisted.Database):
        return await ev(ensureDeferred(block))
    return await ev(block)


async def gather_calls(values: Iterable[Any]) -> list[Any]:
    """``asyncio.gather`` for the futures or Deferreds of several calls."""
    return await asyncio.gather(*(ev(value) for value in values))


async def close(db: Any) -> None:
    await ev(db.close())


def fronts_fixture(fronts: Iterable[str]) -> Any:
    """The ``front`` fixture over the names ``fronts`` (a mapping's keys): a front-end's
    name; a trio run the test hosted ends with it."""
    @pytest_asyncio.fixture(params=list(fronts), name="front")
    async def front(request):
        yield request.param
        await trio_guest.stop_guest()
    return front


front = fronts_fixture(FRONTS)


@pytest_asyncio.fixture
async def db(front, target, table_name):
    """A Database on ``front`` x ``target`` with an empty table ``table_name``
    (userid int primary key, data varchar(100))."""
    database = ALL_FRONTS[front](target.url, pool_size=4)
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
def pytest_pycollect_makeitem(collector, name, obj):
    """A test marked ``trio`` stays pytest-trio's: pytest-asyncio's auto mode claims
    every ``async def`` test as it is collected, so it is collected again as the plain
    test function pytest-trio runs."""
    outcome = yield
    items = outcome.get_result()
    if not items or not isinstance(items, list):
        return
    plain = []
    for item in items:
        if isinstance(item, pytest.Function) and type(item) is not pytest.Function \
                and item.get_closest_marker("trio") is not None:
            item.own_markers = [mark for mark in item.own_markers if mark.name != "asyncio"]
            item = pytest.Function.from_parent(
                item.parent, name=item.name, callspec=getattr(item, "callspec", None),
                callobj=item.obj, fixtureinfo=item._fixtureinfo, keywords=item.keywords,
                originalname=item.originalname)
        plain.append(item)
    outcome.force_result(plain)


#: tests in different modules that must share one process under ``pytest -n N``
#: (pytest-xdist, ``--dist loadgroup``), and why
SHARED_PROCESS = {
    # the standby, the Galera nodes and the pgbouncers listen on fixed ports
    "tests/topologies/": "fixed ports",
    # (the build tests each build a copy of the checkout: tests/project/checkout.py)
    # Twisted's own adbapi suite: one table named "simple" for every driver's class
    "tests/adbapi/test_twisted_adbapi.py": "twisted's table",
    # the benchmarks' tables have fixed names (adb_bench_insert, adb_bench_world, ...)
    "tests/project/test_benchmarks.py": "benchmark tables",
    "tests/project/test_ingestion.py": "benchmark tables",
    "tests/project/test_mongo.py": "benchmark tables",
    "tests/project/test_webprofile.py": "benchmark tables",
    "tests/project/test_faults_scenario.py": "benchmark tables",
    "tests/project/test_bench_manners.py": "benchmark tables",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``pytest -n N`` each test goes to whichever process is free, except those
    that share something: the tests of a module with a module-scoped fixture of its
    own (a private server, a built site, a started application) run in one process,
    so it is made once, and so do the groups in ``SHARED_PROCESS``."""
    if not hasattr(config, "workerinput"):  # not a pytest-xdist worker
        return
    for item in items:
        group = _group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown where it is not installed
def pytest_xdist_node_collection_finished(node, ids):
    """Stop the run when a process's tests came back without their groups.

    pytest-xdist's loadgroup hands a group to one process by a suffix it writes into
    the node id, which pytest 9.2 ignores (pytest-xdist#1386): the run would go on
    ungrouped, its shared tables and ports raced, without a word."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    for nodeid in ids:
        if _shared_group(nodeid) is not None and "@" not in nodeid:
            pytest.exit(f"--dist loadgroup does not group on pytest {pytest.__version__} with "
                        f"this pytest-xdist (pytest-xdist#1386): {nodeid} came back without "
                        "its group; install the test extra's pytest "
                        "(pip install -e '.[test]')", returncode=4)


def _group_of(item):
    """The process group ``item`` belongs to under loadgroup, or None."""
    group = _shared_group(item.nodeid)
    if group is None and _module_scoped(item):
        group = item.nodeid.split("::")[0]
    return group


def _shared_group(nodeid):
    """The ``SHARED_PROCESS`` group of the test ``nodeid``, or None."""
    return next((name for prefix, name in SHARED_PROCESS.items()
                 if nodeid.startswith(prefix)), None)


def _module_scoped(item):
    """True when ``item`` uses a fixture of the tests' own scoped wider than a test."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(definition.scope != "function" and definition.baseid.startswith("tests")
               for definitions in info.name2fixturedefs.values() for definition in definitions)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skipped test is a failed test: every server-backed test must run."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true: {report.longrepr}"


def pytest_sessionfinish(session, exitstatus):
    """On a free-threaded Python the session fails if the interpreter lock is on at
    its end: some module imported by adb, a driver or a test turned it back on, and
    the run did not test adb without it (PYTHON_GIL=1 turns this off)."""
    from adb.drivers import _gil
    if not _gil.FREE_THREADED or not _gil.enabled() or os.environ.get("PYTHON_GIL") == "1":
        return
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = ("free-threaded Python: the interpreter lock (GIL) is on at the end of the "
               "session: a module imported during it turned it back on (CPython's "
               "RuntimeWarning in the warnings summary names it)")
    if reporter is not None:
        reporter.write_line(message, red=True, bold=True)
    else:
        print(message)
