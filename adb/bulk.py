"""Bulk loads (``copy_in``): many rows into one table, in one transaction.

A load is written once, as *steps*: a generator that yields the futures it
needs (the begin, each chunk's job, the commit) and gets their values back.
``adb.steps`` drives them on every front-end, so all keep one order of events
and one rule: if anything fails, the transaction is rolled back and no row of
the load remains.

Where the rows come from decides who reads them. A plain iterable or a
file-like object is read by the worker thread itself, as the driver loads it
(``Driver.copy``'s ``copy_rows``/``copy_text``; for MariaDB's LOAD DATA, by a thread that
feeds the statement's pipe while the worker runs it), so it never waits on the
loop. An async
iterable is read on the loop, a chunk at a time: one chunk loads while the next
is gathered, so at most two chunks are held.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from typing import Any, Optional, Protocol

from .errors import InterfaceError
from .frontend import Waiting
from .op import Op
from .telemetry import Operation, What
from .transaction import Transaction

#: rows per chunk of an async iterable: each chunk is one job for the worker
CHUNK = 5000

_IDENT = r'(?:[A-Za-z_][\w$]*|"(?:[^"]|"")+"|`(?:[^`]|``)+`)'
_TABLE = re.compile(rf"{_IDENT}(?:\.{_IDENT}){{0,2}}\Z")
_COLUMN = re.compile(rf"{_IDENT}\Z")

#: what a load's steps yield: a future (or an awaitable of the source) to wait for
Steps = Generator[Any, Any, int]


class Loader(Protocol):
    """What a load uses of its engine (``adb.engine.Engine``)."""

    def begin_pending(self, read_only: bool,
                      timeout: Optional[float]) -> tuple[Transaction, Any]: ...
    def step_in(self, tx: Transaction, op: Op, args: tuple[Any, ...], what: What) -> Any: ...
    def end(self, tx: Transaction, commit: bool) -> Any: ...


def check_target(table: object, columns: object) -> tuple[str, Optional[tuple[str, ...]]]:
    """The table and column names, checked: they go into the statement's text."""
    if not isinstance(table, str) or not _TABLE.match(table):
        raise InterfaceError(
            f"copy_in needs a table name (an identifier, optionally schema-qualified or "
            f"quoted), not {table!r}")
    if columns is None:
        return table, None
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence) or not columns:
        raise InterfaceError(f"columns must be a non-empty list of column names, not {columns!r}")
    for name in columns:
        if not isinstance(name, str) or not _COLUMN.match(name):
            raise InterfaceError(f"{name!r} is not a column name")
    return table, tuple(columns)


def check_source(rows: object, waiting: Waiting) -> None:
    """Refuse a source copy_in cannot read, now rather than in the worker."""
    if hasattr(rows, "__aiter__"):
        if waiting is Waiting.BLOCKS:
            raise TypeError("adb.sync's copy_in reads a plain iterable or a file, "
                            "not an async iterable")
        return
    if isinstance(rows, (str, bytes)) or not (hasattr(rows, "__iter__") or hasattr(rows, "read")):
        raise TypeError(f"copy_in needs an iterable of rows, an async iterable of rows or a "
                        f"file-like object of text-format lines, not {type(rows).__name__}")


def load(engine: Loader, table: str, columns: Optional[tuple[str, ...]], source: Any,
         tx: Optional[Transaction], timeout: Optional[float]) -> Steps:
    """The steps of one load; returns the row count."""
    own = tx is None
    if tx is None:
        tx, begun = engine.begin_pending(False, timeout)
        yield begun
    what = Operation("COPY", None, (("db.collection.name", table),))
    try:
        if hasattr(source, "__aiter__"):
            count = yield from _chunks(engine, tx, table, columns, source, what)
        else:
            op = Op.COPY_TEXT if hasattr(source, "read") else Op.COPY_ROWS
            count = yield engine.step_in(tx, op, (table, columns, source), what)
    except BaseException:
        if own and tx.active:
            yield engine.end(tx, False)
        raise
    if own:
        yield engine.end(tx, True)
    return int(count)


def _chunks(engine: Loader, tx: Transaction, table: str, columns: Optional[tuple[str, ...]],
            source: Any, what: Operation) -> Steps:
    """An async iterable, a chunk per job; the next chunk is gathered while one loads."""
    rows = source.__aiter__()
    total, loading, more = 0, None, True
    while more:
        chunk: list[Any] = []
        try:
            while len(chunk) < CHUNK:
                chunk.append((yield rows.__anext__()))
        except StopAsyncIteration:
            more = False
        if loading is not None:
            total += yield loading
            loading = None
        if chunk:
            loading = engine.step_in(tx, Op.COPY_ROWS, (table, columns, chunk), what)
    if loading is not None:
        total += yield loading
    return total


__all__ = ["CHUNK", "check_source", "check_target", "load"]
