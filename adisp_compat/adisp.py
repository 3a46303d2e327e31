"""``@process`` and ``@async_``: the 2011 adisp style, rewritten for Python 3.

A ``@process`` generator yields things to wait for and receives their results:

- an adb call (an asyncio/Tornado future, a Twisted Deferred) or any awaitable;
- the result of an ``@async_`` function, or any callable taking ``callback=``;
- a list, tuple or ``map(...)`` of those: they run in parallel and the
  generator receives a list of results in the same order.

An error is thrown back into the generator at its ``yield``. Everything runs on
Tornado's IOLoop (the running asyncio loop). Calling a ``@process`` function
starts it at once and returns a future of its return value, so processes nest:
one may ``yield`` another.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, TypeGuard, cast, overload

from tornado import gen
from tornado.concurrent import Future, future_set_exc_info, future_set_result_unless_cancelled
from tornado.ioloop import IOLoop

if TYPE_CHECKING:
    from tornado.platform.asyncio import BaseAsyncIOLoop
    from twisted.internet.defer import Deferred


def process(func: Callable[..., Any]) -> Callable[..., Future[Any]]:
    """Run the generator function ``func`` as an adisp process (see the module doc)."""
    @functools.wraps(func)
    def start(*args: Any, **kwargs: Any) -> Future[Any]:
        result: Future[Any] = Future()
        try:
            generator = func(*args, **kwargs)
        except Exception as exc:
            result.set_exception(exc)
            return result
        if not isinstance(generator, types.GeneratorType):
            result.set_result(generator)
            return result
        _Process(generator, result).step(None, None)
        return result
    return start


@overload
def async_(func: Callable[..., Any], *, cbname: str = ...) -> Callable[..., CallbackCall]: ...
@overload
def async_(func: None = ..., *, cbname: str = ...
           ) -> Callable[[Callable[..., Any]], Callable[..., CallbackCall]]: ...


def async_(func: Callable[..., Any] | None = None, *, cbname: str = "callback"
           ) -> Callable[..., Any]:
    """Make a callback-style function yieldable: ``f(*args)`` then returns a call
    that a ``@process`` runs as ``func(*args, callback=cb)`` (the old ``@async``)."""
    if func is None:
        return functools.partial(async_, cbname=cbname)

    @functools.wraps(func)
    def prepare(*args: Any, **kwargs: Any) -> CallbackCall:
        return CallbackCall(func, args, kwargs, cbname)
    return prepare


class CallbackCall:
    """A callback-style call waiting to be started by a ``@process``."""

    def __init__(self, func: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], cbname: str = "callback") -> None:
        self.func, self.args, self.kwargs, self.cbname = func, args, kwargs, cbname

    def __call__(self, callback: Callable[..., Any]) -> Any:
        return self.func(*self.args, **{**self.kwargs, self.cbname: callback})


class _Process:
    """Drives one generator: send results in, throw errors in, until it returns."""

    def __init__(self, generator: Generator[Any, Any, Any], result: Future[Any]) -> None:
        self.generator = generator
        self.result = result

    def step(self, value: Any, error: BaseException | None) -> None:
        try:
            if error is None:
                yielded = self.generator.send(value)
            else:
                yielded = self.generator.throw(error)
        except StopIteration as stop:
            future_set_result_unless_cancelled(self.result, stop.value)
            return
        except Exception:
            future_set_exc_info(self.result, sys.exc_info())
            return
        try:
            waitable = to_future(yielded)
        except TypeError as exc:
            IOLoop.current().add_callback(self.step, None, exc)
            return
        IOLoop.current().add_future(waitable, self.resume)

    def resume(self, future: Future[Any]) -> None:
        try:
            value = future.result()
        except Exception as exc:
            self.step(None, exc)
        else:
            self.step(value, None)


def to_future(yielded: object) -> Future[Any]:
    """A future for anything a ``@process`` may yield; TypeError for the rest."""
    if isinstance(yielded, (list, tuple, map, types.GeneratorType)):
        return _all([to_future(item) for item in yielded])
    if _is_deferred(yielded):
        # Tornado 6's IOLoop.current() is always an asyncio-backed IOLoop
        return yielded.asFuture(cast("BaseAsyncIOLoop", IOLoop.current()).asyncio_loop)
    if inspect.isawaitable(yielded):
        return gen.convert_yielded(yielded)
    if callable(yielded):
        return _from_callback(yielded)
    raise TypeError(
        f"a @process generator yielded {type(yielded).__name__} ({yielded!r:.60}); "
        "yield an adb call, an awaitable, an @async_ call or a list of them")


def _from_callback(call: Callable[..., Any]) -> Future[Any]:
    future: Future[Any] = Future()
    io_loop = IOLoop.current()

    def callback(value: Any = None) -> None:
        io_loop.add_callback(future_set_result_unless_cancelled, future, value)
    try:
        call(callback=callback)
    except Exception as exc:
        future.set_exception(exc)
    return future


def _all(futures: list[Future[Any]]) -> Future[list[Any]]:
    """Every future's result, in order; the first error once all have settled."""
    combined: Future[list[Any]] = Future()
    remaining = len(futures)
    if not remaining:
        combined.set_result([])
        return combined

    def settled(_: Future[Any]) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining:
            return
        for future in futures:
            error = future.exception()
            if error is not None:
                combined.set_exception(error)
                return
        combined.set_result([future.result() for future in futures])
    for future in futures:
        future.add_done_callback(settled)
    return combined


def _is_deferred(value: object) -> TypeGuard[Deferred[Any]]:
    defer = sys.modules.get("twisted.internet.defer")  # never import Twisted ourselves
    return defer is not None and isinstance(value, defer.Deferred)
