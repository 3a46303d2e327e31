"""``adb.dropwatch``, the watch on a handle dropped open: it calls back once, also for a
handle that dies in a reference cycle with its watch; a detached watch, one of the
parent's in a forked child and any after the exit handler stopped them call nothing."""

import gc
import os
import subprocess
import sys

from adb import dropwatch


class Handle:
    """Stands for a transaction or stream handle."""


def test_a_dropped_handle_calls_back_once_with_its_arguments():
    calls: list[tuple[str, int]] = []
    handle = Handle()
    dropwatch.watch(handle, lambda *args: calls.append(args), "queue", 7)
    del handle
    gc.collect()
    gc.collect()
    assert calls == [("queue", 7)]


def test_a_handle_that_dies_in_a_cycle_with_its_watch_calls_back():
    """The handle holds what holds its watch (a transaction handle's record): the
    registry keeps the watch alive outside the cycle, so its callback runs."""
    calls: list[str] = []
    handle = Handle()
    handle.self = handle  # type: ignore[attr-defined]
    handle.watch = dropwatch.watch(handle, calls.append, "cycle")  # type: ignore[attr-defined]
    del handle
    gc.collect()
    assert calls == ["cycle"]


def test_a_detached_watch_calls_nothing():
    calls: list[str] = []
    handle = Handle()
    dropwatch.watch(handle, calls.append, "detached").detach()
    del handle
    gc.collect()
    assert calls == []


def test_a_watch_of_the_parents_calls_nothing_in_a_forked_child():
    """The parent's handles are the parent's: dropped in the child, nothing is called
    there (a transaction's rollback would be queued for a worker the child has not)."""
    read, write = os.pipe()
    handle = Handle()
    made = dropwatch.watch(handle, lambda: os.write(write, b"called"))
    pid = os.fork()
    if pid == 0:  # the child: drop it, then leave without pytest's exit
        try:
            del handle
            gc.collect()
            os.write(write, b"done")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    said = os.read(read, 100)
    os.close(read)
    made.detach()
    assert os.waitstatus_to_exitcode(status) == 0
    assert said == b"done"


def test_a_handle_dropped_after_the_exit_handler_stopped_the_watches_calls_nothing():
    """``stop`` is the exit handler's last step: a handle collected in the teardown
    after it calls nothing (in a process of its own: stopping is for good)."""
    code = (
        "import gc\n"
        "from adb import dropwatch\n"
        "class Handle: pass\n"
        "before, after = Handle(), Handle()\n"
        "dropwatch.watch(before, print, 'before')\n"
        "dropwatch.watch(after, print, 'after')\n"
        "del before\n"
        "gc.collect()\n"
        "dropwatch.stop()\n"
        "dropwatch.watch(Handle(), print, 'made after')\n"
        "del after\n"
        "gc.collect()\n"
        "print('end')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["before", "end"]
