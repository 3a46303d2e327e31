"""The job kinds, each declared once, and the ops a call names.

A job is an object of one of the kinds below (``adb.call.Job``): its fields are
what its work needs, its flags (what a worker may do with it: retry it, batch it,
pipeline it...) are class attributes, and its ``run(session)`` does its work on a
worker's ``Session``. The engine (``adb.engine``) is the only maker of jobs: the
facade, the features and the front-ends name an ``Op`` (``adb.op``: what a call
does, a query, an operation, an interaction...) and call one of the engine's entry
points (``standalone``, ``in_transaction``, ``begin``, ``end``, the stream
requests); the engine picks the kind and makes the job. A worker never asks which
function a job runs: it reads the kind's flags and calls ``job.run``.

A new connection-level capability is one job class here (its fields and its
``run``), one engine entry point that makes it, and one facade method.

The session is only named for the type checker: the vocabulary of jobs does not
import what runs them. This module is compiled with the worker's (``build_backend``):
a worker reads a job's fields as a C struct's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from . import ops
from .call import Claim, Job

if TYPE_CHECKING:
    from .rows import RowFactory
    from .session import Session, StreamGate, Tx


# -- calls that run an op: a query, an operation, adb's other work on a cursor ------------

class Statement(Job):
    """One SQL statement a caller passed (``runQuery``, ``runOperation`` and their row
    and value forms), run by an op of the statement kind:
    ``op(cursor, driver, sql, params, row_factory)``."""

    __slots__ = ("op", "sql", "params", "row_factory")

    def __init__(self, future: Any, claim: Optional[Claim], run_timeout: Optional[float],
                 trace: Any, op: ops.StatementOp, args: tuple[Any, ...]) -> None:
        """``args``: ``(sql, params)``, or ``(sql, params, row_factory)`` for a call that
        shapes rows, as the call gave them. Every call makes one: the fields every job
        has are set here rather than through ``Job.__init__``, a second call an
        interpreted build pays for (0.2 us of 2)."""
        self.future = future
        self.claim = claim
        self.run_timeout = run_timeout
        self.trace = trace
        self.op = op
        self.sql = args[0]
        self.params = args[1]
        self.row_factory: Optional[RowFactory] = args[2] if len(args) > 2 else None

    def text(self) -> Any:
        return self.sql


class Query(Statement):
    """A standalone statement that reads: it may be retried, run again after a pooler's
    symptom, and pipelined."""

    __slots__ = ()

    label = "query"
    retriable = True
    rerunnable = True
    pipelinable = True

    def run(self, session: Session) -> Any:
        return session.statement(self.op, self.sql, self.params, self.row_factory)


class Operation(Query):
    """A standalone statement that writes: a query's flags, and it may join a
    group-commit unit (``autobatch``)."""

    __slots__ = ()

    label = "operation"
    batchable = True


class TxStatement(Statement):
    """A query or operation in the transaction pinning the worker: run once, as sent."""

    __slots__ = ()

    label = "statement in transaction"

    def run(self, session: Session) -> Any:
        return session.in_transaction(self.op, self.sql, self.params, self.row_factory)


class Work(Job):
    """adb's other work on a cursor: ``op(cursor, driver, *args)``, the op one of
    ``adb.ops``'s and its arguments as the call gave them."""

    __slots__ = ("op", "args")

    def __init__(self, future: Any, claim: Optional[Claim], run_timeout: Optional[float],
                 trace: Any, op: Callable[..., Any], args: tuple[Any, ...]) -> None:
        super().__init__(future, claim, run_timeout, trace)
        self.op = op
        self.args = args

    def what(self) -> str:
        return str(getattr(self.op, "__name__", self.label))


class Notify(Work):
    """A standalone statement of adb's own that joins neither a unit nor a pipeline
    (``notify()``)."""

    __slots__ = ()

    label = "statement"
    retriable = True
    rerunnable = True

    def run(self, session: Session) -> Any:
        return session.standalone(self.op, *self.args)


class Many(Work):
    """``runMany`` outside a transaction: all its parameter sets in one transaction."""

    __slots__ = ()

    label = "many"
    retriable = True
    rerunnable = True

    def text(self) -> Any:
        return self.args[0]

    def run(self, session: Session) -> Any:
        return session.atomic(self.op, *self.args)


class Interaction(Work):
    """``runInteraction`` outside a transaction: the caller's function in a transaction
    of its own. It may have done more than the database work, so it is never retried."""

    __slots__ = ()

    label = "interaction"
    rerunnable = True

    def run(self, session: Session) -> Any:
        return session.atomic(self.op, *self.args)


class InTransaction(Work):
    """adb's other work in the pinned transaction (``runMany``, NOTIFY, savepoints, COPY)."""

    __slots__ = ()

    label = "in transaction"

    def run(self, session: Session) -> Any:
        return session.in_transaction(self.op, *self.args)


class TxInteraction(Work):
    """``runInteraction`` in the pinned transaction, on a cursor of its own."""

    __slots__ = ()

    label = "interaction in transaction"

    def run(self, session: Session) -> Any:
        return session.interact(self.op, *self.args)


class Hosted(Job):
    """``fn(session, *args)``: a function handed the worker's session (the adbapi
    drop-in's calls). Its worker goes idle before handing back, so the caller's next
    call lands on it."""

    label = "hosted"
    sticky = True
    __slots__ = ("fn", "args")

    def __init__(self, future: Any, claim: Optional[Claim], run_timeout: Optional[float],
                 trace: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        super().__init__(future, claim, run_timeout, trace)
        self.fn = fn
        self.args = args

    def run(self, session: Session) -> Any:
        return session.host(self.fn, *self.args)


# -- the connection and the transaction pinning it -----------------------------------------

class Connect(Job):
    """Open the worker's connection now, or check the one it has (``connect()``)."""

    label = "connect"
    __slots__ = ()

    def run(self, session: Session) -> Any:
        return session.connect()


class Begin(Job):
    """Pin the worker to a transaction and open it."""

    label = "begin"
    __slots__ = ("record", "handle")

    def __init__(self, future: Any, claim: Optional[Claim], run_timeout: Optional[float],
                 trace: Any, record: Tx, handle: Any) -> None:
        super().__init__(future, claim, run_timeout, trace)
        self.record = record
        self.handle = handle

    def run(self, session: Session) -> Any:
        return session.begin(self.record, self.handle)


class Finish(Job):
    """Commit or roll back the pinned transaction. It runs even when its caller gave
    up: nothing else would end the transaction and free the worker."""

    label = "finish"
    ends_transaction = True
    __slots__ = ("record", "commit")

    def __init__(self, future: Any, claim: Optional[Claim], run_timeout: Optional[float],
                 trace: Any, record: Tx, commit: bool) -> None:
        super().__init__(future, claim, run_timeout, trace)
        self.record = record
        self.commit = commit

    def run(self, session: Session) -> Any:
        return session.finish(self.record, self.commit)


class Abandon(Job):
    """Roll back the transaction pinning a worker whose caller is gone (the Database
    closing, a handle dropped while open); nobody waits for it."""

    label = "abandon"
    ends_transaction = True
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        super().__init__(None, None, None, None)
        self.reason = reason

    def run(self, session: Session) -> Any:
        return session.abandon(self.reason)


# -- a stream's requests to the worker holding it ------------------------------------------

class OpenStream(Job):
    """Open a stream's cursor and give its first batch."""

    label = "open stream"
    __slots__ = ("gate", "own", "export", "sql", "params", "size", "factory")

    def __init__(self, future: Any, claim: Optional[Claim], run_timeout: Optional[float],
                 trace: Any, gate: StreamGate, own: bool, export: bool, sql: Any, params: Any,
                 size: int, factory: RowFactory) -> None:
        super().__init__(future, claim, run_timeout, trace)
        self.gate = gate
        self.own = own
        self.export = export
        self.sql = sql
        self.params = params
        self.size = size
        self.factory = factory

    def text(self) -> Any:
        return self.sql

    def run(self, session: Session) -> Any:
        return session.open_stream(self.gate, self.own, self.export, self.sql, self.params,
                                   self.size, self.factory)


class FetchStream(Job):
    """Give the open stream's next batch."""

    label = "fetch stream"
    __slots__ = ("size", "factory")

    def __init__(self, future: Any, claim: Optional[Claim], run_timeout: Optional[float],
                 trace: Any, size: int, factory: RowFactory) -> None:
        super().__init__(future, claim, run_timeout, trace)
        self.size = size
        self.factory = factory

    def run(self, session: Session) -> Any:
        return session.fetch_stream(self.size, self.factory)


class CloseStream(Job):
    """Close the open stream before its end; the transaction goes on."""

    label = "close stream"
    __slots__ = ()

    def run(self, session: Session) -> Any:
        return session.close_stream()


def plain_job(kind: Union[type[Statement], type[Work]], future: Any,
              run_timeout: Optional[float], fn: Any, args: tuple[Any, ...]) -> Job:
    """The job of a call with the Database's own limits (no claim, no trace), of
    ``kind`` (an ``Op``'s). The kinds of nearly every call, Query and Operation, are
    made by their compiled constructors, called directly: through the type, as any
    other kind is, a call would also build an argument tuple and parse it."""
    if kind is Operation:
        return Operation(future, None, run_timeout, None, fn, args)
    if kind is Query:
        return Query(future, None, run_timeout, None, fn, args)
    return kind(future, None, run_timeout, None, fn, args)


__all__ = ["Abandon", "Begin", "CloseStream", "Connect", "FetchStream", "Finish", "Hosted",
           "InTransaction", "Interaction", "Many", "Notify", "OpenStream", "Operation",
           "Query", "Statement", "TxInteraction", "TxStatement", "Work", "plain_job"]
