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
import functools
import itertools
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
    # four scans in C beat one regex search: the common case has nothing to escape
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return _SPECIAL.sub(lambda m: _ESCAPES[m.group()], text)
    return text


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


#: the renderers ``text_of`` may take a column at a time for (ints and strs alike in both)
_COLUMNWISE: frozenset[Render] = frozenset()


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
    kind = type(value)
    if kind is str:  # the common cases first: no isinstance walk for them
        return _escaped(value)
    if kind is int:
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _escaped(bytes(value).decode("latin-1"))
    if isinstance(value, (dict, list)):
        return _escaped(json.dumps(value))
    return value_text(value, "1", "0")


_COLUMNWISE = frozenset({value_text, mysql_value_text})
#: the types whose ``%s`` is their text in both renderers
_AS_IS = frozenset({int, float, str})


def line(row: Sequence[Any], render: Render = value_text) -> str:
    """One row as one line, newline included."""
    return "\t".join(map(render, row)) + "\n"


def text_of(rows: Iterable[Sequence[Any]], render: Render = value_text) -> str:
    """The lines of ``rows``, joined.

    With adb's own renderers, rows of one width of ints, floats and strs with
    nothing to escape are one ``%`` format (``_formatted``, a quarter of the
    time per row of ``line``); other rows of one width are rendered column by
    column: a column of ints only is ``map(str, ...)``, a column of strs only
    needs no escape when their joined text has none, and the lines are joined
    by builtins, with no Python step per value; any other column goes value by
    value through ``render``."""
    batch = rows if isinstance(rows, list) else list(rows)
    if not batch:
        return ""
    widths = set(map(len, batch)) if render in _COLUMNWISE else ()
    if len(widths) != 1:
        return "".join(["\t".join(map(render, row)) + "\n" for row in batch])
    width = widths.pop()
    text = _formatted(batch, width)
    if text is not None:
        return text
    columns = [_column_text(values, render) for values in zip(*batch)]
    return "\n".join(map("\t".join, zip(*columns))) + "\n"


def _formatted(batch: list[Sequence[Any]], width: int) -> Optional[str]:
    """The batch's lines by one ``%`` format, when every value is an int, a float or
    a str (whose ``%s`` is their text) and no value's text holds a character to
    escape (looked for in all of them formatted together). None otherwise."""
    flat = tuple(itertools.chain.from_iterable(batch))
    if not set(map(type, flat)) <= _AS_IS:
        return None
    values = "%s" * len(flat) % flat  # every value's text, to look for escapes in
    if "\\" in values or "\t" in values or "\n" in values or "\r" in values:
        return None
    return _line_format(width) * len(batch) % flat


@functools.lru_cache(maxsize=16)
def _line_format(width: int) -> str:
    return "\t".join(["%s"] * width) + "\n"


def _column_text(values: Sequence[Any], render: Render) -> Iterable[str]:
    """One column's values as text (see ``text_of``)."""
    kinds = set(map(type, values))
    if kinds == {int}:
        return map(str, values)
    if kinds == {str}:
        joined = "".join(values)
        if "\\" in joined or "\t" in joined or "\n" in joined or "\r" in joined:
            return map(_escaped, values)
        return values
    return map(render, values)


class RowReader:
    """``rows`` as a file-like object of text-format lines, rendered as they are read.

    ``read`` renders the next ``rows_per_read`` rows (whatever size it is asked
    for), so a driver that copies from a file sends each piece as soon as it is
    rendered and the server ingests one piece while the next is rendered; no
    more than one piece is held. ``count`` is how many rows have been rendered,
    ``error`` what the source raised; ``encoding`` set makes ``read`` give bytes
    (for readers of binary files)."""

    def __init__(self, rows: Iterable[Sequence[Any]], render: Render = value_text,
                 rows_per_read: int = 1000, encoding: Optional[str] = None) -> None:
        if rows_per_read < 1:
            raise ValueError(f"rows_per_read must be at least 1, not {rows_per_read}")
        self.rows = iter(rows)
        self.render = render
        self.rows_per_read = rows_per_read
        self.encoding = encoding
        self.count = 0
        #: what the rows' source raised, if it did
        self.error: Optional[BaseException] = None

    def read(self, size: int = -1) -> Any:
        """The next piece of text (``""``, or ``b""``, at the end); ``size`` is ignored."""
        try:
            batch = list(itertools.islice(self.rows, self.rows_per_read))
        except BaseException as exc:  # kept: a driver may report it as its own error
            self.error = exc
            raise
        self.count += len(batch)
        text = text_of(batch, self.render)
        return text.encode(self.encoding) if self.encoding else text


def lines(rows: Iterable[Sequence[Any]], render: Render = value_text) -> Iterator[str]:
    """Each row of ``rows`` as its line."""
    render_line = line
    for row in rows:
        yield render_line(row, render)


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


__all__ = ["NULL", "value_text", "array_literal", "mysql_value_text", "line", "lines", "text_of",
           "RowReader", "field", "parse_line", "text_chunks", "parse"]
