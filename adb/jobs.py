"""Job kinds and ops: what a queued job is, and what a call does on its cursor.

The engine (``adb.engine``) is the only builder of jobs: the facade, the
features and the front-ends name an ``Op`` (what a call does: a query, an
operation, an interaction...) and call one of the engine's entry points
(``standalone``, ``in_transaction``, ``begin``, ``finish``, the stream requests);
the engine picks the job's ``Kind`` and lays the job out (``adb.call.Job``).

A worker never asks what a job is by the identity of a function: the job's
``Kind`` says it. Each kind carries the ``Session`` method that runs it and what
the worker may do with it:

- ``retriable``: ``Database(retries=N)`` may run it again after a transient
  failure that took no effect (``adb.transient``);
- ``rerunnable``: it may run once more after failing unsent on a connection the
  driver has just made fit (``Driver.pooler_symptom``);
- ``batchable``: it may join a group-commit unit (``autobatch``);
- ``pipelinable``: it may join a pipeline of standalone statements;
- ``ends_transaction``: it runs even when its caller gave up, since nothing else
  would end the transaction and free the worker;
- ``statement``: its arguments are ``(op, sql, params, ...)`` (a query or an
  operation), so a failure can be checked against its parameters.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Callable, Final, Optional

from . import ops
from .call import ARGS, KIND, Job
from .session import Session

if TYPE_CHECKING:
    from .session import Tx


class Kind(enum.Enum):
    """What a job is: the session method that runs it, and what a worker may do with it."""

    # (label, the Session method that runs it, retriable, rerunnable, batchable,
    #  pipelinable, ends_transaction, statement)
    QUERY = ("query", Session.standalone, True, True, False, True, False, True)
    OPERATION = ("operation", Session.standalone, True, True, True, True, False, True)
    #: a standalone statement that joins neither a unit nor a pipeline (NOTIFY)
    STATEMENT = ("statement", Session.standalone, True, True, False, False, False, False)
    MANY = ("many", Session.atomic, True, True, False, False, False, False)
    #: the caller's function may have done more than the database work: never retried
    INTERACTION = ("interaction", Session.atomic, False, True, False, False, False, False)
    #: a query or operation in the pinned transaction
    TX_STATEMENT = ("statement in transaction", Session.in_transaction, False, False, False,
                    False, False, True)
    #: adb's other work in the pinned transaction (runMany, NOTIFY, savepoints, COPY)
    IN_TRANSACTION = ("in transaction", Session.in_transaction, False, False, False, False,
                      False, False)
    TX_INTERACTION = ("interaction in transaction", Session.interact, False, False, False,
                      False, False, False)
    CONNECT = ("connect", Session.connect, False, False, False, False, False, False)
    BEGIN = ("begin", Session.begin, False, False, False, False, False, False)
    FINISH = ("finish", Session.finish, False, False, False, False, True, False)
    ABANDON = ("abandon", Session.abandon, False, False, False, False, True, False)
    OPEN_STREAM = ("open stream", Session.open_stream, False, False, False, False, False, False)
    FETCH_STREAM = ("fetch stream", Session.fetch_stream, False, False, False, False, False,
                    False)
    CLOSE_STREAM = ("close stream", Session.close_stream, False, False, False, False, False,
                    False)
    #: a function handed the worker's session (the adbapi drop-in's calls)
    HOSTED = ("hosted", Session.host, False, False, False, False, False, False)

    def __init__(self, label: str, run: Callable[..., Any], retriable: bool, rerunnable: bool,
                 batchable: bool, pipelinable: bool, ends_transaction: bool,
                 statement: bool) -> None:
        self.label = label
        #: ``run(session, *args)``, in the worker's thread
        self.run = run
        self.retriable = retriable
        self.rerunnable = rerunnable
        self.batchable = batchable
        self.pipelinable = pipelinable
        self.ends_transaction = ends_transaction
        self.statement = statement
        #: its worker goes idle before handing back its outcome, so that the caller's
        #: next call lands on it (the drop-in's calls: ``Worker.go_idle``)
        self.sticky = label == "hosted"


class Op(enum.Enum):
    """What a call does on a cursor (``adb.ops``), and the job kind it makes outside
    a transaction (None: only inside one) and inside the pinned one."""

    QUERY = ("query", ops.query, Kind.QUERY, Kind.TX_STATEMENT)
    QUERY_ROW = ("query row", ops.query_row, Kind.QUERY, Kind.TX_STATEMENT)
    QUERY_VALUE = ("query value", ops.query_value, Kind.QUERY, Kind.TX_STATEMENT)
    OPERATION = ("operation", ops.operation, Kind.OPERATION, Kind.TX_STATEMENT)
    MANY = ("many", ops.many, Kind.MANY, Kind.IN_TRANSACTION)
    INTERACTION = ("interaction", ops.interaction, Kind.INTERACTION, Kind.TX_INTERACTION)
    NOTIFY = ("notify", ops.notify, Kind.STATEMENT, Kind.IN_TRANSACTION)
    SAVEPOINT = ("savepoint", ops.savepoint, None, Kind.IN_TRANSACTION)
    COPY_ROWS = ("copy rows", ops.copy_rows, None, Kind.IN_TRANSACTION)
    COPY_TEXT = ("copy text", ops.copy_text, None, Kind.IN_TRANSACTION)

    def __init__(self, label: str, fn: Callable[..., Any], standalone: Optional[Kind],
                 in_transaction: Kind) -> None:
        self.label = label
        #: ``fn(cursor, driver, *args)``, in the worker's thread
        self.fn = fn
        self.standalone = standalone
        self.in_transaction = in_transaction


#: where a statement's job keeps its op and statement: ``(op, sql, params, ...)`` follow ARGS
JOB_OP: Final = ARGS
JOB_SQL: Final = ARGS + 1
JOB_PARAMS: Final = ARGS + 2


def detached(kind: Kind, args: tuple[Any, ...]) -> Job:
    """A job nobody waits for (no future, no claim, no limit, no trace)."""
    return (None, kind, None, None, None) + args


def abandon_job(reason: str) -> Job:
    """The job that rolls back the transaction pinning a worker whose caller is gone
    (the Database closing, a handle dropped while open); nobody waits for it."""
    return detached(Kind.ABANDON, (reason,))


def finish_job(tx: Tx, commit: bool) -> Job:
    """The job that ends ``tx`` when nobody waits for it (a dropped stream's own
    transaction)."""
    return detached(Kind.FINISH, (tx, commit))


def ends_transaction(job: Job) -> bool:
    """True for a commit, rollback or abandon: it runs even when its caller gave up."""
    kind: Kind = job[KIND]
    return kind.ends_transaction


__all__ = ["JOB_OP", "JOB_PARAMS", "JOB_SQL", "Kind", "Op", "abandon_job", "detached",
           "ends_transaction", "finish_job"]
