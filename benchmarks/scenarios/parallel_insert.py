"""Seed 000: N single-row inserts fired at once through a pool of 10, then count(*).

drop/create ``benchmark(userid int primary key, data varchar(100))``; every
system inserts ``(i, str(i))`` for i in 0..N-1, all calls issued before the
first completes; afterwards the parent checks the count, the key sum and the
data column.
"""

import adb.sync

NAME = "parallel-insert"
SEED = "000"
DESCRIPTION = "N single-row inserts fired at once, pool of 10 (seed 000)"
TABLE = "benchmark"
_AS_TEXT = {"psycopg2": "cast(userid as varchar(100))", "pymysql": "cast(userid as char)",
            "sqlite3": "cast(userid as text)"}


def statement(paramstyle):
    mark = "?" if paramstyle == "qmark" else "%s"
    return f"insert into {TABLE} (userid, data) values ({mark}, {mark})"


def params(rows):
    return [(i, str(i)) for i in range(rows)]


def prepare(url, rows):
    with adb.sync.Database(url, pool_size=1) as db:
        db.runOperation(f"drop table if exists {TABLE}")
        db.runOperation(f"create table {TABLE} (userid int not null primary key, "
                        "data varchar(100))")


def verify(url, rows):
    """Raise WrongResult unless exactly the N expected rows are there."""
    from . import WrongResult
    with adb.sync.Database(url, pool_size=1) as db:
        text = _AS_TEXT[db.dbapi.__name__]
        (count, key_sum, bad), = db.runQuery(
            f"select count(*), coalesce(sum(userid), 0), "
            f"sum(case when data = {text} then 0 else 1 end) from {TABLE}")
    expected_sum = rows * (rows - 1) // 2
    if count != rows or int(key_sum) != expected_sum or (bad or 0) != 0:
        raise WrongResult(f"expected {rows} rows (key sum {expected_sum}), found {count} rows "
                          f"(key sum {key_sum}, {bad or 0} with wrong data)")
