"""The "Coming from" guides (docs/coming-from-*.md): each page's ported program runs
against the server its old library targets and prints what its comments say, which is
what the original printed; the original runs too where its library is installed."""

import importlib.util
import subprocess
import sys

import pytest

from .test_description import promised_output
from .test_docs import ROOT, localise, python_blocks

#: page -> the library it ports from
GUIDES = {"docs/coming-from-torndb.md": "torndb", "docs/coming-from-aiopg.md": "aiopg",
          "docs/coming-from-asyncpg.md": "asyncpg"}


def programs(page: str) -> tuple[str, str]:
    """The page's two programs: the original, then its port (its first two blocks)."""
    original, port = python_blocks(page)[:2]
    return original, port


#: the guides' further blocks, one per topic after the program (sessions, prepared
#: statements, JSON, errors, pool sizes...): each is a port of its own that runs
SNIPPETS = [(page, i, code) for page in GUIDES for i, code in enumerate(python_blocks(page)[2:])]
#: the topics each guide covers beyond its program, as its headings name them
TOPICS = {
    "docs/coming-from-torndb.md": ["Sessions", "One row", "Parameters: one tuple", "Errors by name",
                                   "Prepared statements", "Pool size", "Shutdown"],
    "docs/coming-from-aiopg.md": ["Prepared statements", "JSON", "Exceptions by name", "Pool size"],
    "docs/coming-from-asyncpg.md": ["Prepared statements", "JSON", "Exceptions by name",
                                    "Pool size", "Parameters: one tuple"],
}


def run(code: str, tmp_path) -> list[str]:
    result = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", localise(code)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("page", GUIDES)
def test_the_port_uses_adb_where_the_original_used_its_library(page):
    original, port = programs(page)
    library = GUIDES[page]
    assert f"import {library}" in original
    assert library not in {line.split()[1] for line in port.splitlines() if line.startswith("import ")}
    assert "from adb" in port
    assert promised_output(original) == promised_output(port) != []


@pytest.mark.parametrize("page", GUIDES)
def test_the_port_prints_what_the_original_printed(page, tmp_path):
    _, port = programs(page)
    assert run(port, tmp_path) == promised_output(port)


@pytest.mark.parametrize("page, index, code", SNIPPETS, ids=[f"{p}#{i + 2}" for p, i, _ in SNIPPETS])
def test_each_topics_snippet_prints_what_its_comments_say(page, index, code, tmp_path):
    assert promised_output(code), "a topic's snippet says what it prints"
    assert run(code, tmp_path) == promised_output(code)


@pytest.mark.parametrize("page", GUIDES)
def test_each_guide_covers_the_topics_a_port_meets(page):
    headings = [line for line in (ROOT / page).read_text().splitlines() if line.startswith("## ")]
    for topic in TOPICS[page]:
        assert [h for h in headings if topic in h], (page, topic)
    assert len(python_blocks(page)) > 2


@pytest.mark.parametrize("page", [page for page, library in GUIDES.items() if library != "torndb"])
def test_the_original_prints_the_same(page, tmp_path):
    """torndb 0.3, its last release, is Python 2 only: its original is not run."""
    if importlib.util.find_spec(GUIDES[page]) is None:
        pytest.skip(f"{GUIDES[page]} is not installed (the bench extra brings it)")
    original, _ = programs(page)
    assert run(original, tmp_path) == promised_output(original)


def test_every_guide_is_in_the_index_and_the_nav():
    index = (ROOT / "docs" / "README.md").read_text()
    nav = (ROOT / ".ci" / "mkdocs.yml").read_text()
    for page in sorted((ROOT / "docs").glob("coming-from-*.md")):
        assert f"docs/{page.name}" in GUIDES, page
        assert f"({page.name})" in index and f": {page.name}" in nav, page
