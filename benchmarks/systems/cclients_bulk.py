"""The limit for the bulk scenario: the servers' own command-line clients reading
and loading the same rows.

Reading (``stream``): ``psql -c "\\copy (select k, v from adb_bench_bulk_rows) to stdout"``
or ``mysql --quick --batch -e "select k, v from adb_bench_bulk_rows"``, the output written to
a file in memory (``/dev/shm`` where there is one); after the clock the file's
lines are counted and their keys summed, which is what the run reports for the
parent to check. Loading (``copy``): the rows written to such a file in the text
format before the clock, then ``psql -c "\\copy adb_bench_bulk_load (k, v) from 'file'"`` or
``mysql --local-infile=1 -e "load data local infile 'file' into table
adb_bench_bulk_load"``. The clock covers the client process from start to exit, its
start-up and connection included (a few milliseconds); its peak RSS and CPU
time are the client process's.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import subprocess
import tempfile
import time
from typing import Any, Iterator

from ..sql import BULK_COLUMNS, BULK_TARGET, bulk_select, bulk_text
from .common import Figures, RunSpec

#: where the files go: memory, so the disk is not what is measured
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def run(spec: RunSpec, table: str) -> Figures:
    """bulk's ``stream`` or ``copy`` part (``spec.options["part"]``) by psql or mysql."""
    part = spec.options.get("part")
    if part == "stream":
        return _read(spec)
    if part == "copy":
        return _load(spec)
    raise ValueError(f"the C clients run bulk's stream and copy parts, not {part!r}")


def _read(spec: RunSpec) -> Figures:
    """Every row of the source table through the client into a file; then its
    lines counted and keys summed, off the clock."""
    if spec.kind == "postgresql":
        command = _psql(spec, f"\\copy ({bulk_select()}) to stdout")
    else:
        command = _mysql(spec, bulk_select(), "--quick")
    with _scratch() as path:
        with open(path, "wb") as out:
            seconds, _ = _timed(spec, command, out)
        count, total = _tally(path)
    return {"part": "stream", "seconds": seconds, "rows_per_s": count / seconds,
            "rows_read": count, "key_sum": total, **_client_usage(max(count, 1)),
            "client": command[0]}


def _load(spec: RunSpec) -> Figures:
    """The rows written to a text-format file, then loaded by the client on the clock."""
    columns = ", ".join(BULK_COLUMNS)
    with _scratch() as path:
        with open(path, "w") as out:
            for key in range(spec.rows):
                out.write(f"{key}\t{bulk_text(key)}\n")
        if spec.kind == "postgresql":
            command = _psql(spec, f"\\copy {BULK_TARGET} ({columns}) from '{path}'")
            pattern = r"COPY (\d+)"
        else:
            command = _mysql(spec, f"load data local infile '{path}' into table {BULK_TARGET} "
                                   f"({columns}); select row_count()", "--local-infile=1")
            pattern = r"^(\d+)\s*$"
        seconds, said = _timed(spec, command, subprocess.PIPE)
    found = re.search(pattern, said, re.MULTILINE)
    return {"part": "copy", "seconds": seconds, "rows_per_s": spec.rows / seconds,
            "rows_loaded": int(found.group(1)) if found else None,
            **_client_usage(spec.rows), "client": command[0]}


def _psql(spec: RunSpec, command: str) -> list[str]:
    """psql running one command against the URL's server, stopping at an error."""
    kw = spec.connect_kwargs()
    return ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", str(kw.get("host", "127.0.0.1")),
            "-p", str(kw.get("port", 5432)), "-U", str(kw.get("user", "postgres")),
            "-d", str(kw.get("database", "postgres")), "-c", command]


def _mysql(spec: RunSpec, statements: str, *flags: str) -> list[str]:
    """mysql running ``statements`` against the URL's server, tab-separated, no header."""
    kw = spec.connect_kwargs()
    return ["mysql", *flags, "--batch", "--skip-column-names",
            "-h", str(kw.get("host", "127.0.0.1")), "-P", str(kw.get("port", 3306)),
            "-u", str(kw.get("user", "root")), str(kw.get("database", "test")),
            "-e", statements]


def _timed(spec: RunSpec, command: list[str], stdout: Any) -> tuple[float, str]:
    """Run the client (the URL's password in its environment); its wall time and
    what it printed (when ``stdout`` is a pipe). A failure raises with the
    client's own words."""
    password = str(spec.connect_kwargs().get("password", ""))
    env = dict(os.environ, PGPASSWORD=password, MYSQL_PWD=password)
    start = time.perf_counter()
    proc = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, env=env, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {proc.stderr.decode().strip()[-300:]}")
    return seconds, proc.stdout.decode() if isinstance(proc.stdout, bytes) else ""


def _tally(path: str) -> tuple[int, int]:
    """The lines of a client's output and the sum of their first field (the key)."""
    count = total = 0
    with open(path, "rb") as lines:
        for line in lines:
            count += 1
            total += int(line.split(b"\t", 1)[0])
    return count, total


def _client_usage(rows: int) -> Figures:
    """The client process's peak RSS and CPU time per row (it is the only child
    this process waited for), in place of this process's own."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"peak_rss_mb": usage.ru_maxrss / 1024,
            "cpu_us_per_row": (usage.ru_utime + usage.ru_stime) / rows * 1e6}


@contextlib.contextmanager
def _scratch() -> Iterator[str]:
    """A file name in memory (or the temporary directory), removed afterwards."""
    handle, path = tempfile.mkstemp(prefix="adb-bench-bulk-", suffix=".tsv", dir=SCRATCH)
    os.close(handle)
    try:
        yield path
    finally:
        os.unlink(path)

