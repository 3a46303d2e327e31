"""The MongoDB benchmarks: seed 001 on MongoDB's own clients, and mongo-tasks.

They run against the MongoDB-wire server that ``.ci/start-mongo`` starts (the
CongoDB stand-in) or ADB_MONGO_URL; without one they skip, and fail under CI.
"""

import asyncio
import json
import threading
import time

import pytest

from benchmarks import cli, mongo
from benchmarks.scenarios import mongo_tasks, sequential_mongo
from benchmarks.scenarios.base import WrongResult
from benchmarks.systems import MONGO_SYSTEMS, SYSTEMS
from benchmarks.systems.mongo_clients import BatchedRunner

from ..conftest import URLS, require_server


@pytest.fixture
def mongo_url():
    require_server("mongodb")
    return URLS["mongodb"]


def test_sequential_on_mongodb_runs_every_client_and_checks_every_document(mongo_url, tmp_path):
    """The seed's three experiments and the keyed inserts and finds, on PyMongo,
    Motor (asyncio and Tornado), AsyncMongoClient, the executor and the batched
    runner, every document verified by the parent."""
    out = tmp_path / "seq.json"
    assert cli.main(["--scenario", "sequential", "--dburl", mongo_url, "--rows", "60",
                     "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert set(document["summary"]) == set(MONGO_SYSTEMS) and document["unavailable"] == {}
    for name, entry in document["summary"].items():
        assert entry["errors"] == [], (name, entry["errors"])
        for key in ("insert_us", "find_us", "one_insert_us", "seed_1000_us", "mixed_us",
                    "startup_ms"):
            assert entry[key]["median"] > 0, (name, key)
        assert entry["ok_calls"]["median"] == sequential_mongo.SEED_DOCUMENTS + 2 * 60
    assert "CongoDB" in document["environment"]["server"] or \
        document["environment"]["server"].startswith("MongoDB ")
    assert document["environment"]["libraries"].keys() >= {"pymongo", "motor"}


def test_mongo_tasks_runs_both_calls_at_each_task_count(mongo_url, tmp_path):
    out = tmp_path / "tasks.json"
    assert cli.main(["--scenario", "mongo-tasks", "--dburl", mongo_url, "--rows", "90",
                     "--pool_size", "1,8", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())["summary"]
    expected = {f"{s} {op} @{n}" for s in MONGO_SYSTEMS for op in mongo_tasks.OPS for n in (1, 8)}
    assert set(summary) == expected
    for name, entry in summary.items():
        assert entry["errors"] == [] and entry["ok_calls"]["median"] == 90, name
        assert entry["calls_per_s"]["median"] > 0 and entry["mb_per_s"]["median"] > 0
        assert entry["cpu_us_per_call"]["median"] >= entry["loop_us_per_call"]["median"] >= 0
    many, one = summary["pymongo-async find-many @8"], summary["pymongo-async find-one @8"]
    assert many["mb_per_s"]["median"] > one["mb_per_s"]["median"]  # 100 documents a call
    assert summary["pymongo-batched find-one @8"]["largest_batch"]["median"] >= 1


def test_sequential_verification_catches_missing_doubled_and_wrong_documents(mongo_url):
    rows = 5
    sequential_mongo.prepare(mongo_url, rows)
    with mongo.client(mongo_url) as client:
        db = mongo.database(client, mongo_url)
        db.users.insert_many([{"1": "one"} for _ in range(sequential_mongo.SEED_DOCUMENTS)])
        db.benchmark.insert_many([{"userid": i, "data": str(i)} for i in range(rows)])
        sequential_mongo.verify(mongo_url, rows)  # right as it stands
        db.benchmark.insert_one({"userid": 4, "data": "4"})
        with pytest.raises(WrongResult, match="6 keyed"):
            sequential_mongo.verify(mongo_url, rows)
        db.benchmark.delete_many({"userid": 4})
        db.benchmark.insert_one({"userid": 4, "data": "four"})
        with pytest.raises(WrongResult, match="1 with wrong data"):
            sequential_mongo.verify(mongo_url, rows)
        db.users.delete_one({})
        with pytest.raises(WrongResult, match="found 1100"):
            sequential_mongo.verify(mongo_url, rows)
    with pytest.raises(WrongResult, match="callbacks"):
        sequential_mongo.verify(mongo_url, rows, {"ok_calls": 1111, "callbacks": 9_999})


def test_the_server_is_named_in_the_report(mongo_url):
    version = mongo.server_version(mongo_url)
    assert version.startswith("CongoDB (@push.rocks/smartmongo 2.2.0") or \
        version.startswith("MongoDB "), version
    assert mongo.server_version("mongodb://127.0.0.1:1/test").startswith("unknown")


def test_scenarios_and_urls_must_match():
    args = cli.parse(["--scenario", "sequential", "--dburl", "mongodb://u:secret@db.example/x"])
    assert args.scenario_record is sequential_mongo.SCENARIO and args.rows == 1_000
    assert args.system_names == list(MONGO_SYSTEMS)
    assert cli._describe("mongodb://u:secret@db.example:27017/x") == \
        "mongodb://u:***@db.example:27017/x"
    assert cli.parse(["--scenario", "mongo-tasks", "--dburl", "mongodb://h/x"]).pool_size == \
        [1, 10, 80]
    assert cli.parse(["--scenario", "sequential"]).system_names == list(SYSTEMS)


@pytest.mark.parametrize("argv, message", [
    (["--scenario", "mongo-tasks"], "does not run on a SQL database"),
    (["--scenario", "parallel-insert", "--dburl", "mongodb://h/x"],
     "does not run on MongoDB; these do: mongo-tasks, sequential"),
    (["--scenario", "sequential", "--dburl", "mongodb://h/x", "--systems", "adb-asyncio"],
     "unknown system(s) adb-asyncio"),
    (["--scenario", "mongo-tasks", "--dburl", "mongodb://h/x", "--mongo_ops", "find-all"],
     "--mongo_ops: unknown find-all"),
])
def test_mismatches_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        cli.parse(argv)
    assert message in capsys.readouterr().err


async def test_batched_runner_settles_results_and_errors_with_fewer_wakeups():
    """The runner behind pymongo-batched: every call gets its own value or its own
    exception, on the loop, and results share wake-ups."""
    runner = BatchedRunner(asyncio.get_running_loop(), threads=4)
    loop_thread = threading.get_ident()
    settled_on = []

    def work(i):
        time.sleep(0.002)
        if i % 10 == 3:
            raise KeyError(i)
        return i * i
    try:
        futures = [runner.submit(work, i) for i in range(60)]
        for f in futures:
            f.add_done_callback(lambda _: settled_on.append(threading.get_ident()))
        results = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        runner.close()
    for i, result in enumerate(results):
        if i % 10 == 3:
            assert isinstance(result, KeyError) and result.args == (i,)
        else:
            assert result == i * i
    assert set(settled_on) == {loop_thread}
    stats = runner.stats()
    assert stats["wakeups"] + stats["polls"] < 60 and stats["largest_batch"] >= 2
