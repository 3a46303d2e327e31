"""adb ships its types (``py.typed``) and they hold: ``mypy --strict`` passes on
``adb/`` and on a sample of user code that pins down what each front-end's methods
return; mypy with ``setup.cfg``'s settings passes on ``benchmarks/`` (every function
annotated) and on ``tests/`` (function bodies checked)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mypy(*args):
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "setup.cfg",
                           "--cache-dir", os.devnull if os.name != "nt" else ".mypy_cache",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_py_typed_ships():
    assert (ROOT / "adb" / "py.typed").is_file()
    assert "adb = py.typed" in (ROOT / "setup.cfg").read_text()


def test_mypy_strict_passes_on_the_package_and_on_typed_usage():
    result = mypy("--strict", "adb", "tests/typing/usage.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_passes_on_the_benchmarks():
    result = mypy("-p", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_passes_on_the_tests():
    result = mypy("tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_catches_a_wrong_return_type(tmp_path):
    """The check can fail: a wrong claim about a return type is reported."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import adb.sync\nfrom typing_extensions import assert_type\n\n\n"
                     "def f(db: adb.sync.Database) -> None:\n"
                     "    assert_type(db.runOperation('delete from t'), str)\n")
    result = mypy(str(wrong))
    assert result.returncode == 1, result.stdout
    assert 'wrong.py:6: error: Expression is of type "int", not "str"' in result.stdout, result.stdout


def test_mypy_catches_a_typo_of_an_option_and_none_as_the_url(tmp_path):
    """Every option of the constructor is a typed keyword (``adb.options.Options``):
    a misspelt one, and an unset environment variable given as the URL, are caught
    before the program runs."""
    wrong = tmp_path / "typo.py"
    wrong.write_text("import os\n\nimport adb\n\n\n"
                     "def f() -> None:\n"
                     "    adb.Database('sqlite://', pool_sise=3)\n"
                     "    adb.Database(os.environ.get('DATABASE_URL'))\n"
                     "    adb.Database('sqlite://', pool_size=3, statement_timeout=None)\n")
    result = mypy(str(wrong))
    assert result.returncode == 1, result.stdout
    assert 'typo.py:7: error: Unexpected keyword argument "pool_sise"' in result.stdout, result.stdout
    assert "typo.py:8: error: Argument 1" in result.stdout, result.stdout
    assert "typo.py:9" not in result.stdout, result.stdout
