"""The engine's listening: the Database's one LISTEN connection, started by its
first listener and stopped with the Database.

``Listening`` owns the ``Hub`` (``adb.listen``) once there is one. Its lock makes
"start the hub" and "the Database stops" one decision: the close refuses new
calls before it stops the hub, so a listener that comes after finds the refusal,
and one that came before made a hub the close then stops.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Generic, Optional

from .. import listen
from ..drivers.base import Connection, Driver
from ..frontend import F, FrontEnd
from ..listen import Hub, Router


class Listening(Generic[F]):
    """The listening hub of one engine, from the first ``listen()`` on."""

    def __init__(self, name: str, driver: Driver, frontend: FrontEnd[F],
                 check_open: Callable[[], None]) -> None:
        self._name = name
        self._driver = driver
        self._frontend = frontend
        self._check_open = check_open
        self._hub: Optional[Hub] = None
        self._lock = threading.Lock()

    def hub(self) -> Hub:
        """The listening hub, started by the first listener."""
        self._check_open()
        listen.check_listen(self._driver)
        with self._lock:
            self._check_open()
            if self._hub is None:
                router = Router()
                self._hub = Hub(self._name, self._driver, router,
                                self._frontend.sink(router.deliver))
            return self._hub

    def stop(self) -> None:
        """Begin the hub's end (the Database closes, or was dropped)."""
        with self._lock:
            hub = self._hub
        if hub is not None:
            hub.stop()

    def close(self) -> None:
        """The close's last step: the hub's thread has ended, and every listener
        ends after what it has queued."""
        if self._hub is not None:
            self._hub.close()

    def loop_moved(self) -> None:
        """The front-end moved to another loop: the hub's sink drains there now."""
        if self._hub is not None:
            self._hub.sink.restart()

    def connection(self) -> Optional[Connection]:
        """The listening connection, if there is one (a forked child lets go of it)."""
        return None if self._hub is None else self._hub.conn

    def stats(self) -> dict[str, Any]:
        return listen.idle_stats() if self._hub is None else self._hub.stats()


__all__ = ["Listening"]
