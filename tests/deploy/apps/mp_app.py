"""multiprocessing: a parent with a Database (and the embedded default) made before
its Pool of workers starts (fork: the workers inherit both), each worker making its
own Database; one runs the sleep. SIGTERM/SIGINT to the parent end it as a program
would: the signal raises in the main thread, the pool is terminated, the Databases
closed (``with``).

A signal's handler runs in the main thread at the next point the interpreter checks
for one, which can be inside a weak reference's callback (a ``WeakSet``'s, when the
objects of a Database just closed are freed there). CPython ignores an exception
raised in such a callback: it prints "Exception ignored in" and goes on. So a pool
process that makes and closes a Database per task would at times go on after
``terminate()``'s SIGTERM, back to the pool's queue, and the parent waited for it
for good (seen once: 3.13t, beside a CPU hog, 2026-11-29). The
handler therefore also notes the signal, and ``work`` ends the process if one came,
as a program that must not outlive its signal does."""

import faulthandler
import multiprocessing
import os
import signal
import sys

import adb.sync

URL = os.environ["ADB_DEPLOY_URL"]


def work(statement):
    """In a pool process: SIGTERM (Pool.terminate()'s) raises SystemExit while a call
    runs, so the call is given up and its statement cancelled on the server; between
    calls SIGTERM keeps its default and ends the process at once, as terminate()
    expects (with the handler left in place, a spawned process idle in the pool's
    queue at times never ended: the parent waited in terminate() forever)."""
    signal.signal(signal.SIGTERM, stop)
    try:
        with adb.sync.Database(URL, pool_size=1) as db:
            return str(db.runQueryValue(statement))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if received:  # its SystemExit was raised where the interpreter ignores it
            raise SystemExit(128 + received[0])


#: the signals this process received (``stop``)
received = []


def stop(signum, frame):
    received.append(signum)
    # an exit slower than 8 s writes every thread's stack to the log the test shows
    faulthandler.dump_traceback_later(8)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def main():
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    context = multiprocessing.get_context(sys.argv[1])
    with adb.sync.Database(URL, pool_size=2) as parent, adb.sync.Database() as embedded:
        parent.runQueryValue("select 1")
        embedded.runOperation("create table t (x int)")
        with context.Pool(2, initializer=signal.signal, initargs=(signal.SIGTERM, signal.SIG_DFL)) as pool:
            print("ready", flush=True)
            pool.map(work, ["select 1", os.environ["ADB_DEPLOY_SLEEP"]] +
                     ["select 1"] * 1000)
            print("at rest", flush=True)  # what a stop "at rest" waits for
            signal.pause()


if __name__ == "__main__":
    main()
