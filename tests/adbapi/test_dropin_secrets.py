"""A connection string libpq cannot parse, on the adbapi drop-in, with Twisted's trial.

The drop-in leaves refusing connect arguments to the module, at connect time, as
stock adbapi does. libpq's refusal quotes the text it could not parse, which can be
the password (an unquoted one with a space in it, ``password=sé cret``). The call
fails at once with ``ConnectionRejected``, naming the cause, not with
``ServerUnavailable`` and a pool trying again for good; neither the failure, with
its chain and context, nor the ``adb`` logger shows any of the password.
"""

from __future__ import annotations

import logging
from typing import Any

from twisted.internet import defer
from twisted.trial import unittest

import adb.twisted
from adb.errors import ConnectionRejected

from ..contract.test_secrets import Records, shown

#: one word of the password libpq quotes back, and one it does not reach
SECRET = "sé cret0wordX"

#: libpq's connection strings with the password where libpq's parser stops: each
#: refusal quotes a different part
MALFORMED = [
    f"host=127.0.0.1 port=1 password={SECRET}",  # missing "=" after "cret0wordX"
    f"host=127.0.0.1 port=1 password={SECRET}=1",  # an option named after it
    f"host=127.0.0.1 port=1 password='{SECRET}",  # unterminated
]


class SecretsTests:
    """Mixed into one TestCase per libpq driver below."""

    driver: str

    def setUp(self) -> None:
        self.records = Records()
        self.logger = logging.getLogger("adb")
        self.level = self.logger.level
        self.logger.addHandler(self.records)
        self.logger.setLevel(logging.DEBUG)

    def tearDown(self) -> None:
        self.logger.removeHandler(self.records)
        self.logger.setLevel(self.level)

    @defer.inlineCallbacks
    def test_an_unparsable_connection_string_is_rejected_without_its_password(self) -> Any:
        case: Any = self
        for dsn in MALFORMED:
            pool = adb.twisted.ConnectionPool(self.driver, dsn, cp_min=1, cp_max=1)
            pool.start()
            try:
                failure = yield case.assertFailure(pool.runQuery("select 1"),
                                                   ConnectionRejected)
            finally:
                pool.close()
            case.assertIn("cannot parse the connect arguments", str(failure))
            text = shown(failure) + repr(pool) + "\n".join(self.records.lines)
            for word in SECRET.split():
                case.assertNotIn(word, text, dsn)

    @defer.inlineCallbacks
    def test_without_a_password_libpq_s_message_is_shown_whole(self) -> Any:
        case: Any = self
        pool = adb.twisted.ConnectionPool(self.driver, "host=127.0.0.1 port=1 no_such_opt=1",
                                          cp_min=1, cp_max=1)
        pool.start()
        try:
            failure = yield case.assertFailure(pool.runQuery("select 1"), ConnectionRejected)
        finally:
            pool.close()
        case.assertIn('"no_such_opt"', str(failure))


class Psycopg2SecretsTests(SecretsTests, unittest.TestCase):
    driver = "psycopg2"


class PsycopgSecretsTests(SecretsTests, unittest.TestCase):
    driver = "psycopg"
