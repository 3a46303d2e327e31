"""The package's description (``docs/description.md``, its page on the package index):
a first program per front-end that runs as written, on SQLite, and prints what the
page says it prints; links that work off the repository.
"""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from ..conftest import CTRL_C
from .test_docs import ROOT, python_blocks

DESCRIPTION = "docs/description.md"
#: each front-end's example, by the module it imports its Database from
FRONT_ENDS = {"asyncio": "from adb import Database", "tornado": "from adb.tornado import Database",
              "twisted": "from adb.twisted import Database", "sync": "from adb.sync import Database"}


def example(front: str) -> str:
    (code,) = [code for code in python_blocks(DESCRIPTION) if FRONT_ENDS[front] in code]
    return code


def promised_output(code: str) -> list[str]:
    """What the example says it prints: the comment after each ``print(...)``."""
    return re.findall(r"^\s*print\(.*\)\s*# (.*)$", code, re.M)




def run(code: str, tmp_path: pathlib.Path) -> subprocess.Popen:
    """The example as a program of its own, in a scratch folder that is also its
    temporary directory (where the embedded default's SQLite file goes)."""
    return subprocess.Popen([sys.executable, "-W", "error::ResourceWarning", "-c", CTRL_C + code],
                            cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_there_is_one_example_per_front_end():
    blocks = python_blocks(DESCRIPTION)
    assert len(blocks) == len(FRONT_ENDS)
    for front in FRONT_ENDS:
        assert example(front)


@pytest.mark.parametrize("front", ["asyncio", "twisted", "sync"])
def test_the_example_runs_as_written_and_prints_what_it_says(front, tmp_path):
    code = example(front)
    promised = promised_output(code)
    assert promised, "the example shows what it prints"
    proc = run(code, tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.splitlines() == promised
    assert not list(tmp_path.glob("adb-*.db")), "the embedded default's file outlived close()"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fetch(url: str, within: float = 30.0) -> tuple[int, bytes]:
    """The status and body at ``url``, trying until the server answers."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_tornado_example_serves_the_table_it_creates(tmp_path):
    code = example("tornado")
    port = free_port()
    assert code.count("8888") == 1
    shown = re.search(r"self\.write\(rows\[0\]\)\s*# (.*)$", code, re.M)
    assert shown is not None, "the handler shows what it writes"
    promised = json.loads(shown.group(1))
    proc = run(code.replace("8888", str(port)), tmp_path)
    try:
        status, body = fetch(f"http://127.0.0.1:{port}/users/1")
        assert (status, json.loads(body)) == (200, promised)
        assert fetch(f"http://127.0.0.1:{port}/users/3")[0] == 404
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: asyncio.run cancels main, which closes
        _, err = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in err and "ResourceWarning" not in err, err
    assert not list(tmp_path.glob("adb-*.db")), "the embedded default's file outlived close()"


def test_links_work_on_the_package_index():
    """No link relative to the repository, which the index page does not have, and no
    path outside the distribution; a documentation site, once it has an address
    (``site_url`` in .ci/mkdocs.yml), is linked from the page and setup.cfg."""
    text = (ROOT / DESCRIPTION).read_text()
    targets = re.findall(r"\]\(([^)]*)\)", text)
    assert all(t.startswith("https://") for t in targets), targets
    assert not re.search(r"shared/|seeds?\b|\.\./", text)
    site_url = re.search(r"^site_url:\s*(\S+)", (ROOT / ".ci" / "mkdocs.yml").read_text(), re.M)
    if site_url:
        assert site_url.group(1) in text
        assert site_url.group(1) in (ROOT / "setup.cfg").read_text()


#: the pages that tell a user how to install adb
INSTALL_PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def test_the_first_install_line_works_before_the_package_is_published():
    """adb-async is not on the package index yet: each page's first ``pip install``
    installs from a checkout (``.``) or its wheel, and ``pip install adb-async`` is only
    offered for once it is published."""
    for page in INSTALL_PAGES:
        text = (ROOT / page).read_text()
        targets = re.findall(r"pip install (?:-q )?(?:-e )?(\S+)", text)
        if not targets:
            continue
        assert targets[0].strip("'`").startswith((".", "dist/")), (page, targets[0])
        for found in re.finditer(r"pip install '?adb-async", text):
            around = text[max(0, found.start() - 200):found.end() + 200]
            assert "published" in around, (page, around)


def test_the_wheel_line_names_the_wheel_the_build_makes():
    """``dist/adb_async-*.whl``: the distribution name as wheel file names spell it."""
    name = re.search(r"^name\s*=\s*(\S+)", (ROOT / "setup.cfg").read_text(), re.M)
    assert name is not None
    wheel = f"dist/{name.group(1).replace('-', '_')}-*.whl"
    assert f"pip install {wheel}" in (ROOT / DESCRIPTION).read_text()
    assert f"pip install {wheel}" in (ROOT / "README.md").read_text()
