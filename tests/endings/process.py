"""One example in a real process: ``client.py`` runs the work, the test ends it
with a signal and asks the server what is left.

The client tells everything on stdout as it happens (``client.TellingLedger``),
so the ledger here knows every unit it issued and every answer it got before it
died. The moment is reached as in this process (k acknowledged units, n
statements waiting at the closed gate, a client held at a transaction's end);
then:

- ``sigint`` / ``sigterm``: the program shuts down as docs/usage.md and
  docs/recipes.md show (see client.py);
- ``exit``: the program exits at once without closing anything;
- ``fork``: the program forks a child that closes its copy and exits normally,
  and the parent works on: the child must exit within ``EXIT`` seconds and the
  parent's work must all succeed.

The checks: the program exits within ``EXIT`` seconds of the ending (a fork: of
its work's end); where the gate holds the work (an adb.sync script interrupted,
or a program that exited), nothing of it still runs on the server ``QUIET``
seconds after the program is gone, with the gate still closed, so nothing of an
ended program can take effect later; then the gate opens and the rows must
agree with what the program was told; adb's log lines stay bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from ..conftest import server_kwargs_of
from .ledger import ACK, MAYBE, NOT_RUN, Ledger
from .scenario import MOMENT, QUIET, Outcome, Plan, log_bound
from .site import Site

#: seconds a program may take to exit after its ending (a loaded machine's)
EXIT = 15.0
#: seconds a program may take to start (imports, first connection): about 2 s on a quiet
#: machine, but 58-80 s on python3.13t beside a busy process per core (its locks spin
#: with sched_yield, and each yield can hand the core to the busy process), so a bound
#: that only a hang at start outlasts
START = 240.0
SIGNALS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "exit": signal.SIGUSR2,
           "fork": signal.SIGUSR1}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Listener:
    """Reads the program's stdout into a ledger, and adb's log lines from its stderr."""

    def __init__(self, proc: subprocess.Popen[bytes], table: str) -> None:
        self.ledger = Ledger()
        self.units: dict[int, Any] = {}
        self.ready = self.held = False
        self.child: Any = None
        self.logs: list[str] = []
        self.stderr: list[str] = []
        self._table = table
        self.threads = [threading.Thread(target=self._out, args=(proc.stdout,), daemon=True),
                        threading.Thread(target=self._err, args=(proc.stderr,), daemon=True)]
        for thread in self.threads:
            thread.start()

    def _out(self, stream: Any) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if "issue" in event:
                self.units[event["issue"]] = self.ledger.issue(event["kind"], event["tokens"],
                                                               event["issue"])
            elif "settle" in event and event["settle"] in self.units:
                self.ledger.settle(self.units[event["settle"]], event["outcome"], event["error"])
            elif "never" in event and event["never"] in self.units:
                self.ledger.never(self.units[event["never"]], event["tokens"])
            elif "ready" in event:
                self.ready = True
            elif "held" in event:
                self.held = True
            elif "child_exit" in event:
                self.child = event
            self.ledger.poke()
        self.ledger.poke()

    def _err(self, stream: Any) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            if line.startswith("ADBLOG"):
                if line.split(" ", 2)[-1].startswith(self._table + ":"):
                    self.logs.append(line)
            else:
                self.stderr = (self.stderr + [line])[-40:]


def spec_of(plan: Plan, site: Site) -> dict[str, Any]:
    connkw: dict[str, Any] = {}
    if plan.front == "dropin":
        if site.kind == "sqlite":
            connkw = {"database": site.url[len("sqlite:///"):], "check_same_thread": False}
        else:
            connkw = server_kwargs_of(site.admin_url)
            if plan.driver == "psycopg":
                connkw["dbname"] = connkw.pop("database")
            if site.kind == "postgresql":
                connkw["application_name"] = site.table
    return {"front": plan.front, "driver": plan.driver, "url": site.url, "table": site.table,
            "clients": [list(c) for c in plan.clients], "pool_size": plan.pool_size,
            "pipeline": plan.pipeline, "autobatch": plan.autobatch, "ending": plan.ending,
            "hold_at": plan.moment[1] if plan.moment[0] == "hold" else 0,
            "graceful": plan.graceful, "connkw": connkw}


def reach_moment(plan: Plan, site: Site, heard: Listener, proc: subprocess.Popen[bytes]) -> str:
    kind, n = plan.moment
    if kind == "running" and site.gate_closed:
        return f"{site.wait_running(n, MOMENT)} of {n} statements running"
    if kind == "hold":
        heard.ledger.wait_for(lambda: heard.held or proc.poll() is not None, MOMENT)
        return "held" if heard.held else "not held"
    heard.ledger.wait_for(lambda: heard.ledger.count(ACK) >= n or proc.poll() is not None, MOMENT)
    return f"{heard.ledger.count(ACK)} of {n} acknowledged"


def orphans_checked(plan: Plan) -> bool:
    """Where the program's work at the gate is the ended work (so nothing of it may
    outlive the program): an adb.sync script interrupted, or any program that exits
    at once. A graceful asyncio/Twisted shutdown lets the calls it accepted finish:
    those wait for the gate to open."""
    return plan.ending == "exit" or (plan.front == "sync" and plan.ending in ("sigint", "sigterm"))


def run_process(plan: Plan, tmp_dir: str) -> Outcome:
    """Run one example in a real process; its findings and figures."""
    out = Outcome()
    site = Site(plan.driver, tmp_dir)
    site.create()
    proc = None
    try:
        if plan.moment[0] == "running" and site.gated:
            site.close_gate()
        # a process group of its own, so that a child it forks ends with it (below)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.endings.client", json.dumps(spec_of(plan, site))],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": REPO}, start_new_session=True)
        heard = Listener(proc, site.table)
        out.figures["group"] = proc.pid
        started = time.monotonic()
        if not heard.ledger.wait_for(lambda: heard.ready or proc.poll() is not None, START) \
                or not heard.ready:
            out.findings.append(f"the program did not start within {START} s: "
                                f"{heard.stderr[-10:]}")
            return out
        out.figures["start_s"] = round(time.monotonic() - started, 2)
        out.figures["moment"] = reach_moment(plan, site, heard, proc)
        began = time.monotonic()
        if proc.poll() is None:
            os.kill(proc.pid, SIGNALS[plan.ending])
        else:
            out.figures["moment"] += " (the program had ended)"
        if plan.ending == "fork":
            site.open_gate()
            heard.ledger.wait_for(lambda: heard.child is not None, EXIT)
            if heard.child is None:
                out.findings.append(f"the forked child had not exited {EXIT} s after the fork")
            elif heard.child["child_exit"] != 0:
                out.findings.append(f"the forked child exited with {heard.child}")
        if site.gate_closed and orphans_checked(plan):
            exited = wait_exit(proc, EXIT)
            out.figures["exit_s"] = round(time.monotonic() - began, 2)
            if not exited:
                out.findings.append(f"the program had not exited {EXIT} s after {plan.ending} "
                                    "(with the server holding its statement)")
            left = site.wait_quiet(QUIET)
            if left:
                out.findings.append(f"after the program's {plan.ending}: {left}")
        site.open_gate()
        if not wait_exit(proc, EXIT + (MOMENT if plan.ending == "fork" else 0)):
            out.findings.append(f"the program had not exited {EXIT} s after {plan.ending}: "
                                f"{heard.stderr[-6:]}")
        out.figures["exit_s"] = round(time.monotonic() - began, 2)
        out.figures["returncode"] = proc.returncode
        for thread in heard.threads:
            thread.join(5)
        left = site.wait_quiet(QUIET, True)
        if left:
            out.findings.append(f"after the program ended: {left}")
        figures = heard.ledger.check(site.tokens(), allow_unknown=True)
        out.findings.extend(figures.pop("findings"))
        out.figures.update(figures)
        if plan.ending == "fork":
            failed = heard.ledger.count(NOT_RUN, MAYBE, but=("abandon",))  # never committed
            if failed or proc.returncode != 0:
                out.findings.append(f"a fork disturbed the parent: {failed} unit(s) failed, "
                                    f"exit {proc.returncode}: {heard.stderr[-6:]}")
        out.figures["log_lines"] = len(heard.logs)
        if len(heard.logs) > log_bound(plan):
            out.findings.append(f"adb logged {len(heard.logs)} lines for one {plan.ending} "
                                f"(bound {log_bound(plan)}): {heard.logs[:8]}")
        return out
    finally:
        if proc is not None:
            end_group(proc)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        site.drop()


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the program and whatever of its process group is left. A forked child that
    outlived the program (a finding already: it had not exited) holds the program's
    stderr open, and closing the pipe while its reader thread waits on it would wait
    for that child for good (seen on 3.13t: a child hung at its exit)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the program and every child of it have ended
        pass
    proc.wait()


def wait_exit(proc: subprocess.Popen[bytes], within: float) -> bool:
    try:
        proc.wait(within)
        return True
    except subprocess.TimeoutExpired:
        return False
