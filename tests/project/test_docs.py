"""The documentation's examples run, and the README's commands are the real ones."""

import pathlib
import re
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from ..conftest import URLS, dialect_url, need_module, require_server
from ..topologies import standby

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_URLS = {"postgresql": r"postgresql://root@127\.0\.0\.1(:5432)?/test",
                "mysql": r"mysql://root@127\.0\.0\.1(:3306)?/test"}


def python_blocks(path):
    text = (ROOT / path).read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def localise(code):
    """Point the examples at the test servers (ADB_TEST_*_URL may move them)."""
    if f"127.0.0.1:{standby.PORT}/test" in code:
        standby.require_standby()
        code = code.replace(f"postgresql://root@127.0.0.1:{standby.PORT}/test", standby.URL)
    for kind, pattern in DEFAULT_URLS.items():
        if kind == "postgresql" and ('driver="psycopg2"' in code or '"psycopg2", host' in code):
            require_server(kind)  # the keyword form names the default server itself
        if re.search(pattern, code):
            require_server(kind)
            code = re.sub(pattern, URLS[kind], code)
    mysqldb = r"mysql\+mysqldb://root@127\.0\.0\.1(:3306)?/test"
    if re.search(mysqldb, code):  # mysqlclient, which no extra installs: built here first
        require_server("mysql")
        need_module("MySQLdb")
        code = re.sub(mysqldb, dialect_url("mysql", "mysqldb"), code)
    return code


DOC_BLOCKS = [(path, i, code) for path in ("docs/usage.md", "docs/porting-2011.md", "docs/adbapi.md",
                                            "docs/replicas.md")
              for i, code in enumerate(python_blocks(path))]


@pytest.mark.parametrize("path, index, code", DOC_BLOCKS,
                         ids=[f"{p}#{i}" for p, i, _ in DOC_BLOCKS])
def test_doc_example_runs(path, index, code, tmp_path):
    code = localise(code)
    result = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", code],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{path} example {index} failed:\n{result.stderr}"


def test_usage_guide_has_examples():
    assert len(DOC_BLOCKS) >= 13


def test_seed_example_runs_on_mariadb_too(tmp_path):
    """The ported seed example with driver="pymysql": the 2011 keyword form on MariaDB."""
    require_server("mysql")
    code = python_blocks("docs/porting-2011.md")[0]
    parts = urlsplit(URLS["mysql"])
    code = code.replace(
        'driver="psycopg2",\n                            database="test", user="root", host="127.0.0.1"',
        f'driver="pymysql", database={parts.path.lstrip("/")!r}, user={parts.username!r}, '
        f'host={parts.hostname!r}, port={parts.port}')
    assert 'driver="pymysql"' in code
    code = code.replace("rows_to_insert = 100000", "rows_to_insert = 20000")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "inserted [(20000,)] records" in result.stdout


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block is not None
    commands = block.group(1).strip().splitlines()
    assert len(commands) == 2
    main_job, tests = commands
    assert "python -m benchmarks" in main_job
    assert "pytest" in tests
    assert tests in ci.splitlines()
