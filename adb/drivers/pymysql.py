"""PyMySQL, for MySQL and MariaDB.

Connections run in autocommit mode; transactions use ``begin()``/``commit()``.
``executemany`` of an ``INSERT ... VALUES`` is rewritten by PyMySQL into multi-row
inserts, its bulk fast path.
"""

from .base import Driver

_INT_KEYS = {"port", "connect_timeout", "read_timeout", "write_timeout",
             "max_allowed_packet", "client_flag"}


class PyMySQLDriver(Driver):
    autocommit = True

    def check(self, kwargs):
        for key in _INT_KEYS & set(kwargs):
            kwargs[key] = _as_int(key, kwargs[key])
        if "dbname" in kwargs:
            kwargs["database"] = kwargs.pop("dbname")
        kwargs.setdefault("charset", "utf8mb4")
        kwargs["autocommit"] = True
        return super().check(kwargs)

    def begin(self, conn):
        conn.begin()

    def fetchall(self, cursor):
        return list(cursor.fetchall())

    def is_disconnect(self, exc, conn):
        err = self.dbapi.err
        if isinstance(exc, err.InterfaceError):
            return True
        return isinstance(exc, err.OperationalError) and exc.args[:1] in ((2006,), (2013,), (2014,))


def _as_int(key, value):
    from ..errors import InterfaceError
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InterfaceError(f"mysql {key}={value!r} is not an integer") from None


DRIVER = PyMySQLDriver
