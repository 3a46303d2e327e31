"""A/B of adb's per-call cost between source trees, e.g. before and after a refactor.

    python -m benchmarks.ab --tree A=/path/to/before --tree B=. --rounds 3 \\
        --dburl postgresql://root@127.0.0.1/test [--json ab.json]

What it measures, per tree and round, each in a fresh child process that runs with
``PYTHONPATH=<tree>`` and checks that ``adb.__file__`` lies under that tree:

- *bytes per call in flight*: tracemalloc's traced size before and after queuing
  ``--calls`` ``runOperation("insert into T values (%s, %s)", (i, "x"))`` calls on the
  asyncio front-end into a pool whose workers are never started (the private
  ``_pool_options={"start": False}``), so every call stays queued; divided by the
  count. The parameters are built before the first reading: the figure is what the
  call adds (the future, the job, the queue's slot). The lines holding most of it
  are listed from a snapshot, and the loop's time per submitted call is taken too,
  without tracemalloc (best of 3).
- *the parallel-insert burst* (seed 000): the ``adb-asyncio`` system from this
  checkout's ``benchmarks`` package with the tree's adb, ``--rows`` inserts,
  pool 10, the rows verified afterwards; rows/s, client CPU per row over the run,
  hand-back wake-ups and timed polls from ``db.stats()``.

Why: a refactor of the core has to keep the per-call cost, and on a small shared
machine only ratios taken within one run mean anything. So the trees alternate in
every round (A B, then B A, ...) and the table gives median (min-max) per tree and
the ratio of each tree's median to the first tree's. Give the same path twice
(``--tree A=. --tree A2=.``) to see the noise floor.

``--autobatch`` measures group commit's path instead: the queued calls' Database
and the burst's system (``adb-asyncio-autobatch``) use the ``-autobatch``
systems' setting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from types import ModuleType
from typing import Any, NoReturn, Optional, Sequence

#: a run's figures (numbers, and the memory run's top lines)
Figures = dict[str, Any]
POOL_SIZE = 10
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = [  # (key, label, format) in table order
    ("bytes_per_call", "bytes per call in flight", "{:,.1f}"),
    ("adb_bytes_per_call", "  of which adb's lines", "{:,.1f}"),
    ("submit_us", "loop us per submitted call", "{:,.2f}"),
    ("rows_per_s", "burst rows/s", "{:,.0f}"),
    ("cpu_us_per_row", "burst client CPU us/row", "{:,.1f}"),
    ("wakeups", "burst hand-back wake-ups", "{:,.0f}"),
    ("polls", "burst timed polls", "{:,.0f}"),
]


# -- in the child (run as a script, so that only the tree's adb is importable) --------

def _import_adb(tree: str) -> ModuleType:
    import adb
    where = os.path.realpath(adb.__file__)
    if not where.startswith(os.path.join(tree, "")):
        raise SystemExit(f"adb was imported from {where}, not from under {tree}")
    return adb


async def _in_flight(url: str, calls: int, autobatch: Optional[int]) -> Figures:
    import asyncio
    import gc
    import time
    import tracemalloc

    import adb

    from benchmarks.sql import placeholder

    # all kept referenced: a Database's __del__ stops its pool, which starts the workers
    *timed, db = dbs = [_unstarted(adb, url, autobatch) for _ in range(4)]
    mark = placeholder(db.paramstyle)
    sql = f"insert into T values ({mark}, {mark})"
    params = [(i, "x") for i in range(calls)]
    best = float("inf")
    for one in timed:  # the loop's time per call, without tracemalloc
        start = time.perf_counter()
        for p in params:
            one.runOperation(sql, p)
        best = min(best, time.perf_counter() - start)
    for p in params[:100]:  # first-call caches
        db.runOperation(sql, p)
    await asyncio.sleep(0)  # whatever the first calls scheduled on the loop runs now
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for p in params:
        db.runOperation(sql, p)
    held = tracemalloc.get_traced_memory()[0] - base
    lines = tracemalloc.take_snapshot().statistics("lineno")
    tracemalloc.stop()
    queued = [one.stats()["queued"] for one in dbs]
    if queued != [calls] * 3 + [calls + 100]:
        raise SystemExit(f"calls queued: {queued}, not {calls} (+100): did a pool start?")
    adb_dir = os.path.join(os.path.dirname(adb.__file__), "")
    lines = [s for s in lines if s.size >= calls]  # a byte per call or more
    return {"bytes_per_call": held / calls, "submit_us": best / calls * 1e6,
            "adb_bytes_per_call": sum(s.size for s in lines
                                      if s.traceback[0].filename.startswith(adb_dir)) / calls,
            "top_lines": [("/".join(s.traceback[0].filename.split(os.sep)[-2:])
                           + f":{s.traceback[0].lineno}", s.size / calls) for s in lines[:6]]}


def _unstarted(adb: ModuleType, url: str, autobatch: Optional[int]) -> Any:
    """An asyncio Database of the tree's adb whose workers never start (the protected
    pool option ``start``): a ``_pool_options()`` hook since the engine's refactor,
    a ``_pool_options=`` keyword before."""
    if not callable(getattr(adb.core.BaseDatabase, "_pool_options", None)):
        older: dict[str, Any] = {"_pool_options": {"start": False}}
        return adb.Database(url, pool_size=POOL_SIZE, autobatch=autobatch, **older)

    class Unstarted(adb.Database):  # type: ignore[name-defined]
        def _pool_options(self) -> dict[str, Any]:
            return {"start": False}
    return Unstarted(url, pool_size=POOL_SIZE, autobatch=autobatch)


def _burst(url: str, rows: int, system: str) -> Figures:
    import resource

    from benchmarks.child import run_system
    from benchmarks.scenarios import parallel_insert as pi
    from benchmarks.scenarios.base import WrongResult
    from benchmarks.systems import SYSTEMS
    from benchmarks.systems.common import RunSpec
    if not str(pi.__file__).startswith(os.path.join(REPO, "")):
        raise SystemExit(f"benchmarks came from {pi.__file__}, not {REPO}")
    pi.prepare(url, rows)
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = run_system(SYSTEMS[system], RunSpec(pi.SCENARIO.name, url, rows, POOL_SIZE))
    after = resource.getrusage(resource.RUSAGE_SELF)
    try:
        pi.verify(url, rows, result)
    except WrongResult as exc:
        raise SystemExit(f"wrong result: {exc}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {**result, "rows_per_s": rows / result["seconds"], "cpu_us_per_row": cpu / rows * 1e6}


def child(spec: dict[str, Any]) -> NoReturn:
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != os.path.dirname(
        os.path.abspath(__file__))]  # this script's folder holds no adb, but keep it clean
    adb = _import_adb(spec["tree"])
    sys.path.insert(0, REPO)  # after adb: this checkout's benchmarks, the tree's adb
    from benchmarks.systems.adb_fronts import AUTOBATCH
    autobatch = AUTOBATCH if spec["autobatch"] else None
    if spec["what"] == "memory":
        import asyncio
        figures = asyncio.run(_in_flight(spec["url"], spec["calls"], autobatch))
    else:
        figures = _burst(spec["url"], spec["rows"],
                         "adb-asyncio-autobatch" if autobatch else "adb-asyncio")
    print(json.dumps({"adb": adb.__file__, **figures}), flush=True)
    os._exit(0)  # the queued calls' pool never started: skip its close and __del__


# -- in the parent ---------------------------------------------------------------------

def run_child(tree: str, what: str, url: str,
              args: argparse.Namespace) -> tuple[Optional[Figures], str]:
    spec = {"tree": tree, "what": what, "url": url, "calls": args.calls, "rows": args.rows,
            "autobatch": args.autobatch}
    env = {**os.environ, "PYTHONPATH": tree}
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                               json.dumps(spec)], env=env, cwd=tempfile.gettempdir(),
                              capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {args.timeout} s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        error = (proc.stderr or proc.stdout).strip().splitlines()
        return None, error[-1] if error else f"exit status {proc.returncode}"
    return json.loads(lines[-1]), ""


def revision(tree: str) -> str:
    """The tree's commit, and whether its adb/ differs from it."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", "-C", tree, *argv], capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "not a git checkout"
    return commit + (" + uncommitted changes in adb/" if git("status", "--porcelain", "--", "adb")
                     else "")


def table(summary: dict[str, dict[str, Any]], names: Sequence[str]) -> str:
    """A metric per line: each tree's median (min-max), then each tree's ratio to
    the first's."""
    first = names[0]
    head = ["metric", *names, *(f"{n}/{first}" for n in names[1:])]
    rows = [head]
    for key, label, fmt in METRICS:
        if not any(key in summary[n] for n in names):
            continue
        row = [label]
        for name in names:
            f = summary[name].get(key)
            row.append(f"{fmt.format(f['median'])} ({fmt.format(f['min'])}-"
                       f"{fmt.format(f['max'])})" if f else "-")
        base = summary[first].get(key)
        for name in names[1:]:
            f = summary[name].get(key)
            row.append(f"{f['median'] / base['median']:.3f}"
                       if f and base and base["median"] else "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))) for r in rows)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                   help="a source tree holding adb/ (repeat; the first is the baseline)")
    p.add_argument("--dburl", help="database URL; default: SQLite in a temporary file")
    p.add_argument("--calls", type=int, default=100_000, help="queued calls (100000)")
    p.add_argument("--rows", type=int, default=100_000, help="burst inserts (100000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per child process")
    p.add_argument("--autobatch", action="store_true",
                   help="group commit: the -autobatch systems' autobatch in the queued "
                        "calls' Database, and adb-asyncio-autobatch in the burst")
    p.add_argument("--json", metavar="PATH", help="write the raw figures")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return args
    trees: dict[str, str] = {}
    for item in args.tree:
        name, sep, path = item.partition("=")
        if not sep or not name or name in trees or not os.path.isdir(os.path.join(path, "adb")):
            p.error(f"--tree {item!r}: give NAME=PATH, names unique, PATH holding adb/")
        trees[name] = os.path.realpath(path)
    if not trees:
        p.error("give at least one --tree NAME=PATH")
    if min(args.calls, args.rows, args.rounds) < 1:
        p.error("--calls, --rows and --rounds must be positive")
    args.trees = trees
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        return child(json.loads(args.child))
    if __package__ != "benchmarks":  # installed (adb.benchmarks): no source tree beside it
        raise SystemExit("the A/B compares adb source trees against a checkout's benchmarks: "
                         "run it from a checkout, as python -m benchmarks.ab")
    names = list(args.trees)
    with tempfile.TemporaryDirectory(prefix="adb-ab-") as tmp:
        url = args.dburl or f"sqlite:///{tmp}/ab.db"
        revisions = {n: revision(t) for n, t in args.trees.items()}
        runs = []
        for round_ in range(1, args.rounds + 1):
            order = names if round_ % 2 else names[::-1]
            for what in ("memory", "burst"):
                for name in order:
                    figures, error = run_child(args.trees[name], what, url, args)
                    runs.append({"tree": name, "round": round_, "what": what,
                                 "figures": figures, "error": error})
                    print(f"round {round_} {what:<6} {name}: "
                          + (error or ", ".join(f"{k} {v:,.1f}" for k, v in (figures or {}).items()
                                                if isinstance(v, float))),
                          file=sys.stderr, flush=True)
    from .harness import Measured, summarise  # the parent's own (the child is a script)
    summary = summarise((Measured(r["tree"], r["figures"], f"round {r['round']} {r['what']}: "
                                  f"{r['error']}" if r["error"] else None) for r in runs),
                        names, keys=[key for key, _, _ in METRICS], values=True)
    print(f"\n{args.calls:,} queued calls, {args.rows:,}-row burst, pool {POOL_SIZE}, "
          f"{args.rounds} round(s) on {url.split('@')[-1] if args.dburl else 'SQLite'}"
          + (", autobatch" if args.autobatch else ""))
    for name in names:
        print(f"  {name} = {args.trees[name]} ({revisions[name]})")
    print(table(summary, names))
    for name in names:
        last = [r for r in runs if r["tree"] == name and r["what"] == "memory" and r["figures"]]
        if last:
            print(f"{name}, where a queued call's bytes are: " + ", ".join(
                f"{where} {size:.0f}" for where, size in last[-1]["figures"]["top_lines"]))
        for error in summary[name]["errors"]:
            print(f"{name} FAILED: {error}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv[1:] if argv is None else argv, "url": url,
                       "calls": args.calls, "rows": args.rows, "rounds": args.rounds,
                       "autobatch": args.autobatch,
                       "pool_size": POOL_SIZE, "trees": args.trees, "revisions": revisions,
                       "summary": summary, "runs": runs}, f, indent=1)
        print(f"JSON: {args.json}")
    return 1 if any(r["error"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
