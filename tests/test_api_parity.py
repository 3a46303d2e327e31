"""Every front-end exposes the same public API."""

import inspect

import adb.asyncio
import adb.sync
import adb.tornado

PUBLIC = {"runQuery", "runOperation", "runMany", "runInteraction", "beginTransaction",
          "commitTransaction", "rollbackTransaction", "transaction", "close", "stats",
          "paramstyle", "dbapi", "closed", "name"}
FRONTS = [adb.asyncio.Database, adb.tornado.Database, adb.sync.Database]


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
