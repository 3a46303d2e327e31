"""One module per DB-API driver, and the registry built from what each declares.

A driver module in this package defines ``DRIVER``, a ``Driver`` subclass whose
``info`` (a ``DriverInfo``) names its PEP 249 module, its server family, the
``+dialect`` forms of its URLs and its pip extra. Nothing else lists drivers:
adding one is adding a module here. Any other importable PEP 249 module works
through the generic driver, named by ``driver=``.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Callable, Iterable, Optional

from ..errors import InterfaceError
from ..target import Family, Target
from . import _gil, _native
from .base import Connection, Driver, DriverInfo, Pooler, check_pooler, unknown_keywords
from .generic import GenericDriver

#: the interface, the generic fallback and the capabilities (and private helpers, _name)
_NOT_DRIVERS = frozenset({"base", "generic", "cancel", "copy", "galera", "notify", "pipelines"})


@functools.lru_cache(maxsize=None)
def registry() -> dict[str, type[Driver]]:
    """Built-in driver name (its module's name) -> its Driver class."""
    found: dict[str, type[Driver]] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name in _NOT_DRIVERS or module.name.startswith("_"):
            continue
        cls = getattr(importlib.import_module(f".{module.name}", __name__), "DRIVER", None)
        if not (isinstance(cls, type) and issubclass(cls, Driver)
                and isinstance(cls.info, DriverInfo)):
            raise TypeError(f"adb.drivers.{module.name} must set DRIVER to a Driver subclass "
                            "whose info is a DriverInfo")
        found[cls.info.module] = cls
    return found


@functools.lru_cache(maxsize=None)
def _aliases() -> dict[str, str]:
    """Every name a built-in driver answers to -> the driver's name."""
    names: dict[str, str] = {}
    for name, cls in registry().items():
        declared = _info(cls)
        schemes = declared.family.schemes if declared.default else ()
        for alias in (name, *declared.dialects, *schemes):
            if names.setdefault(alias, name) != name:
                raise TypeError(f"{alias!r} names two drivers: {names[alias]} and {name}")
    return names


def _info(cls: type[Driver]) -> DriverInfo:
    """What a registered driver declares (``registry`` admits none without it)."""
    if cls.info is None:
        raise TypeError(f"{cls.__name__} declares no DriverInfo")
    return cls.info


def canonical(name: str) -> str:
    """The driver a name, alias or URL scheme means (``postgres`` -> ``psycopg2``);
    a name adb does not know is taken as a PEP 249 module name, unchanged."""
    return _aliases().get(name, name)


def info(name: str) -> Optional[DriverInfo]:
    """What the built-in driver ``name`` declares, or None for a generic module."""
    cls = registry().get(canonical(name))
    return None if cls is None else cls.info


def family(name: str) -> Family:
    """The server family of driver ``name`` (``Family.OTHER`` for a generic module)."""
    found = info(name)
    return Family.OTHER if found is None else found.family


def for_scheme(scheme: str) -> str:
    """The driver a URL scheme means: ``family`` or ``family+dialect``.

    Raises InterfaceError naming the schemes adb knows when it is neither.
    """
    base, _, dialect = scheme.lower().partition("+")
    families = {s: f for f in Family for s in f.schemes}
    fam = families.get(base)
    if fam is None:
        raise InterfaceError(f"unsupported URL scheme {scheme!r}; use one of {_schemes()}")
    if not dialect:
        return _default(fam)
    name = _aliases().get(dialect)
    if name is None or dialect in _all_schemes():
        raise InterfaceError(
            f"unknown driver {dialect!r} in URL scheme {scheme!r}; "
            f"{fam.scheme} URLs take {_dialects(fam)}")
    if family(name) is not fam:
        raise InterfaceError(
            f"URL scheme {scheme!r}: {name} is a {family(name).scheme} driver, "
            f"not a {fam.scheme} one; {fam.scheme} URLs take {_dialects(fam)}")
    return name


def url_scheme(name: str) -> str:
    """The scheme that names driver ``name`` in a URL: the family's own for its
    default driver, ``family+dialect`` for the others."""
    found = info(name)
    if found is None:
        return name
    if found.default or not found.dialects:
        return found.family.scheme
    return f"{found.family.scheme}+{found.dialects[0]}"


def load(target: Target, on_connect: Optional[Callable[[Connection], object]] = None,
         pooler: object = None, options: Iterable[str] = (), native: bool = False) -> Driver:
    """Return a Driver instance for ``target`` (an ``adb.target.Target``); ``on_connect``
    is called with every new connection, in its worker thread; ``pooler`` is
    ``Database(pooler=...)``, checked here (``Pooler``). A keyword of the target
    that the driver's ``connect()`` does not take is refused, with the nearest valid
    name among those and ``options`` (adb's own, whose typos land here).
    ``native``: the adbapi drop-in's native sessions (``adb.drivers._native``), which
    pass every keyword on and take a module without ``connect()`` until the first
    connect, as adbapi does."""
    checked = check_pooler(pooler)
    cls = registry().get(target.driver, GenericDriver)
    if native:
        cls = _native.native(cls)
    gil_before = _gil.enabled()
    try:
        dbapi = importlib.import_module(target.driver)
    except ImportError as exc:
        found = info(target.driver)
        hint = f" (pip install 'adb-async[{found.extra}]')" if found and found.extra else ""
        raise InterfaceError(
            f"driver module {target.driver!r} cannot be imported: {exc}{hint}") from None
    _gil.check_import(target.driver, gil_before)
    if not hasattr(dbapi, "connect") and not native:
        raise InterfaceError(f"{target.driver!r} is not a DB-API 2 module: it has no connect()")
    known = None if native else cls.keywords(dbapi)
    if known is not None:
        refusal = unknown_keywords(set(target.kwargs) - {"pooler"}, known, options, target.driver)
        if refusal is not None:
            raise InterfaceError(refusal)
    return cls(dbapi, target, on_connect, checked)


def _default(fam: Family) -> str:
    for name, cls in registry().items():
        if _info(cls).family is fam and _info(cls).default:
            return name
    raise InterfaceError(f"no built-in driver serves {fam.scheme}:// URLs")


def _all_schemes() -> set[str]:
    return {s for f in Family for s in f.schemes}


def _dialects(fam: Family) -> str:
    names = sorted(d for cls in registry().values() if _info(cls).family is fam
                   for d in _info(cls).dialects)
    return ", ".join(f"+{d}" for d in names) or "no +driver"


def _schemes() -> str:
    forms = [f"{f.scheme}://" for f in Family if f.schemes]
    forms += [f"{s}://" for f in Family for s in f.schemes[1:]]
    forms += [f"{url_scheme(n)}://" for n in registry() if not _info(registry()[n]).default]
    return ", ".join(forms)


__all__ = ["Driver", "DriverInfo", "Family", "Pooler", "canonical", "family", "for_scheme", "info",
           "load", "registry", "url_scheme"]
