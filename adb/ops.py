"""What one call does on a cursor, run in a worker thread.

Each op is ``op(cursor, driver, *args)`` (an ``OnCursor``); the ops of one SQL
statement a caller passed share ``op(cursor, driver, sql, params, row_factory)``
(a ``StatementOp``), so a ``Statement`` job and a pipeline call any of them alike.
Transaction policy is not here: the job's kind decides (``adb.jobs``: its ``run``
names the session method).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sized
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

from .interaction import RUNNING
from .rows import RowFactory, tuple_row

if TYPE_CHECKING:
    from typing import Concatenate

    from .drivers.base import Cursor, Driver

    #: what a call does: ``op(cursor, driver, *args)``, in the worker thread
    OnCursor = Callable[Concatenate[Cursor, Driver, ...], Any]
    #: what one statement's call does: ``op(cursor, driver, sql, params, row_factory)``
    StatementOp = Callable[[Cursor, Driver, Any, Any, Optional[RowFactory]], Any]


def query(cursor: Cursor, driver: Driver, sql: Any, params: Any,
          row_factory: RowFactory) -> list[Any]:
    """Execute and fetch every row; a statement that returns no rows gives []."""
    if params is None:
        cursor.execute(sql)
    else:
        cursor.execute(sql, params)
    if not returns_rows(cursor, driver):
        return []
    return shaped(row_factory, cursor, driver.fetchall(cursor))


def query_row(cursor: Cursor, driver: Driver, sql: Any, params: Any,
              row_factory: RowFactory) -> Any:
    """Execute and give the first row (shaped by the row factory), or None."""
    row = _first_row(cursor, driver, sql, params)
    return None if row is None else shaped(row_factory, cursor, [row])[0]


def query_value(cursor: Cursor, driver: Driver, sql: Any, params: Any,
                row_factory: Optional[RowFactory] = None) -> Any:
    """Execute and give the first column of the first row, or None (``row_factory``
    unused: no row is shaped). A row of no column (PostgreSQL's ``select;``) has no
    value to give: a ValueError says so, where indexing it raised a bare IndexError."""
    row = _first_row(cursor, driver, sql, params)
    if row is None:
        return None
    if len(row) == 0:
        raise ValueError("runQueryValue: the statement returned a row of no column, so "
                         "there is no first column to give; use runQueryRow or runQuery")
    return row[0]


def _first_row(cursor: Cursor, driver: Driver, sql: Any, params: Any) -> Any:
    """Execute; the first row, or None (none, or a statement that returns no rows)."""
    if params is None:
        cursor.execute(sql)
    else:
        cursor.execute(sql, params)
    return cursor.fetchone() if returns_rows(cursor, driver) else None


def shaped(row_factory: RowFactory, cursor: Cursor, rows: Sequence[Any]) -> list[Any]:
    """``rows`` of ``cursor`` shaped by ``row_factory``. Tuples, the default, get no
    description: psycopg 3 builds one at every read."""
    return row_factory(None if row_factory is tuple_row else cursor.description, rows)


def returns_rows(cursor: Cursor, driver: Driver) -> bool:
    """Whether the cursor's last statement returned rows (a description), asked
    of the driver where it can tell without building the description (after every
    call: here, and when the session keeps the cursor for the next)."""
    test = driver.returns_rows
    return cursor.description is not None if test is None else test(cursor)


def operation(cursor: Cursor, driver: Driver, sql: Any, params: Any,
              row_factory: Optional[RowFactory] = None) -> int:
    """Execute and return the rowcount; for a statement that returns rows, their
    number, counted here where the driver says -1 (sqlite3), as the servers' do
    (``row_factory`` unused: no row is shaped)."""
    if params is None:
        cursor.execute(sql)
    else:
        cursor.execute(sql, params)
    count: int = cursor.rowcount
    if count < 0 and returns_rows(cursor, driver):
        count = sum(1 for _ in iter(cursor.fetchone, None))
    return count


_NONE = object()  # ``many``: an iterator of parameter sets that gave none


def many(cursor: Cursor, driver: Driver, sql: Any,
         seq_of_params: Iterable[Sequence[Any]]) -> int:
    """Execute once per parameter set through the driver's bulk path; total rowcount.
    No parameter sets: 0, with nothing sent (PyMySQL would give -1, or the rowcount
    its cursor's previous statement left)."""
    if isinstance(seq_of_params, Sized):
        if not len(seq_of_params):
            return 0
    else:
        sets = iter(seq_of_params)
        first: Any = next(sets, _NONE)
        if first is _NONE:
            return 0
        seq_of_params = itertools.chain((first,), sets)
    return driver.executemany(cursor, sql, seq_of_params)


def interaction(cursor: Cursor, driver: Driver, fn: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
    """Run the caller's ``fn(cursor, *args, **kwargs)`` and return what it returns."""
    outer = RUNNING.running
    RUNNING.running = True
    try:
        result = fn(cursor, *args, **kwargs)
    finally:
        RUNNING.running = outer
    if inspect.isawaitable(result):  # a function that returned a coroutine: nothing awaits it
        getattr(result, "close", lambda: None)()
        raise TypeError(f"runInteraction's function returned {type(result).__name__}, which "
                        "a worker thread cannot await: its transaction is rolled back")
    return result


def notify(cursor: Cursor, driver: Driver, channel: str, payload: str) -> None:
    """What ``notify()`` runs in a worker: ``pg_notify`` with both values as parameters."""
    cursor.execute("select pg_notify(%s, %s)", (channel, payload))


def savepoint(cursor: Cursor, driver: Driver, statements: tuple[str, ...], result: Any) -> Any:
    """Run a savepoint's statements (``adb.savepoint``) and return ``result``."""
    for statement in statements:
        cursor.execute(statement)
    return result


def copy_rows(cursor: Cursor, driver: Driver, table: str, columns: Any, rows: Any) -> int:
    """Load an iterable of rows into ``table`` by the driver's bulk path; the count."""
    return driver.copy.copy_rows(cursor, table, columns, rows)


def copy_text(cursor: Cursor, driver: Driver, table: str, columns: Any, source: Any) -> int:
    """Load a file-like object of text-format lines into ``table``; the count."""
    return driver.copy.copy_text(cursor, table, columns, source)
