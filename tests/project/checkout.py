"""A copy of the checkout's sources for a test to build from.

A build writes into the tree it builds (setuptools' ``build/`` and ``*.egg-info``), so
two builds of the checkout itself in two test processes would race on those. Each
build test builds its own copy instead, and the build tests can run side by side.
"""

from __future__ import annotations

import pathlib
import shutil

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: what a build neither needs nor should see: version control, environments, caches
#: and the outputs of earlier builds (the .gitignore's entries, and .git)
LEFT_OUT = shutil.ignore_patterns(
    ".git", ".venv", ".venv-*", ".nox", ".hypothesis", ".pytest_cache", "__pycache__",
    "build", "dist", "*.egg-info", "site", "_trial_temp", "tests.*", "*.db", "*.db-wal",
    "*.db-shm")


def source_copy(where: pathlib.Path) -> pathlib.Path:
    """The checkout's sources copied to ``where`` (a new directory); ``where``."""
    shutil.copytree(ROOT, where, ignore=LEFT_OUT, symlinks=True)
    return where
