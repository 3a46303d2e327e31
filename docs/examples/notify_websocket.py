"""Push PostgreSQL notifications to websocket clients, with Tornado and adb.

    python docs/examples/notify_websocket.py [--dburl URL] [--port 8888] [--channel events]

Open http://127.0.0.1:8888/ in a browser (or connect a websocket client to
``ws://127.0.0.1:8888/events``), then send a notification, from here::

    curl -d 'hello' http://127.0.0.1:8888/notify

or from any other session on the database, a trigger included::

    psql -h 127.0.0.1 test -c "NOTIFY events, 'hello'"

Every connected client receives every notification on the channel as a JSON text
message, ``{"channel": ..., "payload": ..., "pid": ...}``, in the order the server
committed them.

The design: **one adb listener for the whole app, fanned out to the clients.**
``Hub.start`` opens ``db.listen(channel)`` once, and a single task reads it and
writes each notification to every connected client. The alternative, a listener
per client (``async with db.listen(channel)`` in the handler), is as correct, since
adb shares one listening connection between its listeners anyway, but it keeps a
queue and a task per client, and every notification is then queued and woken for
once per client. With one listener a notification costs one hand-back to the loop
and one ``write_message`` per client, a client coming or going never touches the
database, and the app is listening before the first client arrives.

What can go wrong, and what the app does about it:

- **A client goes away.** ``on_close`` removes it from the hub; a write that races
  with the close (``WebSocketClosedError``) is ignored, and the others go on.
- **A client reads too slowly.** Each client may have ``max_pending`` messages
  written but not yet flushed to its socket (1,000 by default); past that, it is
  closed with code 1013 ("try again later") rather than let its buffer grow
  without bound or hold up the others. A reconnecting client should reload its
  state: it has missed messages.
- **The listening connection is lost.** adb reconnects on its own and the listener
  yields a ``NotificationGap``; the hub passes it on as ``{"gap": reason}``, so
  clients know to reload rather than trust that they saw everything.
- **The listener's own queue overflows** (the hub's task starved of the loop): adb
  drops notifications past ``max_queued`` and says so with a ``NotificationGap`` too.

Runs on the project's default database, ``postgresql://root@127.0.0.1/test``, or on
``--dburl`` / the ``DATABASE_URL`` environment variable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Optional

import tornado.web
import tornado.websocket

import adb
from adb.tornado import Database

DEFAULT_URL = "postgresql://root@127.0.0.1/test"

PAGE = """<!doctype html>
<title>adb notifications</title>
<form id="send"><input id="text" placeholder="payload"> <button>NOTIFY</button></form>
<ul id="log"></ul>
<script>
const log = document.getElementById("log");
const ws = new WebSocket(`ws://${location.host}/events`);
ws.onmessage = (e) => {
  const li = document.createElement("li");
  li.textContent = e.data;
  log.prepend(li);
};
document.getElementById("send").onsubmit = (e) => {
  e.preventDefault();
  fetch("/notify", {method: "POST", body: document.getElementById("text").value});
};
</script>
"""


class Hub:
    """One adb listener on ``channel``, its notifications written to every client.

    Runs on the IOLoop's thread only, so the set of clients needs no lock.
    """

    def __init__(self, db: Database, channel: str, max_pending: int = 1000) -> None:
        self.db = db
        self.channel = channel
        self.max_pending = max_pending
        self.clients: set[EventsSocket] = set()
        self.listener: Optional[adb.Listener] = None
        self.task: Optional[asyncio.Task[None]] = None

    async def start(self) -> None:
        """LISTEN, and start fanning out: a NOTIFY sent after this reaches every client."""
        self.listener = listener = self.db.listen(self.channel)
        await listener.ready()
        self.task = asyncio.get_running_loop().create_task(self._pump(listener))

    async def _pump(self, listener: adb.Listener) -> None:
        """Read the listener until it is closed; hand each item to every client."""
        async for item in listener:
            if isinstance(item, adb.NotificationGap):
                message = json.dumps({"gap": item.reason, "missed": item.missed})
            else:
                message = json.dumps({"channel": item.channel, "payload": item.payload,
                                      "pid": item.pid})
            for client in list(self.clients):  # a client may leave while we write
                client.push(message)

    async def stop(self) -> None:
        """Stop listening (UNLISTEN once no listener needs the channel); close every client."""
        if self.listener is not None:
            await self.listener.aclose()
        if self.task is not None:
            await self.task
        for client in list(self.clients):
            client.close(1001, "server shutting down")


class EventsSocket(tornado.websocket.WebSocketHandler):
    """A client of the hub: it receives, it sends nothing the app reads."""

    pending = 0

    @property
    def hub(self) -> Hub:
        hub: Hub = self.application.settings["hub"]
        return hub

    def open(self, *args: str, **kwargs: str) -> None:
        self.hub.clients.add(self)

    def on_close(self) -> None:
        self.hub.clients.discard(self)

    def on_message(self, message: str | bytes) -> None:
        pass  # the channel is one way; send notifications with POST /notify

    def push(self, message: str) -> None:
        """Write ``message`` without waiting for it; close a client too far behind."""
        if self.pending >= self.hub.max_pending:
            self.hub.clients.discard(self)
            self.close(1013, "too slow: reload and reconnect")
            return
        try:
            written = self.write_message(message)
        except tornado.websocket.WebSocketClosedError:
            self.hub.clients.discard(self)  # on_close is on its way
            return
        self.pending += 1
        written.add_done_callback(self._flushed)

    def _flushed(self, written: asyncio.Future[None]) -> None:
        """One message left the buffer (or the connection closed under it)."""
        self.pending -= 1
        if not written.cancelled():
            written.exception()  # a closed stream's error is expected here: read, not logged


class NotifyHandler(tornado.web.RequestHandler):
    """``POST /notify`` with the payload as the body: ``db.notify`` on a pool worker."""

    async def post(self) -> None:
        hub: Hub = self.application.settings["hub"]
        await hub.db.notify(hub.channel, self.request.body.decode())
        self.set_status(204)


class PageHandler(tornado.web.RequestHandler):
    """``GET /``: a page that shows the messages and sends one."""

    def get(self) -> None:
        self.write(PAGE)


class App(tornado.web.Application):
    """The app, its Database and its hub; ``await start()`` before serving, ``close()`` after."""

    def __init__(self, url: str = DEFAULT_URL, channel: str = "events",
                 max_pending: int = 1000) -> None:
        self.db = Database(url, pool_size=2)
        self.hub = Hub(self.db, channel, max_pending)
        super().__init__([(r"/", PageHandler), (r"/events", EventsSocket),
                          (r"/notify", NotifyHandler)], hub=self.hub)

    async def start(self) -> None:
        await self.hub.start()

    async def close(self) -> None:
        await self.hub.stop()
        await self.db.close()


async def serve(url: str, port: int, channel: str) -> None:
    """Serve until interrupted."""
    app = App(url, channel)
    await app.start()
    server = app.listen(port)
    print(f"listening on channel {channel!r}; http://127.0.0.1:{port}/")
    try:
        await asyncio.Event().wait()
    finally:
        server.stop()
        await app.close()


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--dburl", default=os.environ.get("DATABASE_URL", DEFAULT_URL))
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--channel", default="events")
    args = p.parse_args()
    try:
        asyncio.run(serve(args.dburl, args.port, args.channel))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
