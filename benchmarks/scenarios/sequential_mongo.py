"""Seed 001 on MongoDB itself: Motor against PyMongo, one caller, nothing concurrent.

``--scenario sequential --dburl mongodb://...`` runs this instead of the SQL
``sequential``. One process per system and round, as the seed timed one script
per driver, and in it, one call awaited after another:

- the seed's first experiment, one insert of ``{"1": "one", "2": "two"}``, and the
  time from the process's start to the client's first answer (the seed timed whole
  processes, start-up included: 0.115 s PyMongo, 0.185 s Motor);
- its second, 1,000 such inserts;
- its third, the "CPU and IO" one: 100 inserts, each followed by the seed's two
  callbacks (10,200 formatted lines, written to a buffer: the seed found that
  printing them measured its terminal);
- then N inserts of ``{"userid": i, "data": str(i)}`` and N finds by ``userid``.

Microseconds per call; the parent checks every document afterwards.
"""

from __future__ import annotations

import io
import os
import time
from typing import Any, Optional

from .. import mongo
from ..systems import MONGO_SYSTEMS
from ..systems.common import Document, Figures, MongoCalls, RunSpec
from .base import Scenario, WrongResult

SEED_COLLECTION, COLLECTION = "users", "benchmark"
SEED_INSERTS, MIXED_INSERTS = 1_000, 100
SEED_DOCUMENTS = 1 + SEED_INSERTS + MIXED_INSERTS


def seed_document(i: Optional[int] = None) -> Document:
    """The seed's document: ``{"1": "one", "2": "two"}``, or its third
    experiment's ``{"i": "one", "i+1": "two"}``."""
    return {"1": "one", "2": "two"} if i is None else {f"{i}": "one", f"{i + 1}": "two"}


class Callbacks:
    """The seed's CPU work after each insert of its third experiment: callback1
    prints a line and calls callback2 100 times; callback2 prints 100 lines and
    counts. Lines go to a buffer instead of a terminal."""

    def __init__(self) -> None:
        self.out, self.count = io.StringIO(), 0

    def callback1(self, result: Any) -> None:
        for _ in range(100):
            print(f"Result is {result}", file=self.out)
            print("Callback1 is called", file=self.out)
            self.callback2()
        self.out.seek(0)
        self.out.truncate()

    def callback2(self) -> None:
        for _ in range(100):
            print("Callback2 is called", file=self.out)
        self.count += 1


async def run(calls: MongoCalls, spec: RunSpec) -> Figures:
    await calls.ping()
    startup = time.time() - process_start()
    start = time.perf_counter()
    await calls.insert(SEED_COLLECTION, seed_document())
    one = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(SEED_INSERTS):
        await calls.insert(SEED_COLLECTION, seed_document())
    thousand = time.perf_counter() - start
    callbacks = Callbacks()
    start = time.perf_counter()
    for i in range(MIXED_INSERTS):
        callbacks.callback1(await calls.insert(SEED_COLLECTION, seed_document(i)))
    mixed = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(spec.rows):
        await calls.insert(COLLECTION, {"userid": i, "data": str(i)})
    middle = time.perf_counter()
    for i in range(spec.rows):
        found = await calls.find_one(COLLECTION, {"userid": i})
        if found is None or found["data"] != str(i):
            raise AssertionError(f"find by userid {i} gave {found!r}")
    end = time.perf_counter()
    return {"seconds": end - start, "ok_calls": 1 + SEED_INSERTS + MIXED_INSERTS + 2 * spec.rows,
            "callbacks": callbacks.count, "startup_ms": startup * 1e3, "one_insert_us": one * 1e6,
            "seed_1000_us": thousand / SEED_INSERTS * 1e6, "mixed_us": mixed / MIXED_INSERTS * 1e6,
            "insert_us": (middle - start) / spec.rows * 1e6,
            "find_us": (end - middle) / spec.rows * 1e6}


def process_start() -> float:
    """When this process started, in ``time.time()`` seconds (Linux: /proc)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def prepare(url: str, rows: int) -> None:
    """Empty collections, and an index on ``userid`` (used where the server can)."""
    with mongo.client(url) as client:
        db = mongo.database(client, url)
        db.drop_collection(SEED_COLLECTION)
        db.drop_collection(COLLECTION)
        db[COLLECTION].create_index("userid")


def verify(url: str, rows: int, figures: Optional[Figures] = None) -> None:
    """Raise WrongResult unless every call succeeded and exactly the expected
    documents are there: the seed's 1,101 and N keyed ones, each with its data."""
    expected_calls = SEED_DOCUMENTS + 2 * rows
    if figures is not None and (figures.get("ok_calls") != expected_calls
                                or figures.get("callbacks") != MIXED_INSERTS * 100):
        raise WrongResult(f"{figures.get('ok_calls')} calls and {figures.get('callbacks')} "
                          f"callbacks reported, not {expected_calls} and {MIXED_INSERTS * 100}")
    with mongo.client(url) as client:
        db = mongo.database(client, url)
        seeded = db[SEED_COLLECTION].count_documents({})
        keyed = {d["userid"]: d["data"] for d in db[COLLECTION].find({}, {"_id": 0})}
        count = db[COLLECTION].count_documents({})
    wrong = sum(1 for key, data in keyed.items() if data != str(key))
    if seeded != SEED_DOCUMENTS or count != rows or set(keyed) != set(range(rows)) or wrong:
        raise WrongResult(f"expected {SEED_DOCUMENTS} seed documents and userid 0..{rows - 1} "
                          f"once each; found {seeded}, and {count} keyed ({len(keyed)} distinct "
                          f"userids, {wrong} with wrong data)")


SCENARIO = Scenario(
    name="sequential", seed="001",
    description="one caller on MongoDB: the seed's inserts, then N inserts and N finds by key",
    prepare=prepare, run=run, verify=verify, kinds=(mongo.SCHEME,), roster=MONGO_SYSTEMS,
    min_connections=1,
    # a find by key scans the stand-in's collection (it keeps no usable index): N stays small
    default_rows=1_000, baselines=("pymongo",),
    fields=(("insert_us", "insert us", "{:.0f}"), ("find_us", "find us", "{:.0f}"),
            ("one_insert_us", "1st insert us", "{:.0f}"), ("seed_1000_us", "1000x us", "{:.0f}"),
            ("mixed_us", "CPU+IO us", "{:.0f}"), ("startup_ms", "start-up ms", "{:.0f}"),
            ("peak_rss_mb", "peak RSS MB", "{:.0f}")))
