"""Twisted's own adbapi test suite, every class of it, run against ``adb.twisted.ConnectionPool``.

``twisted/test/test_adbapi.py`` ships with Twisted. It is executed here a second
time, from the installed Twisted's own file, as a module of its own in which the
names it imports from ``twisted.enterprise.adbapi`` are adb's (``ADBAPI_NAMES``
says which adb object plays each), so every test in it (the database-backed
``ADBAPITestBase`` and ``ReconnectTestBase``, and the fake-based
``ConnectionPoolTests``, ``ConnectionTests`` and ``TransactionTests``, whose
``DummyConnectionPool`` subclasses the pool) runs on adb's drop-in unchanged.
Twisted's database connectors target MySQLdb, pyPgSQL and psycopg 3 with a
``twisted_test`` user; the connectors below point its database-backed classes at
this project's test servers, for sqlite3, psycopg2 and psycopg 3 on PostgreSQL and
PyMySQL on MariaDB.

A test the drop-in does not pass would be listed in ``EXPECTED_FAILURES`` (none
is: every test passes): it runs and is reported as an expected failure (trial's
``todo``, pytest's xfail); one that starts passing is reported as an unexpected
success, which fails the run, so its entry must then be removed.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types
from typing import Any, Callable

import pytest
from twisted.enterprise import adbapi
from twisted.trial import unittest

import adb.sync
import adb.twisted

from ..conftest import own_database, require_server, server_kwargs_of


#: the names test_adbapi.py imports from twisted.enterprise.adbapi -> adb's object.
#: ConnectionLost stays adbapi's: it is what applications import and catch, what
#: adbapi's Connection (the drop-in's too) raises, and what adb's own
#: ``adb.twisted.ConnectionLost`` subclasses
ADBAPI_NAMES = {
    "ConnectionPool": adb.twisted.ConnectionPool,
    "ConnectionLost": adbapi.ConnectionLost,
    # adbapi's Connection/Transaction: the drop-in's factories are adbapi's own
    "Connection": adb.twisted.ConnectionPool.connectionFactory,
    "Transaction": adb.twisted.ConnectionPool.transactionFactory,
}


def _twisted_suite_on_adb() -> types.ModuleType:
    """A fresh copy of the installed ``twisted.test.test_adbapi``, executed with
    ``from twisted.enterprise.adbapi import ...`` finding ``ADBAPI_NAMES``."""
    stock = importlib.util.find_spec("twisted.test.test_adbapi")
    assert stock is not None and stock.origin is not None
    spec = importlib.util.spec_from_file_location(__name__ + "._twisted_suite", stock.origin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    stand_in = types.ModuleType("twisted.enterprise.adbapi")
    stand_in.__dict__.update(ADBAPI_NAMES)
    real = sys.modules["twisted.enterprise.adbapi"]
    sys.modules["twisted.enterprise.adbapi"] = stand_in
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules["twisted.enterprise.adbapi"] = real
    return module


suite = _twisted_suite_on_adb()

#: test id (class.method) -> why it fails on the drop-in (see docs/adbapi.md); remove
#: an entry once its test passes
EXPECTED_FAILURES: dict[str, str] = {}


class ExpectedFailures:
    """Reports the tests listed in EXPECTED_FAILURES as expected failures: to pytest
    through a strict xfail mark (``_test_case`` puts it on the method), to trial
    through ``todo``. (Under pytest a todo is lost: trial wraps pytest's result in
    its adapter for pyunit results, whose addExpectedFailure takes other arguments,
    and the test shows as passed.)"""

    _testMethodName: str

    def getTodo(self) -> Any:
        if "PYTEST_CURRENT_TEST" in os.environ:  # pytest runs this test: its xfail mark
            return None
        reason = EXPECTED_FAILURES.get(f"{type(self).__name__}.{self._testMethodName}")
        return unittest.makeTodo(reason) if reason else None


@functools.cache
def _own_url(kind: str) -> str:
    """A database of this process's own on server ``kind``, made once: Twisted's
    tests share one table name, ``simple``, and other processes run them on the same
    server at the same time (the matrix's interpreters, the compiled wheel's run, the
    free-threaded one, and test_twisted_reactors' trial run beside this module)."""
    return own_database(kind, "adb_adbapi")


class AdbConnector(suite.DBTestConnector):  # type: ignore[name-defined]
    """Twisted's connector, pointed at this project's servers; a missing server
    skips (fails under CI=true). ``makePool`` is Twisted's: with ``ADBAPI_NAMES``
    it builds adb's ConnectionPool."""

    kind: str  # each connector below names its server kind
    early_reconnect = True  # adb checks for a closed connection before each call

    def can_connect(self) -> bool:
        if self.kind != "sqlite":
            try:
                require_server(self.kind)
            except unittest.SkipTest:
                return False
        return True

    def server_kwargs(self) -> dict[str, Any]:
        return server_kwargs_of(self.url())

    def url(self) -> str:
        return _own_url(self.kind)

    def startDB(self) -> None:
        """A clean slate: Twisted's tearDown drops ``simple`` through the pool under
        test, so a run cut short there leaves it behind for the next CREATE TABLE."""
        if self.kind != "sqlite":
            with adb.sync.Database(self.url(), pool_size=1) as db:
                db.runOperation("drop table if exists simple")
        super().startDB()


class SQLite3Connector(suite.SQLite3Connector, AdbConnector):  # type: ignore[name-defined]
    kind = "sqlite"


class Psycopg2Connector(AdbConnector):
    TEST_PREFIX = "Psycopg2"
    kind = "postgresql"

    def getPoolArgs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return ("psycopg2",), {**self.server_kwargs(), "cp_min": 0}


class PsycopgConnector(AdbConnector):
    """psycopg 3: Twisted's own connector's driver, on this project's server."""
    TEST_PREFIX = "Psycopg"
    kind = "postgresql"

    def getPoolArgs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        kw = self.server_kwargs()
        # the connection is made with exactly these keywords, as adbapi makes it, and
        # psycopg 3 takes libpq's dbname= (Twisted's own connector's database= fails)
        kw["dbname"] = kw.pop("database")
        return ("psycopg",), {**kw, "cp_min": 0}


class PyMySQLConnector(AdbConnector):
    TEST_PREFIX = "PyMySQL"
    kind = "mysql"
    trailing_spaces_ok = False

    def getPoolArgs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        kw = self.server_kwargs()
        # adbapi users of MySQLdb write db= and passwd=; PyMySQL takes those too
        kw["db"] = kw.pop("database")
        return ("pymysql",), kw


def _test_case(name: str, *bases: type) -> type:
    """A TestCase class of this module; its tests in EXPECTED_FAILURES get pytest's
    strict xfail mark (an unexpected pass fails the run: remove the entry)."""
    case = type(name, (ExpectedFailures, *bases), {"__module__": __name__})
    for test_id, reason in EXPECTED_FAILURES.items():
        class_name, method_name = test_id.split(".")
        if class_name == name:
            setattr(case, method_name, _expected_to_fail(getattr(case, method_name), reason))
    return case


def _expected_to_fail(test: Callable[[Any], Any], reason: str) -> Callable[[Any], Any]:
    @functools.wraps(test)
    def expected_to_fail(self: Any) -> Any:
        return test(self)
    return pytest.mark.xfail(reason=reason, strict=True)(expected_to_fail)


# the database-backed classes: each of Twisted's two bases on each connector
for connector in (SQLite3Connector, Psycopg2Connector, PsycopgConnector, PyMySQLConnector):
    for base, suffix in ((suite.ADBAPITestBase, "ADBAPITests"),
                         (suite.ReconnectTestBase, "ReconnectTests")):
        name = connector.TEST_PREFIX + suffix
        globals()[name] = _test_case(name, connector, base, unittest.TestCase)

# the fake-based classes, as Twisted wrote them (they are TestCases already)
for name in ("ConnectionPoolTests", "ConnectionTests", "TransactionTests"):
    globals()[name] = _test_case(name, getattr(suite, name))
del connector, base, suffix, name

#: every TestCase class of Twisted's module has its counterpart here, except the
#: database-backed ones Twisted generates for drivers this project does not test
TWISTED_CONNECTORS_NOT_RUN = ("pysqlite2", "PyPgSQL", "MySQL", "Firebird")


def test_every_twisted_test_class_runs_here() -> None:
    """A class added to Twisted's test_adbapi.py in a later release runs here too
    (or this fails, naming it)."""
    ours = {name for name, value in globals().items()
            if isinstance(value, type) and issubclass(value, unittest.TestCase)}
    missing = []
    for name, value in vars(suite).items():
        if not (isinstance(value, type) and issubclass(value, unittest.TestCase)):
            continue
        if name.startswith(TWISTED_CONNECTORS_NOT_RUN) and name.endswith(("ADBAPITests", "ReconnectTests")):
            continue
        if name not in ours:
            missing.append(name)
    assert missing == []


def test_expected_failures_name_tests_that_exist() -> None:
    """Every EXPECTED_FAILURES entry names a test of this module."""
    for test_id in EXPECTED_FAILURES:
        cls_name, method = test_id.split(".")
        assert hasattr(globals()[cls_name], method), test_id
