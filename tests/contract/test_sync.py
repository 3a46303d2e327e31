"""The blocking front-end from plain threads."""

import threading

import pytest

import adb.sync
from adb.errors import PoolTimeout


def test_threads_share_one_database(tmp_path):
    with adb.sync.Database(f"sqlite:///{tmp_path}/s.db", pool_size=4) as db:
        db.runOperation("create table t (k int primary key)")
        errors = []

        def writer(base):
            try:
                for i in range(100):
                    db.runOperation("insert into t values (?)", (base + i,))
            except Exception as exc:  # collected and asserted below
                errors.append(exc)
        threads = [threading.Thread(target=writer, args=(n * 1000,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert db.runQuery("select count(*), count(distinct k) from t") == [(800, 800)]
    assert db.closed


def test_sqlite_parallel_writers_never_see_database_is_locked(tmp_path):
    """Transactions from many threads on a file: BEGIN IMMEDIATE + busy timeout + WAL."""
    with adb.sync.Database(f"sqlite:///{tmp_path}/l.db", pool_size=8) as db:
        db.runOperation("create table t (k int primary key, v int)")

        def work(n):
            for i in range(25):
                with db.transaction() as tx:
                    tx.runQuery("select count(*) from t")
                    tx.runOperation("insert into t values (?, ?)", (n * 100 + i, n))
        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert db.runQuery("select count(*) from t") == [(200,)]
        assert db.runQuery("pragma journal_mode") == [("wal",)]


def test_timeout_while_all_workers_busy(tmp_path):
    with adb.sync.Database(f"sqlite:///{tmp_path}/t.db", pool_size=1) as db:
        tx = db.beginTransaction()
        with pytest.raises(PoolTimeout, match="within 0.1 s"):
            db.runQuery("select 1", timeout=0.1)
        tx.rollback()
        assert db.runQuery("select 1", timeout=10) == [(1,)]  # the worker is free again


def test_embedded_default_file_is_removed_on_close():
    db = adb.sync.Database()
    embedded = db._engine.lifecycle._embedded
    assert embedded is not None
    path = embedded.path
    db.runOperation("create table t (a int)")
    assert db.runQuery("select count(*) from t") == [(0,)]
    db.close()
    import os
    assert not os.path.exists(path)


def test_generic_pep249_module_by_name(tmp_path):
    """Any DB-API module works through the generic driver (sqlite3 by a name adb
    does not special-case): commits after each call, rolls back after a failure."""
    import sys
    import types
    import sqlite3
    module = types.ModuleType("plain_dbapi")
    vars(module).update(
        connect=lambda database: sqlite3.connect(database),  # implicit transactions
        paramstyle="qmark",
        Error=sqlite3.Error)
    sys.modules["plain_dbapi"] = module
    try:
        with adb.sync.Database(driver="plain_dbapi", database=str(tmp_path / "g.db"),
                               pool_size=2) as db:
            assert db.paramstyle == "qmark"
            db.runOperation("create table t (k int primary key)")
            db.runOperation("insert into t values (?)", (1,))
            with pytest.raises(sqlite3.IntegrityError):
                db.runMany("insert into t values (?)", [(2,), (1,)])
            with adb.sync.Database(f"sqlite:///{tmp_path}/g.db", pool_size=1) as other:
                assert other.runQuery("select k from t") == [(1,)]
    finally:
        del sys.modules["plain_dbapi"]


def test_unclosed_database_warns():
    import gc
    db = adb.sync.Database("sqlite://")
    db.runQuery("select 1")
    with pytest.warns(ResourceWarning, match="unclosed"):
        del db
        gc.collect()


def test_common_calls_check_their_arguments_as_every_call_does():
    """The common call's inline check passes only a str statement with plain
    parameters; every other form goes through the full check, as before."""
    import adb.sync
    with adb.sync.Database("sqlite://", pool_size=1) as db:
        db.runOperation("create table common (k int, v text)")
        assert db.runOperation("insert into common values (?, ?)", [1, "a"]) == 1
        assert db.runOperation(("insert into common values (?, ?)", (2, "b"))) == 1  # 2011 form
        assert db.runOperation("insert into common values (3, 'c')") == 1
        assert db.runQuery("select k from common where v = :v", {"v": "b"}) == [(2,)]
        assert db.runQueryValue("select count(*) from common", ()) == 3
        with pytest.raises(TypeError, match="not str"):
            db.runOperation("insert into common values (?, ?)", "ab")
        with pytest.raises(TypeError, match="SQL must be a str, not int"):
            db.runQueryRow(5)  # type: ignore[arg-type]
        with pytest.raises(db.dbapi.OperationalError):
            db.runOperation("insert into nowhere values (1)")
        assert db.runQueryValue("select count(*) from common") == 3
