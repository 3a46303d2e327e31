"""Savepoints: a nested all-or-nothing step inside a transaction.

``async with tx.savepoint():`` (``with`` on adb.sync, and in Twisted coroutines)
runs its block as one step: if the block raises, everything it did is rolled
back to the savepoint and the exception propagates, while the transaction goes
on; otherwise the savepoint is released. Savepoints nest, and each one belongs
to one transaction. For callback code the same is explicit:
``tx.beginSavepoint()`` gives a ``Savepoint`` (a future, a Deferred or the
value), whose ``release()`` and ``rollback()`` end it (also on the handle:
``tx.releaseSavepoint(sp)``, ``tx.rollbackSavepoint(sp)``). Inside the function
``runInteraction`` runs, ``with adb.savepoint(cursor):`` does the same on its cursor.

The statements are SQL's own (``SAVEPOINT``, ``RELEASE SAVEPOINT``, ``ROLLBACK TO
SAVEPOINT``), which PostgreSQL, MariaDB/MySQL and SQLite share; adb names each
savepoint itself. Ending a savepoint ends every savepoint opened inside it, as
in SQL. Misuse (a finished transaction, a savepoint already ended, a cursor
outside runInteraction) raises ``TransactionError`` before anything runs.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional, Protocol

from .drivers.base import Cursor
from .errors import TransactionError, add_note
from .interaction import interacting
from .steps import Steps, run_async, run_blocking


class SavepointState(enum.Enum):
    ACTIVE = "active"
    RELEASED = "released"
    ROLLED_BACK = "rolled back"
    FAILED = "failed"  # its SAVEPOINT statement failed: it does not exist


class Holder(Protocol):
    """The transaction a savepoint belongs to (``adb.transaction.Transaction``)."""

    savepoints: Savepoints

    @property
    def id(self) -> int: ...
    @property
    def active(self) -> bool: ...
    def releaseSavepoint(self, savepoint: Savepoint) -> Any: ...
    def rollbackSavepoint(self, savepoint: Savepoint) -> Any: ...
    def savepoint_step(self, statements: tuple[str, ...], result: Any) -> Any: ...


class Savepoint:
    """One savepoint of a transaction: ``release()`` keeps what was done since it
    began, ``rollback()`` undoes it; either ends it."""

    def __init__(self, tx: Holder, number: int) -> None:
        self.tx = tx
        self.name = f"adb_sp_{number}"
        self.state = SavepointState.ACTIVE

    def __repr__(self) -> str:
        return f"<adb savepoint {self.name} of transaction {self.tx.id} {self.state.value}>"

    @property
    def active(self) -> bool:
        return self.state is SavepointState.ACTIVE

    def release(self) -> Any:
        return self.tx.releaseSavepoint(self)

    def rollback(self) -> Any:
        return self.tx.rollbackSavepoint(self)


class Savepoints:
    """A transaction's open savepoints, innermost last. Its methods run on the
    caller's side, in the order the caller asks, as the statements will run.
    (It holds no reference to its transaction: a dropped handle is still
    collected at once, and rolled back.)"""

    def __init__(self, tx_id: int) -> None:
        self.tx_id = tx_id
        self.open: list[Savepoint] = []
        self._numbers = itertools.count(1)

    def begin(self, tx: Holder) -> tuple[Savepoint, str]:
        """A new innermost savepoint of ``tx`` and its statement."""
        savepoint = Savepoint(tx, next(self._numbers))
        self.open.append(savepoint)
        return savepoint, f"SAVEPOINT {savepoint.name}"

    def end(self, savepoint: Savepoint, keep: bool) -> tuple[str, ...]:
        """End ``savepoint`` (and every one inside it): released if ``keep``, else
        rolled back; the statements that do it."""
        if not isinstance(savepoint, Savepoint) or savepoint not in self.open \
                and savepoint.tx.id != self.tx_id:
            raise TransactionError(f"{savepoint!r} is not a savepoint of transaction {self.tx_id}")
        if not savepoint.active:
            raise TransactionError(f"{savepoint!r} has already ended: begin a new savepoint")
        state = SavepointState.RELEASED if keep else SavepointState.ROLLED_BACK
        at = self.open.index(savepoint)
        for ended in self.open[at:]:
            ended.state = state
        del self.open[at:]
        return end_statements(savepoint.name, keep)

    def failed(self, savepoint: Savepoint) -> None:
        """Its SAVEPOINT statement failed: it does not exist on the server."""
        savepoint.state = SavepointState.FAILED
        if savepoint in self.open:
            self.open.remove(savepoint)


def end_statements(name: str, keep: bool) -> tuple[str, ...]:
    """What ends savepoint ``name``: released if ``keep``, else rolled back to and
    released (the rollback alone would leave it open)."""
    release = f"RELEASE SAVEPOINT {name}"
    return (release,) if keep else (f"ROLLBACK TO SAVEPOINT {name}", release)


class SavepointContext:
    """``async with tx.savepoint() as sp`` (``with`` on adb.sync): release when the
    block ends normally, roll back to it when the block raises (the exception
    goes on); nothing if the block ended it itself. Both forms run the same
    steps (``adb.steps``)."""

    def __init__(self, tx: Holder) -> None:
        self.tx = tx
        self.savepoint: Optional[Savepoint] = None

    def _enter(self) -> Steps:
        savepoints = self.tx.savepoints
        savepoint, statement = savepoints.begin(self.tx)
        try:
            yield self.tx.savepoint_step((statement,), savepoint)
        except BaseException:
            savepoints.failed(savepoint)
            raise
        self.savepoint = savepoint
        return savepoint

    def _exit(self, exc: Optional[BaseException]) -> Steps:
        savepoint = self.savepoint
        if savepoint is None or not savepoint.active:
            return
        statements = self.tx.savepoints.end(savepoint, keep=exc is None)
        if exc is None:
            yield self.tx.savepoint_step(statements, None)
            return
        try:
            yield self.tx.savepoint_step(statements, None)
        except Exception as undo_error:  # the transaction itself is gone: exc says why
            _undo_failed(exc, undo_error)

    async def __aenter__(self) -> Savepoint:
        savepoint: Savepoint = await run_async(self._enter())
        return savepoint

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await run_async(self._exit(exc))

    def __enter__(self) -> Savepoint:
        savepoint: Savepoint = run_blocking(self._enter())
        return savepoint

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        run_blocking(self._exit(exc))


def _undo_failed(exc: BaseException, undo_error: BaseException) -> None:
    add_note(exc, f"adb: rolling back to the savepoint failed too ({type(undo_error).__name__}:"
                  f" {str(undo_error).strip()[:200]}); the transaction cannot go on")


_cursor_numbers = itertools.count(1)


@contextmanager
def savepoint(cursor: Cursor) -> Iterator[str]:
    """``with adb.savepoint(cursor):`` inside the function ``runInteraction`` runs:
    the block is one all-or-nothing step of its transaction, as ``tx.savepoint()``.
    Yields the savepoint's name."""
    if not interacting():
        raise TransactionError(
            "adb.savepoint(cursor) works only inside the function runInteraction runs, "
            "which is a transaction; a standalone call commits by itself and has no "
            "savepoints: use tx.savepoint() on a transaction handle")
    name = f"adb_isp_{next(_cursor_numbers)}"
    cursor.execute(f"SAVEPOINT {name}")
    try:
        yield name
    except BaseException as exc:
        try:
            for statement in end_statements(name, keep=False):
                cursor.execute(statement)
        except Exception as undo_error:
            _undo_failed(exc, undo_error)
        raise
    for statement in end_statements(name, keep=True):
        cursor.execute(statement)


__all__ = ["Savepoint", "SavepointContext", "SavepointState", "Savepoints", "savepoint"]
