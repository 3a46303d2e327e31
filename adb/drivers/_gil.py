"""Free-threaded Python: a driver whose import turns the interpreter lock back on.

On a free-threaded build (``Py_GIL_DISABLED``, ``python3.13t``) adb's worker threads
run Python in parallel. Importing a C extension that does not declare it can run
without the lock (psycopg2 is one) turns the lock back on for the whole process:
CPython warns once, naming the extension's inner module. A Database says so too,
once, naming the driver it loaded and what to use instead, since the driver is the
user's choice (a URL's scheme) and the fix is another URL.
"""

from __future__ import annotations

import sys
import sysconfig
import warnings
from typing import Final

#: this interpreter was built without the GIL (it may have turned it back on since)
FREE_THREADED: Final = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

#: what to use instead, by the driver's family of servers
INSTEAD: Final = ("psycopg 3 for PostgreSQL (postgresql+psycopg://; PSYCOPG_IMPL=python "
                  "where it has no free-threaded binary) or PyMySQL for MySQL and MariaDB "
                  "(mysql+pymysql://)")

_warned = False


def enabled() -> bool:
    """Whether the interpreter lock is on now (always, on a build with one)."""
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else bool(is_enabled())


def check_import(module: str, before: bool) -> None:
    """The driver module ``module`` was just imported, with the lock on or off
    ``before``: warn (once per process) if that import turned it on."""
    global _warned
    if not FREE_THREADED or before or _warned or not enabled():
        return
    _warned = True
    warnings.warn(
        f"importing the driver module {module!r} turned the interpreter lock (GIL) back on "
        f"in this free-threaded Python: adb's worker threads now run Python one at a time; "
        f"drivers that keep it off: {INSTEAD}", RuntimeWarning, stacklevel=2)
