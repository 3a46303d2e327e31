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
import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

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
        dsn = self.args[0] if self.args else kw.get("dsn")
        if self.family is Family.POSTGRESQL and isinstance(dsn, str):
            kw = {**libpq_fields(dsn), **kw}  # a libpq DSN: its host and database
        elif self.args and not kw:
            return f"{scheme}://(positional connect arguments)"
        if self.family is Family.SQLITE:
            path = str(kw.get("database", ":memory:"))
            return f"{scheme}://" if path == ":memory:" else f"{scheme}:///" + path
        user = str(kw.get("user", ""))
        if any(k in kw for k in _SECRET_KEYS):
            user += ":***"
        db = kw.get("database") or kw.get("dbname") or kw.get("db") or ""
        netloc = (user + "@" if user else "") + ",".join(_hosts(kw))
        return f"{scheme}://{netloc}/{db}"

    def __repr__(self) -> str:
        return f"Target({self.describe()!r})"

    __str__ = describe


def _hosts(kwargs: dict[str, Any]) -> list[str]:
    """``host:port`` of each host, several for a multi-host target (libpq's
    comma-separated ``host``/``port`` form)."""
    host = str(kwargs.get("host") or kwargs.get("unix_socket") or "")
    port = kwargs.get("port")
    hosts, ports = host.split(","), str(port or "").split(",")
    if len(ports) != len(hosts):
        ports = ports[:1] * len(hosts)
    return [h + (f":{p}" if p else "") for h, p in zip(hosts, ports)]


_PAIR = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)")
#: what a description shows of a libpq DSN (the password only as being there)
_SHOWN = ("host", "hostaddr", "port", "user", "dbname", "password")


#: what begins a URI: a scheme and ``://`` (a libpq ``key=value`` string begins with a
#: key, and may hold ``://`` only inside a value: a password)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(dsn: str) -> bool:
    """Is the connection string ``dsn`` a URI (``postgresql://...``), not libpq's
    ``key=value`` form?"""
    return _SCHEME.match(dsn) is not None


def libpq_fields(dsn: str) -> dict[str, str]:
    """What ``describe`` shows of a libpq connection string, in its ``key=value``
    form or its ``postgresql://`` URI form: host, port, user, dbname, and
    ``password`` as ``***`` where one is given (never its value)."""
    fields: dict[str, str] = {}
    if is_uri(dsn) and credentials_unclear(dsn):
        fields.update(host=hosts_after_credentials(dsn), password="***")
    elif is_uri(dsn):
        parts = urlsplit(dsn)
        userinfo, _, hosts = parts.netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        fields.update(host=unquote(hosts), user=unquote(user), dbname=unquote(parts.path[1:]))
        if colon:
            fields["password"] = "***"
        fields.update(parse_qsl(parts.query))
    else:
        fields.update((key, value.strip("'")) for key, value in _PAIR.findall(dsn))
    if "hostaddr" in fields and not fields.get("host"):
        fields["host"] = fields["hostaddr"]
    return {key: ("***" if key == "password" else value) for key, value in fields.items()
            if key in _SHOWN and value}


#: what ends a URL's host part (and so cuts short a password holding one raw)
_AFTER_HOST = "/?#"


def credentials_unclear(url: str) -> bool:
    """True when a ``scheme://...`` URL's credentials cannot be told from the rest:
    an ``@`` past the host part (a raw ``/``, ``?`` or ``#`` in a password ends
    the host part early, and an ``@`` in a query value reads the same), or a URL
    ``urlsplit`` refuses (a raw ``[``/``]``, a character NFKC turns into one of these).
    A raw ``@`` or ``:`` in a password is unambiguous: the host follows the last ``@``."""
    rest = url.split("://", 1)[-1]
    at = rest.rfind("@")
    if at < 0:
        return False
    ends = [i for i in (rest.find(c) for c in _AFTER_HOST) if i >= 0]
    if ends and min(ends) < at:
        return True
    try:
        urlsplit(url)
    except ValueError:
        return True
    return False


def mask_credentials(url: str) -> str:
    """``url`` with everything between ``://`` and its last ``@`` as ``***``: all
    that could be credentials, for an error about a URL that cannot be parsed."""
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    if "@" not in rest:
        return url
    return f"{head}{sep}***@{rest.rpartition('@')[2]}"


def hosts_after_credentials(url: str) -> str:
    """The host part after a URL's last ``@`` (up to its path or query)."""
    host = url.rpartition("@")[2]
    for delimiter in _AFTER_HOST:
        host = host.split(delimiter, 1)[0]
    return unquote(host)


__all__ = ["Family", "Target", "credentials_unclear", "hosts_after_credentials", "is_uri",
           "libpq_fields", "mask_credentials"]
