"""The checks of a call's arguments, made in the caller's thread before anything is
queued: a wrong type fails at once (TypeError), never later in a worker."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

#: a statement: SQL text, or the 2011 form ``(sql, params)`` as one argument
SQL = Union[str, bytes, "tuple[Union[str, bytes], Params]"]
#: statement parameters in the driver's paramstyle: a sequence, a mapping, or None
Params = Union[Sequence[Any], Mapping[str, Any], None]

_PLAIN_PARAMS = frozenset({tuple, list, dict})
#: parameter types a call passes on unchecked with a ``str`` statement (``statement``
#: would return both as they are): the caller's test, without a call
PLAIN = frozenset({tuple, list, dict, type(None)})


def statement(sql: object, params: Any) -> tuple[Union[str, bytes], Params]:
    """The statement and its parameters, checked (the 2011 single-tuple form unpacked)."""
    if params is None and isinstance(sql, tuple) and len(sql) == 2:
        sql, params = sql  # the 2011 form: runOperation((sql, params))
    if not isinstance(sql, (str, bytes)):
        raise TypeError(f"SQL must be a str, not {type(sql).__name__}")
    if params is not None:
        check_params(params)
    return sql, params


def check_params(params: object) -> None:
    if type(params) in _PLAIN_PARAMS:  # the common case, without ABC checks
        return
    if isinstance(params, (str, bytes)):
        raise TypeError(
            f"parameters must be a tuple, list or dict, not {type(params).__name__} "
            f"(for one value write ({params!r},))")
    if not isinstance(params, (Sequence, Mapping)):
        raise TypeError(f"parameters must be a tuple, list or dict, not {type(params).__name__}")


def many(sql: object, seq_of_params: object) -> tuple[Union[str, bytes], list[Any]]:
    """``runMany``'s statement and its parameter sets, as a list (the first one checked)."""
    text, _ = statement(sql, None)
    if isinstance(seq_of_params, (str, bytes)) or not isinstance(seq_of_params, Iterable):
        raise TypeError(
            f"runMany needs a sequence of parameter sets, not {type(seq_of_params).__name__}")
    seq = list(seq_of_params)
    for params in seq[:1]:
        check_params(params)
    return text, seq


def check_callable(fn: object, method: str) -> None:
    if not callable(fn):
        raise TypeError(f"{method} needs a callable, not {type(fn).__name__}")


def check_interaction(fn: object) -> None:
    """``runInteraction``'s function: a plain callable. It runs in a worker thread,
    where a coroutine function would only make a coroutine nobody awaits (and an
    empty transaction would commit): refused before anything runs."""
    check_callable(fn, "runInteraction")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn) \
            or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        raise TypeError(
            f"runInteraction runs fn(cursor, ...) in a worker thread, which cannot await: "
            f"{getattr(fn, '__name__', fn)!r} is a coroutine function. Pass a plain function, "
            "or use runTransaction(fn), whose fn(tx) awaits the handle's calls")


__all__ = ["PLAIN", "Params", "SQL", "check_callable", "check_interaction", "check_params", "many", "statement"]
