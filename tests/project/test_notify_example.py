"""docs/examples/notify_websocket.py: every websocket client gets every NOTIFY, in order."""

import importlib.util
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import psycopg2
from tornado.httpclient import AsyncHTTPClient
from tornado.testing import AsyncHTTPTestCase, gen_test
from tornado.websocket import WebSocketClientConnection, websocket_connect

from ..conftest import URLS, require_server

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "notify_websocket.py"


def load_example() -> Any:
    """The example as a module (docs/examples is not a package)."""
    spec = importlib.util.spec_from_file_location("notify_websocket", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = load_example()


class NotifyWebsocketTest(AsyncHTTPTestCase):
    """The example app on a channel of its own, served by tornado.testing's server."""

    def setUp(self) -> None:
        require_server("postgresql")
        self.channel = f"example_{uuid.uuid4().hex}"
        self.opened: list[WebSocketClientConnection] = []
        super().setUp()

    def get_app(self) -> Any:
        self.app = example.App(URLS["postgresql"], self.channel)
        return self.app

    def tearDown(self) -> None:
        for client in self.opened:  # idempotent; an unclosed client warns when collected
            client.close()
        self.io_loop.run_sync(self.app.close)
        super().tearDown()

    async def connect(self, clients: int) -> list[WebSocketClientConnection]:
        """``clients`` websocket clients, once the hub counts every one of them."""
        before = len(self.app.hub.clients)
        url = f"ws://127.0.0.1:{self.get_http_port()}/events"
        connected = [await websocket_connect(url) for _ in range(clients)]
        self.opened += connected
        await self.until(lambda: len(self.app.hub.clients) == before + clients)
        return connected

    async def until(self, condition: Any) -> None:
        """Let the loop run until ``condition()`` holds (the server's side of a connect
        or close runs after the client's side has returned)."""
        import asyncio
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not met in 5 s")

    def sql_notify(self, payloads: list[str]) -> None:
        """Plain SQL ``NOTIFY``, from another session (a trigger or another app)."""
        conn = psycopg2.connect(URLS["postgresql"])
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                for payload in payloads:
                    cur.execute(f"NOTIFY {self.channel}, %s", (payload,))
        finally:
            conn.close()

    @staticmethod
    async def payloads(client: WebSocketClientConnection, n: int) -> list[str]:
        """The next ``n`` messages' payloads."""
        got = []
        for _ in range(n):
            message = await client.read_message()
            assert isinstance(message, str), message  # None: the server closed it
            got.append(json.loads(message)["payload"])
        return got

    @gen_test(timeout=60)
    async def test_every_client_gets_every_notification_in_order(self) -> None:
        await self.app.start()
        a, b = await self.connect(2)
        sent = [f"adb-{i}" for i in range(20)]
        for payload in sent:
            await self.app.db.notify(self.channel, payload)
        more = [f"sql-{i}" for i in range(20)]
        self.sql_notify(more)
        sent += more
        response = await AsyncHTTPClient().fetch(self.get_url("/notify"), method="POST",
                                                 body="über http")
        assert response.code == 204
        sent.append("über http")
        assert await self.payloads(a, len(sent)) == sent
        assert await self.payloads(b, len(sent)) == sent
        page = await AsyncHTTPClient().fetch(self.get_url("/"))
        assert b"new WebSocket" in page.body
        a.close()
        b.close()

    @gen_test(timeout=60)
    async def test_a_client_leaving_leaves_the_others_listening(self) -> None:
        await self.app.start()
        with self.assertNoLogs(level=logging.ERROR):
            a, b, c = await self.connect(3)
            await self.app.db.notify(self.channel, "to all three")
            for client in (a, b, c):
                assert await self.payloads(client, 1) == ["to all three"]
            a.close()  # a closing handshake
            assert c.protocol is not None and c.protocol.stream is not None
            c.protocol.stream.close()  # a client gone without one
            sent = [f"after-{i}" for i in range(50)]
            for payload in sent[:25]:  # while the server learns of the two leaving
                await self.app.db.notify(self.channel, payload)
            await self.until(lambda: len(self.app.hub.clients) == 1)
            self.sql_notify(sent[25:])
            assert await self.payloads(b, len(sent)) == sent
            assert self.app.hub.task is not None and not self.app.hub.task.done()
            b.close()
            await self.until(lambda: not self.app.hub.clients)

    @gen_test(timeout=60)
    async def test_a_client_too_far_behind_is_closed(self) -> None:
        """With room for no unflushed message, the next write finds the client behind."""
        await self.app.start()
        (a,) = await self.connect(1)
        self.app.hub.max_pending = 0
        await self.app.db.notify(self.channel, "one too many")
        assert await a.read_message() is None  # closed by the server
        assert a.close_code == 1013
        await self.until(lambda: not self.app.hub.clients)
