"""The Tornado front-end: a Database bound to a Tornado ``IOLoop``.

Results are the asyncio futures Tornado 6 runs on, so handlers ``await`` them
(``async def``) or ``yield`` them (``@gen.coroutine``). Binding happens at
construction, so the Database may be created before the IOLoop starts.
"""

from __future__ import annotations

from typing import Any, Optional

from tornado.ioloop import IOLoop

from . import asyncio as _asyncio
from .core import frontend_doc


class Database(_asyncio.Database):
    """The Tornado front-end's Database: bound to an IOLoop when it is made.

    Its calls return the asyncio futures Tornado runs on.

    :param ioloop: the IOLoop to deliver results on (default ``IOLoop.current()``).

    Every other keyword is an option of ``adb.core.BaseDatabase``, the same on
    every front-end.
    """
    __doc__ = frontend_doc(__doc__)

    def __init__(self, url: Any = None, *, ioloop: Optional[IOLoop] = None, **kwargs: Any) -> None:
        self.ioloop = ioloop if ioloop is not None else IOLoop.current()
        super().__init__(url, loop=self.ioloop.asyncio_loop, **kwargs)  # type: ignore[attr-defined]

    def _sibling_options(self) -> dict[str, Any]:
        return {"ioloop": self.ioloop}
