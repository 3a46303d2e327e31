"""The ``faults`` benchmark scenario (issue 38): a brief run of every fault program
against adb's asyncio and Tornado front-ends on both servers, with adb's counts
asserted zero, and the accounting that makes those counts checked against rows."""

import json

import pytest

from benchmarks import cli
from benchmarks.faultledger import Ledger
from benchmarks.scenarios import faults
from benchmarks.systems.fault_pools import dollar, named

from ..conftest import URLS, require_server

#: what a brief run costs: a fraction of a second per fault
BRIEF = ["--fault_seconds", "0.3", "--fault_calls", "150", "--settle_seconds", "5"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_every_fault_program_leaves_adb_with_zero_counts(kind, tmp_path):
    require_server(kind)
    out = tmp_path / "faults.json"
    assert cli.main(["--scenario", "faults", "--dburl", URLS[kind], "--systems",
                     "adb-asyncio,adb-tornado", "--json", str(out), *BRIEF]) == 0
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert {(r["base"], r["variant"]) for r in runs} == {
        (system, program) for system in ("adb-asyncio", "adb-tornado")
        for program in faults.PROGRAMS}
    for run in runs:
        figures = run["figures"]
        where = f"{run['system']} on {kind}"
        assert run["ok"], f"{where}: {run['error']}"
        assert {k: figures[k] for k in faults.COUNTS} == dict.fromkeys(faults.COUNTS, 0), where
        assert figures["calls"] > 0 and figures["recovery_s"] < 10, where
        if run["variant"] == "second-loop":
            # the second thread's loop is refused by design (one Database per loop); the
            # loop that replaced a closed one is served
            assert figures["refused"] == 100 and figures["errors"] == {"InterfaceError": 100}
        else:
            assert figures["refused"] == 0, where
    storm = next(r["figures"] for r in runs if r["variant"] == "cancel-storm")
    assert storm["maybe"] > 0  # the storm did cancel statements mid-way


@pytest.mark.timeout(120)
def test_a_peer_runs_the_same_program_and_a_program_it_cannot_express_says_why(tmp_path):
    require_server("postgresql")
    runs, unavailable = [], {}
    for systems in ("asyncpg", "adbapi"):
        out = tmp_path / f"{systems}.json"
        cli.main(["--scenario", "faults", "--dburl", URLS["postgresql"], "--systems", systems,
                  "--fault_programs", "open-tx,second-loop" if systems == "adbapi" else "open-tx",
                  "--json", str(out), *BRIEF])
        report = json.loads(out.read_text())
        runs += report["runs"]
        unavailable.update(report["unavailable"])
    assert [(r["system"], r["ok"]) for r in runs] == [("asyncpg open-tx", True),
                                                      ("adbapi open-tx", True)]
    assert unavailable["adbapi second-loop"].startswith("n/a: ")
    assert all(r["figures"]["version"] not in ("", "?") for r in runs)  # each peer's version
    assert all(r["figures"][k] == 0 for r in runs for k in faults.COUNTS)


def test_the_ledger_finds_rows_lost_doubled_and_half_a_transaction():
    ledger = Ledger()
    ledger.ok |= {"a", "b", "c"}
    ledger.not_run.add("d")
    ledger.maybe.add("e")
    ledger.transactions += [(["t1", "t2"], True), (["u1", "u2"], False), (["v1"], True)]
    ledger.rolled_back.add("r")
    counts = ledger.check(["a", "b", "b", "d", "e", "t1", "t2", "u1", "r"])
    # c and the committed v1 lost; b written twice; d said "not run", r rolled back,
    # u1 without u2: three wrong
    assert counts == {"lost": 2, "doubled": 1, "wrong_rows": 3}
    assert Ledger().check([]) == {"lost": 0, "doubled": 0, "wrong_rows": 0}


def test_programs_are_checked_and_marks_rewritten(capsys):
    with pytest.raises(SystemExit):
        cli.parse(["--scenario", "faults", "--dburl", URLS["postgresql"],
                   "--fault_programs", "cancel-storm,nosuch"])
    assert "unknown nosuch" in capsys.readouterr().err
    assert dollar("select %s, %s") == "select $1, $2"
    assert named("values (%s, %s)") == "values (:p1, :p2)"
