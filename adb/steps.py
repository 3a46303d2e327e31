"""Work written once as *steps*, run on every front-end.

A piece of adb's own work that needs several calls in order (a bulk load, a
retried transaction) is a generator that yields what it must wait for (a future
of one of its calls, an awaitable of the caller's) and gets its value back, or
its exception thrown in. ``run_async`` drives the steps in a coroutine on a
front-end with futures (awaiting each), ``run_blocking`` on adb.sync (waiting for
each ``Waitable``), so the order of events and the error handling are written once.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Optional

#: steps that yield what to wait for and return their result
Steps = Generator[Any, Any, Any]


async def run_async(steps: Steps) -> Any:
    """Drive ``steps``, awaiting each thing they yield; return their result."""
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            value, error = await step, None
        except BaseException as exc:  # thrown into the steps, which decide
            value, error = None, exc


def run_blocking(steps: Steps) -> Any:
    """Drive ``steps`` on a blocking front-end, waiting for each future they yield."""
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            step.wait(None)
            value, error = step.result(), None
        except BaseException as exc:
            value, error = None, exc


__all__ = ["Steps", "run_async", "run_blocking"]
