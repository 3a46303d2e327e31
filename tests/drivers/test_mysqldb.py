"""What only the mysqlclient driver does (``adb/drivers/mysqldb.py``); the contract,
fault and endings suites run on it as on PyMySQL (the ``mysqldb`` target).

mysqlclient refuses any method of a connection called from another thread while a
call runs on it ("already in use from another thread"), and a forked child's copy of
such a connection refuses the same way. What other threads need, the cancel's server
and id and the fork hook's socket, is read when the connection opens."""

import os
import threading
import time
from typing import Any

import pytest

import adb.sync

from ..conftest import make_target, mysql_thread_id


@pytest.fixture
def url(tmp_path):
    return make_target("mysqldb", tmp_path).url


def test_a_busy_connection_tells_its_socket_and_id_to_other_threads(url):
    """While the worker's call runs, the connection's ``fileno()`` and the id a cancel
    sends ``KILL QUERY`` for answer from another thread (mysqlclient's own refuse)."""
    with adb.sync.Database(url, pool_size=1) as db:
        db.runQuery("select 1")
        conn = next(iter(db._engine.pool.connections.values()))
        fd, ident = conn.fileno(), mysql_thread_id(conn)
        call = threading.Thread(target=db.runQuery, args=("select sleep(1)",))
        call.start()
        try:
            deadline = time.monotonic() + 10
            with pytest.raises(Exception, match="in use from another thread"):
                while time.monotonic() < deadline:  # until the call holds the connection
                    conn.thread_id()
                    time.sleep(0.005)
            assert conn.fileno() == fd and mysql_thread_id(conn) == ident
        finally:
            call.join()
        assert db.runQueryValue("select connection_id()") == ident


def test_a_child_forked_during_a_call_points_its_copy_of_the_socket_away(url):
    """The fork hook points the child's copy of each connection's socket at /dev/null,
    so nothing the child does with it reaches the server; a connection whose call was
    running at the fork refuses the child's every method, its socket's number too, so
    the hook takes the number read at open. The parent's call ends as it would."""
    with adb.sync.Database(url, pool_size=1) as db:
        db.runQuery("select 1")
        conn = next(iter(db._engine.pool.connections.values()))
        fd, ident = conn.fileno(), mysql_thread_id(conn)
        result: dict[str, object] = {}
        call = threading.Thread(target=lambda: result.setdefault(
            "rows", db.runQuery("select sleep(1), 7")))
        call.start()
        deadline = time.monotonic() + 10
        while True:  # until the call holds the connection
            try:
                conn.thread_id()
            except Exception:
                break
            assert time.monotonic() < deadline, "the call never started"
            time.sleep(0.005)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: say where its copy of the socket points, and leave
            os.close(read)
            os.write(write, os.readlink(f"/proc/self/fd/{fd}").encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            where = pipe.read()
        os.waitpid(pid, 0)
        call.join()
        assert where == "/dev/null"
        assert result["rows"] == [(0, 7)]
        assert db.runQueryValue("select connection_id()") == ident  # the same session
        assert db.stats()["connects"] == 1


def _results(cursor) -> list[object]:
    """Every result set of the cursor's last statement, as mysqlclient gives them."""
    seen: list[object] = [cursor.fetchall() if cursor.description else cursor.rowcount]
    while cursor.nextset():
        seen.append(cursor.fetchall() if cursor.description else cursor.rowcount)
    return seen


def test_the_c_client_is_asked_for_a_next_result_only_when_one_is_left(url):
    """mysqlclient's cursors ask for the next result before each statement and when
    they close, and its ``next_result`` lets go of the GIL even with none left (a
    wait for the GIL each time beside a busy loop thread). adb's connection asks
    the C client only when the server said a result is left: never for a plain
    statement; a procedure's results all come, as on mysqlclient's own connection."""
    import importlib

    from adb import drivers
    from adb.drivers.mysqldb import adb_connection
    from adb.url import parse_url

    connections = importlib.import_module("MySQLdb.connections")  # no types of its own
    asked: list[bool] = []

    def next_result(self: Any) -> int:  # what reaches the C client's
        asked.append(True)
        return int(connections.Connection.next_result(self))
    recording = type("Recording", (connections.Connection,), {"next_result": next_result})

    driver = drivers.load(parse_url(url), None, None)
    ours = adb_connection(recording)(*driver.connect_args, **driver.connect_kwargs)
    theirs = connections.Connection(*driver.connect_args, **driver.connect_kwargs)
    try:
        setup = theirs.cursor()
        setup.execute("drop procedure if exists adb_two_sets")
        setup.execute("create procedure adb_two_sets() begin select 1; select 2, 3; end")
        setup.close()
        for statement, expected in (("select %s, %s", [((1, 2),)]), ("do %s + %s", [0])):
            cursor = ours.cursor()
            cursor.execute(statement, (1, 2))
            assert _results(cursor) == expected
            cursor.close()
        assert asked == []  # before, after and at close of each: never needed
        outcomes = []
        for conn in (theirs, ours):
            cursor = conn.cursor()
            cursor.execute("call adb_two_sets()")
            outcomes.append(_results(cursor))
            cursor.close()
        assert outcomes[0] == outcomes[1] and outcomes[1][:2] == [((1,),), ((2, 3),)]
        assert len(asked) == len(outcomes[1]) - 1  # once per result left
        cursor = ours.cursor()  # and the connection serves on
        cursor.execute("select %s", (7,))
        assert cursor.fetchall() == ((7,),)
    finally:
        theirs.cursor().execute("drop procedure if exists adb_two_sets")
        ours.close()
        theirs.close()


def test_the_drop_ins_own_connections_are_read_as_adbs_are(url):
    """The adbapi drop-in's native sessions open mysqlclient's own ``Connection``
    (exactly as ``MySQLdb.connect`` makes it). The driver reads them as it reads
    adb's: the connection's id (a cancel's), whether its peer is gone (the liveness
    check of a connection left idle), its socket (a cut). Before, each read raised
    AttributeError on those connections: the endings checker found every call after
    a server-side ``KILL`` failing so on the drop-in."""
    import importlib

    from adb import drivers
    from adb.url import parse_url

    plain = importlib.import_module("MySQLdb.connections").Connection
    driver: Any = drivers.load(parse_url(url), None, None, native=True)
    conn = driver.connect()
    try:
        assert type(conn) is plain  # the module's own, not adb's subclass
        ident = conn.thread_id()
        assert driver.side_of(conn).thread_id == ident
        assert not driver.peer_gone(conn)
        admin = adb.sync.Database(url, pool_size=1)
        try:
            admin.runOperation(f"KILL CONNECTION {ident}")
            deadline = time.monotonic() + 10
            while not driver.peer_gone(conn):  # the server's close reaches the socket
                assert time.monotonic() < deadline, "the killed connection never read as gone"
                time.sleep(0.01)
        finally:
            admin.close()
        driver.cut(conn)  # a cut of a dead connection's socket is harmless
    finally:
        driver.close(conn)
