"""adb.trio under the contract's asyncio tests: a trio run in guest mode on the test's
own event loop.

The spec is written once, as asyncio tests that ``await ev(...)`` whatever a call
returns (``tests/conftest.py``). For the trio front-end each such test hosts a trio
run on its loop (trio's guest mode: the run's ticks are callbacks of the asyncio
loop, on the same thread). adb.trio's Database is called from the host, which is
inside the run as guest mode allows; and everything awaited (a call's TrioFuture,
``close()``, a test's own block of ``async with`` and ``async for``) is awaited in a
task of the run, by ``run_in_trio``. Cancelling what the test awaits cancels that
task, the trio way. Trio's own tests of the front-end are ``tests/contract/test_trio.py``
(pytest-trio).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import trio
import trio.lowlevel

#: the guest run of each event loop that hosts one
_guests: dict[asyncio.AbstractEventLoop, "TrioGuest"] = {}


class TrioGuest:
    """A trio run hosted by the running asyncio loop until ``stop()``."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = trio.Event()
        self._done: asyncio.Future[Any] = self.loop.create_future()
        trio.lowlevel.start_guest_run(
            self._main, run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            done_callback=self._finished, host_uses_signal_set_wakeup_fd=True)

    async def _main(self) -> None:
        await self._stop.wait()

    def _finished(self, outcome: Any) -> None:
        if not self._done.done():
            self._done.set_result(outcome)

    def run(self, awaitable: Any) -> asyncio.Future[Any]:
        """Await ``awaitable`` in a task of the run; its outcome as an asyncio future.
        Cancelling that future cancels the task."""
        result: asyncio.Future[Any] = self.loop.create_future()
        scope = trio.CancelScope()

        async def task() -> None:
            with scope:
                try:
                    value = await awaitable
                except trio.Cancelled:
                    if not result.done():
                        result.set_exception(RuntimeError("the trio run ended under the call"))
                    raise
                except BaseException as exc:
                    if not result.done():
                        result.set_exception(exc)
                else:
                    if not result.done():
                        result.set_result(value)

        trio.lowlevel.spawn_system_task(task)
        result.add_done_callback(lambda done: scope.cancel() if done.cancelled() else None)
        return result

    async def stop(self) -> None:
        """End the run (its system tasks are cancelled) and raise what it raised."""
        self._stop.set()
        outcome = await self._done
        outcome.unwrap()


def guest() -> TrioGuest:
    """The running loop's guest run, started on first use."""
    loop = asyncio.get_running_loop()
    hosted = _guests.get(loop)
    if hosted is None:
        hosted = _guests[loop] = TrioGuest()
    return hosted


def current_guest() -> Optional[TrioGuest]:
    """The running loop's guest run, if it hosts one."""
    try:
        return _guests.get(asyncio.get_running_loop())
    except RuntimeError:
        return None


async def stop_guest() -> None:
    """End the running loop's guest run, if any (a test's teardown)."""
    hosted = _guests.pop(asyncio.get_running_loop(), None)
    if hosted is not None:
        await hosted.stop()


def in_trio_task() -> bool:
    """True inside a task of a trio run (a test's block that ``run_in_trio`` runs)."""
    return trio.lowlevel.in_trio_task()


async def run_in_trio(awaitable: Any) -> Any:
    """``await awaitable`` in a task of the running loop's guest run."""
    return await guest().run(awaitable)
