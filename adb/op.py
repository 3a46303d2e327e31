"""``Op``: what a call does on a cursor, and the kinds of job it makes.

The facade, the features and the front-ends name an ``Op`` when they call the
engine (``engine.standalone``, ``engine.in_transaction``, ``engine.step_in``); the
engine makes the job of the kind the op names (``adb.jobs``), which runs the op's
function (``adb.ops``) on a worker's cursor. An enum, so it stays interpreted: the
job kinds and the cursor functions it names are compiled.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Optional, Union

from . import ops
from .jobs import (Interaction, InTransaction, Many, Notify, Operation, Query, Statement,
                   TxInteraction, TxStatement, Work)

#: a kind of job that runs an op: made ``kind(future, claim, run_timeout, trace, op, args)``
OpKind = Union[type[Statement], type[Work]]


class Op(enum.Enum):
    """What a call does on a cursor (``adb.ops``), and the kind of job it makes outside a
    transaction (None: only inside one) and inside the pinned one."""

    QUERY = ("query", ops.query, Query, TxStatement)
    QUERY_ROW = ("query row", ops.query_row, Query, TxStatement)
    QUERY_VALUE = ("query value", ops.query_value, Query, TxStatement)
    OPERATION = ("operation", ops.operation, Operation, TxStatement)
    MANY = ("many", ops.many, Many, InTransaction)
    INTERACTION = ("interaction", ops.interaction, Interaction, TxInteraction)
    NOTIFY = ("notify", ops.notify, Notify, InTransaction)
    SAVEPOINT = ("savepoint", ops.savepoint, None, InTransaction)
    COPY_ROWS = ("copy rows", ops.copy_rows, None, InTransaction)
    COPY_TEXT = ("copy text", ops.copy_text, None, InTransaction)

    def __init__(self, label: str, fn: Callable[..., Any], standalone: Optional[OpKind],
                 in_transaction: OpKind) -> None:
        self.label = label
        #: ``fn(cursor, driver, *args)``, in the worker's thread
        self.fn = fn
        #: the kind of job the call makes, made ``kind(future, claim, run_timeout,
        #: trace, fn, args)``
        self.standalone = standalone
        self.in_transaction = in_transaction


__all__ = ["Op", "OpKind"]
