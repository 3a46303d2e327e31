"""Every front-end exposes the same public API."""

import inspect

import adb.asyncio
import adb.sync
import adb.tornado
import adb.twisted

PUBLIC = {"runQuery", "runOperation", "runMany", "runInteraction", "beginTransaction",
          "commitTransaction", "rollbackTransaction", "transaction", "runTransaction",
          "close", "stats", "listen", "notify", "paramstyle", "dbapi", "closed", "name"}
FRONTS = [adb.asyncio.Database, adb.tornado.Database, adb.sync.Database, adb.twisted.Database]


def public_names(cls):
    return {n for n in dir(cls) if not n.startswith("_")}


def test_same_public_names_on_every_front_end():
    names = [public_names(cls) | {"name"} for cls in FRONTS]
    assert all(n == names[0] for n in names), names
    assert PUBLIC <= names[0]


def test_same_call_signatures():
    for method in PUBLIC - {"paramstyle", "dbapi", "closed", "name", "close"}:
        signatures = {str(inspect.signature(getattr(cls, method))) for cls in FRONTS}
        assert len(signatures) == 1, (method, signatures)


def test_top_level_database_is_asyncio():
    import adb
    assert adb.Database is adb.asyncio.Database
    assert adb.errors.Error in adb.PoolClosed.__mro__


def test_connection_pool_has_adbapis_methods_and_adbs_additions():
    from twisted.enterprise import adbapi
    adbapi_api = {n for n in dir(adbapi.ConnectionPool) if not n.startswith("_")}
    adbapi_api -= {"connectionFactory", "transactionFactory"}  # internals, see docs/adbapi.md
    ours = public_names(adb.twisted.ConnectionPool)
    assert adbapi_api <= ours, adbapi_api - ours
    assert {"runMany", "beginTransaction", "commitTransaction", "rollbackTransaction",
            "stats"} <= ours
