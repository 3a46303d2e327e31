"""Both MySQL drivers over the server's Unix socket (``unix_socket=``): TCP keepalive
is for TCP sockets only (``adb.drivers._mysql.keep_alive``); set on a Unix socket it
raised "Operation not supported", and PyMySQL never connected that way."""

import os

import pytest

import adb.sync

from ..conftest import URLS, need_module, require_server


@pytest.mark.parametrize("module", ["pymysql", "MySQLdb"])
def test_a_connection_over_the_servers_unix_socket(module):
    require_server("mysql")
    need_module(module)
    with adb.sync.Database(URLS["mysql"], pool_size=1) as admin:
        path = str(admin.runQueryValue("select @@socket"))
    if not os.path.exists(path):
        pytest.skip(f"the test server's socket {path} is not on this machine")
    with adb.sync.Database(driver=module, unix_socket=path, user="root", database="test",
                           pool_size=1) as db:
        assert db.runQueryValue("select 1") == 1
        # over the socket itself (MariaDB names such a client localhost), not TCP
        assert db.runQueryValue("select host from information_schema.processlist "
                                "where id = connection_id()") == "localhost"
