"""uvicorn's HTTP protocol with ``TCP_NODELAY`` set on every connection it accepts.

uvicorn's ``--workers N`` (N > 1) binds the listening socket itself and hands it to
the worker processes. That socket is made with ``proto`` 0, the sockets it accepts
inherit the 0, and asyncio's loop sets ``TCP_NODELAY`` only on an accepted socket
whose ``proto`` is ``IPPROTO_TCP`` (uvloop sets it on every TCP socket). On Linux
every keep-alive response after the first then waits for wrk's delayed ACK: about
43 ms a request, whatever the server does (Kludex/uvicorn#3149, open as of 0.54).
The web scenario's N-worker Starlette servers run this protocol instead of
uvicorn's own, so they are measured as a server that sets the option would be; the
one-process servers keep uvicorn's default (asyncio sets the option there).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

try:  # the protocol uvicorn's "auto" picks: httptools' where installed, else h11's
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Http
except ImportError:  # pragma: no cover - httptools is a dependency of the benchmarks
    from uvicorn.protocols.http.h11_impl import H11Protocol as _Http  # type: ignore[assignment]


class NoDelayHttp(_Http):
    """uvicorn's HTTP protocol, with Nagle's algorithm off on the connection."""

    def connection_made(self, transport: Any) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)


def http_protocol(processes: int) -> "type[asyncio.Protocol] | str":
    """What ``uvicorn.run(http=...)`` is given for a server of ``processes`` workers."""
    return NoDelayHttp if processes > 1 else "auto"


__all__ = ["NoDelayHttp", "http_protocol"]
