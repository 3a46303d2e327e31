"""MkDocs hooks of adb's site (``.ci/mkdocs.yml``): the version on every page.

The version is written once, in ``adb/__init__.py``; it is read from there as text,
without importing adb, so the site builds the same from a checkout or an unpacked
sdist. It goes into the site's name (the header and every page's title) and its
footer.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any


def adb_version(root: Path) -> str:
    """``__version__`` as ``adb/__init__.py`` under ``root`` assigns it."""
    tree = ast.parse((root / "adb" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets):
            version = ast.literal_eval(node.value)
            assert isinstance(version, str)
            return version
    raise ValueError(f"{root / 'adb' / '__init__.py'} assigns no __version__")


def on_config(config: Any) -> Any:
    """Name the site ``adb <version>`` and put the version in the footer."""
    version = adb_version(Path(config.config_file_path).resolve().parent.parent)
    config.site_name = f"adb {version}"
    config.copyright = f"adb {version} · Apache-2.0"
    return config
