"""psycopg2's bulk path: which statements are batched into multi-row inserts
(``split_values``), and that batching never changes what a ``runMany`` means."""

import pytest

import adb
from adb.drivers.psycopg2 import split_values

from ..conftest import URLS, psycopg_url, require_server


@pytest.mark.parametrize("sql, split", [
    ("insert into t (a, b) values (%s, %s)", ("insert into t (a, b) values %s", "(%s, %s)")),
    ("INSERT INTO t VALUES(%(a)s, now())", ("INSERT INTO t VALUES%s", "(%(a)s, now())")),
    ("insert into t values (%s, 'it''s (x)')",
     ("insert into t values %s", "(%s, 'it''s (x)')")),
    ('insert into "T" ("a)") values (%s)', ('insert into "T" ("a)") values %s', "(%s)")),
    ("insert into t values (%s, %s) on conflict (a) do nothing",
     ("insert into t values %s on conflict (a) do nothing", "(%s, %s)")),
    ("insert into t values (%s) returning a", ("insert into t values %s returning a", "(%s)")),
])
def test_single_row_inserts_are_split(sql, split):
    assert split_values(sql) == split


@pytest.mark.parametrize("sql", [
    "insert into t values (%s, $$ ) $$)",               # dollar quotes
    "insert into t values (%s, $tag$ ) $tag$)",
    "insert into t values (%s, %s) -- ) trailing",      # comments
    "insert into t values (%s /* ) */, %s)",
    "insert into t values (%s, E'\\')')",              # backslash escapes
    "insert into t values (%s, %s) on conflict (a) do update set b = excluded.b",
    "insert into t values (%s, %s) on conflict (a) do update set b = %s",
    "insert into t values (%s), (%s)",                  # already several rows
    "insert into t select %s",
    "update t set a = %s",
    "insert into t values (%s",                         # unbalanced
    b"insert into t values (%s)",
])
def test_what_batching_could_change_is_left_to_executemany(sql):
    assert split_values(sql) is None


@pytest.mark.parametrize("url", ["postgresql", "psycopg"])
async def test_upsert_with_a_key_twice_updates_as_row_by_row_would(url, table_name):
    require_server("postgresql")
    db = adb.Database(psycopg_url() if url == "psycopg" else URLS["postgresql"], pool_size=1)
    try:
        await db.runOperation(f"create table {table_name} (k int primary key, v text)")
        upsert = (f"insert into {table_name} values (%s, %s) "
                  "on conflict (k) do update set v = excluded.v")
        rows = [(1, "a"), (2, "b"), (1, "c")] * 400
        assert await db.runMany(upsert, rows) == 1200
        assert await db.runQuery(f"select k, v from {table_name} order by k") == [
            (1, "c"), (2, "b")]
        text = f"insert into {table_name} values (%s, $$ ) $$)"
        assert await db.runMany(text, [(3,), (4,)]) == 2
        assert await db.runQuery(f"select v from {table_name} where k = 4") == [(" ) ",)]
    finally:
        await db.runOperation(f"drop table if exists {table_name}")
        await db.close()
