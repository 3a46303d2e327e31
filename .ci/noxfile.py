"""The interpreter matrix: every supported Python present on this machine.

- ``tests``: the whole suite, on the interpreter running nox (the default one);
- ``core``: the core contract (``CORE``: the public contract on every front-end, and
  each front-end's own tests, on SQLite and PostgreSQL with both of its drivers), on
  every other supported interpreter found here.

``.ci/run`` runs the README's test command (the whole suite on the default
interpreter) and then ``.ci/matrix``, which runs every ``core`` session side by side, so
CI fails when any of them fails. By hand: ``.venv/bin/nox -f .ci/noxfile.py -s core``
(or ``-s core-3.12``).

Interpreters are found on ``PATH`` (``python3.12``) or under pyenv's
``~/.pyenv/versions``; a supported one that is missing is reported with how to get it.
``SUPPORTED`` is what ``setup.cfg`` declares (``tests/project/test_matrix.py`` holds them equal).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import nox

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
DEFAULT = f"{sys.version_info.major}.{sys.version_info.minor}"
#: the core contract: the public contract on every front-end and each front-end's own tests
CORE = ("tests/contract/test_spec.py", "tests/contract/test_sync.py",
        "tests/contract/test_tornado.py", "tests/contract/test_twisted.py",
        "tests/contract/test_trio.py",
        "tests/adbapi/test_twisted_adbapi.py", "tests/contract/test_adisp_compat.py",
        "tests/features/test_savepoint.py", "tests/features/test_retry.py",
        "tests/features/test_stream.py")
#: SQLite and PostgreSQL only (psycopg2 and psycopg 3); MariaDB runs on the default one
CORE_SERVERS = "not mysql"

nox.options.envdir = str(ROOT / ".ci" / ".nox")
nox.options.reuse_existing_virtualenvs = False


def _runs(command: str) -> bool:
    try:
        return subprocess.run([command, "-c", ""], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _find(version: str) -> str | None:
    """The directory of a working ``python<version>``: PATH first (a pyenv shim for a
    version that is not selected fails to run, so it does not count), then pyenv."""
    name = f"python{version}"
    if _runs(name):
        return ""
    root = pathlib.Path(os.environ.get("PYENV_ROOT", pathlib.Path.home() / ".pyenv"))
    candidates = sorted(root.glob(f"versions/{version}.*/bin/{name}"),
                        key=lambda p: [int(n) for n in p.parts[-3].split(".") if n.isdigit()])
    found = [path for path in candidates if _runs(str(path))]
    return str(found[-1].parent) if found else None


def _present() -> list[str]:
    """The supported versions found here; pyenv's are put on PATH for nox to find."""
    present = []
    for version in SUPPORTED:
        directory = _find(version)
        if directory is None:
            print(f"noxfile: Python {version} is supported but not on this machine; get it with "
                  f"`pyenv install {version}` or your system's python{version} package",
                  file=sys.stderr)
            continue
        if directory:
            os.environ["PATH"] = directory + os.pathsep + os.environ["PATH"]
        present.append(version)
    return present


PRESENT = _present()
OTHERS = [version for version in PRESENT if version != DEFAULT]


@nox.session(python=DEFAULT)
def tests(session: nox.Session) -> None:
    """The whole suite (what the README's test command runs)."""
    session.install("-e", f"{ROOT}[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python=OTHERS)
def core(session: nox.Session) -> None:
    """The core contract on SQLite and PostgreSQL."""
    session.install("-e", f"{ROOT}[test-core]")
    session.chdir(ROOT)
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "-k", CORE_SERVERS, *CORE, *session.posargs)
