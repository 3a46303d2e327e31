"""Twisted's asyncio reactor and Tornado on one asyncio loop, both using adb.

Run as a script by tests/contract/test_twisted_reactors.py (a reactor is chosen once per
process): ``python tests/contract/shared_loop_app.py URL``. Prints ``OK ...`` on success.
"""

import asyncio
import sys
import threading
import uuid
from typing import Any, cast

from twisted.internet import asyncioreactor

loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
asyncioreactor.install(loop)

from tornado.ioloop import IOLoop  # noqa: E402  (after the reactor is installed)
from twisted.internet import defer  # noqa: E402
from twisted.internet import reactor as installed_reactor  # noqa: E402

import adb.tornado  # noqa: E402
import adb.twisted  # noqa: E402

# the reactor installed above (Twisted types its global ``reactor`` as a blend of
# zope interfaces, whose methods mypy cannot call)
reactor = cast(asyncioreactor.AsyncioSelectorReactor, installed_reactor)


async def main(url: str) -> Any:
    # a table of this run's own: the compiled wheel's run of this script meets the
    # main suite's on the same server
    table = f"adb_shared_loop_{uuid.uuid4().hex[:10]}"
    tornado_db = adb.tornado.Database(url, ioloop=IOLoop.current(), pool_size=4)
    pool = adb.twisted.ConnectionPool("psycopg2", url, cp_max=4)
    pool.start()
    await tornado_db.runOperation(f"drop table if exists {table}")
    await tornado_db.runOperation(f"create table {table} (k int primary key, origin text)")
    threads: set[int] = set()

    async def from_tornado(i: int) -> None:
        await tornado_db.runOperation(f"insert into {table} values (%s, 'tornado')", (i,))
        threads.add(threading.get_ident())

    def from_twisted(i: int) -> asyncio.Future[Any]:
        d = pool.runOperation(f"insert into {table} values (%s, 'twisted')", (i,))
        d.addCallback(lambda _: threads.add(threading.get_ident()))
        return d.asFuture(loop)

    await asyncio.gather(*(from_tornado(i) for i in range(200)),
                         *(from_twisted(1000 + i) for i in range(200)))
    rows = await pool.runQuery(f"select origin, count(*) from {table} group by 1 order by 1"
                               ).asFuture(loop)
    await tornado_db.runOperation(f"drop table {table}")
    await tornado_db.close()
    pool.close()
    assert rows == [("tornado", 200), ("twisted", 200)], rows
    assert threads == {threading.get_ident()}, "results must arrive on the loop thread"
    return rows


def run(url: str) -> int:
    result: dict[str, Any] = {}

    def start() -> None:
        d = defer.Deferred.fromFuture(asyncio.ensure_future(main(url)))  # an asyncio task
        d.addCallback(lambda rows: result.setdefault("rows", rows))
        d.addErrback(lambda f: result.setdefault("error", f.getTraceback()))
        d.addBoth(lambda _: reactor.stop())
    reactor.callWhenRunning(start)
    reactor.run()
    if "error" in result:
        print(result["error"])
        return 1
    print("OK", result["rows"], type(reactor).__name__)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
