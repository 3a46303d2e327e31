"""Watches on the handles adb gives its callers (a transaction, a stream): a callback
runs if the caller lets go of one while it is still open, and a fork never copies a
watch half-made.

A watch is a weak reference to the handle, kept alive in this module's registry
(``_Registry``), not in the handle: a handle that dies in a reference cycle with its
watch inside the cycle would otherwise be cleared without its callback. Its owner
detaches it once the handle is finished.

Why not ``weakref.finalize``, which does the same: its registry is one dict shared by
every finalizer of the process, written from whichever thread makes a handle or drops
one. On the free-threaded build a dict has a lock of its own, and one that a fork
catches held (handed to a thread that then waits to run) stays held in the child,
which has only the forking thread: the child hung for good at its exit, in
``finalize``'s exit function, iterating that dict (docs/failures.md, the fork
finding). Every change to this registry is made under one lock instead, and a fork
takes that lock first: in the child it is made anew and the registry emptied, so
the parent's watches call nothing there (the handles' transactions are the parent's).

The engine's exit handler ends what is still open when the interpreter exits
(``EndedBy.EXIT``) and then stops the watches (``stop``), so that the collection of
the last handles during the interpreter's teardown calls nothing.
"""

from __future__ import annotations

import enum
import os
import threading
import weakref
from typing import Any, Callable


class RegistryState(enum.Enum):
    WATCHING = "watching"
    STOPPED = "stopped"  # the interpreter is exiting: a handle dropped now calls nothing


class _Registry:
    """The live watches of this process and the lock every change to them is made
    under. One for the process, never replaced (``_dropped`` holds it)."""

    def __init__(self) -> None:
        # reentrant: a collection can call ``_dropped`` in a thread inside ``watch``
        self.lock = threading.RLock()
        self.watches: dict[int, Watch] = {}  # by id: a handle need not be hashable
        self.state = RegistryState.WATCHING

    def before_fork(self) -> None:
        self.lock.acquire()

    def after_fork_in_parent(self) -> None:
        self.lock.release()

    def after_fork_in_child(self) -> None:
        """A new lock (the parent's is held, by the thread that forked) and no watch:
        the parent's are the parent's."""
        self.lock = threading.RLock()
        self.watches = {}


_registry = _Registry()


class Watch(weakref.ref[Any]):
    """A weak reference to a handle that calls ``on_drop(*args)`` when the handle is
    collected, unless detached first. ``args`` must not refer to the handle."""

    __slots__ = ("on_drop", "args")

    def __init__(self, handle: object, on_drop: Callable[..., object], *args: Any) -> None:
        self.on_drop = on_drop
        self.args = args

    def __new__(cls, handle: object, on_drop: Callable[..., object], *args: Any) -> Watch:
        return super().__new__(cls, handle, _dropped)

    def detach(self) -> None:
        """The handle is finished: nothing is called when it goes."""
        with _registry.lock:
            _registry.watches.pop(id(self), None)


def watch(handle: object, on_drop: Callable[..., object], *args: Any) -> Watch:
    """Call ``on_drop(*args)`` if ``handle`` is collected before the watch is detached."""
    made = Watch(handle, on_drop, *args)
    with _registry.lock:
        if _registry.state is RegistryState.WATCHING:
            _registry.watches[id(made)] = made
    return made


def _dropped(made: Watch, registry: _Registry = _registry) -> None:
    """The weak reference's callback: the handle went, in whichever thread let go of
    it. (``registry`` is bound here: the interpreter's teardown may clear the module.)"""
    with registry.lock:
        if registry.watches.pop(id(made), None) is not made:
            return  # detached, stopped, or a watch of the parent's in a forked child
    made.on_drop(*made.args)


def stop() -> None:
    """The interpreter is exiting, and the engine has ended what was open: from now on
    a handle collected calls nothing."""
    with _registry.lock:
        _registry.state = RegistryState.STOPPED
        _registry.watches.clear()


os.register_at_fork(before=_registry.before_fork, after_in_parent=_registry.after_fork_in_parent,
                    after_in_child=_registry.after_fork_in_child)

__all__ = ["RegistryState", "Watch", "stop", "watch"]
