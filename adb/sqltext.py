"""What adb reads from SQL text: which statements may join a group-commit unit.

A leaf of pure policy, below the drivers that decide per statement and the
worker that runs units (``Database(autobatch=N)``; the contract is in
``adb.worker``). Which statements qualify (``Path``, decided by the driver and
cached per SQL text): single DML statements (INSERT, UPDATE, DELETE, REPLACE)
given as text. A statement whose text is *self-contained* (every quote closed,
no ``;`` inside, no comment, no backslash, no dollar quote) may be rendered by
the driver's own parameter escaping and joined with others into one message
(``Path.MESSAGE``) where the driver can read each statement's result; any other
DML runs inside one transaction (``Path.TRANSACTION``); anything else runs alone
(``Path.ALONE``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Final, NamedTuple, Optional

_DML = re.compile(r"\s*(insert|update|delete|replace)\s", re.IGNORECASE)
#: characters that change how quotes are read (escapes, dollar quotes): never self-contained
_UNSAFE = "\\$"
_TRAILING = frozenset("; \t\r\n")


class Path(enum.Enum):
    """How a statement may run when a worker batches it."""

    ALONE = "alone"              # never batched
    TRANSACTION = "transaction"  # with others, inside one transaction, one execute each
    MESSAGE = "message"          # with others, in one multi-statement message


def is_dml(sql: object) -> bool:
    """True for one INSERT/UPDATE/DELETE/REPLACE given as text."""
    return isinstance(sql, str) and _DML.match(sql) is not None


def self_contained(sql: str, line_comment: tuple[str, ...] = ("--",)) -> bool:
    """True when ``sql`` is one statement whose text ends where it ends: every
    quote it opens is closed, and outside quotes it has no ``;`` (one trailing
    one aside), no comment and nothing that changes how quotes are read (a
    backslash, a dollar quote). Joined to another such statement with ``;`` it
    cannot swallow or alter its neighbour."""
    text = without_terminator(sql)
    if any(mark in text for mark in _UNSAFE):
        return False
    quote = None
    for i, ch in enumerate(text):
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == ";" or text.startswith("/*", i) \
                or any(text.startswith(mark, i) for mark in line_comment):
            return False
    return quote is None


def without_terminator(sql: str) -> str:
    """``sql`` without its one trailing ``;`` (a message joins statements with it)."""
    if sql[-1:] not in _TRAILING:  # the common case, without a copy
        return sql
    text = sql.rstrip()
    return text[:-1] if text.endswith(";") else text


class PathCache:
    """Each SQL text's ``Path``, decided once (templates repeat; the decision is a scan)."""

    LIMIT = 1024

    def __init__(self, decide: Callable[[str], Path]) -> None:
        self.decide = decide
        self.paths: dict[object, Path] = {}

    def __call__(self, sql: object) -> Path:
        path = self.paths.get(sql)
        if path is None:
            path = self.decide(sql) if isinstance(sql, str) and is_dml(sql) else Path.ALONE
            if len(self.paths) >= self.LIMIT:
                self.paths.clear()
            self.paths[sql] = path
        return path

    def demote(self, sql: str) -> None:
        """Never send ``sql`` in a message again (the driver found it cannot prove
        its rowcount there); it still batches inside a transaction."""
        self.paths[sql] = Path.TRANSACTION


#: ``placeholder_hint``'s ``params`` for a call whose parameters are not a
#: statement's (an interaction, a bulk load): none are checked
NOT_GIVEN: Final = object()

#: a percent sign and what follows it, in a ``format``/``pyformat`` statement
_PERCENT = re.compile(r"%(%|s|\(([^)]*)\)s|.?)", re.DOTALL)


class Placeholders(NamedTuple):
    """The ``%`` forms of a ``format``/``pyformat`` statement, as the driver reads
    them: everywhere in the text, quotes or not."""

    positional: int              # how many %s
    named: frozenset[str]        # the names of the %(name)s
    lone: Optional[int]          # where the first lone % (neither %s, %(name)s nor %%) is
    escaped: bool                # whether it has a %%


def placeholders(sql: str) -> Placeholders:
    """The ``%`` forms of ``sql`` (``Placeholders``)."""
    positional, lone, escaped = 0, None, False
    named: set[str] = set()
    for match in _PERCENT.finditer(sql):
        form = match.group(1)
        if form == "s":
            positional += 1
        elif form == "%":
            escaped = True
        elif match.group(2) is not None:
            named.add(match.group(2))
        elif lone is None:
            lone = match.start()
    return Placeholders(positional, frozenset(named), lone, escaped)


def placeholder_hint(sql: object, paramstyle: str, params: Any = NOT_GIVEN) -> Optional[str]:
    """For a statement the driver refused: a note when its placeholders are another
    paramstyle's (``%s`` on a ``qmark`` driver such as sqlite3, ``?`` on a
    ``pyformat`` one), the likely cause of the syntax error; or, on a ``format``
    or ``pyformat`` driver, when they do not match ``params`` (psycopg2 says only
    ``IndexError: tuple index out of range`` or ``syntax error at or near "%"``);
    else None."""
    if not isinstance(sql, str):
        return None
    if paramstyle == "qmark" and ("%s" in sql or "%(" in sql):
        return ("adb: this driver's paramstyle is 'qmark' (db.paramstyle): write its "
                "placeholders as ?, not %s")
    if paramstyle in ("format", "pyformat") and "?" in sql:
        return (f"adb: this driver's paramstyle is {paramstyle!r} (db.paramstyle): write its "
                "placeholders as %s, not ?")
    if paramstyle in ("format", "pyformat") and params is not NOT_GIVEN:
        return _mismatch(placeholders(sql), params, paramstyle)
    return None


def _mismatch(found: Placeholders, params: Any, paramstyle: str) -> Optional[str]:
    """Why the placeholders ``found`` cannot take ``params``, or None."""
    forms = found.positional + len(found.named)
    if params is None:
        if forms:
            return (f"adb: the statement has {_counted(forms, 'placeholder')} but no "
                    "parameters were passed (params=None), so the driver sent it as written")
        if found.escaped:
            return ("adb: with no parameters the driver sends %% as written: write a literal "
                    "percent sign as % then, and as %% only when parameters are passed")
        return None
    if found.lone is not None:
        return (f"adb: a literal percent sign must be written %% when parameters are passed "
                f"(a lone % at character {found.lone}; paramstyle {paramstyle!r})")
    if isinstance(params, Mapping):
        if found.positional:
            return ("adb: the statement's positional placeholders (%s) take a sequence of "
                    "parameters, not a mapping; a named one is written %(name)s")
        missing = sorted(found.named - set(params))
        if missing:
            return f"adb: the parameters have no {', '.join(map(repr, missing))}, named in the " \
                   "statement"
        return None
    if isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
        return None  # refused before it reached the driver (adb.args)
    if found.named:
        return (f"adb: the statement has named placeholders (%({sorted(found.named)[0]})s), "
                f"which take a mapping of parameters, not a {type(params).__name__}")
    if found.positional != len(params):
        passed = "1 parameter was" if len(params) == 1 else f"{len(params)} parameters were"
        return (f"adb: the statement has {_counted(found.positional, 'placeholder')} (%s) but "
                f"{passed} passed")
    return None


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


__all__ = ["NOT_GIVEN", "Path", "PathCache", "Placeholders", "is_dml", "placeholder_hint",
           "placeholders", "self_contained", "without_terminator"]
