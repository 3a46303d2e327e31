"""The package as users get it, built and installed the way they would.

``python -m build`` makes the sdist and, from it, the wheel. The wheel goes into a
fresh virtual environment outside the checkout: site-packages gains ``adb``,
``adisp_compat`` and the dist-info, nothing else (the benchmark rides along as
``adb.benchmarks``); its ``adb-benchmark`` command first says which extra it lacks,
then, with it, runs a short SQLite benchmark and verifies it. The sdist, unpacked and
installed with its test extra into another environment, passes its own tests with
the database servers out of reach: the SQLite and no-server tests pass, the others
skip saying why.

The environments install from the package index (the bench and test extras), so this
takes a few minutes; it never touches the servers the other tests use.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest

import adb

from .checkout import source_copy

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = f"adb_async-{adb.__version__}"
#: the repository's packages and where the wheel puts them
PACKAGES = {"adb": "adb", "adisp_compat": "adisp_compat", "benchmarks": "adb/benchmarks"}
#: no server answers here (the discard port): every server test of the sdist skips
NOWHERE = "127.0.0.1:9"
SERVERS_AWAY = {
    "ADB_TEST_POSTGRESQL_URL": f"postgresql://root@{NOWHERE}/test",
    "ADB_TEST_MYSQL_URL": f"mysql://root@{NOWHERE}/test",
    "ADB_TEST_STANDBY_URL": f"postgresql://root@{NOWHERE}/test", "ADB_TEST_STANDBY_PORT": "9",
    "ADB_TEST_PGBOUNCER_URL": f"postgresql://root@{NOWHERE}/test",
    "ADB_MONGO_URL": f"mongodb://{NOWHERE}/test",
}
#: what the sdist's run leaves out: the project's own checks (this test, mypy over
#: everything, the benchmark runs: the main run makes them on the same files); the real
#: applications, installed from the index (with all these this test took 544 s here, the
#: applications installed afresh, and 395 s in CI; without them 209 s);
#: the stress suite (CI runs it on the free-threaded build); the fault tests, which stop
#: and restart servers; the tests of clusters at fixed ports (Galera, a primary/standby
#: pair they start)
SDIST_RUN_SKIPS = ["project", "adbapi/test_adbapi_apps.py", "stress", "faults/test_faults.py",
                   "topologies/test_galera_faults.py", "topologies/test_galera.py",
                   "topologies/test_galera_retry.py", "topologies/test_failover.py"]

pytestmark = pytest.mark.timeout(1200)


def run(*argv: object, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run a command, failing the test with its output if it fails."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{argv}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, pathlib.Path]:
    """The sdist and the wheel built from it, as ``python -m build`` makes them."""
    out = tmp_path_factory.mktemp("dist")
    source = source_copy(tmp_path_factory.mktemp("checkout") / "source")
    # the pure wheel (the compiled one is tests/project/test_compiled.py's and .ci/compiled's)
    run(sys.executable, "-m", "build", "--outdir", out, source,
        env={**os.environ, "ADB_COMPILE": "0"})
    return {"sdist": out / f"{NAME}.tar.gz", "wheel": out / f"{NAME}-py3-none-any.whl"}


def venv(where: pathlib.Path) -> pathlib.Path:
    """A fresh virtual environment at ``where`` (outside the checkout); its bin/."""
    assert ROOT not in where.parents
    run(sys.executable, "-m", "venv", where)
    return where / "bin"


def site_packages(bin_dir: pathlib.Path) -> pathlib.Path:
    (path,) = bin_dir.parent.glob("lib/python3*/site-packages")
    return path


def outside_env(**extra: str) -> dict[str, str]:
    """The environment for commands run from a venv: no CI=true (it turns skips into
    failures), nothing pointing at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def test_the_wheel_holds_every_module_under_adb_or_adisp_compat(dists):
    names = zipfile.ZipFile(dists["wheel"]).namelist()
    for folder, installed in PACKAGES.items():
        for module in (ROOT / folder).rglob("*.py"):
            assert f"{installed}/{module.relative_to(ROOT / folder)}" in names, module
    tops = {name.split("/")[0] for name in names}
    assert tops == {"adb", "adisp_compat", f"{NAME}.dist-info"}
    assert "adb/py.typed" in names


def test_the_metadata_is_complete_and_lists_each_requirement_once(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        metadata = wheel.read(f"{NAME}.dist-info/METADATA").decode()
    headers, _, body = metadata.partition("\n\n")
    assert "License-Expression: Apache-2.0" in headers
    assert "License ::" not in headers  # the deprecated classifier
    assert re.search(r"^Classifier: Development Status :: ", headers, re.M)
    assert re.search(r"^Keywords: .*asyncio", headers, re.M)
    assert f"Version: {adb.__version__}" in headers
    requirements = re.findall(r"^Requires-Dist: (.*)$", headers, re.M)
    assert requirements and len(requirements) == len(set(requirements))
    extras = set(re.findall(r"^Provides-Extra: (.*)$", headers, re.M))
    assert {"postgresql", "psycopg", "mysql", "tornado", "twisted", "otel"} <= extras
    assert body.strip() == (ROOT / "docs" / "description.md").read_text().strip()


def test_the_sdist_holds_what_its_tests_read_and_nothing_from_outside(dists):
    with tarfile.open(dists["sdist"]) as sdist:
        names = {name.removeprefix(f"{NAME}/") for name in sdist.getnames()}
    for needed in ("tests/__init__.py", "tests/conftest.py", "tests/idioms.py",
                   "tests/typing/usage.py", "docs/architecture.md", "docs/description.md",
                   ".ci/mkdocs.yml", ".ci/mkdocs_hooks.py", ".ci/griffe_frontends.py",
                   ".ci/run", ".ci/noxfile.py", "benchmarks/__main__.py", "setup.cfg"):
        assert needed in names, needed
    tracked = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")}
    assert tracked <= names
    assert not [n for n in names if "shared" in n.split("/") or n.endswith(".db")]


def test_the_wheel_installs_adb_and_its_benchmark_command_outside_the_checkout(dists, tmp_path):
    bin_dir = venv(tmp_path / "venv")
    before = {p.name for p in site_packages(bin_dir).iterdir()}
    run(bin_dir / "pip", "install", "-q", dists["wheel"])
    gained = {p.name for p in site_packages(bin_dir).iterdir()} - before
    assert gained == {"adb", "adisp_compat", f"{NAME}.dist-info"}

    work = tmp_path / "work"
    work.mkdir()
    env = outside_env()
    bare = subprocess.run([bin_dir / "adb-benchmark", "--rows", "200"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and bare.stdout == ""
    assert "pip install 'adb-async[bench]'" in bare.stderr and "tqdm" in bare.stderr

    run(bin_dir / "pip", "install", "-q", f"{dists['wheel']}[bench]")
    result = run(bin_dir / "adb-benchmark", "--rows", "300", "--systems", "adb-asyncio,adb-sync",
                 "--json", work / "run.json", cwd=work, env=env)
    report = json.loads((work / "run.json").read_text())
    assert report["scenario"] == "parallel-insert" and report["rows"] == 300
    assert [(r["system"], r["ok"]) for r in report["runs"]] == [("adb-asyncio", True),
                                                               ("adb-sync", True)]
    assert "adb-benchmark --dburl postgresql://" in result.stdout
    assert f"{site_packages(bin_dir)}/adb/" in run(
        bin_dir / "python", "-c", "import adb.benchmarks.cli as c; print(c.__file__)",
        cwd=work, env=env).stdout


def test_the_sdist_passes_its_own_tests_on_sqlite(dists, tmp_path):
    with tarfile.open(dists["sdist"]) as sdist:
        if hasattr(tarfile, "data_filter"):  # 3.10.12 and later: refuse odd members
            sdist.extractall(tmp_path, filter="data")
        else:
            sdist.extractall(tmp_path)
    source = tmp_path / NAME
    bin_dir = venv(tmp_path / "venv")
    run(bin_dir / "pip", "install", "-q", f"{source}[test]", timeout=900)
    skips = [f"--ignore=tests/{name}" for name in SDIST_RUN_SKIPS]
    result = subprocess.run(
        [bin_dir / "python", "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
         "-k", "not galera", *skips],
        cwd=source, env=outside_env(**SERVERS_AWAY), capture_output=True, text=True,
        timeout=900)
    tail = result.stdout[-4000:]
    failures = "\n".join(line for line in result.stdout.splitlines() if line.startswith("FAILED"))
    assert result.returncode == 0, failures + "\n" + tail + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", tail)
    assert passed is not None and int(passed.group(1)) > 500, tail
    for kind in ("postgresql", "mysql"):  # skipped, saying where no server answered
        assert re.search(rf"no {kind} server at \S*{re.escape(NOWHERE)}: start ", result.stdout)
