"""Transaction handles: the seed's ``txId``, pinned to one worker until it ends.

The handle is the user's: its methods, its ``state``. What the engine and the
worker pinned by it keep of it (its queue, the hooks that move its state) is its
``TxRecord`` (``adb.txrecord``), which only the engine reaches.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Optional, Protocol, TypeVar

from . import rows
from .args import SQL, Params, check_interaction, many, statement
from .errors import InterfaceError
from .op import Op
from .savepoint import Savepoint, SavepointContext, Savepoints
from .steps import Steps, run_async, run_blocking
from .telemetry import INTERACTION, many_what
from .txrecord import USABLE, TxRecord, TxState


class TxEngine(Protocol):
    """What a handle uses of the engine its transaction runs on (``adb.engine.Engine``).
    What ``in_transaction`` and ``finish`` return is the front-end's: a future, a
    Deferred or the value; ``step_in`` and ``end`` give a future to wait for."""

    name: str
    row_factory: rows.RowFactory

    def in_transaction(self, tx: Transaction, op: Op, args: tuple[Any, ...],
                       statement_timeout: Optional[float] = None, what: Any = "") -> Any: ...
    def step_in(self, tx: Transaction, op: Op, args: tuple[Any, ...], what: Any) -> Any: ...
    def check_tx(self, tx: Transaction) -> None: ...
    def finish(self, tx: Transaction, commit: bool) -> Any: ...
    def end(self, tx: Transaction, commit: bool) -> Any: ...
    def check_ended(self, tx: Transaction) -> None: ...


class Transaction:
    """An open transaction on one worker's connection.

    Get one from ``beginTransaction()`` or ``async with db.transaction()``; pass it
    as ``tx`` (the third positional argument) to ``runQuery``/``runOperation``/
    ``runMany``, or call the same methods on the handle itself. ``savepoint()``
    nests an all-or-nothing step (``adb.savepoint``). A handle dropped while still
    open is rolled back (with a warning) when it is garbage-collected.

    ``timeout=`` (the wait for a free worker) does not apply to its calls: the
    transaction's worker is already its own. Its methods refuse it rather than
    ignore it; ``statement_timeout=`` bounds how long a statement runs.
    """

    def __init__(self, engine: TxEngine, record: TxRecord) -> None:
        self.engine = engine
        self._record = record  # the engine's (adb.txrecord), watching this handle
        self.savepoints = Savepoints(record.id)

    def __repr__(self) -> str:
        return repr(self._record)

    @property
    def id(self) -> int:
        return self._record.id

    @property
    def read_only(self) -> bool:
        return self._record.read_only

    @property
    def isolation(self) -> Optional[str]:
        return self._record.isolation

    @property
    def state(self) -> TxState:
        """Where it stands (``TxState``)."""
        return self._record.state

    @property
    def worker(self) -> Optional[int]:
        """The index of the worker it pins, once begun."""
        return self._record.worker

    @property
    def active(self) -> bool:
        """True until commit or rollback has been asked for."""
        return self._record.state in USABLE

    # -- the public API on the handle ----------------------------------------------------

    def runQuery(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                 timeout: Optional[float] = None,
                 statement_timeout: Optional[float] = None) -> Any:
        """Run a query in this transaction and return its rows."""
        _no_timeout(timeout)
        sql, params = statement(sql, params)
        factory = self.engine.row_factory if row_factory is None else rows.resolve(row_factory)
        return self.engine.in_transaction(self, Op.QUERY, (sql, params, factory),
                                          statement_timeout, sql)

    def runQueryRow(self, sql: SQL, params: Params = None, *, row_factory: Any = None,
                    timeout: Optional[float] = None,
                    statement_timeout: Optional[float] = None) -> Any:
        """Run a query in this transaction; its first row, or None."""
        _no_timeout(timeout)
        sql, params = statement(sql, params)
        factory = self.engine.row_factory if row_factory is None else rows.resolve(row_factory)
        return self.engine.in_transaction(self, Op.QUERY_ROW, (sql, params, factory),
                                          statement_timeout, sql)

    def runQueryValue(self, sql: SQL, params: Params = None, *, timeout: Optional[float] = None,
                      statement_timeout: Optional[float] = None) -> Any:
        """Run a query in this transaction; the first column of its first row, or None."""
        _no_timeout(timeout)
        sql, params = statement(sql, params)
        return self.engine.in_transaction(self, Op.QUERY_VALUE, (sql, params),
                                          statement_timeout, sql)

    def runOperation(self, sql: SQL, params: Params = None, *, timeout: Optional[float] = None,
                     statement_timeout: Optional[float] = None) -> Any:
        """Run one statement in this transaction; return its rowcount."""
        _no_timeout(timeout)
        sql, params = statement(sql, params)
        return self.engine.in_transaction(self, Op.OPERATION, (sql, params),
                                          statement_timeout, sql)

    def runMany(self, sql: SQL, seq_of_params: Any, *, timeout: Optional[float] = None,
                statement_timeout: Optional[float] = None) -> Any:
        """Run ``sql`` once per parameter set in this transaction; the total rowcount."""
        _no_timeout(timeout)
        sql, seq = many(sql, seq_of_params)
        return self.engine.in_transaction(self, Op.MANY, (sql, seq), statement_timeout,
                                          many_what(sql, len(seq)))

    def runInteraction(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(cursor, *args, **kwargs)`` inside this transaction (no commit of its own)."""
        check_interaction(fn)
        return self.engine.in_transaction(self, Op.INTERACTION, (fn, args, kwargs),
                                          what=INTERACTION)

    def savepoint(self) -> SavepointContext:
        """``async with tx.savepoint():`` (``with`` on adb.sync): the block is one
        all-or-nothing step; if it raises, it is undone and the transaction goes on."""
        self.engine.check_tx(self)
        return SavepointContext(self)

    def beginSavepoint(self) -> Any:
        """Begin a savepoint; gives its ``Savepoint`` (a future, a Deferred, the value)."""
        self.engine.check_tx(self)
        savepoint, statement_ = self.savepoints.begin(self)
        return self._run_savepoint((statement_,), savepoint)

    def releaseSavepoint(self, savepoint: Savepoint) -> Any:
        """Keep what was done since ``savepoint`` began, and end it."""
        self.engine.check_tx(self)
        return self._run_savepoint(self.savepoints.end(savepoint, keep=True), None)

    def rollbackSavepoint(self, savepoint: Savepoint) -> Any:
        """Undo what was done since ``savepoint`` began, and end it; the transaction goes on."""
        self.engine.check_tx(self)
        return self._run_savepoint(self.savepoints.end(savepoint, keep=False), None)

    def _run_savepoint(self, statements: tuple[str, ...], result: Any) -> Any:
        return self.engine.in_transaction(self, Op.SAVEPOINT, (statements, result),
                                          what="; ".join(statements))

    def savepoint_step(self, statements: tuple[str, ...], result: Any) -> object:
        """A savepoint's statements queued in this transaction: their future
        (``SavepointContext`` waits for it as a step), settled with ``result``."""
        return self.engine.step_in(self, Op.SAVEPOINT, (statements, result),
                                   "; ".join(statements))

    def commit(self) -> Any:
        return self.engine.finish(self, True)

    def rollback(self) -> Any:
        return self.engine.finish(self, False)


def _no_timeout(timeout: Optional[float]) -> None:
    """A transaction's calls wait for no worker: ``timeout=`` is refused, not ignored."""
    if timeout is not None:
        raise InterfaceError(
            f"timeout={timeout!r} does not apply inside a transaction: its worker is already "
            "its own, so its calls wait for none (use statement_timeout= to bound how long "
            "a statement runs)")


#: the handle type a front-end's transaction context gives (its own Transaction subclass)
TX = TypeVar("TX", bound=Transaction, covariant=True)


class TransactionContext(Generic[TX]):
    """``async with db.transaction() as tx`` (or ``with`` on adb.sync).

    Commits when the block ends normally, rolls back when it raises; does
    nothing if the block already committed or rolled back itself. A block that
    ends normally after something else ended its transaction (``close()`` rolled
    it back) raises TransactionError naming what did: the block exits normally
    only if its own commit succeeded. Both forms run the same steps (``adb.steps``).

    :param begin: begins the transaction: its handle, and the future of its begin.
    """

    def __init__(self, begin: Callable[[], tuple[TX, Any]]) -> None:
        self._begin = begin
        self.tx: Any = None  # the handle, once the block has begun

    def _enter(self) -> Steps:
        tx, begun = self._begin()
        yield begun
        self.tx = tx
        return tx

    def _exit(self, exc_type: Any) -> Steps:
        tx = self.tx
        if tx.active:
            yield tx.engine.end(tx, exc_type is None)
        elif exc_type is None:  # ended already: by the block itself, or under it
            tx.engine.check_ended(tx)

    async def __aenter__(self) -> TX:
        tx: TX = await run_async(self._enter())
        return tx

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await run_async(self._exit(exc_type))

    def __enter__(self) -> TX:
        tx: TX = run_blocking(self._enter())
        return tx

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        run_blocking(self._exit(exc_type))


def record_of(tx: Transaction) -> TxRecord:
    """The record behind a handle: the engine's way in (its transactions part), which
    nothing else takes."""
    return tx._record


__all__ = ["Transaction", "TransactionContext", "TxEngine", "TxState", "record_of"]
