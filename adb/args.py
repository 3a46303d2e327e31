"""The checks of a call's arguments, made in the caller's thread before anything is
queued: a wrong type fails at once (TypeError), never later in a worker."""

from __future__ import annotations

import inspect
import reprlib
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
    if is_one_value(params):  # runQuery(sql, 7): a value where its tuple belongs
        raise TypeError(
            f"parameters must be a tuple, list or dict, not {type(params).__name__} "
            f"(for one value write ({_short(params)},))")
    if not isinstance(params, (Sequence, Mapping)):
        raise TypeError(f"parameters must be a tuple, list or dict, not {type(params).__name__}")


def is_one_value(params: object) -> bool:
    """True for what can only be one parameter's value (7, 'x', None, a Decimal, a
    date, bytes), never a set of parameters: not a tuple, list, dict or other
    sequence, mapping or iterable (a set or a generator is a mistake of its own)."""
    return isinstance(params, (str, bytes)) or not isinstance(params, (Iterable, Mapping))


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 40


def _short(value: object) -> str:
    """``value`` as the hint writes it: its repr, long strings and bytes shortened."""
    return _REPR.repr(value)


#: ``check_tx``'s ``params`` for a method whose second argument is not parameters
NOT_PARAMS: Any = object()


def check_tx(method: str, params: object, tx: object) -> None:
    """``tx`` as ``method`` got it, when it is not a transaction handle: a TypeError
    naming the mistake. ``runQuery(sql, 7, "x")``, torndb's and asyncpg's way, puts
    the parameters in separate arguments; the second of them lands in ``tx``. Then
    the error writes the one tuple out, ``(7, 'x')``, whatever the values' types."""
    if params is not NOT_PARAMS and (params is None or is_one_value(params)):
        raise TypeError(
            f"{method} takes the parameters as one tuple, not as separate arguments: "
            f"write {method}(sql, ({_short(params)}, {_short(tx)})) "
            f"(its third argument is tx, a transaction handle from beginTransaction(), "
            f"not {type(tx).__name__})")
    raise TypeError(
        f"tx must be a transaction handle from beginTransaction(), not {type(tx).__name__}")


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


__all__ = ["NOT_PARAMS", "PLAIN", "Params", "SQL", "check_callable", "check_interaction", "check_params",
           "check_tx", "is_one_value", "many", "statement"]
