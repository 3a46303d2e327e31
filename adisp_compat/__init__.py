"""The 2011 adisp yield-callback style on Python 3, on top of adb.

    from adisp_compat import process, async_

``@process`` drives a generator that yields adb calls (or lists / ``map(...)``
of them, run in parallel); ``@async_`` is the old ``@async`` (a keyword since
Python 3.7). See docs/porting-2011.md.
"""

from .adisp import CallbackCall, async_, process

__all__ = ["process", "async_", "CallbackCall"]
