"""A client program for the endings that end a real process: run as
``python -m tests.endings.client '<spec as JSON>'`` by ``process.py``.

It runs the spec's clients on one front-end, written as an application writes
its script, with the graceful shutdown docs/usage.md and docs/recipes.md show:

- asyncio, Tornado: ``asyncio.run(main())``; SIGINT is asyncio's own (the main
  task is cancelled; ``async with Database`` closes it); SIGTERM sets an Event and
  the program stops taking work and awaits ``db.close()`` (the recipe);
- adb.trio: ``trio.run(main)``; SIGINT is trio's own (KeyboardInterrupt in the main
  task, whose nursery cancels the clients; ``close()`` on the way out); SIGTERM comes
  through ``trio.open_signal_receiver`` and is the recipe's graceful stop;
- adb.sync: a script, its one client in the main thread (with the fork ending,
  more clients in threads); SIGINT raises KeyboardInterrupt, SIGTERM a SystemExit
  from ``signal.signal``; the script closes the Database on the way out, or (spec
  ``graceful`` False) is a bare script that never closes it;
- Twisted (``adb.twisted.Database``, the adbapi drop-in): ``task.react``, whose
  reactor stops on SIGINT and SIGTERM and runs its shutdown triggers: the
  Database's ``close`` (added by the program), the drop-in's own ``finalClose``.
  A forked child of a running reactor or event loop shares its epoll set, so
  there the child closes its copy, runs the exit functions and leaves with
  ``os._exit`` (as multiprocessing's children do); adb.sync's child exits normally.

Two more signals are the test's: SIGUSR2 makes the program exit at once without
closing anything (``sys.exit`` / the main coroutine returning), SIGUSR1 makes it
fork a child that closes its copy of the Database and exits (its stdout sent to
/dev/null first), while the parent works on.

Everything the program is told is printed on stdout as one JSON line per event
(``issue``, ``settle``, ``held``, ``ready``, ``child_exit``), flushed at once, so
the test knows what was acknowledged however the process ends. adb's log lines go
to stderr, prefixed ``ADBLOG``.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any, Optional

from .ledger import Ledger, Unit
from .site import DBAPI, Site
from .work import ASYNC, DROPIN, Env, run_async, run_sync

_out = threading.Lock()
#: the program's own process: a forked child tells nothing (and takes none of the
#: locks another thread may have held at the fork)
_PID = os.getpid()


def in_child() -> bool:
    return os.getpid() != _PID


def say(**event: Any) -> None:
    line = json.dumps(event) + "\n"
    with _out:
        os.write(1, line.encode())  # one write per line, unbuffered: nothing lost at a kill


class TellingLedger(Ledger):
    """A ledger that tells the test everything it records."""

    def issue(self, kind: str, tokens: list[str], unit_id: Optional[int] = None) -> Unit:
        if in_child():
            return Unit(-1, kind, tokens)
        unit = super().issue(kind, tokens, unit_id)
        say(issue=unit.id, kind=kind, tokens=tokens)
        return unit

    def settle(self, unit: Unit, outcome: str, error: Optional[str] = None) -> None:
        if in_child():
            return
        super().settle(unit, outcome, error)
        say(settle=unit.id, outcome=outcome, error=error)

    def never(self, unit: Unit, tokens: list[str]) -> None:
        if in_child():
            return
        super().never(unit, tokens)
        say(never=unit.id, tokens=tokens)

    def poke(self) -> None:
        """``Env.hold``: a client is held at the end of a transaction's body."""
        if in_child():
            return
        super().poke()
        say(held=True)


def options(spec: dict[str, Any]) -> dict[str, Any]:
    found = {"pool_size": spec["pool_size"], "name": spec["table"]}
    if spec["pipeline"] is not None:
        found["pipeline"] = spec["pipeline"]
    if spec["autobatch"]:
        found["autobatch"] = spec["autobatch"]
    return found


def make_env(spec: dict[str, Any], db: Any) -> Env:
    site = Site.named(spec["driver"], spec["table"], spec["url"])
    env = Env(db, site, TellingLedger(), twisted=spec["front"] in ("twisted", "dropin"),
              hold_at=spec["hold_at"])
    return env


#: the checker's own test (``test_checker.py``): the forked child never exits, as one
#: did on the free-threaded build (docs/failures.md)
CHILD_HANGS = "ADB_ENDINGS_CHILD_HANGS"


def child_after_fork(close: Any) -> None:
    """In the forked child: nothing of it may reach the test's stdout; close the
    copy of the Database (it returns at once in a child) and exit normally."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    close()
    if os.environ.get(CHILD_HANGS):
        threading.Event().wait()


#: the fork ending: set in the parent once it has forked (``watch_child``)
FORKED = threading.Event()
#: seconds a program whose work is over waits for the fork before it ends: the
#: test fires the ending once the moment has come, and a program that ended first
#: would meet SIGUSR1 in its interpreter's exit, with no handler left (killed by it,
#: seen on 3.13t beside a CPU hog, where the test itself is slow to fire)
FORK_WAIT = 60.0


def waits_for_fork(spec: dict[str, Any]) -> bool:
    """True if the program, its work over, must wait for the fork (``FORKED``): not
    in the forked child, whose ``SystemExit`` from the handler a client's work may
    have caught (it then ends its work, refused, and must exit then)."""
    return spec["ending"] == "fork" and os.getpid() == _PID


def watch_child(pid: int) -> None:
    """In the parent: report when the child exits, and how long it took."""
    began = time.monotonic()
    FORKED.set()

    def wait() -> None:
        _, status = os.waitpid(pid, 0)
        say(child_exit=os.waitstatus_to_exitcode(status), seconds=round(time.monotonic() - began, 2))
    threading.Thread(target=wait).start()  # the program waits for its child to end


# -- asyncio and Tornado -----------------------------------------------------------------


def future_pause(loop: Any) -> tuple[Any, Any]:
    future = loop.create_future()
    return future, lambda: future.done() or future.set_result(None)


def on_signal(action: Any, env: Env) -> None:
    action()
    released(env)


def released(env: Env) -> None:
    """The ending came: the held client's other work is over, it goes on."""
    if env.release is not None:
        env.release()


async def main_async(spec: dict[str, Any]) -> None:
    import adb
    import adb.tornado
    cls = adb.tornado.Database if spec["front"] == "tornado" else adb.Database
    loop = asyncio.get_running_loop()
    stop, leave = asyncio.Event(), asyncio.Event()
    db = cls(spec["url"], **options(spec))
    closing = True
    try:
        env = make_env(spec, db)
        env.pause = lambda: future_pause(loop)
        # the recipe's graceful stop; the held client's other work ends meanwhile
        loop.add_signal_handler(signal.SIGTERM, on_signal, stop.set, env)
        loop.add_signal_handler(signal.SIGUSR2, on_signal, leave.set, env)
        loop.add_signal_handler(signal.SIGUSR1, on_signal, lambda: fork_async(db), env)
        tasks = [asyncio.ensure_future(run_async(env, c, kinds, ASYNC))
                 for c, kinds in enumerate(spec["clients"])]
        say(ready=True)
        all_done = asyncio.ensure_future(asyncio.wait(tasks))
        stopped = asyncio.ensure_future(stop.wait())
        left = asyncio.ensure_future(leave.wait())
        await asyncio.wait([all_done, stopped, left], return_when=asyncio.FIRST_COMPLETED)
        if all_done.done() and waits_for_fork(spec):
            await loop.run_in_executor(None, FORKED.wait, FORK_WAIT)
        if left.done():
            closing = False  # the program returns at once, closing nothing
            return
        if stopped.done():
            env.stop.set()
            await db.close()  # the calls it accepted finish first
            await asyncio.wait(tasks)
    finally:
        if closing:  # also on SIGINT: asyncio cancelled the main task
            await db.close()


def fork_async(db: Any) -> None:
    pid = os.fork()
    if pid == 0:
        # the child shares the running loop's epoll set with the parent, so it must
        # not run the loop again (nor close it): it closes its copy of the Database
        # (a coroutine with nothing to wait for in a child), runs the interpreter's
        # exit functions (adb's among them) and leaves, as multiprocessing's do
        child_after_fork(lambda: None)
        closing = db.close()
        try:
            closing.send(None)
        except StopIteration:
            pass
        atexit._run_exitfuncs()
        os._exit(0)
    watch_child(pid)


# -- adb.trio ---------------------------------------------------------------------------


async def main_trio(spec: dict[str, Any]) -> None:
    import trio

    import adb.trio
    db = adb.trio.Database(spec["url"], **options(spec))
    token = trio.lowlevel.current_trio_token()
    closing = True

    def pause() -> tuple[Any, Any]:
        flag = trio.Event()
        return flag.wait(), lambda: token.run_sync_soon(flag.set)
    try:
        env = make_env(spec, db)
        env.trio, env.pause = True, pause
        async with trio.open_nursery() as program:
            clients_done = trio.Event()

            async def clients() -> None:
                async with trio.open_nursery() as nursery:
                    for c, kinds in enumerate(spec["clients"]):
                        nursery.start_soon(run_async, env, c, kinds, ASYNC)
                if waits_for_fork(spec):
                    await trio.to_thread.run_sync(FORKED.wait, FORK_WAIT)
                clients_done.set()
                program.cancel_scope.cancel()  # the work is over: so is the program
            program.start_soon(clients)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGUSR2,
                                           signal.SIGUSR1) as received:
                say(ready=True)
                async for signum in received:
                    if signum == signal.SIGUSR1:
                        fork_async(db)
                        released(env)
                        continue
                    released(env)
                    if signum == signal.SIGUSR2:
                        closing = False  # the program returns at once, closing nothing
                        program.cancel_scope.cancel()
                        return
                    env.stop.set()  # SIGTERM: the recipe's graceful stop
                    await db.close()  # the calls it accepted finish first
                    await clients_done.wait()
    finally:
        if closing:  # also on SIGINT: trio raised KeyboardInterrupt in the main task
            with trio.CancelScope(shield=True):
                await db.close()


# -- adb.sync ---------------------------------------------------------------------------


def event_pause() -> tuple[Any, Any]:
    flag = threading.Event()
    return flag, flag.set


def main_sync(spec: dict[str, Any]) -> None:
    import adb.sync

    def graceful_term(signum: int, frame: Any) -> None:
        raise SystemExit(0)  # docs/usage.md: SIGTERM turned into an orderly exit

    db = adb.sync.Database(spec["url"], **options(spec))
    env = make_env(spec, db)
    env.pause = event_pause
    leaving = threading.Event()

    def leave(signum: int, frame: Any) -> None:
        leaving.set()
        raise SystemExit(0)

    def fork(signum: int, frame: Any) -> None:
        pid = os.fork()
        if pid == 0:
            child_after_fork(db.close)
            sys.exit(0)
        watch_child(pid)
        released(env)

    signal.signal(signal.SIGTERM, graceful_term)
    signal.signal(signal.SIGUSR2, leave)
    signal.signal(signal.SIGUSR1, fork)
    # a script: one client, in the main thread, where Ctrl-C lands; with the fork
    # ending, a threaded program (its other clients in threads of their own)
    more = spec["clients"][1:] if spec["ending"] == "fork" else []
    threads = [threading.Thread(target=run_sync, args=(env, c, kinds))
               for c, kinds in enumerate(more, 1)]
    for thread in threads:
        thread.start()
    say(ready=True)
    try:
        run_sync(env, 0, spec["clients"][0])
        for thread in threads:
            thread.join()
        if waits_for_fork(spec):
            FORKED.wait(FORK_WAIT)
    finally:
        if not leaving.is_set() and spec["graceful"]:
            env.stop.set()
            db.close()


# -- Twisted: the Database and the adbapi drop-in, on the real reactor ------------------------


def main_twisted(spec: dict[str, Any]) -> None:
    from twisted.internet import defer, task, threads

    import adb.twisted

    def main(reactor: Any) -> Any:
        db: Any
        if spec["front"] == "dropin":
            db = adb.twisted.ConnectionPool(
                DBAPI[spec["driver"]], cp_min=1, cp_max=spec["pool_size"], cp_name=spec["table"],
                cp_noisy=False, cp_autobatch=spec["autobatch"], **spec["connkw"])
            db.start()
            work = DROPIN
        else:
            db = adb.twisted.Database(spec["url"], **options(spec))
            reactor.addSystemEventTrigger("before", "shutdown", db.close)
            work = ASYNC
        env = make_env(spec, db)

        def pause() -> tuple[Any, Any]:
            waiter: defer.Deferred[None] = defer.Deferred()

            def fire() -> None:
                if not waiter.called:
                    waiter.callback(None)
            return waiter, lambda: reactor.callFromThread(fire)
        env.pause = pause

        def leave(signum: int, frame: Any) -> None:
            # the reactor stops without its shutdown triggers (nothing is closed),
            # react() returns and the interpreter exits
            reactor.callFromThread(reactor.crash)

        def fork(signum: int, frame: Any) -> None:
            pid = os.fork()
            if pid == 0:
                # the child shares the running reactor's epoll set with the parent, so
                # it must not run the reactor again: it closes its copy of the pool,
                # runs the interpreter's exit functions (adb's among them) and leaves
                child_after_fork(db.close)
                atexit._run_exitfuncs()
                os._exit(0)
            watch_child(pid)
            released(env)

        def stopping() -> None:  # SIGINT, SIGTERM: the reactor stops
            released(env)
        reactor.addSystemEventTrigger("before", "shutdown", stopping)
        signal.signal(signal.SIGUSR2, leave)
        signal.signal(signal.SIGUSR1, fork)
        clients = [defer.Deferred.fromCoroutine(run_async(env, c, kinds, work))
                   for c, kinds in enumerate(spec["clients"])]
        say(ready=True)
        done = defer.DeferredList(clients, consumeErrors=True)
        if waits_for_fork(spec):
            done.addCallback(lambda result: threads.deferToThread(FORKED.wait, FORK_WAIT)
                             .addCallback(lambda _: result))
        if spec["front"] == "dropin":
            return done
        return done.addCallback(lambda _: db.close())

    task.react(main)


def main() -> None:
    spec = json.loads(sys.argv[1])
    # Ctrl-C as in a terminal, even under a parent that ignores SIGINT (a job started
    # with `&`, nohup), which this process inherits and Python would leave ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ADBLOG %(levelname)s %(message)s"))
    logging.getLogger("adb").addHandler(handler)
    logging.getLogger("adb").setLevel(logging.INFO)
    if spec["front"] in ("asyncio", "tornado"):
        asyncio.run(main_async(spec))
    elif spec["front"] == "sync":
        main_sync(spec)
    elif spec["front"] == "trio":
        import trio
        trio.run(main_trio, spec)
    else:
        main_twisted(spec)


if __name__ == "__main__":
    main()
