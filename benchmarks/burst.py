"""Backpressure check: N calls from one fast producer, ``max_queued`` bounding memory.

    python -m benchmarks.burst --dburl postgresql://root@127.0.0.1/test --calls 1000000

The producer awaits ``db.wait_for_room()`` before each ``select 1`` and never awaits
the calls themselves; the output gives the time and how far resident memory grew.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from typing import Any

import adb


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


async def burst(url: str, calls: int, max_queued: int,
                pool_size: int) -> tuple[float, float, float]:
    db = adb.Database(url, pool_size=pool_size, max_queued=max_queued)
    await db.runQuery("select 1")
    base = peak = rss_mb()
    done = 0

    def finished(_: Any) -> None:
        nonlocal done
        done += 1
    start = time.perf_counter()
    for i in range(calls):
        await db.wait_for_room()
        db.runQuery("select 1").add_done_callback(finished)
        if i % 20_000 == 0:
            peak = max(peak, rss_mb())
    while done < calls:
        await asyncio.sleep(0.01)
    seconds = time.perf_counter() - start
    await db.close()
    return seconds, base, max(peak, rss_mb()) - base


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.burst", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--dburl", default="sqlite://")
    p.add_argument("--calls", type=int, default=1_000_000)
    p.add_argument("--max-queued", type=int, default=1000)
    p.add_argument("--pool_size", type=int, default=10)
    args = p.parse_args()
    pool = 1 if args.dburl == "sqlite://" else args.pool_size
    seconds, base, grown = asyncio.run(burst(args.dburl, args.calls, args.max_queued, pool))
    print(f"{args.calls:,} calls, max_queued={args.max_queued}: {seconds:.1f} s, "
          f"RSS {base:.0f} MB at start, grew {grown:.1f} MB")


if __name__ == "__main__":
    main()
