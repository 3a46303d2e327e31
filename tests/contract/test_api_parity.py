"""Every front-end exposes the same public API."""

import inspect

import adb.asyncio
import adb.sync
import adb.tornado
import adb.trio
import adb.twisted

PUBLIC = {"runQuery", "runOperation", "runMany", "runInteraction", "beginTransaction",
          "commitTransaction", "rollbackTransaction", "transaction", "runTransaction",
          "close", "stats", "listen", "notify", "paramstyle", "dbapi", "closed", "name"}
FRONTS = [adb.asyncio.Database, adb.tornado.Database, adb.sync.Database, adb.twisted.Database,
          adb.trio.Database]
#: what a front-end's Database has beside the common API: the loop it delivers on
OWN: dict[type, set[str]] = {adb.tornado.Database: {"ioloop"}, adb.twisted.Database: {"reactor"}}


def public_names(cls):
    return {n for n in dir(cls) if not n.startswith("_")}


def test_same_public_names_on_every_front_end():
    names = [public_names(cls) - OWN.get(cls, set()) | {"name"} for cls in FRONTS]
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
    ours = public_names(adb.twisted.ConnectionPool)
    assert adbapi_api <= ours, adbapi_api - ours
    assert {"runMany", "beginTransaction", "commitTransaction", "rollbackTransaction",
            "stats", "stream", "copy_in", "copy_out"} <= ours
    # what subclasses override, and the hooks, are adbapi's own unless adb needs its own
    for name in ("_runInteraction", "_runWithConnection", "_runQuery", "_runOperation",
                 "_close", "connectionFactory", "transactionFactory"):
        assert getattr(adb.twisted.ConnectionPool, name) is getattr(adbapi.ConnectionPool, name)
    assert issubclass(adb.twisted.ConnectionPool, adbapi.ConnectionPool)
