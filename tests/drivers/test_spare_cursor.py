"""A worker reuses one cursor between calls, but never one that still holds rows,
belongs to a replaced connection, or went through an error."""

import pytest

import adb.sync


def spare(db):
    (worker,) = db._engine.pool.workers
    return worker.session._spare


def test_operations_share_a_cursor_queries_leave_none(target, table_name):
    with adb.sync.Database(target.url, pool_size=1) as db:
        db.runOperation(f"create table {table_name} (k int primary key, v varchar(10))")
        try:
            db.runOperation(target.sql(f"insert into {table_name} values (%s, %s)"), (1, "a"))
            first = spare(db)
            assert first is not None
            db.runOperation(target.sql(f"insert into {table_name} values (%s, %s)"), (2, "b"))
            assert spare(db)[1] is first[1]  # the same cursor, not a new one
            rows = db.runQuery(f"select k, v from {table_name} order by k")
            assert rows == [(1, "a"), (2, "b")]
            assert spare(db) is None  # rows stay in a cursor until its next execute: not kept
            with pytest.raises(db.dbapi.IntegrityError):
                db.runOperation(target.sql(f"insert into {table_name} values (%s, %s)"), (1, "x"))
            assert spare(db) is None  # not reused after an error
            assert db.runOperation(
                target.sql(f"update {table_name} set v = %s where k = %s"), ("c", 2)) == 1
            with db.transaction() as tx:
                tx.runOperation(target.sql(f"insert into {table_name} values (%s, %s)"), (3, "d"))
                assert tx.runQuery(f"select count(*) from {table_name}") == [(3,)]
            assert db.runQuery(f"select v from {table_name} order by k") == [("a",), ("c",), ("d",)]
        finally:
            db.runOperation(f"drop table {table_name}")


def test_a_replaced_connection_gets_a_new_cursor(tmp_path):
    with adb.sync.Database(f"sqlite:///{tmp_path}/r.db", pool_size=1) as db:
        db.runOperation("create table t (k int)")
        old_conn, old_cursor = spare(db)
        (worker,) = db._engine.pool.workers
        worker.session.disconnect("test")  # as after a broken connection
        assert worker.session._spare is None
        # the worker thread is idle in its inbox; the next call reconnects
        assert db.runOperation("insert into t values (1)") == 1
        conn, cursor = spare(db)
        assert conn is not old_conn and cursor is not old_cursor
        assert db.runQuery("select count(*) from t") == [(1,)]
