"""The compiled build and its fallback (build_backend.py).

``ADB_COMPILE=0`` makes a pure-Python ``py3-none-any`` wheel with no extension in
it; ``ADB_COMPILE=1`` makes a platform wheel holding an extension for every module
``COMPILED`` names (beside its ``.py``), and the shared library of them inside
``adb/``; any other value is refused by name. Each build installs its own
setuptools (and mypy, to compile) from the package index, as users' builds do.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import build_backend  # noqa: E402

from .checkout import source_copy  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def build(tmp_path: pathlib.Path, compile_: str) -> subprocess.CompletedProcess[str]:
    """Build a wheel of a copy of the checkout into ``tmp_path``."""
    return subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir",
         str(tmp_path), str(source_copy(tmp_path / "source"))],
        env={**os.environ, build_backend.ENV: compile_}, capture_output=True, text=True,
        timeout=800)


def wheel_names(tmp_path: pathlib.Path, pattern: str) -> list[str]:
    (wheel,) = tmp_path.glob(pattern)
    return zipfile.ZipFile(wheel).namelist()


def test_adb_compile_0_makes_a_pure_wheel(tmp_path):
    proc = build(tmp_path, "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "adb: compiling" not in proc.stderr + proc.stdout
    names = wheel_names(tmp_path, "adb_async-*-py3-none-any.whl")
    assert "adb/worker.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyd"))]


def test_adb_compile_1_makes_a_wheel_with_every_listed_module_compiled(tmp_path):
    proc = build(tmp_path, "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # one line, before the minute of compiling, says what runs, how long, and for whom
    said = [line for line in (proc.stderr + proc.stdout).splitlines() if "adb: compiling" in line]
    assert len(said) == 1, said
    for words in ("about a minute", "for this Python only", sys.implementation.cache_tag,
                  "ADB_COMPILE=0 makes a pure-Python wheel", *map(os.path.basename, build_backend.COMPILED)):
        assert words in said[0], (words, said[0])
    names = wheel_names(tmp_path, "adb_async-*-cp3*.whl")
    assert build_backend.COMPILED
    for source in build_backend.COMPILED:
        stem = source.removesuffix(".py")
        assert source in names  # the pure module stays, for tracebacks and the fallback
        assert [n for n in names if n.startswith(f"{stem}.") and n.endswith(".so")], source
    shared = [n for n in names if "__mypyc" in n]
    assert shared and all(n.startswith("adb/") for n in shared)


def test_an_unknown_adb_compile_value_is_refused_by_name(tmp_path):
    proc = build(tmp_path, "yes")
    assert proc.returncode != 0
    assert "ADB_COMPILE='yes'" in proc.stderr + proc.stdout
