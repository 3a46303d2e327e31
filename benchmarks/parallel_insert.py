"""Seed 000: fire N single-row inserts at once, pool of 10, then count(*).

drop/create ``benchmark(userid int primary key, data varchar(100))``, gather
``runOperation`` over every row, verify the count and report rows/s, peak RSS
and how many loop wake-ups the hand-back cost.
"""

import asyncio
import resource
import time

import adb

DDL = "create table benchmark (userid int not null primary key, data varchar(100))"


async def run(dburl, rows, pool_size):
    db = adb.Database(dburl, pool_size=pool_size)
    try:
        p = "?" if db.paramstyle == "qmark" else "%s"
        await db.runOperation("drop table if exists benchmark")
        await db.runOperation(DDL)
        sql = f"insert into benchmark (userid, data) values ({p}, {p})"
        stmts = [(sql, (i, str(i))) for i in range(rows)]
        wakeups_before = db.stats()["wakeups"]
        start = time.perf_counter()
        counts = await asyncio.gather(*map(db.runOperation, stmts))
        seconds = time.perf_counter() - start
        stats = db.stats()
        present = (await db.runQuery("select count(*) from benchmark"))[0][0]
        if present != rows or sum(counts) != rows:
            raise RuntimeError(f"wrong row count: {present} rows present, "
                               f"{sum(counts)} reported, {rows} inserted")
        return {
            "target": str(db._driver.target),
            "rows": rows,
            "pool_size": pool_size,
            "seconds": seconds,
            "rows_per_s": rows / seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "wakeups": stats["wakeups"] - wakeups_before,
            "largest_batch": stats["largest_batch"],
        }
    finally:
        await db.close()
