"""The text format of bulk loads and exports: one line per row, values separated
by tabs, ``\\N`` for NULL, and backslash escapes for backslash, tab, newline and
carriage return.

It is PostgreSQL's ``COPY`` text format, and what MariaDB's ``LOAD DATA`` reads
by default, so ``copy_in`` can hand the same lines to either server, and
``copy_out`` gives back lines that ``copy_in`` takes. Only those four escapes are
written; reading also understands PostgreSQL's ``\\b \\f \\v`` and octal forms.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Callable, Optional

NULL = "\\N"
_SPECIAL = re.compile(r"[\\\t\n\r]")
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPE = re.compile(r"\\([0-7]{1,3}|.)")
_READ = {"t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "\\": "\\"}

#: how one value becomes its text (``render``); a server family may change a few
Render = Callable[[Any], str]


def _escaped(text: str) -> str:
    if _SPECIAL.search(text) is None:  # the common case: nothing to escape
        return text
    return _SPECIAL.sub(lambda m: _ESCAPES[m.group()], text)


def value_text(value: Any, true: str = "t", false: str = "f") -> str:
    """One value in the text format (``true``/``false``: how the server spells booleans)."""
    if value is None:
        return NULL
    kind = type(value)
    if kind is str:
        return _escaped(value)
    if kind is int or kind is float:
        return str(value)
    if kind is bool:
        return true if value else false
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\\\x" + bytes(value).hex()  # bytea's hex form, its backslash escaped
    if isinstance(value, dict):
        return _escaped(json.dumps(value))
    if isinstance(value, (list, tuple)):
        return _escaped(array_literal(value))
    return _escaped(str(value))


def array_literal(items: Sequence[Any]) -> str:
    """A PostgreSQL array literal: ``{1,2}``, ``{"a b",NULL}``, nested for nested lists."""
    parts = []
    for item in items:
        if item is None:
            parts.append("NULL")
        elif isinstance(item, (list, tuple)):
            parts.append(array_literal(item))
        elif isinstance(item, bool):
            parts.append("t" if item else "f")
        elif isinstance(item, (int, float)):
            parts.append(str(item))
        else:
            text = json.dumps(item) if isinstance(item, dict) else str(item)
            parts.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(parts) + "}"


def mysql_value_text(value: Any) -> str:
    """One value as MariaDB's ``LOAD DATA`` reads it: booleans are 1 and 0, bytes raw."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _escaped(bytes(value).decode("latin-1"))
    if isinstance(value, (dict, list)):
        return _escaped(json.dumps(value))
    return value_text(value, "1", "0")


def line(row: Sequence[Any], render: Render = value_text) -> str:
    """One row as one line, newline included."""
    return "\t".join([render(value) for value in row]) + "\n"


def lines(rows: Iterable[Sequence[Any]], render: Render = value_text) -> Iterator[str]:
    """Each row of ``rows`` as its line."""
    for row in rows:
        yield line(row, render)


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] in "01234567":
        return chr(int(code, 8))
    return _READ.get(code, code)


def field(text: str) -> Optional[str]:
    """One field of a line, unescaped (None for ``\\N``)."""
    if text == NULL:
        return None
    if "\\" not in text:
        return text
    return _UNESCAPE.sub(_unescape, text)


def parse_line(text: str) -> tuple[Optional[str], ...]:
    """One line (its newline optional) as a row of text values."""
    return tuple(field(part) for part in text.rstrip("\n").split("\t"))


def text_chunks(source: Any, size: int = 1 << 16) -> Iterator[str]:
    """The text of a file-like object in pieces of about ``size`` characters, each
    ending at a line end, so no line is split between two pieces."""
    rest = ""
    decoder = codecs.getincrementaldecoder("utf-8")()  # a character may span two reads
    while True:
        piece = source.read(size)
        if isinstance(piece, (bytes, bytearray)):
            piece = decoder.decode(piece, final=not piece)
        if not piece:
            break
        piece = rest + piece
        cut = piece.rfind("\n") + 1
        rest = piece[cut:]
        if cut:
            yield piece[:cut]
    if rest:
        yield rest + "\n"


def parse(source: Any) -> Iterator[tuple[Optional[str], ...]]:
    """The rows of a file-like object of text-format lines (text or bytes)."""
    for chunk in text_chunks(source):
        for text in chunk[:-1].split("\n"):  # every chunk ends with its line's end
            if text != "\\.":  # psql's end-of-data marker
                yield parse_line(text)


__all__ = ["NULL", "value_text", "array_literal", "mysql_value_text", "line", "lines", "field", "parse_line",
           "text_chunks", "parse"]
