"""The documentation site: `mkdocs build --strict` passes, and it covers the public API.

The build fails on a broken link, a missing cross-reference, a page left out of the
navigation or a docstring that does not match its signature (`.ci/mkdocs.yml`).
"""

import importlib
import os
import pathlib
import re
import subprocess
import sys

import pytest

import adb
import adb.core

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CONFIG = ROOT / ".ci" / "mkdocs.yml"
API_PAGES = sorted((DOCS / "api").glob("*.md"))
IMPORT = re.compile(r"^\s*(?:from|import) ((?:adb|adisp_compat)(?:\.\w+)*)\b", re.M)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "--site-dir", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr
    return out


def public_modules():
    """adb's public modules: where the names of ``adb.__all__`` live, every module the
    docs tell users to import, and ``adb.core`` (the API every front-end shares)."""
    modules = {"adb", "adb.core", "adisp_compat"}
    modules |= {getattr(adb, name).__module__ for name in adb.__all__
                if hasattr(getattr(adb, name), "__module__")}
    sources = [*DOCS.glob("*.md"), *DOCS.glob("examples/*.py"), ROOT / "README.md"]
    for path in sources:
        modules |= set(IMPORT.findall(path.read_text()))
    return modules


def documented_modules():
    """The modules rendered by a ``::: name`` directive (or one of their members), and
    ``adb`` itself, whose names the API index lists."""
    modules = {"adb"}
    for name in re.findall(r"^::: ([\w.]+)", "\n".join(p.read_text() for p in API_PAGES), re.M):
        try:
            modules.add(importlib.import_module(name).__name__)
        except ImportError:
            modules.add(name.rsplit(".", 1)[0])
    return modules


def test_the_site_builds_strict_with_every_page(site):
    pages = {p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md")}
    for page in pages:
        index = page.name in ("README", "index")
        html = site / (page.parent if index else page) / "index.html"
        assert html.exists(), f"{page} was not rendered"


def test_every_public_module_has_an_api_page(site):
    public = public_modules()
    assert {"adb.asyncio", "adb.tornado", "adb.twisted", "adb.sync", "adb.errors"} <= public
    missing = public - documented_modules()
    assert not missing, f"public modules without an API page in docs/api/: {sorted(missing)}"


def test_api_pages_render_every_public_method_of_the_database(site):
    html = (site / "api" / "core" / "index.html").read_text()
    methods = [name for name, value in vars(adb.core.BaseDatabase).items()
               if not name.startswith("_") and (callable(value) or isinstance(value, property))]
    assert len(methods) >= 15  # the listing itself works
    for name in methods:
        assert f'id="adb.core.BaseDatabase.{name}"' in html, name


def test_front_end_pages_render_their_database(site):
    for front in ("asyncio", "tornado", "twisted", "sync"):
        html = (site / "api" / front / "index.html").read_text()
        assert f'id="adb.{front}.Database"' in html, front
        assert "adb.core.BaseDatabase" in html  # its base, linked
    assert 'id="adb.twisted.ConnectionPool.runInteraction"' in (site / "api" / "twisted" / "index.html").read_text()


def test_every_top_level_name_is_on_the_api_index():
    index = (DOCS / "api" / "index.md").read_text()
    for name in adb.__all__:
        assert f"[`{name}`]" in index or f"[`adb.{name}`]" in index or f"`{name}`" in index, name


def test_every_benchmark_chart_is_shown(site):
    html = "".join(p.read_text() for p in site.rglob("index.html"))
    for chart in sorted((DOCS / "results").glob("*.png")):
        assert (site / "results" / chart.name).exists()
        assert re.search(rf'<img [^>]*src="[./]*results/{re.escape(chart.name)}"', html), chart.name
