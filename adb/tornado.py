"""The Tornado front-end: a Database bound to a Tornado ``IOLoop``.

Results are the asyncio futures Tornado 6 runs on, so handlers ``await`` them
(``async def``) or ``yield`` them (``@gen.coroutine``). Without ``ioloop=`` the
Database binds to the IOLoop of its first call, as the asyncio front-end does, so
it may be created before the loop runs (Tornado 6's ``asyncio.run(main())`` start
included); with ``ioloop=`` it is bound to that one at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Optional

try:
    from tornado.ioloop import IOLoop
except ModuleNotFoundError as exc:  # pragma: no cover - exercised where Tornado is absent
    raise ModuleNotFoundError(
        "adb.tornado needs Tornado: pip install 'adb-async[tornado]'", name=exc.name) from exc

from . import asyncio as _asyncio
from .core import URL, frontend_doc
from .options import EMBEDDED

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .options import Options


class TornadoFrontEnd(_asyncio.AsyncioFrontEnd):
    """The asyncio front-end on the event loop of one IOLoop: the one given, or that
    of the first call."""

    def __init__(self, ioloop: Optional[IOLoop]) -> None:
        super().__init__(None if ioloop is None else ioloop.asyncio_loop)  # type: ignore[attr-defined]
        self.ioloop = ioloop

    def running_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().running_loop()
        if self.ioloop is None:  # bound just now, on the loop's own thread
            self.ioloop = IOLoop.current()
        return loop


class Database(_asyncio.FutureDatabase):
    """The Tornado front-end's Database: bound to an IOLoop (``ioloop=``, else that of
    its first call).

    Its calls return the asyncio futures Tornado runs on.

    Every other keyword is an option of ``adb.core.BaseDatabase``, the same on
    every front-end.

    :param ioloop: the IOLoop to deliver results on (default: that of the first call).
    """
    __doc__ = frontend_doc(__doc__)

    _frontend: TornadoFrontEnd

    def __init__(self, url: URL = EMBEDDED, *, ioloop: Optional[IOLoop] = None,
                 **options: Unpack[Options]) -> None:
        super().__init__(TornadoFrontEnd(ioloop), url, **options)

    @property
    def ioloop(self) -> Optional[IOLoop]:
        """The IOLoop results are delivered on (None until the first call binds it)."""
        return self._frontend.ioloop
