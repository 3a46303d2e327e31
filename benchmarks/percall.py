"""Wall time per call between source trees: the timed twin of ``benchmarks.callgrind``.

    python -m benchmarks.percall --tree A=/path/to/before --tree A2=/path/to/before \\
        --tree B=. --tree B2=. [--fronts sync,asyncio] [--rounds 7] [--json out.json]

Each measurement is one child process with ``PYTHONPATH=<tree>`` (it checks that
``adb.__file__`` lies under the tree) running what ``benchmarks.callgrind`` counts:
one Database (pool 1, an in-memory SQLite database, so no server shares the
machine) and ``runOperation`` inserts, ``sync`` one after another on ``adb.sync``,
``asyncio`` gathered at once; after a warm-up of the same calls, only the calls are
timed (``time.perf_counter``), and the child prints microseconds per call.

Time on a small shared machine is noisy, so the trees alternate in every round
(A A2 B B2, then B2 B A2 A, ...) and the table gives each tree's median (min-max)
over the rounds, the ratio of its median to the first tree's, and the median of
its paired ratios (its time over the first tree's in the same round, which a
round's load moves for both); the same tree given twice (A and A2) shows the noise
floor that a ratio must clear.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any, NoReturn, Optional, Sequence

FRONTS = ("sync", "asyncio")
#: calls timed per child process, and calls made first to warm up
CALLS = {"sync": 20_000, "asyncio": 40_000}
WARM = 2_000
SQL = "insert into adb_percall values (?, ?)"


def _time_sync(calls: int) -> float:
    import time

    import adb.sync
    with adb.sync.Database("sqlite://", pool_size=1) as db:
        db.runOperation("create table adb_percall (k int, v varchar(10))")
        for i in range(WARM):
            db.runOperation(SQL, (i, "x"))
        began = time.perf_counter()
        for i in range(calls):
            db.runOperation(SQL, (i, "x"))
        return time.perf_counter() - began


async def _time_asyncio(calls: int) -> float:
    import asyncio
    import time

    import adb
    db = adb.Database("sqlite://", pool_size=1)
    await db.runOperation("create table adb_percall (k int, v varchar(10))")
    await asyncio.gather(*[db.runOperation(SQL, (i, "x")) for i in range(WARM)])
    began = time.perf_counter()
    await asyncio.gather(*[db.runOperation(SQL, (i, "x")) for i in range(calls)])
    seconds = time.perf_counter() - began
    await db.close()
    return seconds


def child(tree: str, front: str, calls: int) -> NoReturn:
    import asyncio

    import adb
    where = os.path.realpath(adb.__file__)
    if not where.startswith(os.path.join(tree, "")):
        raise SystemExit(f"adb was imported from {where}, not from under {tree}")
    seconds = _time_sync(calls) if front == "sync" else asyncio.run(_time_asyncio(calls))
    print(json.dumps({"us_per_call": seconds / calls * 1e6}))
    sys.exit(0)


def measure(tree: str, front: str, calls: int) -> float:
    """Microseconds per call of one child process on ``tree``."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps([tree, front, calls])],
        env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{front} on {tree} failed: {proc.stderr.strip()[-500:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["us_per_call"])


def paired(times: list[float], base: list[float]) -> str:
    """The median (min-max) of the round-by-round ratios ``times[r] / base[r]``."""
    ratios = [t / b for t, b in zip(times, base)]
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.percall",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                   help="a source tree holding adb/ (repeat; the first is the baseline)")
    p.add_argument("--fronts", default=",".join(FRONTS),
                   help=f"comma-separated, of {', '.join(FRONTS)} (all)")
    p.add_argument("--rounds", type=int, default=7, help="rounds of every tree (7)")
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
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    args.front_list = [f.strip() for f in args.fronts.split(",") if f.strip()]
    unknown = set(args.front_list) - set(FRONTS)
    if unknown:
        p.error(f"--fronts: unknown {', '.join(sorted(unknown))}; choose from {', '.join(FRONTS)}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        tree, front, calls = json.loads(args.child)
        child(tree, front, calls)
    names = list(args.trees)
    results: dict[str, dict[str, list[float]]] = {}
    for front in args.front_list:
        results[front] = {name: [] for name in names}
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else reversed(names):
                us = measure(args.trees[name], front, CALLS[front])
                results[front][name].append(us)
                print(f"{front:<8} round {round_ + 1} {name}: {us:.2f} us per call",
                      file=sys.stderr, flush=True)
    print(f"\nwall time per call, us, median (min-max) of {args.rounds} rounds, "
          "in-memory SQLite, pool 1")
    rows = [["front", *names, *(f"{n}/{names[0]}" for n in names[1:]),
             *(f"paired {n}/{names[0]}" for n in names[1:])]]
    for front, by_tree in results.items():
        base = statistics.median(by_tree[names[0]])
        rows.append([front, *(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
                              for v in by_tree.values()),
                     *(f"{statistics.median(by_tree[n]) / base:.3f}" for n in names[1:]),
                     *(f"{paired(by_tree[n], by_tree[names[0]])}" for n in names[1:])])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print("\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                              for i, (c, w) in enumerate(zip(r, widths))) for r in rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trees": args.trees, "results": results}, f, indent=1)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
