"""Twisted's own adbapi test suite, run against ``adb.twisted.ConnectionPool``.

``twisted/test/test_adbapi.py`` ships with Twisted; its ``ADBAPITestBase`` and
``ReconnectTestBase`` are imported here unchanged and combined with connectors
that build adb's pool instead of adbapi's, for sqlite3, psycopg2 on PostgreSQL
and PyMySQL on MariaDB. (Twisted's own connectors target MySQLdb, pyPgSQL and
psycopg 3, and a ``twisted_test`` user; these point at the test servers.)
"""

import os

from twisted.test.test_adbapi import ADBAPITestBase, DBTestConnector, ReconnectTestBase
from twisted.trial import unittest

from adb.twisted import ConnectionPool

from .conftest import require_server, server_kwargs


class AdbConnector(DBTestConnector):
    """Build adb's ConnectionPool; a missing server skips (fails under CI=true)."""

    kind: str  # each connector below names its server kind
    early_reconnect = True  # adb checks for a closed connection before each call

    def can_connect(self):
        if self.kind != "sqlite":
            try:
                require_server(self.kind)
            except unittest.SkipTest:
                return False
        return True

    def makePool(self, **newkw):
        args, kw = self.getPoolArgs()
        return ConnectionPool(*args, **{**kw, **newkw})

    def server_kwargs(self):
        return server_kwargs(self.kind)


class SQLite3Connector(AdbConnector):
    TEST_PREFIX = "SQLite3"
    kind = "sqlite"
    escape_slashes = False
    num_iterations = 1

    def startDB(self):
        assert self.DB_DIR is not None  # DBTestConnector.setUp made it
        self.database = os.path.join(self.DB_DIR, self.DB_NAME)
        if os.path.exists(self.database):
            os.unlink(self.database)

    def getPoolArgs(self):
        return ("sqlite3",), {"database": self.database, "cp_max": 1,
                              "check_same_thread": False}


class Psycopg2Connector(AdbConnector):
    TEST_PREFIX = "Psycopg2"
    kind = "postgresql"

    def getPoolArgs(self):
        return ("psycopg2",), {**self.server_kwargs(), "cp_min": 0}


class PyMySQLConnector(AdbConnector):
    TEST_PREFIX = "PyMySQL"
    kind = "mysql"
    trailing_spaces_ok = False

    def getPoolArgs(self):
        kw = self.server_kwargs()
        # adbapi users of MySQLdb write db= and passwd=; PyMySQL takes those too
        kw["db"] = kw.pop("database")
        return ("pymysql",), kw


for connector in (SQLite3Connector, Psycopg2Connector, PyMySQLConnector):
    for base, suffix in ((ADBAPITestBase, "ADBAPITests"), (ReconnectTestBase, "ReconnectTests")):
        name = connector.TEST_PREFIX + suffix
        globals()[name] = type(name, (connector, base, unittest.TestCase), {"__module__": __name__})
del connector, base, suffix, name
