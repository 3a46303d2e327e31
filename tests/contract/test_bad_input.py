"""Bad input: the driver's own error, nothing run, no retry, the pool unharmed;
values always travel as data (hypothesis generates the nasty ones)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adb.sync
from adb.errors import ConnectionLost

from ..conftest import URLS, make_target, psycopg_url, require_server

class BadInputDatabase(adb.sync.Database):
    """The blocking Database with what these tests need to know about its target."""

    kind: str
    table: str
    p: str


NASTY = ["'", '"', "\\", "%s", "%(x)s", "?", "$1", ";--", "'); drop table x; --", "%", "%%"]


@pytest.fixture(params=["postgresql", "psycopg", "mysql", "sqlite"])
def sdb(request, tmp_path, table_name):
    kind = request.param
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}/bad.db"
    else:
        require_server("postgresql" if kind == "psycopg" else kind)
        url = psycopg_url() if kind == "psycopg" else URLS[kind]
    db = BadInputDatabase(url, pool_size=2)
    db.kind, db.table = kind, table_name
    db.p = "?" if kind == "sqlite" else "%s"
    text = "text" if kind != "mysql" else "longtext"
    db.runOperation(f"create table {table_name} (k bigint, v {text})")
    yield db
    db.runOperation(f"drop table {table_name}")
    db.close()


def insert(db):
    return f"insert into {db.table} (k, v) values ({db.p}, {db.p})"


def count(db):
    return db.runQuery(f"select count(*) from {db.table}")[0][0]


@pytest.mark.parametrize("value", [object(), {1, 2}, lambda: 0], ids=["object", "set", "function"])
def test_unsupported_parameter_types(sdb, value):
    if sdb.kind == "mysql" and not isinstance(value, set):
        # PyMySQL writes str(value) for types it does not know: the driver's choice,
        # passed through; the value still travels as data, once
        sdb.runOperation(insert(sdb), (1, value))
        assert sdb.runQuery(f"select v from {sdb.table}") == [(str(value),)]
        return
    # MariaDB refuses a set (PyMySQL writes it as a list) as an operand; the rest
    # are refused by the driver before anything is sent
    expected = sdb.dbapi.OperationalError if sdb.kind == "mysql" else sdb.dbapi.ProgrammingError
    with pytest.raises(expected):
        sdb.runOperation(insert(sdb), (1, value))
    assert count(sdb) == 0
    assert sdb.runQuery("select 1") == [(1,)]
    assert sdb.stats()["connects"] <= 2  # no connection was replaced, nothing retried


def test_ragged_run_many_writes_nothing(sdb):
    # each driver's own error, passed through (psycopg2's execute_values indexes the row)
    expected = IndexError if sdb.kind == "postgresql" else sdb.dbapi.ProgrammingError
    with pytest.raises(expected):
        sdb.runMany(insert(sdb), [(1, "a"), (2,), (3, "c")])
    assert count(sdb) == 0


def test_dict_parameters_for_positional_placeholders(sdb):
    expected = TypeError if sdb.kind in ("postgresql", "psycopg") else sdb.dbapi.ProgrammingError
    with pytest.raises(expected):
        sdb.runOperation(insert(sdb), {"k": 1, "v": "x"})
    assert count(sdb) == 0 and sdb.runQuery("select 1") == [(1,)]


@pytest.mark.parametrize("value", NASTY)
def test_sql_looking_values_stay_data(sdb, value):
    sdb.runOperation(insert(sdb), (7, value))
    assert sdb.runQuery(f"select v from {sdb.table} where k = {sdb.p}", (7,)) == [(value,)]
    assert count(sdb) == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                    max_size=200),
       number=st.integers(min_value=-2**63, max_value=2**63 - 1))
def test_generated_values_round_trip(sdb: BadInputDatabase, text: str, number: int) -> None:
    sdb.runOperation(f"delete from {sdb.table}")
    sdb.runOperation(insert(sdb), (number, text))
    rows = sdb.runQuery(f"select k, v from {sdb.table} where k = {sdb.p} and v = {sdb.p}",
                        (number, text))
    if sdb.kind == "mysql":  # MariaDB compares text case- and trailing-space-insensitively
        rows = [r for r in sdb.runQuery(f"select k, v from {sdb.table}") if r[1] == text]
    assert rows == [(number, text)]
    assert count(sdb) == 1


def test_nul_in_postgresql_text_is_refused_clearly(table_name):
    require_server("postgresql")
    with adb.sync.Database(URLS["postgresql"], pool_size=1) as db:
        with pytest.raises(ValueError, match="NUL"):
            db.runQuery("select %s", ("a\x00b",))
        assert db.runQuery("select 1") == [(1,)]


def test_large_value_round_trips_on_postgresql():
    require_server("postgresql")
    blob = bytes(range(256)) * (16 * 4096)  # 16 MB
    with adb.sync.Database(URLS["postgresql"], pool_size=1) as db:
        assert db.runQuery("select length(%s::bytea)", (blob,)) == [(len(blob),)]


@pytest.mark.parametrize("driver", ["mysql", "mysqldb"])
def test_packet_over_max_allowed_packet_on_mariadb(driver, table_name, tmp_path):
    with adb.sync.Database(make_target(driver, tmp_path).url, pool_size=1) as db:
        limit = db.runQuery("select @@max_allowed_packet")[0][0]
        db.runOperation(f"create table {table_name} (v longblob)")
        try:
            connects = db.stats()["connects"]
            for size in (limit + 1024, limit * 3):
                with pytest.raises(db.dbapi.OperationalError) as info:
                    db.runOperation(f"insert into {table_name} values (%s)", (b"x" * size,))
                # refused before a byte was sent: it names the limit and did not run
                assert "max_allowed_packet" in str(info.value)
                assert f"({limit} bytes)" in str(info.value)
                assert info.value.may_have_run is False
            assert db.runQuery(f"select count(*) from {table_name}") == [(0,)]  # not run, not retried
            assert db.stats()["connects"] == connects  # the connection stayed usable
            # a statement one byte short of the limit is sent, and runs
            short = limit - 1 - len("select length('')") - 1
            assert db.runQuery("select length(%s)", ("x" * short,)) == [(short,)]
        finally:
            db.runOperation(f"drop table {table_name}")
