"""Tornado's pre-fork model: bind, fork two processes, then make the Database in each
(``adb.tornado.Database`` after ``fork_processes``); SIGTERM/SIGINT stop the loop and
the Database is closed before the process exits. Plus the embedded default, made
after the fork too."""

import asyncio
import os
import signal
import sys

import tornado.httpserver
import tornado.netutil
import tornado.process
import tornado.web

import adb.tornado

URL = os.environ["ADB_DEPLOY_URL"]
#: seconds the requests in flight have at a stop before they are cancelled (adb then
#: cancels their statements on the server), as uvicorn's --timeout-graceful-shutdown:
#: a Database's close() waits for the calls already running, however long they take
GRACE = 3.0


class Ping(tornado.web.RequestHandler):
    async def get(self):
        self.write({"value": await self.application.db.runQueryValue("select 1")})


class Sleep(tornado.web.RequestHandler):
    async def get(self):
        value = await self.application.db.runQueryValue(os.environ["ADB_DEPLOY_SLEEP"])
        self.write({"value": str(value)})


async def serve(sockets):
    stop = asyncio.Event()  # the handlers first: a signal now must not kill a half-made file
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    app = tornado.web.Application([("/", Ping), ("/sleep", Sleep)])
    app.db = adb.tornado.Database(URL, pool_size=4)
    embedded = adb.tornado.Database()
    await embedded.runOperation("create table t (x int)")
    server = tornado.httpserver.HTTPServer(app)
    server.add_sockets(sockets)
    await stop.wait()
    server.stop()
    await finish_requests(GRACE)
    await app.db.close(timeout=0)
    await embedded.close()


async def finish_requests(grace):
    """Give the tasks still running (the requests in flight) ``grace`` seconds, then
    cancel those left and wait for them to end."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if not others:
        return
    _, pending = await asyncio.wait(others, timeout=grace)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def main():
    sockets = tornado.netutil.bind_sockets(int(sys.argv[1]), "127.0.0.1")
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the parent: as SIGTERM, killed
    tornado.process.fork_processes(2)  # the parent waits; each child serves
    asyncio.run(serve(sockets))


if __name__ == "__main__":
    main()
