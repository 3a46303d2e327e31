"""Where a web request's CPU goes: the web scenario's server, profiled under load.

    python -m benchmarks.webprofile --dburl postgresql://root@127.0.0.1/test \\
        --systems starlette+adb,starlette+asyncpg --loop uvloop --connections 64 \\
        --duration 20 [--pool_size 10] [--rate 100] [--sampler native|python] [--json out.json]

For each single-process server of the web scenario (``benchmarks.scenarios.web``;
``/db``, one row by a random id, as JSON) this starts the server as the scenario
does (``benchmarks.webroster``), warms it up with wrk, loads it once unprofiled for
a reference, then loads it for ``--duration`` seconds at ``--connections`` with
py-spy attached (``py-spy record --threads --format raw``). Two figures come from
the same profiled run:

- the server process's CPU seconds over the load (utime + stime of every thread,
  from ``/proc/PID/stat``) divided by the requests wrk counted: CPU per request;
- py-spy's samples of the threads that were on a CPU, each classified by its
  innermost frame that belongs to a known component (``RULES``): the share of each
  component in those samples splits the CPU per request.

So the split is of measured CPU, and the components add up to it by construction;
how much of the CPU the samples cover (on-CPU samples over the rate, beside the
CPU seconds) says how well the samples see the process.

The default sampler (``native``) records C frames too: the GIL, the drivers' and
uvloop's C code. It stops the process for every sample, which slows the server
(the unprofiled reference run shows by how much), and it records idle threads as
well, which the rules recognise by the wait they sleep in (epoll, libpq's poll, a
queue's semaphore: idle; the GIL's condition variable: waiting for the GIL, given
as thread time per request beside the CPU). libpython inlines ``take_gil``, so the
GIL shows as the C library's ``pthread_cond_timedwait`` (waiting) or
``pthread_mutex_lock``/``pthread_cond_signal`` (handing over) under a Python or C
extension frame. ``--sampler python`` never stops the process and sees Python
frames only (a C extension's time falls to its Python caller): the cross-check.

adb's own modules outside the named caller-side, hand-back and worker lists count
by thread: on the loop's (main) thread as the caller side, on any other as the
worker's. Only pure-Python adb is split by module: a compiled (mypyc) build shows
its modules as C frames, which the rules do not split.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

import adb.sync

from . import cli, cpushare, load
from .scenarios import web
from .sql import WEB_TABLE
from .webapps import LOOPS, WORLD_ROWS
from .webroster import free_port, serving


@dataclasses.dataclass(frozen=True)
class Rule:
    """Frames whose file (Python) or shared library and symbol (native) match
    ``pattern`` belong to ``component``."""

    component: str
    kind: str  # "python": the frame's file path; "native": "symbol (library)"
    pattern: str


#: the components of the CPU, in the order of the table, and what each row is
#: called: the user-space ones split each thread's user CPU by its samples; the
#: kernel's is the process's system CPU (socket I/O, the futexes of GIL and queue
#: hand-overs, epoll), whose samples are too skewed to split it (a thread that
#: wakes another in a syscall is often preempted right there, and sampled there)
USER = {
    "http": "HTTP server and framework",
    "app": "the benchmark's handler",
    "loop": "event loop",
    "adb-caller": "adb, caller side",
    "handback": "adb, hand-back",
    "worker": "adb, worker loop",
    "driver": "driver",
    "other": "other (stdlib, interpreter)",
}
COMPONENTS = {**USER, "kernel": "kernel (sockets, futexes, epoll)"}
#: samples in a system call that count to the kernel's CPU (never to user CPU)
KERNEL = {"socket": "socket I/O (and libuv's io_uring)",
          "handover": "GIL and queue hand-over (futex)"}
#: what a sampled thread may be doing off the CPU: asleep in a wait (idle), or
#: asleep waiting for the GIL (counted as thread time per request, not CPU)
OFF_CPU = {"idle": "idle (waiting for work)", "gil-wait": "waiting for the GIL"}
#: a component decided by the sample's thread: the main (loop) thread's adb frames
#: are the caller side, any other thread's the worker's
ADB_BY_THREAD = "adb-by-thread"

#: The classification: a sample goes to the first rule that matches its innermost
#: frame, else the next frame out, and so on; no match at all is "other". Python
#: rules match the frame's file (``--full-filenames``: ``/adb/`` is adb's package
#: directory), native rules the whole frame, ``symbol (library or source file)``.
RULES: tuple[Rule, ...] = (
    # asleep: the loop's epoll, libpq's poll for the server's answer, a lock or
    # queue wait (PyThread_acquire_lock_timed, on a semaphore), a sleep
    Rule("idle", "native", r"^(epoll_p?wait|e?poll|ppoll|p?select|clock_nanosleep|nanosleep|"
                           r"sem_(clock|timed)?wait|PyThread_acquire_lock_timed) "),
    # the GIL: libpython's take_gil is inlined into its callers and shows as the C
    # library's condition variable (waiting) or its mutex and signal (handing over)
    Rule("gil-wait", "native", r"^pthread_cond_(timed|clock)?wait "),
    Rule("handover", "native", r"^(take_gil|drop_gil|pthread_cond_(signal|broadcast)|"
                               r"pthread_mutex_(un)?lock|sem_post) "),
    Rule("socket", "native", r"^(write|writev|send|sendto|sendmsg|read|recv|recvfrom|recvmsg|"
                             r"syscall) "
                             r"\(\S*libc\.so"),
    Rule("handback", "python", r"/adb/handback\.py$"),
    Rule("worker", "python", r"/adb/(worker|session|ops|pipeline|watchdog|drivers/\w+)\.py$"),
    Rule("adb-caller", "python", r"/adb/(asyncio|tornado|twisted|frontend|core|engine/\w+|call|"
                                 r"dispatch|admission|args|jobs)\.py$"),
    Rule(ADB_BY_THREAD, "python", r"/adb/\w+\.py$"),
    Rule("driver", "python", r"/(psycopg2|psycopg|psycopg_binary|psycopg_c|asyncpg)/"),
    # psycopg2's and psycopg's C modules and the libpq each bundles (site-packages'
    # psycopg2/, psycopg_binary/, psycopg2_binary.libs/ ...), asyncpg's Cython
    Rule("driver", "native", r"/(psycopg|asyncpg)[^/]*/|/libpq[-.]"),
    Rule("http", "python", r"/(uvicorn|h11|httptools|starlette|tornado|anyio)/"),
    Rule("http", "native", r"/httptools/"),
    Rule("app", "python", r"/benchmarks/"),
    Rule("loop", "python", r"/(asyncio|uvloop)/|/selectors\.py$"),
    Rule("loop", "native", r"/uvloop/|/libuv|_asynciomodule\.c|selectmodule\.c"),
)
#: py-spy's options per sampler. "native" stops the process for each sample and
#: records every thread, idle or not (``--idle``: which threads are asleep is read
#: from their stacks by the rules, as py-spy's own test is unreliable when it stops
#: the process); "python" never stops it and records only the threads the kernel
#: has running, but sees no C frames: a C extension's time (psycopg2's, asyncpg's
#: Cython, uvloop) falls to the Python frame that called it, and the GIL is unseen.
SAMPLERS = {"native": ("--native", "--idle"), "python": ("--nonblocking",)}
_COMPILED = [(rule, re.compile(rule.pattern)) for rule in RULES]
#: a raw line: "thread (TID): NAME;frame;frame;... COUNT" (``--threads``), frames
#: "name (file.py:line)" or "name (library)"
_THREAD = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)")
_PYTHON_FRAME = re.compile(r"^(.*) \((.+\.pyx?):(\d+)\)$")


def classify(frames: Sequence[str], on_main_thread: bool) -> tuple[str, str]:
    """The component of one sample (``frames`` outermost first), and the frame that
    decided it ("" if none did)."""
    for frame in reversed(frames):
        python = _PYTHON_FRAME.match(frame)
        for rule, pattern in _COMPILED:
            if (rule.kind == "python") != bool(python):
                continue
            subject = python.group(2) if python else frame
            if pattern.search(subject):
                component = rule.component
                if component == ADB_BY_THREAD:
                    component = "adb-caller" if on_main_thread else "worker"
                return component, frame
    return "other", frames[-1] if frames else ""


def split(raw: str, pid: int) -> dict[str, Any]:
    """Samples per component of py-spy's raw output (``--threads``) for process
    ``pid``, per thread group (``main``: the loop's thread, ``others``), the
    innermost deciding frames of each component, and the sample count."""
    counts: dict[str, collections.Counter[str]] = {"main": collections.Counter(),
                                                   "others": collections.Counter()}
    frames_of: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = _THREAD.match(frames[0])
        on_main = thread is not None and int(thread.group(1), 0) == pid
        if thread:
            frames = frames[1:]  # the thread's id and name
        component, frame = classify(frames, on_main)
        counts["main" if on_main else "others"][component] += int(count)
        frames_of[component][_short(frame)] += int(count)
    return {"samples": sum(sum(c.values()) for c in counts.values()),
            "counts": {group: dict(c) for group, c in counts.items()},
            "top_frames": {c: f.most_common(8) for c, f in frames_of.items()}}


def attribute(counts: dict[str, dict[str, int]], cpu: dict[str, tuple[float, float]],
              requests: int) -> dict[str, float]:
    """µs per request of each component: each thread group's user CPU split by its
    samples in user-space components, and the system CPU of all as the kernel's."""
    split = dict.fromkeys(COMPONENTS, 0.0)
    for group, (user, system) in cpu.items():
        seen = {c: counts.get(group, {}).get(c, 0) for c in USER}
        total = sum(seen.values())
        for component, n in seen.items():
            split[component] += user * (n / total if total else component == "other")
        split["kernel"] += system
    return {c: seconds / requests * 1e6 for c, seconds in split.items()}


def _short(frame: str) -> str:
    """A frame without the directories of its file."""
    python = _PYTHON_FRAME.match(frame)
    if python:
        path = python.group(2)
        parts = path.split("/")
        return f"{python.group(1)} ({'/'.join(parts[-2:])}:{python.group(3)})"
    return frame


def cpu_seconds(pid: int) -> dict[str, tuple[float, float]]:
    """User and system CPU seconds so far of process ``pid``'s main thread and of
    its other threads (``/proc/PID/task/*/stat``: utime, stime)."""
    cpu = {"main": [0.0, 0.0], "others": [0.0, 0.0]}
    for tid in os.listdir(f"/proc/{pid}/task"):
        seen = cpushare.read_stat(f"/proc/{pid}/task/{tid}/stat")
        if seen is None:  # the thread ended meanwhile
            continue
        group = cpu["main" if int(tid) == pid else "others"]
        group[0] += seen.user
        group[1] += seen.system
    return {group: (user, system) for group, (user, system) in cpu.items()}


def _used(before: dict[str, tuple[float, float]],
          after: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    return {g: (after[g][0] - before[g][0], after[g][1] - before[g][1]) for g in after}


def _total(cpu: dict[str, tuple[float, float]]) -> float:
    return sum(user + system for user, system in cpu.values())


def py_spy_or_none() -> str | None:
    """The py-spy program: on PATH, or beside this Python (a venv not activated)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))


def py_spy() -> str:
    found = py_spy_or_none()
    if found is None:
        raise SystemExit("py-spy is not installed (pip install 'adb-async[bench]')")
    return found


def profile_one(name: str, url: str, pool_size: int, loop: str, connections: int,
                duration: int, rate: int, reference: int,
                keep: str | None = None, sampler: str = "native") -> dict[str, Any]:
    """Serve ``name`` on one process, load it unprofiled (``reference`` seconds,
    0: not at all), then profiled for ``duration`` seconds; the figures of both."""
    server = web.ROSTER[name]
    if server.processes != "1":
        raise SystemExit(f"{name}: only single-process servers can be profiled")
    config = server.config(url, pool_size, 1, free_port(), loop)
    result: dict[str, Any] = {"system": name, "connections": connections, "sampler": sampler}
    with serving(config, "/db?id=1") as (base, pid):
        result["loop"] = _serving_loop(base, loop)
        load.wrk(base + "/db", min(8, connections), 1)  # primer
        load.wrk(base + "/db", connections, 3)  # warm-up
        if reference:
            before = cpu_seconds(pid)
            run = load.wrk(base + "/db", connections, reference)
            spent = _total(_used(before, cpu_seconds(pid)))
            result["reference"] = {"seconds": reference, "rps": run["requests_per_s"],
                                   "requests": run["requests"], "cpu_s": spent,
                                   "cpu_us_per_request": spent / run["requests"] * 1e6}
        with tempfile.TemporaryDirectory() as scratch:
            out = os.path.join(scratch, "raw.txt")
            spy = subprocess.Popen(
                [py_spy(), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                 "--threads", *SAMPLERS[sampler], "--full-filenames", "--output", out],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(1.5)  # attached before the load begins
            if spy.poll() is not None:
                raise SystemExit(f"py-spy failed: {spy.stderr.read() if spy.stderr else ''}")
            before = cpu_seconds(pid)
            run = load.wrk(base + "/db", connections, duration)
            used = _used(before, cpu_seconds(pid))
            spy.send_signal(signal.SIGINT)
            _, errors = spy.communicate(timeout=60)
            with open(out) as raw:
                text = raw.read()
            if keep:
                with open(os.path.join(keep, f"{name.replace('+', '-')}.raw.txt"), "w") as copy:
                    copy.write(text)
            samples = split(text, pid)
        samples["py_spy"] = errors.strip().splitlines()[-2:] if errors else []
    if run["non_2xx"] or run["socket_errors"]:  # kept, and shown: the CPU split stands
        print(f"{name}: {run['non_2xx']} non-2xx answers and {run['socket_errors']} socket "
              "errors under the profiler", file=sys.stderr)
    requests = run["requests"]
    counts = samples["counts"]
    merged: collections.Counter[str] = collections.Counter()
    for group in counts.values():
        merged.update(group)
    user_samples = sum(merged[c] for c in USER)
    result.update({
        "seconds": duration, "rps": run["requests_per_s"], "requests": requests,
        "p99_ms": run["p99_ms"], "non_2xx": run["non_2xx"],
        "socket_errors": run["socket_errors"], "cpu_s": _total(used), "cpu_by_thread": used,
        "cpu_us_per_request": _total(used) / requests * 1e6,
        "us_per_request": attribute(counts, used, requests),
        "rate": rate, "samples": samples["samples"], "samples_by_component": counts,
        "user_samples": user_samples,
        "sampled_user_over_measured": user_samples / rate / max(
            sum(user for user, _ in used.values()), 1e-9),
        "kernel_samples": {k: merged[k] for k in KERNEL},
        "off_cpu_thread_us_per_request": {c: merged[c] / rate / requests * 1e6
                                          for c in OFF_CPU},
        "top_frames": samples["top_frames"], "py_spy": samples["py_spy"]})
    return result


def _serving_loop(base: str, asked: str) -> str:
    """The loop the server runs on (``/loop``), checked against the one asked for."""
    with urllib.request.urlopen(f"{base}/loop", timeout=10) as response:
        serving_loop: str = response.read().decode()
    if ("uvloop" in serving_loop) != (asked == "uvloop"):
        raise SystemExit(f"asked for the {asked} loop, the server runs on {serving_loop}")
    return serving_loop


def ensure_table(url: str) -> bool:
    """The web scenario's table, made (True) unless it is there with every row."""
    with adb.sync.Database(url, pool_size=1) as db:
        (there,), = db.runQuery("select count(*) from information_schema.tables "
                                f"where table_name = '{WEB_TABLE}'")
        (count,), = db.runQuery(f"select count(*) from {WEB_TABLE}") if there else ((0,),)
    if count == WORLD_ROWS:
        return False
    web.prepare(url, 0)
    return True


def table(results: Sequence[dict[str, Any]]) -> str:
    """µs of CPU per request by component, one column per system; then the totals,
    requests/s (profiled, and the reference run's) and the sample counts."""
    width = max(len(r["system"]) for r in results) + 2
    head = f"{'us of CPU per request':<32}" + "".join(f"{r['system']:>{width}}" for r in results)
    lines = [head, "-" * len(head)]
    for key, label in COMPONENTS.items():
        lines.append(f"{label:<32}" + "".join(
            f"{r['us_per_request'][key]:>{width}.1f}" for r in results))
    lines.append("-" * len(head))
    rows: list[tuple[str, str, Any]] = [
        ("total (/proc CPU / requests)", ".1f", lambda r: r["cpu_us_per_request"]),
        ("requests/s, profiled", ",.0f", lambda r: r["rps"]),
        ("failed answers, profiled", ",d", lambda r: r["non_2xx"] + r["socket_errors"]),
        ("requests/s, unprofiled", ",.0f",
         lambda r: r.get("reference", {}).get("rps", float("nan"))),
        ("us CPU / request, unprofiled", ".1f",
         lambda r: r.get("reference", {}).get("cpu_us_per_request", float("nan"))),
        ("  of it kernel (system CPU), %", ".0f",
         lambda r: r["us_per_request"]["kernel"] / r["cpu_us_per_request"] * 100),
        ("  kernel samples: hand-over, %", ".0f", lambda r: r["kernel_samples"]["handover"]
         / max(sum(r["kernel_samples"].values()), 1) * 100),
        ("GIL wait, thread-us / request", ".1f",
         lambda r: r["off_cpu_thread_us_per_request"]["gil-wait"]),
        ("samples in user code", ",d", lambda r: r["user_samples"]),
        ("samples, all threads", ",d", lambda r: r["samples"]),
        ("user samples / user CPU", ".2f", lambda r: r["sampled_user_over_measured"]),
    ]
    for label, spec, get in rows:
        lines.append(f"{label:<32}" + "".join(f"{format(get(r), spec):>{width}}" for r in results))
    return "\n".join(lines)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.webprofile",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--dburl", required=True, help="the database the servers read")
    p.add_argument("--systems", type=web.servers, default="starlette+adb,starlette+asyncpg",
                   help="web scenario servers, comma-separated (single-process ones)")
    p.add_argument("--loop", choices=LOOPS, default="uvloop")
    p.add_argument("--connections", type=int, default=64, help="wrk connections (64)")
    p.add_argument("--duration", type=int, default=20, help="profiled seconds per system (20)")
    p.add_argument("--reference", type=int, default=5,
                   help="unprofiled seconds before it, for comparison (5; 0: none)")
    p.add_argument("--pool_size", "--pool-size", type=int, default=10)
    p.add_argument("--rate", type=int, default=100, help="py-spy samples per second (100)")
    p.add_argument("--sampler", choices=SAMPLERS, default="native",
                   help="native: C frames too, the process stopped per sample (the GIL and "
                        "the drivers' C code seen); python: Python frames only, never stopped")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--keep-raw", help="a directory to keep py-spy's raw samples in")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    reason = load.missing("wrk")
    if reason:
        raise SystemExit(reason)
    py_spy()
    made = ensure_table(args.dburl)
    results = []
    try:
        for name in args.systems:
            results.append(profile_one(name, args.dburl, args.pool_size, args.loop,
                                       args.connections, args.duration, args.rate,
                                       args.reference, args.keep_raw, args.sampler))
            print(f"{name}: {results[-1]['samples']:,} samples, "
                  f"{results[-1]['rps']:,.0f} req/s profiled", file=sys.stderr)
    finally:
        if made:
            cli.drop_tables("webprofile", args.dburl, (WEB_TABLE,))
    print(table(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": ["python", "-m", "benchmarks.webprofile", *argv],
                       "options": vars(args), "components": COMPONENTS,
                       "rules": [dataclasses.asdict(r) for r in RULES],
                       "results": results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
