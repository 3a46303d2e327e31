"""Forks while other threads begin and end transactions and streams; every child must
exit normally.

Run as a script by tests/contract/test_fork_signals.py: ``python
tests/contract/fork_churn_app.py URL FORKS``. Three threads run transaction blocks and
streams on one ``adb.sync`` Database; the main thread forks FORKS times, each fork
after the threads have ended more transactions since the last one (so each lands in
the middle of their churn). Each child exits the ordinary way, through the
interpreter's exit and its ``atexit`` handlers, as a worker process of a forking
server does. Prints one line, ``forks N hung H transactions T``: a child that has not
exited within HANG_LIMIT seconds is counted hung and killed.

On the free-threaded build a container's own lock is copied into the child as it was;
a lock handed to a thread of the parent at the fork is never released in the child
(docs/failures.md, the fork finding), so the child hangs the first time it touches
that container, typically at its exit.
"""

import os
import signal
import sys
import threading
import time

import adb.sync

#: seconds a child is given to exit; one that only had to run its exit handlers and
#: has not done so by then will not
HANG_LIMIT = 60.0

#: transactions the threads end between two forks
CHURN_PER_FORK = 3


def churn(db: adb.sync.Database, stop: threading.Event, ended: list[int],
          failed: list[BaseException]) -> None:
    """Transaction blocks and streams, each one's handle made and let go of, until stopped."""
    try:
        while not stop.is_set():
            with db.transaction() as tx:
                tx.runQuery("select 1")
            with db.stream("select 1") as rows:
                list(rows)
            ended.append(1)
    except BaseException as exc:
        failed.append(exc)
        raise


def wait_child(pid: int) -> bool:
    """True once child ``pid`` has exited; False (it is killed) if it hangs."""
    deadline = time.monotonic() + HANG_LIMIT
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def main(url: str, forks: int) -> None:
    db = adb.sync.Database(url, pool_size=4)
    stop = threading.Event()
    ended: list[int] = []
    failed: list[BaseException] = []
    threads = [threading.Thread(target=churn, args=(db, stop, ended, failed))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    hung = 0
    try:
        for _ in range(forks):
            mark = len(ended) + CHURN_PER_FORK
            while len(ended) < mark and not failed:
                time.sleep(0.001)
            if failed:
                raise SystemExit(f"a thread's transactions failed: {failed[0]!r}")
            pid = os.fork()
            if pid == 0:
                sys.exit(0)  # the interpreter's exit, with its atexit handlers
            hung += not wait_child(pid)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        db.close()
    print(f"forks {forks} hung {hung} transactions {len(ended)}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
