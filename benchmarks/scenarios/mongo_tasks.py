"""MongoDB under concurrency: the thread-pool tax, and whether batching removes it.

MongoDB's own migration table (FindManyAndEmptyCursor, 1 to 80 tasks) has Motor
falling from 74.1 to 37.2 MB/s and PyMongo's native async client from 112.5 to
89.5 MB/s. Here ``--pool_size`` is the number of tasks (1, 10 and 80 by default),
which share ``--rows`` calls, each task awaiting its calls one after another:

- ``find-one``: a find by key on a collection of 100 small documents: small calls,
  where the hand-off between the loop and a thread is most of a client's cost;
- ``find-many``: every document of a collection of 100 documents of about 1 KB,
  the cursor emptied (MongoDB's FindManyAndEmptyCursor, smaller): data-bound.

Every call's result is checked in the run; the report gives calls/s, MB/s of
documents read, and the client's CPU per call while the calls ran (the whole
process, and the loop thread alone: the main thread, idle in the blocking world).
"""

from __future__ import annotations

import argparse
import time
from typing import Optional

from .. import mongo
from ..systems import MONGO_SYSTEMS
from ..systems.common import Document, Figures, MongoCalls, Options, RunSpec
from .base import Scenario, Variant, WrongResult

COLLECTION = "tasks"
DOCUMENTS = 100
OPS = ("find-one", "find-many")


def document(i: int) -> Document:
    """About 1 KB of BSON: a key, its text, and filler words."""
    return {"userid": i, "data": str(i), "text": " ".join(f"word{i}-{j}" for j in range(90))}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--mongo_ops", default=",".join(OPS),
                       help=f"mongo-tasks: comma-separated calls to time ({', '.join(OPS)})")


def variants(options: Options) -> list[Variant]:
    ops = [op.strip() for op in options.get("mongo_ops", ",".join(OPS)).split(",") if op.strip()]
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise ValueError(f"--mongo_ops: unknown {', '.join(unknown) or 'empty list'}; "
                         f"choose from {', '.join(OPS)}")
    return [(op, {"mongo_op": op}) for op in ops]


async def run(calls: MongoCalls, spec: RunSpec) -> Figures:
    import bson
    op, tasks = spec.options["mongo_op"], spec.pool_size
    shares = [spec.rows // tasks + (1 if t < spec.rows % tasks else 0) for t in range(tasks)]
    first = await calls.find_one(COLLECTION, {"userid": 0})
    if first is None:
        raise ValueError(f"{COLLECTION} has no document with userid 0: was it prepared?")
    size = len(bson.encode(first))

    async def task(t: int) -> int:
        ok = 0
        for j in range(shares[t]):
            if op == "find-one":
                key = (t * 7 + j) % DOCUMENTS
                found = await calls.find_one(COLLECTION, {"userid": key})
                ok += found is not None and found["data"] == str(key)
            else:
                ok += len(await calls.find_all(COLLECTION, {})) == DOCUMENTS
        return ok
    start, cpu, loop = time.perf_counter(), time.process_time(), time.thread_time()
    ok = sum(await calls.map(task, range(tasks)))
    seconds = time.perf_counter() - start
    # the thread's clock read inside the process's interval: its share never exceeds it
    loop = time.thread_time() - loop
    cpu = time.process_time() - cpu
    moved = spec.rows * size * (1 if op == "find-one" else DOCUMENTS)
    figures = {"seconds": seconds, "ok_calls": ok, "calls_per_s": spec.rows / seconds,
               "mb_per_s": moved / seconds / 1e6, "cpu_us_per_call": cpu / spec.rows * 1e6,
               "loop_us_per_call": loop / spec.rows * 1e6}
    if calls.stats is not None:
        figures.update(calls.stats())
    return figures


def prepare(url: str, rows: int) -> None:
    with mongo.client(url) as client:
        db = mongo.database(client, url)
        db.drop_collection(COLLECTION)
        db[COLLECTION].insert_many([document(i) for i in range(DOCUMENTS)])
        db[COLLECTION].create_index("userid")


def verify(url: str, rows: int, figures: Optional[Figures] = None) -> None:
    """Raise WrongResult unless every call found what it asked for."""
    if figures is not None and figures.get("ok_calls") != rows:
        raise WrongResult(f"{figures.get('ok_calls')} of {rows} calls found the right documents")
    with mongo.client(url) as client:
        count = mongo.database(client, url)[COLLECTION].count_documents({})
    if count != DOCUMENTS:
        raise WrongResult(f"the collection holds {count} documents, not {DOCUMENTS}")


SCENARIO = Scenario(
    name="mongo-tasks", seed="001",
    description="MongoDB, many tasks: find-one and find-many calls, thread pools vs native async",
    prepare=prepare, run=run, verify=verify, kinds=(mongo.SCHEME,), roster=MONGO_SYSTEMS,
    min_connections=1, default_rows=4_000, default_pool_sizes=(1, 10, 80),
    baselines=("motor-asyncio", "pymongo-async"), add_arguments=add_arguments,
    variants=variants,
    fields=(("calls_per_s", "calls/s", "{:,.0f}"), ("mb_per_s", "MB/s", "{:.1f}"),
            ("cpu_us_per_call", "CPU us/call", "{:.0f}"),
            ("loop_us_per_call", "loop us/call", "{:.0f}"),
            ("peak_rss_mb", "peak RSS MB", "{:.0f}")))
