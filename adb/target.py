"""Where to connect: the ``Target`` value, and the server ``Family`` it belongs to.

A plain value at the bottom of the package: it describes itself (for reprs,
logs and errors, never with the password) from what it holds, so the drivers
can take one without knowing how URLs are parsed or which drivers exist.
``adb.url`` builds Targets from URLs and keywords, filling in what the driver
registry declares.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

_SECRET_KEYS = frozenset({"password", "passwd", "pass", "secret"})


class Family(enum.Enum):
    """A kind of server; its URL schemes pick its default driver, ``+dialect`` another."""

    POSTGRESQL = ("postgresql", "postgres")
    MYSQL = ("mysql", "mariadb")
    SQLITE = ("sqlite",)
    OTHER = ()

    @property
    def scheme(self) -> str:
        """The scheme URLs of this family are written with (``postgresql``)."""
        return self.value[0] if self.value else "other"

    @property
    def schemes(self) -> tuple[str, ...]:
        schemes: tuple[str, ...] = self.value
        return schemes


@dataclasses.dataclass(frozen=True)
class Target:
    """Where to connect: a driver name and the arguments for its ``connect()``.

    ``driver`` is the PEP 249 module's name (``psycopg2``, ``psycopg``,
    ``pymysql``, ``sqlite3`` or any other), ``family`` its kind of server and
    ``scheme`` the URL scheme that names it (``postgresql+psycopg``; the module's
    name for a generic one). ``repr`` and ``describe()`` never show the password.
    """

    driver: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    args: tuple[Any, ...] = ()
    family: Family = Family.OTHER
    scheme: str = ""

    def describe(self) -> str:
        """A URL-like, password-free description for reprs, logs and errors."""
        kw = self.kwargs
        scheme = self.scheme or self.driver
        if self.args and not kw:
            return f"{scheme}://(positional connect arguments)"
        if self.family is Family.SQLITE:
            path = str(kw.get("database", ":memory:"))
            return f"{scheme}://" if path == ":memory:" else f"{scheme}:///" + path
        user = str(kw.get("user", ""))
        if any(k in kw for k in _SECRET_KEYS):
            user += ":***"
        db = kw.get("database") or kw.get("dbname") or kw.get("db") or ""
        netloc = (user + "@" if user else "") + ",".join(self._hosts())
        return f"{scheme}://{netloc}/{db}"

    def _hosts(self) -> list[str]:
        """``host:port`` of each host, several for a multi-host target (libpq's
        comma-separated ``host``/``port`` form)."""
        host = str(self.kwargs.get("host") or self.kwargs.get("unix_socket") or "")
        port = self.kwargs.get("port")
        hosts, ports = host.split(","), str(port or "").split(",")
        if len(ports) != len(hosts):
            ports = ports[:1] * len(hosts)
        return [h + (f":{p}" if p else "") for h, p in zip(hosts, ports)]

    def __repr__(self) -> str:
        return f"Target({self.describe()!r})"

    __str__ = describe


__all__ = ["Family", "Target"]
