"""Bulk loads and exports, a capability every driver offers (``Driver.copy``).

``copy_in`` (``adb.bulk``, through ``adb.ops``' copy ops) loads rows or a file of
text-format lines (``adb.copytext``) into a table; ``copy_out`` reads a query's
rows as such lines. ``InsertCopy`` is the PEP 249 way, which any module can do:
multi-row INSERTs, and a stream rendered line by line. A driver with a faster
path (PostgreSQL's COPY, MariaDB's LOAD DATA) offers its own ``BulkCopy``.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence

from ..copytext import line, parse, value_text

#: a DB-API connection or cursor (``adb.drivers.base``)
Connection = Any
Cursor = Any


class BulkCopy(abc.ABC):
    """A driver's bulk paths: load rows or text into a table inside the open
    transaction, and open a query's rows as text-format lines. Every method runs
    in the worker thread that owns the connection."""

    @abc.abstractmethod
    def copy_rows(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  rows: Iterable[Sequence[Any]]) -> int:
        """Load ``rows`` into ``table`` inside the open transaction; return the count."""

    def copy_text(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  source: Any) -> int:
        """Load a file-like object of text-format lines (``adb.copytext``); by
        default parsed into rows, loaded by ``copy_rows``."""
        return self.copy_rows(cursor, table, columns, parse(source))

    @abc.abstractmethod
    def open_export(self, conn: Connection, sql: Any, params: Any) -> Cursor:
        """A stream's cursor whose rows are text-format lines (``copy_out``)."""


class Loader(Protocol):
    """What ``InsertCopy`` asks of its driver (``adb.drivers.base.Driver``)."""

    @property
    def paramstyle(self) -> str: ...

    def executemany(self, cursor: Cursor, sql: str,
                    seq_of_params: Iterable[Sequence[Any]]) -> int: ...

    def open_stream(self, conn: Connection, sql: Any, params: Any) -> Cursor: ...


class InsertCopy(BulkCopy):
    """Bulk loads by PEP 249 alone: one multi-row ``executemany`` of an INSERT per
    chunk of rows; an export is the query's stream, each row rendered."""

    #: rows per chunk of a bulk load: the most it holds in memory at once
    chunk = 5000
    #: how a value is written in the text format (``adb.copytext``)
    render_value: Callable[[Any], str] = staticmethod(value_text)

    def __init__(self, driver: Loader) -> None:
        self.driver = driver

    def copy_rows(self, cursor: Cursor, table: str, columns: Optional[Sequence[str]],
                  rows: Iterable[Sequence[Any]]) -> int:
        total = 0
        sql = None
        for piece in chunked(rows, self.chunk):
            if sql is None:
                sql = self.insert_sql(table, columns, len(piece[0]))
            total += self.driver.executemany(cursor, sql, piece)
        return total

    def insert_sql(self, table: str, columns: Optional[Sequence[str]], width: int) -> str:
        """The INSERT that loads one row of ``width`` values."""
        mark = "?" if self.driver.paramstyle == "qmark" else "%s"
        return f"INSERT INTO {table}{column_list(columns)} VALUES ({', '.join([mark] * width)})"

    def open_export(self, conn: Connection, sql: Any, params: Any) -> Cursor:
        """The stream of ``sql``, each row rendered by ``render_value``."""
        return TextRows(self.driver.open_stream(conn, sql, params), self.render_value)


class TextRows:
    """A stream's cursor whose rows come out as text-format lines."""

    description = None

    def __init__(self, cursor: Cursor, render: Callable[[Any], str]) -> None:
        self.cursor = cursor
        self.render = render

    def fetchmany(self, size: int) -> list[str]:
        render = self.render
        return [line(row, render) for row in self.cursor.fetchmany(size)]

    def close(self) -> None:
        self.cursor.close()


def column_list(columns: Optional[Sequence[str]]) -> str:
    """`` (a, b)`` after a table name in a bulk load's statement; "" for every column."""
    return f" ({', '.join(columns)})" if columns else ""


def chunked(rows: Iterable[Sequence[Any]], size: int) -> Iterable[list[Sequence[Any]]]:
    """``rows`` in lists of up to ``size``, read one list at a time."""
    chunk: list[Sequence[Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


__all__ = ["BulkCopy", "InsertCopy", "Loader", "TextRows", "chunked", "column_list"]
