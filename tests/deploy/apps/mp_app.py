"""multiprocessing: a parent with a Database (and the embedded default) made before
its Pool of workers starts (fork: the workers inherit both), each worker making its
own Database; one runs the sleep. SIGTERM/SIGINT to the parent end it as a program
would: the signal raises in the main thread, the pool is terminated, the Databases
closed (``with``)."""

import multiprocessing
import os
import signal
import sys

import adb.sync

URL = os.environ["ADB_DEPLOY_URL"]


def work(statement):
    with adb.sync.Database(URL, pool_size=1) as db:
        return str(db.runQueryValue(statement))


def stop(signum, frame):
    raise SystemExit(128 + signum)


def main():
    signal.signal(signal.SIGTERM, stop)
    context = multiprocessing.get_context(sys.argv[1])
    with adb.sync.Database(URL, pool_size=2) as parent, adb.sync.Database() as embedded:
        parent.runQueryValue("select 1")
        embedded.runOperation("create table t (x int)")
        with context.Pool(2) as pool:
            print("ready", flush=True)
            pool.map(work, ["select 1", os.environ["ADB_DEPLOY_SLEEP"]] +
                     ["select 1"] * 1000)
            print("at rest", flush=True)  # what a stop "at rest" waits for
            signal.pause()


if __name__ == "__main__":
    main()
