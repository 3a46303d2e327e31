"""Instructions per call, counted by valgrind's callgrind, between source trees.

    python -m benchmarks.callgrind --tree A=/path/to/before --tree B=. \\
        [--fronts sync,asyncio,tornado,twisted,driver,awaiting,executor] [--dburl URL] \\
        [--json out.json]

Time on a small shared machine is noise; an instruction count is not: callgrind
counts the instructions a process executes (every thread of it), the same for the
same binary, inputs and environment whatever else the machine does. So a change
to adb's per-call path is measured here as instructions per call, and a refactor
that should cost nothing is held to that.

Each measurement is one child process under ``valgrind --tool=callgrind`` with
``PYTHONPATH=<tree>`` (it checks ``adb.__file__`` lies under the tree) that opens
one Database (pool 1; by default an in-memory SQLite database, so no server
shares the machine) and makes N ``runOperation`` inserts. It runs at two N, and
the difference of the totals divided by the difference of the N is the cost of
one call, start-up cancelled out. The fronts:

- ``sync``: ``adb.sync``, N calls one after another (the caller blocks on each);
- ``asyncio``, ``tornado``, ``twisted``: N calls made at once, then gathered
  (``asyncio.gather``; Twisted's asyncio reactor and ``gatherResults``);
- ``driver``: the same insert by the driver alone, ``cursor.execute`` N times in
  one thread: what a call costs without adb, to subtract from the others;
- ``awaiting``: no database and no adb: N asyncio futures made at once, gathered
  (``asyncio.gather``) and settled by one callback another thread schedules: what
  awaiting N results costs any asyncio library, which the gathered fronts include;
- ``executor``: the standard library's own way to await a blocking call, without
  adb: the driver's N inserts each handed to a one-thread ``ThreadPoolExecutor``
  with ``loop.run_in_executor``, made at once and gathered. Less ``driver``, it is
  what handing a call to a thread and awaiting it costs anyone, to set adb's
  asyncio front beside.

With ``--dburl`` (a server) the count is the client process's only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any, NoReturn, Optional, Sequence

FRONTS = ("sync", "asyncio", "tornado", "twisted", "driver", "awaiting", "executor")
#: the two N of each front (calls made one after another cost less start-up noise)
COUNTS = {"sync": (1000, 4000), "driver": (1000, 4000)}
GATHERED = (2000, 8000)


# -- in the child (run as a script, so that only the tree's adb is importable) --------

def _insert(paramstyle: str) -> str:
    mark = "?" if paramstyle == "qmark" else "%s"
    return f"insert into adb_callgrind values ({mark}, {mark})"


def _run(front: str, url: str, calls: int) -> None:
    if front == "driver":
        return _run_driver(url, calls)
    if front == "executor":
        import asyncio
        asyncio.run(_run_executor(url, calls))
        return None
    if front == "awaiting":
        import asyncio
        asyncio.run(_run_awaiting(calls))
        return None
    if front == "sync":
        import adb.sync
        with adb.sync.Database(url, pool_size=1) as db:
            _fresh_table(db.runOperation)
            sql = _insert(db.paramstyle)
            for i in range(calls):
                db.runOperation(sql, (i, "x"))
        return None
    import asyncio
    asyncio.run(_run_gathered(front, url, calls))
    return None


async def _run_gathered(front: str, url: str, calls: int) -> None:
    import asyncio
    if front == "twisted":
        from twisted.internet import defer
        from twisted.internet.asyncioreactor import AsyncioSelectorReactor

        import adb.twisted
        loop = asyncio.get_running_loop()
        tdb = adb.twisted.Database(url, pool_size=1, reactor=AsyncioSelectorReactor(loop))
        await _fresh_table_async(tdb.runOperation, loop)
        sql = _insert(tdb.paramstyle)
        done = defer.gatherResults([tdb.runOperation(sql, (i, "x")) for i in range(calls)])
        await done.asFuture(loop)
        await tdb.close().asFuture(loop)
        return
    if front == "tornado":
        import adb.tornado
        db: Any = adb.tornado.Database(url, pool_size=1)
    else:
        import adb
        db = adb.Database(url, pool_size=1)
    await db.runOperation("drop table if exists adb_callgrind")
    await db.runOperation("create table adb_callgrind (k int, v varchar(10))")
    sql = _insert(db.paramstyle)
    await asyncio.gather(*[db.runOperation(sql, (i, "x")) for i in range(calls)])
    await db.close()


async def _run_awaiting(calls: int) -> None:
    """N futures gathered and settled from another thread, as the gathered fronts'
    are: without them, what is left of those fronts' count is adb's and the driver's."""
    import asyncio
    import threading
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(calls)]

    def settle() -> None:
        for i, future in enumerate(futures):
            future.set_result(i)
    worker = threading.Thread(target=loop.call_soon_threadsafe, args=(settle,))
    worker.start()
    await asyncio.gather(*futures)
    worker.join()


def _fresh_table(run: Any) -> None:
    run("drop table if exists adb_callgrind")
    run("create table adb_callgrind (k int, v varchar(10))")


async def _fresh_table_async(run: Any, loop: Any) -> None:
    await run("drop table if exists adb_callgrind").asFuture(loop)
    await run("create table adb_callgrind (k int, v varchar(10))").asFuture(loop)


def _run_driver(url: str, calls: int) -> None:
    """The driver alone, on a connection opened and set up as adb's workers open theirs."""
    driver, conn, cursor = _driver_cursor(url)
    sql = _insert(driver.paramstyle)
    for i in range(calls):
        cursor.execute(sql, (i, "x"))
    cursor.close()
    driver.close(conn)


async def _run_executor(url: str, calls: int) -> None:
    """The driver's inserts through ``run_in_executor`` on one thread, which opens
    the connection and makes every call on it, gathered as adb's asyncio front is."""
    import asyncio
    import concurrent.futures
    loop = asyncio.get_running_loop()
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        driver, conn, cursor = await loop.run_in_executor(executor, _driver_cursor, url)
        sql = _insert(driver.paramstyle)
        await asyncio.gather(*[loop.run_in_executor(executor, cursor.execute, sql, (i, "x"))
                               for i in range(calls)])
        await loop.run_in_executor(executor, cursor.close)
        await loop.run_in_executor(executor, driver.close, conn)


def _driver_cursor(url: str) -> tuple[Any, Any, Any]:
    """The URL's driver, a connection opened as adb's workers open theirs, and a
    cursor on it, the test table made afresh."""
    from adb import drivers, url as urls
    driver = drivers.load(urls.parse_url(url), None, None)
    conn = driver.connect()
    cursor = conn.cursor()
    cursor.execute("drop table if exists adb_callgrind")
    cursor.execute("create table adb_callgrind (k int, v varchar(10))")
    return driver, conn, cursor


def child(spec: dict[str, Any]) -> NoReturn:
    import adb
    where = os.path.realpath(adb.__file__)
    if not where.startswith(os.path.join(spec["tree"], "")):
        raise SystemExit(f"adb was imported from {where}, not from under {spec['tree']}")
    _run(spec["front"], spec["url"], spec["calls"])
    sys.exit(0)


# -- in the parent ---------------------------------------------------------------------

def count(tree: str, front: str, url: str, calls: int, timeout: float) -> int:
    """The instructions one child process executed (every thread), per callgrind."""
    with tempfile.TemporaryDirectory(prefix="adb-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        spec = json.dumps({"tree": tree, "front": front, "url": url, "calls": calls})
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, os.path.abspath(__file__), "--child", spec],
            env={**os.environ, "PYTHONPATH": tree}, cwd=tmp, capture_output=True, text=True,
            timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{front} on {tree} failed: {proc.stderr.strip()[-500:]}")
        with open(out) as f:
            totals = re.search(r"^(?:summary|totals):\s*(\d+)", f.read(), re.MULTILINE)
    if totals is None:
        raise RuntimeError(f"no instruction total in callgrind's output for {front} on {tree}")
    return int(totals.group(1))


def per_call(tree: str, front: str, url: str, timeout: float) -> dict[str, Any]:
    low, high = COUNTS.get(front, GATHERED)
    a, b = count(tree, front, url, low, timeout), count(tree, front, url, high, timeout)
    return {"calls": [low, high], "instructions": [a, b], "per_call": (b - a) / (high - low)}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.callgrind",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                   help="a source tree holding adb/ (repeat; the first is the baseline)")
    p.add_argument("--fronts", default=",".join(FRONTS),
                   help=f"comma-separated, of {', '.join(FRONTS)} (all)")
    p.add_argument("--dburl", default="sqlite://",
                   help="database URL (default: in-memory SQLite)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per child process")
    p.add_argument("--json", metavar="PATH", help="write the raw figures")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return args
    args.trees = {}
    for item in args.tree:
        name, sep, path = item.partition("=")
        if not sep or not name or name in args.trees \
                or not os.path.isdir(os.path.join(path, "adb")):
            p.error(f"--tree {item!r}: give NAME=PATH, names unique, PATH holding adb/")
        args.trees[name] = os.path.realpath(path)
    if not args.trees:
        p.error("give at least one --tree NAME=PATH")
    args.front_list = [f.strip() for f in args.fronts.split(",") if f.strip()]
    unknown = set(args.front_list) - set(FRONTS)
    if unknown:
        p.error(f"--fronts: unknown {', '.join(sorted(unknown))}; choose from {', '.join(FRONTS)}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        child(json.loads(args.child))
    names = list(args.trees)
    results: dict[str, dict[str, Any]] = {}
    for front in args.front_list:
        results[front] = {}
        for name in names:
            results[front][name] = figures = per_call(args.trees[name], front, args.dburl,
                                                      args.timeout)
            print(f"{front:<8} {name}: {figures['per_call']:,.0f} instructions per call",
                  file=sys.stderr, flush=True)
    print(f"\ninstructions per call on {args.dburl.split('@')[-1]}, pool 1 "
          "(difference of two runs at two N)")
    head = ["front", *names, *(f"{n}/{names[0]}" for n in names[1:])]
    rows = [head]
    for front, by_tree in results.items():
        base = by_tree[names[0]]["per_call"]
        rows.append([front, *(f"{by_tree[n]['per_call']:,.0f}" for n in names),
                     *(f"{by_tree[n]['per_call'] / base:.4f}" for n in names[1:])])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print("\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                              for i, (c, w) in enumerate(zip(r, widths))) for r in rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dburl": args.dburl, "trees": args.trees, "results": results}, f, indent=1)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
