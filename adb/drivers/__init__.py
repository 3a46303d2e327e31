"""One module per DB-API driver; ``load(target)`` picks the right one."""

import importlib

from ..errors import InterfaceError
from .base import Driver

_MODULES = {"psycopg2": "psycopg2", "pymysql": "pymysql", "sqlite3": "sqlite3"}

_EXTRAS = {"psycopg2": "postgresql", "pymysql": "mysql"}


def load(target, on_connect=None):
    """Return a Driver instance for ``target`` (a ``adb.url.Target``); ``on_connect``
    is called with every new connection, in its worker thread."""
    if target.driver in _MODULES:
        module = importlib.import_module(f".{_MODULES[target.driver]}", __name__)
        cls = module.DRIVER
    else:
        from .generic import GenericDriver as cls
    try:
        dbapi = importlib.import_module(target.driver)
    except ImportError as exc:
        extra = _EXTRAS.get(target.driver)
        hint = f" (pip install 'adb-async[{extra}]')" if extra else ""
        raise InterfaceError(
            f"driver module {target.driver!r} cannot be imported: {exc}{hint}") from None
    if not hasattr(dbapi, "connect"):
        raise InterfaceError(f"{target.driver!r} is not a DB-API 2 module: it has no connect()")
    return cls(dbapi, target, on_connect)


__all__ = ["Driver", "load"]
