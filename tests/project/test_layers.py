"""The import graph is the one ``docs/architecture.md`` draws.

That page lists, for ``adb`` and ``benchmarks``, the layers of each package in a
fenced ``layers`` block, top layer first: one layer per line, each naming the
modules on it (``adb/core.py``; a glob such as ``adb/drivers/*.py`` takes every
module no other line names). A module may import only modules on lower lines,
whether at the top of the file, inside a function or under ``TYPE_CHECKING``;
so the graph has no circle, and the page cannot drift from the code.

Importing ``pkg.sub.mod`` from outside ``pkg/sub/`` runs ``pkg/sub/__init__.py``
first, so it counts as importing that too. Imports made by name at run time
(``importlib``: the driver registry's discovery) are not seen here.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("adb", "benchmarks")


def layer_blocks(text: str) -> list[list[str]]:
    """The ``layers`` blocks of ``text``: each a list of lines, top layer first."""
    return [block.strip("\n").splitlines()
            for block in re.findall(r"^```layers\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]


def layers_of(package: str, text: str) -> list[list[str]]:
    """The module patterns of each layer of ``package``, bottom layer first."""
    for lines in layer_blocks(text):
        layers = [[word for word in line.split() if word.startswith(package + "/")]
                  for line in lines]
        layers = [layer for layer in layers if layer]
        if layers:
            return layers[::-1]
    raise AssertionError(f"docs/architecture.md has no ```layers block for {package}/")


def modules_of(package: str, root: Path = ROOT) -> list[str]:
    """Every module file of ``package``, as a path relative to ``root`` (``adb/core.py``)."""
    return sorted(str(path.relative_to(root)) for path in (root / package).rglob("*.py"))


def assign(package: str, layers: list[list[str]], modules: list[str]) -> dict[str, int]:
    """Each module's layer (0: the bottom). An explicit name wins over a glob; a
    module that no line names, or that two lines name, fails the test."""
    level: dict[str, int] = {}
    for exact in (True, False):
        for index, layer in enumerate(layers):
            for pattern in layer:
                if ("*" in pattern) == exact:
                    continue
                for module in modules:
                    if module in level and not exact and level[module] == index:
                        continue
                    if (module == pattern) if exact else fnmatch.fnmatch(module, pattern):
                        if exact:
                            assert module not in level, f"{module} is on two lines"
                            level[module] = index
                        elif module not in level:
                            level[module] = index
    missing = [m for m in modules if m not in level]
    assert not missing, f"docs/architecture.md puts no layer on: {', '.join(missing)}"
    stale = [p for layer in layers for p in layer
             if "*" not in p and p not in modules]
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"
    return level


def module_file(dotted: str, root: Path = ROOT) -> str | None:
    """The file of module ``dotted`` under ``root``, or None if it is not one of ours."""
    path = root.joinpath(*dotted.split("."))
    if (path / "__init__.py").is_file():
        return str((path / "__init__.py").relative_to(root))
    if path.with_suffix(".py").is_file():
        return str(path.with_suffix(".py").relative_to(root))
    return None


def imports_of(module: str, root: Path = ROOT) -> list[tuple[int, str]]:
    """``(line, file)`` for every module of ours that ``module`` imports, anywhere in
    it, with the package ``__init__`` files the import runs on the way."""
    dotted = module[:-3].replace("/", ".")
    is_package = dotted.endswith(".__init__")
    package = dotted[: -len(".__init__")] if is_package else dotted.rpartition(".")[0]
    tree = ast.parse((root / module).read_text(), module)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            for end in range(1, len(parts) + 1):  # the packages on the way, then the module
                target = module_file(".".join(parts[:end]), root)
                if target is not None and target != module and not _contains(target, module):
                    found.append((node.lineno, target))
    return found


def _contains(init: str, module: str) -> bool:
    """True when ``init`` is the ``__init__.py`` of a package that holds ``module``:
    the package runs before any of its modules, so that is no import of it."""
    return init.endswith("/__init__.py") and module.startswith(init[: -len("__init__.py")])


def violations(package: str, text: str, root: Path = ROOT) -> list[str]:
    modules = modules_of(package, root)
    level = assign(package, layers_of(package, text), modules)
    wrong = []
    for module in modules:
        for line, target in imports_of(module, root):
            if target in level and level[target] >= level[module]:
                where = "the same line" if level[target] == level[module] else "a higher line"
                wrong.append(f"{module}:{line} imports {target}, which is on {where}")
    return sorted(set(wrong))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_follow_the_layers_the_doc_draws(package: str) -> None:
    assert violations(package, DOC.read_text()) == []


def test_a_back_import_is_caught(tmp_path: Path) -> None:
    """The check can fail: a lower module importing a higher one is reported, at
    its line, whether at the top, in a function or under TYPE_CHECKING."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "top.py").write_text("from . import low\n")
    (pkg / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .top import X\n"
        "def f():\n    from pkg import top\n\nfrom . import sub\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "leaf.py").write_text("")
    (pkg / "mid.py").write_text("from .sub.leaf import thing\n")  # sub/__init__ too: lower
    doc = ("```layers\npkg/__init__.py\npkg/top.py\npkg/mid.py\npkg/sub/leaf.py\n"
           "pkg/low.py pkg/sub/*.py\n```\n")
    assert violations("pkg", doc, tmp_path) == [
        "pkg/low.py:3 imports pkg/top.py, which is on a higher line",
        "pkg/low.py:5 imports pkg/top.py, which is on a higher line",
        "pkg/low.py:7 imports pkg/sub/__init__.py, which is on the same line",
    ]
