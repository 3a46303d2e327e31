"""Connection targets: URLs and keyword forms, parsed into a secret-free ``Target``.

Accepted URLs follow the SQLAlchemy convention, ``family[+driver]://``::

    postgresql://user:password@host:5432/dbname?sslmode=require
    postgresql+psycopg://...         postgresql+psycopg2://...    postgres://...
    mysql://user@host:3306/dbname    mysql+pymysql://...          mariadb://...
    sqlite:///relative/path.db       sqlite:////absolute/path.db
    sqlite://                        (an in-memory database)
    postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write
    mysql://u@h1:3307,h2:3308,h3:3309/db              (several hosts: failover)

The family's bare scheme means its default driver; which drivers exist, and
which is the default, is what the modules in ``adb.drivers`` declare. Query
parameters are passed to the driver's ``connect()`` as keywords. The ``Target``
value itself lives in ``adb.target``, below the drivers.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Union
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from . import drivers
from .errors import InterfaceError
from .target import Family, Target, credentials_unclear, is_uri, mask_credentials

#: the port a host of a multi-host URL gets when none is written
DEFAULT_PORTS = {Family.POSTGRESQL: 5432, Family.MYSQL: 3306}

#: a ``%`` that does not start a ``%XX`` escape, or that escapes a NUL byte, which libpq
#: refuses in a URI (its error quoting the text around it)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})|%00")


def _userinfo(url: str) -> str:
    """What precedes the host part's last ``@`` (empty without one)."""
    netloc = re.split(r"[/?#]", url.split("://", 1)[-1], maxsplit=1)[0]
    return netloc.rpartition("@")[0]


def target_for(driver: str, kwargs: Optional[dict[str, Any]] = None,
               args: tuple[Any, ...] = ()) -> Target:
    """The Target of driver ``driver`` (a name, alias or module name) with the
    ``connect()`` arguments given, its family and URL scheme as the registry says."""
    name = drivers.canonical(driver)
    for dsn in (*args[:1], (kwargs or {}).get("dsn")):
        if isinstance(dsn, str) and is_uri(dsn) and (
                credentials_unclear(dsn) or _BAD_ESCAPE.search(_userinfo(dsn))
                or "@" in _userinfo(dsn)):  # libpq's host part begins at the first '@'
            raise unclear_credentials(dsn)  # libpq would misread it, quoting the password
    return Target(name, dict(kwargs or {}), tuple(args), drivers.family(name),
                  drivers.url_scheme(name))


def parse_url(url: object) -> Target:
    """Parse a database URL into a ``Target``; raise InterfaceError naming the bad part."""
    if not isinstance(url, str):
        raise InterfaceError(f"a database URL must be a str, not {type(url).__name__}")
    if "://" not in url:
        raise InterfaceError(
            f"not a database URL (no '://'): {_redact(url)!r}; "
            "expected e.g. 'postgresql://user@host/db', 'mysql://...' or 'sqlite:///file.db'")
    driver = drivers.for_scheme(url.split("://", 1)[0])
    if credentials_unclear(url):
        raise unclear_credentials(url)
    parts = urlsplit(url)
    query: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    if drivers.family(driver) is Family.SQLITE:
        return target_for(driver, _sqlite_kwargs(url, parts, query))
    kwargs: dict[str, Any] = _host_kwargs(url, parts, drivers.family(driver))
    if parts.username:
        kwargs["user"] = unquote(parts.username)
    if parts.password is not None:
        kwargs["password"] = unquote(parts.password)
    path = parts.path.lstrip("/")
    if "/" in path:
        raise InterfaceError(f"bad database name {unquote(path)!r} in URL: it contains '/'")
    if path:
        kwargs["database"] = unquote(path)
    kwargs.update(query)
    return target_for(driver, kwargs)


def _host_kwargs(url: str, parts: SplitResult, family: Family) -> dict[str, Any]:
    """``host`` and ``port`` of the URL: one host as it is, several in libpq's
    comma-separated form with a port for each."""
    hostlist = parts.netloc.rpartition("@")[2]
    if "," not in hostlist:
        try:
            port = parts.port
        except ValueError:
            raise InterfaceError(f"bad port in database URL {_redact(url)!r}: "
                                 "must be a number 1-65535") from None
        return _one_host(parts.hostname, port)
    hosts = [_split_host(url, item) for item in hostlist.split(",")]
    default = DEFAULT_PORTS.get(family)
    if any(port is None for _, port in hosts) and default is None:
        raise InterfaceError(f"several hosts in {_redact(url)!r}, but {family.scheme} "
                             "has no default port: write one for each host")
    return {"host": ",".join(host for host, _ in hosts),
            "port": ",".join(str(default if port is None else port) for _, port in hosts)}


def _one_host(hostname: Optional[str], port: Optional[int]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if hostname:
        kwargs["host"] = hostname
    if port is not None:
        if not 0 < port < 65536:
            raise InterfaceError(f"bad port {port} in database URL: must be 1-65535")
        kwargs["port"] = port
    return kwargs


def _split_host(url: str, item: str) -> tuple[str, Optional[int]]:
    """One ``host[:port]`` (or ``[v6]:port``) of a host list."""
    host, port = item, ""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else rest
    elif ":" in item:
        host, _, port = item.rpartition(":")
    if not host:
        raise InterfaceError(f"an empty host in the host list of {_redact(url)!r}")
    if not port:
        return unquote(host), None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InterfaceError(f"bad port {port!r} for host {host!r} in database URL "
                             f"{_redact(url)!r}: must be a number 1-65535")
    return unquote(host), int(port)


def _sqlite_kwargs(url: str, parts: SplitResult, query: dict[str, Any]) -> dict[str, Any]:
    if parts.netloc:
        raise InterfaceError(
            f"a sqlite URL takes no host ({parts.netloc!r}); "
            "use sqlite:///relative.db, sqlite:////absolute.db or sqlite:// for memory")
    path = unquote(url.split("://", 1)[1].split("?", 1)[0])
    path = path[1:] if path.startswith("/") else path
    kwargs = dict(query)
    kwargs["database"] = path or ":memory:"
    return kwargs


def unclear_credentials(url: str) -> InterfaceError:
    """The error of a URL whose user and password cannot be told from its host: it
    says how to write the password, and shows nothing of what could be credentials."""
    return InterfaceError(
        f"cannot tell the user and password from the host in database URL "
        f"{mask_credentials(url)!r}: percent-encode a password (or user name) that holds "
        "any of @ : / ? # [ ] % or a space, with urllib.parse.quote(password, safe=''), "
        "and write an '@' elsewhere in the URL as %40")


def _redact(url: str) -> str:
    """The URL with any password replaced by ***: the user is kept, the rest of
    what precedes the last ``@`` of the host part is masked."""
    if "://" not in url:
        return mask_credentials(url)
    if credentials_unclear(url):
        return mask_credentials(url)
    head, _, rest = url.partition("://")
    end = min([i for i in (rest.find(c) for c in "/?#") if i >= 0] or [len(rest)])
    userinfo, at, host = rest[:end].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{head}://{userinfo.partition(':')[0]}:***@{host}{rest[end:]}"


def make_target(url: Union[str, Target, None] = None, driver: Optional[str] = None,
                connect_kwargs: Optional[dict[str, Any]] = None) -> Optional[Target]:
    """Build the Target from a URL, a driver name and keywords, or nothing (SQLite).

    ``driver`` may be an alias (``"postgresql"``, the family's default driver) or
    any importable PEP 249 module name; keywords override what the URL says.
    """
    connect_kwargs = dict(connect_kwargs or {})
    if isinstance(url, Target):
        return target_for(url.driver, {**url.kwargs, **connect_kwargs}, url.args)
    if url is not None:
        target = parse_url(url)
        if driver is not None and drivers.canonical(driver) != target.driver:
            raise InterfaceError(
                f"driver={driver!r} contradicts the URL scheme of {_redact(url)!r}")
        return target_for(target.driver, {**target.kwargs, **connect_kwargs})
    if driver is None:
        if connect_kwargs:
            raise InterfaceError(
                "connection keywords given without driver= or a URL: "
                + ", ".join(sorted(connect_kwargs)))
        return None
    if not isinstance(driver, str) or not driver:
        raise InterfaceError(f"driver must be a module name such as 'psycopg2', not {driver!r}")
    return target_for(driver, connect_kwargs)
