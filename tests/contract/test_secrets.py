"""Secrets, fuzzed: generated passwords (every URL-special character, ``%``, spaces,
non-ASCII, long ones; raw and percent-encoded) in URLs, libpq DSNs and the keyword
form, through every error path a Database reaches quickly. No fragment of the
password may appear in an exception (with its chain and traceback), ``repr(db)``,
``str(db)``, ``db.stats()``, telemetry attributes or the ``adb`` logger at DEBUG.

Brief by default; ``ADB_FUZZ_EXAMPLES=2000`` runs each test that many examples
(docs/failures.md, "Checks that look for the next defect").
"""

import logging
import os
import traceback
from typing import Optional
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import adb.sync
from adb.errors import Error
from adb.telemetry import Telemetry
from adb.url import make_target

from ..conftest import URLS, need_module, require_server

EXAMPLES = int(os.environ.get("ADB_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXAMPLES or 30, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
#: the slow paths (a refused login waits on the server): a tenth as many examples
SLOW = settings(FUZZ, max_examples=EXAMPLES // 10 or 8)

#: characters no message of adb, a driver or a server would hold by chance (an ASCII
#: letter would: Q in SQL, V in a version): a fragment with one of them that shows
#: up anywhere came from the password
MARKERS = "éßЖ中ŁøÆ\u2100\uff03\uff20\U0001f511"
SPECIAL = "@:/?#[]%&=+ ;,$!*'()\"\\<>{}|^`~\t"
password_chars = st.sampled_from(MARKERS + SPECIAL + "abcQXZ0123456789")
passwords = st.one_of(
    st.text(password_chars, min_size=1, max_size=24),
    st.text(password_chars, min_size=100, max_size=300),  # long
).filter(lambda pw: any(c in MARKERS for c in pw))

#: a closed port on this machine: connects are refused at once
CLOSED = 1


def fragments(password: str) -> set[str]:
    """What must never show: every 4-character piece holding a marker (pieces of
    punctuation alone appear in any text), or the whole of a short password; and,
    percent-encoded, each marker with its neighbours."""
    found = {password} if len(password) < 4 else set()
    found.update(password[i:i + 4] for i in range(len(password) - 3)
                 if any(c in MARKERS for c in password[i:i + 4]))
    found.update(quote(password[max(0, i - 1):i + 2], safe="")
                 for i, c in enumerate(password) if c in MARKERS)
    return found


def assert_hidden(password: str, text: str) -> None:
    leaked = sorted(f for f in fragments(password) if f in text)
    assert not leaked, f"password fragments {leaked!r} in:\n{text}"


class Records(logging.Handler):
    """Every record of the ``adb`` logger, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def records():
    handler = Records()
    logger = logging.getLogger("adb")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def shown(exc: BaseException) -> str:
    """An exception as a person (or a log) would see it: its chain with tracebacks,
    and each link's repr and args."""
    text = "".join(traceback.format_exception(exc))
    link: Optional[BaseException] = exc
    while link is not None:
        text += repr(link) + repr(link.args)
        link = link.__cause__ or link.__context__
    return text


def everything(records: Records, **options) -> str:
    """Build a Database, make one call, close it: all it showed along the way."""
    records.lines.clear()
    text = ""
    try:
        db = adb.sync.Database(**options)
    except Exception as exc:
        assert isinstance(exc, (Error, ValueError)), shown(exc)
        return shown(exc) + "\n".join(records.lines)
    try:
        text += repr(db) + str(db) + repr(db.stats())
        try:
            db.runQuery("select 1")
        except Exception as exc:
            text += shown(exc)
        text += repr(db.stats())
        target = db._engine.driver.target
        telemetry = Telemetry(db.name, target, traced=False)
        text += repr(telemetry._attrs) + telemetry._target + repr(target)
    finally:
        db.close()
    return text + "\n".join(records.lines)


def url(scheme: str, user: str, password: str, host: str, port: object, encoded: bool) -> str:
    secret = quote(password, safe="") if encoded else password
    return f"{scheme}://{user}:{secret}@{host}:{port}/test?connect_timeout=2"


SCHEMES = st.sampled_from(["postgresql", "postgresql+psycopg", "mysql"])


@FUZZ
@given(password=passwords, scheme=SCHEMES, encoded=st.booleans(),
       port=st.sampled_from([CLOSED, 0, 99999, "x1", ""]))
def test_url_bad_port_or_refused(records, password, scheme, encoded, port):
    text = everything(records, url=url(scheme, "u", password, "127.0.0.1", port, encoded),
                      pool_size=1)
    assert_hidden(password, text)


@FUZZ
@given(password=passwords, scheme=SCHEMES, encoded=st.booleans())
def test_url_bad_host_name(records, password, scheme, encoded):
    text = everything(records, url=url(scheme, "u", password, "no-such-host.invalid", 5432,
                                       encoded), pool_size=1)
    assert_hidden(password, text)


@SLOW
@given(password=passwords, encoded=st.booleans())
def test_url_wrong_password(records, password, encoded):
    """Rejected logins on the real servers: MariaDB's root with a wrong password, a
    PostgreSQL role that does not exist (its server trusts every role it has)."""
    require_server("mysql")
    require_server("postgresql")
    for dburl in (url("mysql", "root", password, "127.0.0.1", 3306, encoded),
                  url("postgresql", "no_such_role_secrets", password, "127.0.0.1", 5432,
                      encoded)):
        text = everything(records, url=dburl, pool_size=1)
        assert_hidden(password, text)


@FUZZ
@given(password=passwords, scheme=SCHEMES, encoded=st.booleans(),
       pooler=st.sampled_from(["transaction", "bogus", 7]))
def test_pooler_errors(records, password, scheme, encoded, pooler):
    text = everything(records, url=url(scheme, "u", password, "127.0.0.1", CLOSED, encoded),
                      pooler=pooler, pool_size=1)
    assert_hidden(password, text)


@FUZZ
@given(password=passwords, encoded=st.booleans(), port=st.sampled_from([CLOSED, 99999]))
def test_replica_urls(records, password, encoded, port):
    require_server("postgresql")
    replica = url("postgresql", "u", password, "127.0.0.1", port, encoded)
    text = everything(records, url=URLS["postgresql"], replicas=[replica], pool_size=1)
    assert_hidden(password, text)


def libpq_quoted(password: str) -> str:
    """A libpq keyword value: single-quoted, with ``\\`` and ``'`` escaped."""
    return "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"


@FUZZ
@given(password=passwords, form=st.sampled_from(["keywords", "uri", "uri-raw"]),
       port=st.sampled_from([CLOSED, 99999]))
# a CI run's find: libpq refused the raw %00 quoting the password (psycopg2's parse error)
@example(password="é%00", form="uri-raw", port=CLOSED)
# and a key=value string with '://' in its password, described as if it were a URI
@example(password="0000://Æ", form="keywords", port=CLOSED)
@example(password="a://b@cÆd", form="keywords", port=CLOSED)
def test_libpq_dsn(records, password, form, port):
    """``dsn=`` as libpq's ``key=value`` string and as its ``postgresql://`` URI,
    that with the password percent-encoded and raw."""
    if form == "keywords":
        dsn = (f"host=127.0.0.1 port={port} user=u password={libpq_quoted(password)} "
               "dbname=test connect_timeout=2")
    else:
        dsn = url("postgresql", "u", password, "127.0.0.1", port, form == "uri")
    text = everything(records, driver="psycopg2", dsn=dsn, pool_size=1)
    assert_hidden(password, text)


#: DSNs libpq cannot parse, each a different message quoting a different part
MALFORMED = {
    "keywords, a word without '='": "host=127.0.0.1 password={quoted} dbname",
    "keywords, a bad option": "host=127.0.0.1 password={quoted} no_such_option=1",
    "keywords, unterminated": "host=127.0.0.1 dbname='test password={quoted}",
    "uri, a query without '='": "postgresql://u:{encoded}@127.0.0.1:1/test?connect_timeout",
    "uri, a bad escape in the path": "postgresql://u:{encoded}@127.0.0.1:1/te%zzst",
}


@FUZZ
@given(password=passwords, malformed=st.sampled_from(sorted(MALFORMED)))
def test_libpq_dsn_parse_errors(records, password, malformed):
    """libpq's parse errors quote the text they refuse: none may quote the password."""
    dsn = MALFORMED[malformed].format(quoted=libpq_quoted(password),
                                      encoded=quote(password, safe=""))
    text = everything(records, driver="psycopg2", dsn=dsn, pool_size=1)
    assert "bad PostgreSQL connection option" in text
    assert_hidden(password, text)


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg", "pymysql", "MySQLdb"])
@FUZZ
@given(password=passwords, port=st.sampled_from([CLOSED, 99999, "x"]))
def test_keyword_form(records, password, driver, port):
    need_module(driver)
    text = everything(records, driver=driver, host="127.0.0.1", port=port, user="u",
                      password=password, database="test", connect_timeout=2, pool_size=1)
    assert_hidden(password, text)


@pytest.mark.parametrize("driver", ["pymysql", "MySQLdb"])
@SLOW
@given(password=passwords)
def test_keyword_form_wrong_password(records, password, driver):
    require_server("mysql")
    need_module(driver)
    text = everything(records, driver=driver, host="127.0.0.1", port=3306, user="root",
                      password=password, database="test", pool_size=1)
    assert_hidden(password, text)


@FUZZ
@given(password=passwords, encoded=st.booleans())
def test_targets_describe_no_password(password, encoded):
    """The Target itself, and the telemetry attributes built from it."""
    try:
        target = make_target(url("postgresql", "u", password, "db.example", 5432, encoded))
    except Error as exc:
        assert_hidden(password, shown(exc))
        return
    assert target is not None
    telemetry = Telemetry("t", target, traced=False)
    assert_hidden(password, repr(target) + str(target) + target.describe()
                  + repr(telemetry._attrs) + telemetry._target)


def test_fragments_finds_what_it_looks_for():
    """The check itself can fail: a password in plain sight is found."""
    with pytest.raises(AssertionError):
        assert_hidden("QXZJ#é", "mysql://u:QXZJ#é@h/test")
    with pytest.raises(AssertionError):
        assert_hidden("%🔑", 'invalid percent-encoded token: "%🔑"')
    with pytest.raises(AssertionError):
        assert_hidden("é中", "password: é中")
    with pytest.raises(AssertionError):
        assert_hidden("a b/Xé1", "url 'mysql://u:a%20b%2FX%C3%A91@h'")
    assert_hidden("QXZJ#é", "mysql://u:***@h/test")
