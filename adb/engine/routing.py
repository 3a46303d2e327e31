"""The engine's routing: which engine a call runs on, the primary's or a replica's.

A read with ``replica=True`` goes to a replica the ``ReplicaSet`` chooses (or to
the primary when it has none, or when none is fit and ``fallback`` allows); a
transaction runs where it began, so each of its calls is routed back to the
engine that began it. ``Routing`` holds no state: the choice is the replica
set's, and a handle names its engine.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Optional, TypeVar

from ..errors import InterfaceError, TransactionError
from ..replicas import ReplicaSet
from ..transaction import Transaction

#: the engine type routed among (``adb.engine.Engine``)
E = TypeVar("E")


class Routing(Generic[E]):
    """Where a call runs, for the primary engine ``home`` and its ``replicas``.

    :param check_open: raises what every call gets once the Database is closing.
    """

    def __init__(self, home: E, name: str, replicas: Optional[ReplicaSet],
                 check_open: Callable[[], None]) -> None:
        self._home = home
        self._name = name
        self._replicas = replicas
        self._check_open = check_open

    def route(self, tx: object) -> E:
        """The engine ``tx`` belongs to: the primary, or one of its replicas' (a
        transaction begun with ``replica=True`` runs where it began)."""
        if not isinstance(tx, Transaction):
            raise TypeError(
                f"tx must be a transaction handle from beginTransaction(), not {type(tx).__name__}")
        engine: Any = tx.engine
        if engine is self._home or self._replicas is not None \
                and engine in self._replicas.engines:
            routed: E = engine
            return routed
        raise TransactionError(f"{tx!r} belongs to another Database, not {self._name!r}")

    def reader(self, tx: Optional[Transaction] = None) -> E:
        """The engine a ``replica=True`` read goes to (``ReplicaSet.choose``): the
        primary when it has no replicas."""
        if tx is not None:
            raise InterfaceError("replica=True with tx=: a transaction's statements run where "
                                 "it began (begin it with replica=True)")
        self._check_open()
        if self._replicas is None:
            return self._home
        chosen: E = self._replicas.choose(self._home)
        return chosen


__all__ = ["Routing"]
