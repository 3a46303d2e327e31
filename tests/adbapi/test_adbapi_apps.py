"""Real applications on adb's adbapi drop-in: ``.ci/run-adbapi-apps`` in its brief mode.

The script installs Matrix Synapse and Cowrie from the package index (once: their
virtual environments are kept in ``~/.cache/adb/apps``, or ``$ADB_APPS_DIR``) and runs
each end to end on SQLite with Twisted's stock adbapi and with adb's drop-in in its
place. Every run must pass: a stock run that fails means the harness, not adb, is
broken. A drop-in run listed in ``EXPECTED_FAILURES`` (none today) is a strict xfail:
one that passes fails the run until its entry is removed. The full mode (PostgreSQL,
MariaDB, a Scrapy pipeline, killed connections) is ``.ci/run-adbapi-apps --full``.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BRIEF_RUNS = [(app, "sqlite", pool) for app in ("synapse", "cowrie") for pool in ("adbapi", "adb")]

#: (application, database, pool) -> why it fails on today's drop-in; remove an entry
#: once its run passes
EXPECTED_FAILURES: dict[tuple[str, str, str], str] = {}


@pytest.fixture(scope="module")
def results(tmp_path_factory: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    out = tmp_path_factory.mktemp("apps") / "results.json"
    run = subprocess.run([sys.executable, str(ROOT / ".ci" / "run-adbapi-apps"), "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    if not out.exists():
        pytest.fail(f"the script wrote no results:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return {(r["app"], r["database"], r["pool"]): r for r in json.loads(out.read_text())}


@pytest.mark.timeout(900)  # the first run installs the applications
@pytest.mark.parametrize("app, database, pool", [
    pytest.param(*run, id="-".join(run), marks=[pytest.mark.xfail(reason=EXPECTED_FAILURES[run],
                                                                   strict=True)]
                 if run in EXPECTED_FAILURES else [])
    for run in BRIEF_RUNS])
def test_application_runs_end_to_end(results: dict[tuple[str, str, str], dict[str, Any]],
                                     app: str, database: str, pool: str) -> None:
    result = results[(app, database, pool)]
    assert result["result"] == "PASS", result["detail"]
