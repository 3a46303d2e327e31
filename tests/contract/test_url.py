"""URL and keyword parsing, construction-time validation, secrets kept out of text."""

import logging
from urllib.parse import quote

import pytest

import adb
import adb.sync
from adb import drivers
from adb.errors import InterfaceError
from adb.target import Target
from adb.url import make_target, parse_url, target_for


def target_of(url: str | None, driver: str | None, kwargs: dict[str, object]) -> Target:
    """``make_target`` for arguments that name a database (so it is not None)."""
    target = make_target(url, driver, kwargs)
    assert target is not None
    return target

CANARY = "Cx-@#%/:-canary"


@pytest.mark.parametrize("url, driver, kwargs", [
    ("postgresql://u:pw@db.example:5433/app", "psycopg2",
     {"host": "db.example", "port": 5433, "user": "u", "password": "pw", "database": "app"}),
    ("postgresql+psycopg2://u@h/app?sslmode=require", "psycopg2",
     {"host": "h", "user": "u", "database": "app", "sslmode": "require"}),
    ("postgres://h", "psycopg2", {"host": "h"}),
    ("postgresql+psycopg://u@h:5433/app?sslmode=disable", "psycopg",
     {"host": "h", "port": 5433, "user": "u", "database": "app", "sslmode": "disable"}),
    ("POSTGRES+PSYCOPG://h", "psycopg", {"host": "h"}),
    ("mysql://root@127.0.0.1:3306/test", "pymysql",
     {"host": "127.0.0.1", "port": 3306, "user": "root", "database": "test"}),
    ("mysql+pymysql://root@h/test", "pymysql", {"host": "h", "user": "root", "database": "test"}),
    ("mariadb://root@h/test", "pymysql", {"host": "h", "user": "root", "database": "test"}),
    ("sqlite:///rel/file.db", "sqlite3", {"database": "rel/file.db"}),
    ("sqlite:////abs/file.db", "sqlite3", {"database": "/abs/file.db"}),
    ("sqlite://", "sqlite3", {"database": ":memory:"}),
    ("sqlite:///:memory:", "sqlite3", {"database": ":memory:"}),
])
def test_urls(url, driver, kwargs):
    target = parse_url(url)
    assert target.driver == driver
    assert target.kwargs == kwargs


def test_percent_encoded_credentials_are_decoded():
    target = parse_url("postgresql://us%40er:p%40ss%2Fw%3Ard@h/d%20b")
    assert target.kwargs["user"] == "us@er"
    assert target.kwargs["password"] == "p@ss/w:rd"
    assert target.kwargs["database"] == "d b"


@pytest.mark.parametrize("url, fragment", [
    ("oracle://h/db", "unsupported URL scheme 'oracle'"),
    ("postgresql+pymysql://h/db", "pymysql is a mysql driver, not a postgresql one"),
    ("mysql+nosuch://h/db", "unknown driver 'nosuch' in URL scheme 'mysql+nosuch'; mysql URLs take"),
    ("postgresql+mysql://h/db", "unknown driver 'mysql'"),
    ("127.0.0.1:5432/test", "no '://'"),
    ("postgresql://h:notaport/db", "bad port"),
    ("postgresql://h:70000/db", "bad port"),
    ("postgresql://h/a/b", "contains '/'"),
    ("sqlite://somehost/file.db", "takes no host"),
])
def test_bad_urls_name_the_bad_part(url, fragment):
    with pytest.raises(InterfaceError, match=fragment.replace("+", r"\+")):
        parse_url(url)


def test_bad_url_is_a_value_error_too():
    with pytest.raises(ValueError):
        adb.sync.Database("nosuch://x")
    with pytest.raises(InterfaceError, match="must be a str"):
        parse_url(b"postgresql://h/db")


def test_keyword_form_and_aliases():
    assert target_of(None, "postgresql", {"database": "t"}).driver == "psycopg2"
    assert target_of(None, "sqlite3", {"database": "x.db"}).kwargs == {"database": "x.db"}
    assert make_target(None, None, {}) is None
    with pytest.raises(InterfaceError, match="without driver"):
        make_target(None, None, {"host": "h"})
    with pytest.raises(InterfaceError, match="contradicts"):
        make_target("mysql://h/db", "psycopg2", {})
    assert target_of(None, "psycopg", {}).driver == "psycopg"
    assert target_of(None, "psycopg3", {}).driver == "psycopg"
    assert target_of("postgresql+psycopg://h/db", "psycopg", {}).driver == "psycopg"
    with pytest.raises(InterfaceError, match="contradicts"):
        make_target("postgresql+psycopg://h/db", "psycopg2", {})


def test_drivers_declare_themselves():
    """The registry is what the driver modules declare: one default per family,
    no name claimed twice, and each driver's URL scheme parses back to it."""
    found = drivers.registry()
    assert set(found) >= {"psycopg2", "psycopg", "pymysql", "sqlite3"}
    infos: list[drivers.DriverInfo] = []
    for name, cls in found.items():
        info = cls.info
        assert info is not None  # registry() admits only drivers with a DriverInfo
        infos.append(info)
        assert info.module == name and drivers.canonical(name) == name
        rest = "" if info.family is drivers.Family.SQLITE else "h/db"
        assert parse_url(f"{drivers.url_scheme(name)}://{rest}").driver == name
    defaults = [info.family for info in infos if info.default]
    assert sorted(f.name for f in defaults) == ["MYSQL", "POSTGRESQL", "SQLITE"]
    assert drivers.family("nosuch_module") is drivers.Family.OTHER
    assert repr(parse_url("postgresql+psycopg://u:pw@h:5433/app")) == \
        "Target('postgresql+psycopg://u:***@h:5433/app')"
    with pytest.raises(InterfaceError, match=r"postgresql\+psycopg://"):
        parse_url("oracle://h/db")


@pytest.mark.parametrize("kwargs, fragment", [
    ({"pool_size": 0}, "pool_size must be a positive integer"),
    ({"pool_size": "10"}, "pool_size must be a positive integer"),
    ({"pool_size": True}, "pool_size must be a positive integer"),
    ({"timeout": -1}, "timeout must be"),
    ({"row_factory": "csv"}, "row_factory"),
    ({"driver": "no_such_dbapi_module"}, "cannot be imported"),
    ({"driver": "json"}, "not a DB-API 2 module"),
])
def test_bad_options_fail_at_construction(kwargs, fragment):
    with pytest.raises(InterfaceError, match=fragment):
        adb.sync.Database(**kwargs)


def test_unknown_driver_keywords_fail_at_construction():
    with pytest.raises(InterfaceError, match="'hots'"):
        adb.sync.Database(driver="pymysql", hots="127.0.0.1")  # type: ignore[call-arg]
    with pytest.raises(InterfaceError, match=r"'hots' \(did you mean 'host'\?\)"):
        adb.sync.Database(driver="psycopg2", hots="127.0.0.1")  # type: ignore[call-arg]
    with pytest.raises(InterfaceError, match="journal_mode"):
        adb.sync.Database("sqlite:///x.db?journal_mode=fast")
    with pytest.raises(InterfaceError, match="connect_timeout"):
        adb.sync.Database("mysql://h/db?connect_timeout=soon")


@pytest.mark.parametrize("url, kwargs, fragment", [
    ("postgresql+psycopg://h/db", {"hots": "h"}, r"'hots' \(did you mean 'host'\?\)"),
    ("postgresql+psycopg://h/db?autocommit=1", {}, "autocommit= is adb's"),
    ("postgresql+psycopg://h/db?row_factory=dict_row", {}, "row_factory= is adb's"),
    ("postgresql+psycopg://h/db?prepare_threshold=soon", {}, "prepare_threshold='soon'"),
    ("postgresql+psycopg://h/db", {"dbname": "other"}, "dbname= or database=, not both"),
])
def test_bad_psycopg_options_fail_at_construction(url, kwargs, fragment):
    with pytest.raises(InterfaceError, match=fragment):
        adb.sync.Database(url, **kwargs)


def test_psycopg_options_are_normalised():
    db = adb.sync.Database("postgresql+psycopg://h/app?prepare_threshold=none&connect_timeout=3")
    try:
        kwargs = db._engine.driver.connect_kwargs
        assert kwargs["dbname"] == "app" and "database" not in kwargs
        assert kwargs["prepare_threshold"] is None and kwargs["connect_timeout"] == "3"
        assert kwargs["keepalives_idle"] == 30  # adb's defaults where the URL is silent
    finally:
        db.close()


def test_memory_sqlite_has_one_worker():
    db = adb.sync.Database("sqlite://")
    try:
        assert db.stats()["pool_size"] == 1
    finally:
        db.close()
    with pytest.raises(InterfaceError, match="in-memory SQLite"):
        adb.sync.Database("sqlite://", pool_size=4)


def test_no_password_in_repr_str_or_errors():
    target = parse_url(f"postgresql://user:{quote(CANARY, safe='')}@127.0.0.1:1/db")
    assert target.kwargs["password"] == CANARY
    for text in (repr(target), str(target), target.describe()):
        assert "canary" not in text and "***" in text
    with pytest.raises(InterfaceError) as info:
        parse_url("postgresql://user:secretpw@h:bad/db")
    assert "secretpw" not in str(info.value)


@pytest.mark.parametrize("kind", ["postgresql", "psycopg", "mysql"])
def test_failed_connect_shows_no_password(kind, caplog):
    caplog.set_level(logging.DEBUG)
    url = {"postgresql": "postgresql://u:{}@127.0.0.1:1/d?connect_timeout=1",
           "psycopg": "postgresql+psycopg://u:{}@127.0.0.1:1/d?connect_timeout=1",
           "mysql": "mysql://u:{}@127.0.0.1:1/d?connect_timeout=1"}[kind]
    db = adb.sync.Database(url.format(quote(CANARY, safe="")), name="hidden", pool_size=1)
    try:
        text = repr(db) + str(db.stats())
        assert "u:***@127.0.0.1:1/d" in text
        # nothing listens on port 1: the call fails fast, saying why, and may be retried
        with pytest.raises(adb.errors.ServerUnavailable, match="127.0.0.1:1/d") as info:
            db.runQuery("select 1")
        exc = info.value
        assert exc.may_have_run is False and "refused" in str(exc)
        text += str(exc) + repr(exc.args) + repr(exc.__cause__) + repr(exc.__context__)
    finally:
        db.close()
    text += caplog.text
    assert "cannot connect" in caplog.text
    assert "canary" not in text and quote(CANARY, safe="") not in text


@pytest.mark.parametrize("dsn, shown", [
    (f"host=127.0.0.1 port=5432 dbname=test user=root password='{CANARY} x'",
     "postgresql://root:***@127.0.0.1:5432/test"),
    (f"postgresql://root:{quote(CANARY, safe='')}@127.0.0.1:5432/test?sslmode=disable",
     "postgresql://root:***@127.0.0.1:5432/test"),
    ("postgresql:///test?host=/run/postgresql", "postgresql:///run/postgresql/test"),
    ("dbname = 'my db'", "postgresql:///my db"),
])
def test_a_libpq_dsn_string_is_described_by_its_host_and_database(dsn, shown):
    """adbapi users pass psycopg2 a DSN string (``ConnectionPool("psycopg2", dsn)``):
    reprs and errors still name its host and database, never its password."""
    target = target_for("psycopg2", {"connect_timeout": 10}, (dsn,))
    assert target.describe() == shown
    assert "canary" not in repr(target) and quote(CANARY, safe="") not in repr(target)


@pytest.mark.parametrize("url, host, port, shown", [
    ("postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write",
     "h1,h2", "5432,5433", "postgresql://u@h1:5432,h2:5433/db"),
    ("postgresql+psycopg://h1,h2:6000/db", "h1,h2", "5432,6000",
     "postgresql+psycopg://h1:5432,h2:6000/db"),
    ("mysql://root:pw@127.0.0.1:3307,127.0.0.1:3308,127.0.0.1:3309/test",
     "127.0.0.1,127.0.0.1,127.0.0.1", "3307,3308,3309",
     "mysql://root:***@127.0.0.1:3307,127.0.0.1:3308,127.0.0.1:3309/test"),
    ("mariadb://[::1]:3307,h%2Dx/test", "::1,h-x", "3307,3306", "mysql://::1:3307,h-x:3306/test"),
])
def test_multi_host_urls_keep_libpq_form(url, host, port, shown):
    target = parse_url(url)
    assert (target.kwargs["host"], target.kwargs["port"]) == (host, port)
    assert target.describe() == shown
    assert "pw" not in repr(target)


@pytest.mark.parametrize("url, words", [
    ("mysql://h1:3307,:3308/t", "empty host"),
    ("mysql://h1:99999,h2/t", "bad port '99999' for host 'h1'"),
    ("postgresql://h1:x,h2/t", "bad port 'x'"),
    ("mysql://u:secretpw@h1,h2:0/t", "bad port '0' for host 'h2'"),
])
def test_bad_multi_host_urls_name_the_part(url, words):
    with pytest.raises(InterfaceError, match=words) as info:
        parse_url(url)
    assert "secretpw" not in str(info.value)


def test_mysql_host_list_and_session_attrs_are_checked_at_construction():
    with pytest.raises(InterfaceError, match="target_session_attrs='primary'"):
        adb.sync.Database("mysql://h1,h2/t?target_session_attrs=primary")
    with pytest.raises(InterfaceError, match="one port, or one for each host"):
        adb.sync.Database(driver="pymysql", host="h1,h2,h3", port="1,2")
