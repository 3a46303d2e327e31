"""The bigdata scenario's input: census lines, their dictionary, and the reader.

A line of the US Census 2000 Summary File 1, segment 01, has 227 comma-separated
fields: ``uSF1,NY,000,01,<logrecno>`` and then 222 non-negative counts, one per
dictionary item of the segment's five matrices (P1..P5). The census file is not
part of this package: ``lines(n)`` makes lines of the same shape and value
distribution (92% zeros; the non-zero ones log-spread with median 13, p90 389,
p99 3,541, a few in the millions: ``NONZERO_QUANTILES``), and ``--census FILE`` reads a real file
(a ``.zip`` holding one, or plain text). ``dictionary()`` makes a data
dictionary of the real one's size (286 matrices in 39 segments, 8,113 items,
segment 01 holding 222) with generated names.

``start_reader`` parses lines in a separate process and feeds a queue, as the
original benchmark did (zzzeek's bigdata, ``util.py``), so parsing is not on the
workers' path but the pickling through the queue is.
"""

from __future__ import annotations

import bisect
import math
import multiprocessing
import random
import zipfile
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from typing import Any, Iterator, Optional

#: a parsed line: (fileid, stusab, chariter, cifsn, logrecno, [222 counts]); the
#: geo phase's record is its first five fields
Record = tuple[Any, ...]

ITEMS_PER_LINE = 222
SEGMENT = "01"
ZERO_SHARE = 0.92
#: (cumulative share, value) knots of the non-zero counts, log-linear between them:
#: the quantiles of the real file's (summary figures, not its data)
NONZERO_QUANTILES = ((0.0, 1), (0.25, 3), (0.5, 13), (0.75, 58), (0.9, 389), (0.95, 1_001),
                     (0.99, 3_541), (0.999, 26_535), (0.9999, 2_963_124), (1.0, 19_000_000))
MATRICES, SEGMENTS, ITEMS = 286, 39, 8_113
SEGMENT_01_MATRICES = (1, 6, 71, 73, 71)  # items of P1..P5: 222 in all
GENERATED_SEED = 2000


def value(rng: random.Random) -> int:
    """One count drawn from the census-like distribution."""
    if rng.random() < ZERO_SHARE:
        return 0
    share = rng.random()
    shares = [q for q, _ in NONZERO_QUANTILES]
    i = max(1, bisect.bisect_right(shares, share))
    (q0, v0), (q1, v1) = NONZERO_QUANTILES[i - 1], NONZERO_QUANTILES[i]
    fraction = (share - q0) / (q1 - q0)
    return max(1, round(math.exp(math.log(v0) + fraction * (math.log(v1) - math.log(v0)))))


def lines(count: int, seed: int = GENERATED_SEED) -> Iterator[str]:
    """``count`` generated census lines (text, no newline), log record numbers 1..count."""
    rng = random.Random(seed)
    for logrecno in range(1, count + 1):
        counts = ",".join(str(value(rng)) for _ in range(ITEMS_PER_LINE))
        yield f"uSF1,NY,000,{SEGMENT},{logrecno:07d},{counts}"


def file_lines(path: str, count: Optional[int] = None) -> Iterator[str]:
    """Up to ``count`` lines of a real census file (``.zip`` or text)."""
    def text_lines() -> Iterator[str]:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive, archive.open(archive.namelist()[0]) as f:
                for raw in f:
                    yield raw.decode("ascii").rstrip("\r\n")
        else:
            with open(path, encoding="ascii") as f:
                for line in f:
                    yield line.rstrip("\r\n")
    for n, line in enumerate(text_lines()):
        if count is not None and n >= count:
            return
        yield line


def parse(line: str) -> Record:
    """(fileid, stusab, chariter, cifsn, logrecno, [counts]) of one line; a line
    of the wrong shape is a ValueError that says which."""
    fields = line.split(",")
    if len(fields) != 5 + ITEMS_PER_LINE:
        raise ValueError(f"a census line has {5 + ITEMS_PER_LINE} fields, this one "
                         f"{len(fields)}: {line[:40]!r}")
    return (*fields[:5], [int(v) for v in fields[5:]])


def source(census: Optional[str], count: int) -> Iterator[str]:
    """The lines of a run: the real file if given, else generated ones."""
    return file_lines(census, count) if census else lines(count)


def dictionary(seed: int = GENERATED_SEED) -> list[tuple[str, str, str, list[int]]]:
    """[(code, segment_id, sortkey, [item indexes])] for every matrix, in order:
    segment 01 is P1..P5 with the real item counts, the rest spread to the real
    totals."""
    rng = random.Random(seed)
    matrices = [(f"P{n}", SEGMENT, n) for n in range(1, 6)]
    rest_matrices, rest_items = MATRICES - 5, ITEMS - sum(SEGMENT_01_MATRICES)
    sizes = list(SEGMENT_01_MATRICES)
    weights = [rng.random() + 0.2 for _ in range(rest_matrices)]
    spread = [max(1, int(w / sum(weights) * rest_items)) for w in weights]
    spread[-1] += rest_items - sum(spread)
    sizes += spread
    for n in range(6, MATRICES + 1):
        segment = 2 + (n - 6) * (SEGMENTS - 1) // rest_matrices
        matrices.append((f"P{n}", f"{segment:02d}", n))
    return [(code, segment, f"{sortkey:05d}", list(range(size)))
            for (code, segment, sortkey), size in zip(matrices, sizes)]


def start_reader(census: Optional[str], count: int,
                 phase: str) -> tuple[BaseProcess, Queue[Optional[Record]]]:
    """A process parsing the run's lines into a queue: for phase "geo", the geo
    record of each line; for "data", the whole record. Ends with None. Returns
    (process, queue)."""
    context = multiprocessing.get_context("spawn")  # the child's threads are running: no fork
    records = context.Queue()
    process = context.Process(target=_read, args=(census, count, phase, records), daemon=True)
    process.start()
    return process, records


def _read(census: Optional[str], count: int, phase: str,
          records: Queue[Optional[Record]]) -> None:
    for line in source(census, count):
        record = parse(line)
        records.put(record[:5] if phase == "geo" else record)
    records.put(None)
