"""MongoDB for the benchmarks: where the server is, what it is, and a blocking client.

adb itself talks SQL; the MongoDB scenarios (seed 001's Motor against PyMongo, and
the thread-pool tax of ``mongo-tasks``) measure the drivers people use instead.
The server here is usually the stand-in that ``.ci/start-mongo`` starts (CongoDB,
a MongoDB-wire server in Node), so every figure is labelled with what answered.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

SCHEME = "mongodb"
#: where ``.ci/start-mongo`` writes the URL of the server it brought up
URL_FILE = pathlib.Path(os.environ.get("ADB_MONGO_STANDIN_DIR")
                        or pathlib.Path(os.environ.get("XDG_CACHE_HOME")
                                        or pathlib.Path.home() / ".cache") / "adb" / "mongo-standin"
                        ) / "url"
DEFAULT_URL = "mongodb://127.0.0.1:27017/test"


def is_mongo(url: Optional[str]) -> bool:
    return url is not None and url.split("://", 1)[0] in (SCHEME, "mongodb+srv")


def default_url() -> str:
    """``ADB_MONGO_URL``, else the URL ``.ci/start-mongo`` recorded, else 27017."""
    if os.environ.get("ADB_MONGO_URL"):
        return os.environ["ADB_MONGO_URL"]
    try:
        return URL_FILE.read_text().strip() or DEFAULT_URL
    except OSError:
        return DEFAULT_URL


def describe(url: str) -> str:
    """The URL without its password, for reports and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def client(url: str, factory: Any = None, **options: Any) -> Any:
    """A client (PyMongo's blocking ``MongoClient`` unless ``factory`` names another:
    Motor's, ``AsyncMongoClient``) that fails fast when nothing answers. Any: the
    clients' classes share no type."""
    if factory is None:
        from pymongo import MongoClient
        factory = MongoClient
    return factory(url, serverSelectionTimeoutMS=5000, **options)


def database(client_: Any, url: str) -> Any:
    """The URL's database (``test`` if it names none)."""
    return client_.get_database(urlsplit(url).path.lstrip("/") or "test")


def server_version(url: str) -> str:
    """What answered: 'MongoDB 7.0.14', or the stand-in by name (CongoDB reports
    version 7.0.0 and gitVersion 'congodb')."""
    try:
        with client(url) as c:
            info = c.admin.command("buildInfo")
    except Exception as exc:  # reported, not fatal: the runs will say more
        return f"unknown ({type(exc).__name__})"
    if info.get("gitVersion") == "congodb":
        return (f"CongoDB (@push.rocks/smartmongo 2.2.0, a MongoDB-wire stand-in in Node; "
                f"reports MongoDB {info.get('version')})")
    return f"MongoDB {info.get('version', '?')}"
