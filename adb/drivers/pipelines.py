"""Pipelines, a capability a driver offers or not (``Driver.pipelines``).

A worker with standalone calls queued behind it sends up to 16 of them before
reading any result (``adb.pipeline``); this is what it asks of the driver. A
driver that cannot (psycopg2, sqlite3, a generic module) has ``pipelines =
None`` and runs one statement at a time; the engine gives the driver its depth
(``Driver.use_pipelines``) from this capability and the ``pipeline=`` option.
"""

from __future__ import annotations

import abc
import re
from typing import Any, Optional

from ..sqltext import self_contained

#: a DB-API connection (``adb.drivers.base.Connection``)
Connection = Any

#: the statements a pipeline may carry: reads and DML
_PIPELINED = re.compile(r"\s*(select|insert|update|delete|replace|with|values)\s", re.IGNORECASE)


class Pipelines(abc.ABC):
    """A driver's pipelines: several standalone statements sent before any result
    is read, each keeping its own implicit transaction, result and error."""

    #: whether pipelines are on when neither ``Database(pipeline=)`` nor ``?pipeline=`` says
    default = False
    #: what starts a comment to the end of the line in this dialect
    line_comment: tuple[str, ...] = ("--",)

    def safe(self, sql: object) -> bool:
        """True when ``sql`` may share a pipeline: certainly one statement (a read or
        DML, every quote closed, no ``;`` inside, no comment, no escape), so that
        sending it with others can never make it run as more statements than it
        would alone, nor change how it runs. Anything else runs on its own."""
        return isinstance(sql, str) and _PIPELINED.match(sql) is not None \
            and self_contained(sql, self.line_comment)

    @abc.abstractmethod
    def run(self, conn: Connection, statements: list[tuple[str, Any]]) -> list[Answered]:
        """Send ``statements`` (``(sql, params)`` pairs, each ``safe``) before
        reading any result, each in its own implicit transaction as it would run
        alone, and return each one's outcome in order. Raises only when the
        connection fails: ``PipelineBroken`` with the outcomes read before it (the
        rest may have run), or any other error (then any of them may have run)."""


class PipelineBroken(Exception):
    """The connection failed partway through a pipeline: ``answered`` holds the
    outcomes of its first statements, read before ``error``; the statements after
    them may or may not have run."""

    def __init__(self, answered: list[Answered], error: BaseException) -> None:
        super().__init__(f"a pipeline broke after {len(answered)} answers: {error!r}")
        self.answered = answered
        self.error = error


class Answered:
    """One statement's outcome from a pipeline, as the cursor an op (``adb.ops``)
    reads: ``execute`` raises the statement's own error, or does nothing (it has
    run); everything else is its result's (``description``, ``rowcount``, rows)."""

    __slots__ = ("result", "error")

    def __init__(self, result: Any, error: Optional[BaseException]) -> None:
        self.result = result
        self.error = error

    def execute(self, sql: Any, params: Any = None) -> None:
        if self.error is not None:
            raise self.error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)


__all__ = ["Answered", "Pipelines"]
