"""Row factories: how ``runQuery`` shapes the rows a driver returns.

A row factory is a function ``(cursor.description, rows) -> list``; it runs in the
worker thread. Pass one (or its name: ``"tuple"``, ``"dict"``, ``"namedtuple"``,
``"attrdict"``) as ``row_factory=`` to a Database or to a single ``runQuery`` call.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable, NamedTuple, Sequence, cast

from .errors import InterfaceError

#: a row factory: ``(cursor.description, rows) -> list`` (a DB-API description and rows)
RowFactory = Callable[[Any, Sequence[Any]], list[Any]]


class Batch(NamedTuple):
    """One batch of a stream: its rows (shaped by the row factory), and whether
    they are the last (the cursor is then closed)."""

    rows: list[Any]
    done: bool


def tuple_row(description: Any, rows: Sequence[Any]) -> list[Any]:
    """Rows as the driver returns them (tuples), in a list. ``description`` is not
    read: adb passes None here rather than have the driver build one."""
    return rows if isinstance(rows, list) else list(rows)


def dict_row(description: Any, rows: Sequence[Any]) -> list[Any]:
    """Each row as a dict keyed by column name."""
    names = [d[0] for d in description]
    return [dict(zip(names, row)) for row in rows]


@functools.lru_cache(maxsize=256)
def _row_class(names: tuple[str, ...]) -> Any:
    return collections.namedtuple("Row", names, rename=True)


def namedtuple_row(description: Any, rows: Sequence[Any]) -> list[Any]:
    """Each row as a named tuple (columns that are not identifiers become _0, _1...)."""
    cls = _row_class(tuple(d[0] for d in description))
    make = cls._make
    return [make(row) for row in rows]


class AttrDict(dict[str, Any]):
    """A row as a dict whose keys are also attributes: ``row.name`` and ``row["name"]``,
    as torndb's ``Row``. It is a dict, so ``json.dumps(row)`` writes an object and
    ``row == {"id": 1}`` holds. A column named as a dict method (``keys``, ``items``,
    ``count``...) is read as ``row["keys"]``: the attribute is the method."""

    __slots__ = ()  # no attributes of its own: ``row.x = 1`` fails instead of hiding

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"this row has no column {name!r} (its columns: {', '.join(map(str, self))})"
            ) from None

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *(key for key in self if isinstance(key, str))]


def attrdict_row(description: Any, rows: Sequence[Any]) -> list[Any]:
    """Each row as an ``AttrDict``: ``row.name``, ``row["name"]``, and a JSON object."""
    names = [d[0] for d in description]
    return [AttrDict(zip(names, row)) for row in rows]


_BY_NAME: dict[str, RowFactory] = {"tuple": tuple_row, "dict": dict_row,
                                   "namedtuple": namedtuple_row, "attrdict": attrdict_row}


def resolve(factory: Any) -> RowFactory:
    """Turn a name or callable into a row factory; None means the tuple default."""
    if factory is None:
        return tuple_row
    if callable(factory):
        return cast(RowFactory, factory)
    if factory in _BY_NAME:
        return _BY_NAME[factory]
    raise InterfaceError(
        f"row_factory must be 'tuple', 'dict', 'namedtuple', 'attrdict' or a callable, "
        f"not {factory!r}")
