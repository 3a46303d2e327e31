"""Notification latency: from NOTIFY to the listener's own code, adb beside the native clients.

    python -m benchmarks.notify --dburl postgresql://root@127.0.0.1/test --count 10000 \\
        --rounds 3 --json docs/results/notify-latency.json

What it measures, per system and round, each in a fresh child process: one listener
on a channel of its own (a new uuid per run), ``--count`` notifications sent to it
after ``WARMUP`` unmeasured ones, and for each the time from just before the sender's
``select pg_notify(...)`` to the first line of the listener's code that sees it (the
callback, or the body of the ``async for`` / ``for`` loop). The table gives p50 and
p99 (and min, mean, max) per system, median (min-max) over the rounds, the client
CPU time per notification, and each system's ratio to asyncpg from the same run.

How, and why so:

- The sender is the parent process, on a plain psycopg2 connection in autocommit:
  its own cost never sits on the receiver's loop or holds the receiver's GIL. The
  payload is ``"<seq> <time.time_ns()>"``; the receiver reads ``time.time_ns()`` as
  its code gets the notification. Both processes read the same CLOCK_REALTIME, so
  the difference is the latency (NTP slews it by a few parts per million at most).
- The sends are paced, one NOTIFY then a pause of ``--interval`` seconds (1 ms), so
  the figure is latency, not queueing; ``--interval 0`` is a burst, sent as fast as
  one connection can, where the figure is mostly time spent queued.
- The child prints ``ready`` once its channel is LISTENed (``await listener.ready()``
  for adb, ``add_listener`` returned for asyncpg, ``LISTEN`` executed for the others),
  and only then does the parent send; a final ``end`` payload closes the run.
- Every run is verified: the sequence numbers received must be exactly 0, 1, ...,
  N-1 in order, each once, and adb must report no gap. A run that lost, duplicated
  or reordered one is an error, never a figure, and the program exits with status 1.
- Systems are interleaved over the rounds (A B C, then B C A, ...), so drift on a
  shared machine hits everyone alike; compare ratios from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import resource
import select
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, NamedTuple, Optional, Sequence

from .harness import Measured, summarise
from .scenarios.base import WrongResult

#: the folder holding this package's top level (the checkout, or site-packages), where
#: ``python -m`` finds it; never the package's own folder, which would shadow asyncio
IMPORT_ROOT = os.path.abspath(
    os.path.join(__file__, *[os.pardir] * (2 + (__package__ or "").count("."))))
#: notifications sent before the measured ones (first-use costs), verified but not timed
WARMUP = 100
#: the payload that ends a run
END = "end"
#: seconds the parent waits for the child to say it listens
READY_TIMEOUT = 60.0
#: the percentiles of one run, in table order: (figure key, label)
METRICS = (("p50_us", "p50"), ("p99_us", "p99"), ("mean_us", "mean"), ("min_us", "min"),
           ("max_us", "max"), ("cpu_us", "CPU us/notif"))
#: the ratios to the baseline's median, in table order: (figure key, label)
RATIOS = (("p50_us", "p50/{}"), ("p99_us", "p99/{}"))
BASELINE = "asyncpg"

#: a run's figures, as JSON holds them
Figures = dict[str, Any]


class WrongSequence(WrongResult):
    """The notifications received are not exactly those sent, once each and in order."""


class Receipt(NamedTuple):
    """One notification as the listener's code got it: its payload and when (time_ns)."""

    payload: str
    received_ns: int


class Stamp(NamedTuple):
    """A payload read back: the sender's sequence number and its time_ns at sending."""

    seq: int
    sent_ns: int


class Latency(NamedTuple):
    """One run's latency distribution, in microseconds."""

    min_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float
    mean_us: float


class Run(NamedTuple):
    """One system in one round: its figures, or why it has none."""

    system: str
    round: int
    figures: Optional[Figures]
    error: str


def payload(seq: int) -> str:
    """The payload of notification ``seq``: its number and the time it is sent."""
    return f"{seq} {time.time_ns()}"


def parse_payload(text: str) -> Stamp:
    """Read a payload back; ValueError if it is not one of ours."""
    seq, sent = text.split(" ")
    return Stamp(int(seq), int(sent))


# -- the receivers: one per system, each run in its child process ----------------------

class Collector:
    """The listener's own code: the time each notification reached it, nothing more.

    Every system calls ``add`` first thing for each notification, so each pays the
    same few hundred nanoseconds; parsing and checking wait until the run is over.
    """

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.times: list[int] = []
        self.gaps: list[str] = []
        self.timed_out = False

    def add(self, text: str) -> bool:
        """Record one notification (its time first); True when it ends the run."""
        now = time.time_ns()
        self.payloads.append(text)
        self.times.append(now)
        return text == END

    def receipts(self) -> list[Receipt]:
        """What arrived before ``end``, in arrival order."""
        pairs = [Receipt(p, t) for p, t in zip(self.payloads, self.times)]
        return pairs[:-1] if pairs and pairs[-1].payload == END else pairs


#: ``receive(url, channel, collector, on_ready, timeout)``: listen on ``channel``,
#: call ``on_ready()`` once a NOTIFY sent afterwards is sure to be delivered, then feed
#: ``collector`` until it says ``end`` (or ``timeout`` seconds pass: set ``timed_out``)
Receiver = Callable[[str, str, Collector, Callable[[], None], float], None]


def libpq_url(url: str) -> str:
    """``url`` without adb's ``+driver`` suffix: what libpq, psycopg and asyncpg read."""
    scheme, rest = url.split("://", 1)
    return scheme.split("+")[0] + "://" + rest


def adb_url(url: str, driver: str) -> str:
    """``url`` for adb's driver ``driver`` (``psycopg2``: the plain scheme)."""
    plain = libpq_url(url)
    return plain if driver == "psycopg2" else plain.replace("://", f"+{driver}://", 1)


async def _consume_with_timeout(consume: Any, collector: Collector, timeout: float) -> None:
    """Await ``consume`` for at most ``timeout`` seconds; a timeout marks the run."""
    try:
        await asyncio.wait_for(consume, timeout)
    except asyncio.TimeoutError:
        collector.timed_out = True


def _adb_receiver(driver: str) -> Receiver:
    """adb's asyncio Database on ``driver``: ``async for item in db.listen(channel)``."""

    def receive(url: str, channel: str, collector: Collector, on_ready: Callable[[], None],
                timeout: float) -> None:
        import adb

        async def main() -> None:
            db = adb.Database(adb_url(url, driver), pool_size=1)
            try:
                async with db.listen(channel) as listener:  # ready() on enter

                    async def consume() -> None:
                        async for item in listener:
                            if isinstance(item, adb.Notification):
                                if collector.add(item.payload):
                                    return
                            else:
                                collector.gaps.append(f"{item.reason} ({item.missed} missed)")
                    on_ready()
                    await _consume_with_timeout(consume(), collector, timeout)
            finally:
                await db.close()
        asyncio.run(main())
    return receive


def _asyncpg(url: str, channel: str, collector: Collector, on_ready: Callable[[], None],
             timeout: float) -> None:
    """asyncpg: ``Connection.add_listener(channel, callback)``, the callback on the loop."""
    import asyncpg

    async def main() -> None:
        conn = await asyncpg.connect(libpq_url(url))
        try:
            done = asyncio.get_running_loop().create_future()

            def callback(_conn: Any, _pid: int, _channel: str, text: str) -> None:
                if collector.add(text) and not done.done():
                    done.set_result(None)
            await conn.add_listener(channel, callback)
            on_ready()
            await _consume_with_timeout(done, collector, timeout)
        finally:
            await conn.close()
    asyncio.run(main())


def _psycopg_async(url: str, channel: str, collector: Collector, on_ready: Callable[[], None],
                   timeout: float) -> None:
    """psycopg 3: ``async for n in AsyncConnection.notifies()`` after ``LISTEN``."""
    import psycopg

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True)
        try:
            await conn.execute(f'LISTEN "{channel}"')
            on_ready()
            notifies = conn.notifies(timeout=timeout)
            try:
                async for n in notifies:
                    if collector.add(n.payload):
                        return
                collector.timed_out = True  # the generator ends only at its timeout
            finally:
                await notifies.aclose()
        finally:
            await conn.close()
    asyncio.run(main())


def _psycopg_sync(url: str, channel: str, collector: Collector, on_ready: Callable[[], None],
                  timeout: float) -> None:
    """psycopg 3, blocking: ``for n in Connection.notifies()`` in the main thread."""
    import psycopg
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(f'LISTEN "{channel}"')
        on_ready()
        notifies = conn.notifies(timeout=timeout)
        try:
            for n in notifies:
                if collector.add(n.payload):
                    return
            collector.timed_out = True
        finally:
            notifies.close()


def _psycopg2_select(url: str, channel: str, collector: Collector,
                     on_ready: Callable[[], None], timeout: float) -> None:
    """psycopg2, blocking: ``select()`` on the connection, ``poll()``, ``conn.notifies``:
    the loop adb's listener thread would run with no hand-back behind it."""
    import psycopg2
    conn = psycopg2.connect(libpq_url(url))
    try:
        conn.autocommit = True
        conn.cursor().execute(f'LISTEN "{channel}"')
        on_ready()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or select.select([conn], [], [], left) == ([], [], []):
                collector.timed_out = True
                return
            conn.poll()
            while conn.notifies:
                if collector.add(conn.notifies.pop(0).payload):
                    return
    finally:
        conn.close()


class NotifySystem(NamedTuple):
    """A system under test: its name, what it is, its receiver, the modules it needs."""

    name: str
    what: str
    receive: Receiver
    requires: tuple[str, ...]

    def unavailable(self) -> Optional[str]:
        """Why this system cannot run here, or None."""
        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        return f"{', '.join(missing)} is not installed" if missing else None


SYSTEMS = {s.name: s for s in (
    NotifySystem("adb-psycopg2", "adb.Database (asyncio), postgresql://: async for in db.listen()",
                 _adb_receiver("psycopg2"), ("adb", "psycopg2")),
    NotifySystem("adb-psycopg", "adb.Database (asyncio), postgresql+psycopg://: the same",
                 _adb_receiver("psycopg"), ("adb", "psycopg")),
    NotifySystem("asyncpg", "asyncpg Connection.add_listener: a callback on the loop",
                 _asyncpg, ("asyncpg",)),
    NotifySystem("psycopg-async", "psycopg 3 AsyncConnection.notifies(): async for",
                 _psycopg_async, ("psycopg",)),
    NotifySystem("psycopg-sync", "psycopg 3 Connection.notifies(): for, blocking",
                 _psycopg_sync, ("psycopg",)),
    NotifySystem("psycopg2-select", "psycopg2: select(), poll(), conn.notifies; blocking",
                 _psycopg2_select, ("psycopg2",)),
)}


def cpu_seconds() -> float:
    """This process's CPU time so far, every thread of it (adb's listener thread too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(spec: dict[str, Any]) -> int:
    """One run of one system: print ``ready`` when listening, then one JSON line with
    the figures (or the error) once ``end`` has arrived."""
    system = SYSTEMS[spec["system"]]
    collector = Collector()
    cpu_at_ready = [0.0]

    def on_ready() -> None:
        cpu_at_ready[0] = cpu_seconds()
        print("ready", flush=True)
    system.receive(spec["url"], spec["channel"], collector, on_ready, spec["timeout"])
    cpu = cpu_seconds() - cpu_at_ready[0]
    total = spec["warmup"] + spec["count"]
    try:
        figures = figures_of(collector, total, spec["warmup"])
    except WrongResult as exc:
        print(json.dumps({"error": f"wrong result: {exc}"}), flush=True)
        return 1
    figures["cpu_us"] = cpu / total * 1e6
    print(json.dumps(figures), flush=True)
    return 0


# -- checking and figures ----------------------------------------------------------------

def check_sequence(stamps: Sequence[Stamp], total: int) -> None:
    """Raise WrongSequence unless ``stamps`` are numbered 0 .. total-1, in order, once each."""
    seqs = [s.seq for s in stamps]
    if seqs == list(range(total)):
        return
    seen: dict[int, int] = {}
    for seq in seqs:
        seen[seq] = seen.get(seq, 0) + 1
    lost = [seq for seq in range(total) if seq not in seen]
    duplicated = [seq for seq, n in seen.items() if n > 1]
    foreign = [seq for seq in seen if not 0 <= seq < total]
    unordered = sum(1 for a, b in zip(seqs, seqs[1:]) if b < a)
    problems = [f"{len(what)} {label} (first: {sorted(what)[:3]})"
                for what, label in ((lost, "lost"), (duplicated, "duplicated"),
                                    (foreign, "never sent")) if what]
    if unordered:
        problems.append(f"{unordered} out of order")
    raise WrongSequence(f"{total} notifications sent, {len(seqs)} received: "
                        + ", ".join(problems or ["in the wrong order"]))


def percentile(ordered: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of the sorted values ``ordered``."""
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def latency(values_us: Sequence[float]) -> Latency:
    """The distribution of ``values_us`` (not empty)."""
    ordered = sorted(values_us)
    return Latency(ordered[0], percentile(ordered, 50), percentile(ordered, 90),
                   percentile(ordered, 99), ordered[-1], statistics.fmean(ordered))


def figures_of(collector: Collector, total: int, warmup: int) -> Figures:
    """A finished run's figures, after checking that every notification arrived once,
    in order, and that no gap was reported; WrongResult otherwise."""
    if collector.gaps:
        raise WrongSequence(f"the listener reported {len(collector.gaps)} gap(s): "
                            + "; ".join(collector.gaps[:3]))
    receipts = collector.receipts()
    try:
        stamps = [parse_payload(r.payload) for r in receipts]
    except ValueError:
        raise WrongSequence(f"a payload that was not sent: {receipts!r:.200}") from None
    check_sequence(stamps, total)
    if collector.timed_out:
        raise WrongSequence("every notification arrived but not the end of the run")
    measured = [(r.received_ns - s.sent_ns) / 1000
                for r, s in zip(receipts[warmup:], stamps[warmup:])]
    span = (receipts[-1].received_ns - receipts[warmup].received_ns) / 1e9
    return {**latency(measured)._asdict(), "received": len(receipts),
            "per_s": (len(measured) - 1) / span if span > 0 else 0.0}


# -- in the parent: the sender and the rounds -------------------------------------------

class Sent(NamedTuple):
    """What the sender did in one run: notifications sent and the seconds it took."""

    notifications: int
    seconds: float


def send(conn: Any, channel: str, total: int, interval: float) -> Sent:
    """Send ``total`` numbered notifications on ``channel`` (one, then a pause of
    ``interval`` seconds), then ``end``, each in its own autocommit transaction."""
    cur = conn.cursor()
    start = time.perf_counter()
    for seq in range(total):
        cur.execute("select pg_notify(%s, %s)", (channel, payload(seq)))
        if interval:
            time.sleep(interval)
    cur.execute("select pg_notify(%s, %s)", (channel, END))
    cur.close()
    return Sent(total, time.perf_counter() - start)


def _wait_ready(proc: subprocess.Popen[str]) -> str:
    """Wait for the child's ``ready`` line; '' when it came, else why not."""
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT)
    line = proc.stdout.readline() if readable else ""
    if line.strip() == "ready":
        return ""
    proc.kill()
    _, err = proc.communicate()
    lines = (err or "").strip().splitlines()
    return lines[-1] if lines else f"not ready after {READY_TIMEOUT:.0f} s"


def run_once(system: str, url: str, conn: Any, args: argparse.Namespace) -> tuple[Optional[Figures], str]:
    """One run of ``system`` in a fresh child process, fed by the sender ``conn``."""
    total = WARMUP + args.count
    timeout = total * (args.interval + 0.005) + 60
    spec = {"system": system, "url": url, "channel": f"notify_bench_{uuid.uuid4().hex}",
            "count": args.count, "warmup": WARMUP, "timeout": timeout}
    proc = subprocess.Popen([sys.executable, "-m", f"{__package__}.notify", "--child", json.dumps(spec)],
                            cwd=IMPORT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    error = _wait_ready(proc)
    if error:
        return None, error
    sent = send(conn, spec["channel"], total, args.interval)
    try:
        out, err = proc.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, f"no result {timeout + 30:.0f} s after the sends began"
    lines = out.strip().splitlines()
    try:
        figures = json.loads(lines[-1])
    except (IndexError, ValueError):
        lines = err.strip().splitlines()
        return None, lines[-1] if lines else f"exit status {proc.returncode}"
    if "error" in figures:
        return None, figures["error"]
    figures["sent_per_s"] = sent.notifications / sent.seconds
    return figures, ""


def ratio(summary: dict[str, dict[str, Any]], name: str, key: str, base: str) -> Optional[float]:
    """``name``'s median of ``key`` over ``base``'s, or None if either has none."""
    mine, theirs = summary.get(name, {}).get(key), summary.get(base, {}).get(key)
    if not mine or not theirs or not theirs["median"]:
        return None
    return float(mine["median"] / theirs["median"])


def table(summary: dict[str, dict[str, Any]], names: Sequence[str]) -> str:
    """A system per line: median (min-max) over rounds of each figure, then the ratios
    of its p50 and p99 medians to the baseline's (asyncpg) from the same run."""
    ratios = [(key, label.format(BASELINE)) for key, label in RATIOS] if BASELINE in summary else []
    rows = [["system", *(label for _, label in METRICS), *(label for _, label in ratios)]]
    for name in names:
        row = [name]
        for key, _ in METRICS:
            f = summary[name].get(key)
            row.append(f"{f['median']:,.0f} ({f['min']:,.0f}-{f['max']:,.0f})" if f else "-")
        for key, _ in ratios:
            r = ratio(summary, name, key, BASELINE)
            row.append(f"{r:.2f}" if r is not None else "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))) for r in rows)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The options; ``--child`` (internal) runs one receiver."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.notify",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--dburl", default="postgresql://root@127.0.0.1/test",
                   help="the PostgreSQL server (any +driver suffix is ignored)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated, from: {', '.join(SYSTEMS)} (default: all)")
    p.add_argument("--count", type=int, default=10_000, help="measured notifications per run (10000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--interval", type=float, default=0.001,
                   help="seconds of pause after each NOTIFY (0.001); 0: a burst")
    p.add_argument("--json", metavar="PATH", help="write every run's figures and the summary")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return args
    args.system_names = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.system_names if s not in SYSTEMS]
    if unknown or not args.system_names:
        p.error(f"unknown system(s) {unknown}; choose from {', '.join(SYSTEMS)}")
    if args.count < 2 or args.rounds < 1 or args.interval < 0:
        p.error("--count must be 2 or more, --rounds positive, --interval not negative")
    if not libpq_url(args.dburl).startswith("postgresql://"):
        p.error("--dburl must be a postgresql:// URL: LISTEN/NOTIFY is PostgreSQL's")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run every system ``--rounds`` times, interleaved; print the table; write the JSON."""
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        return child(json.loads(args.child))
    import psycopg2

    from .report import environment
    unavailable = {n: why for n in args.system_names if (why := SYSTEMS[n].unavailable())}
    names = [n for n in args.system_names if n not in unavailable]
    runs: list[Run] = []
    conn = psycopg2.connect(libpq_url(args.dburl))
    try:
        conn.autocommit = True
        for round_ in range(1, args.rounds + 1):
            shift = (round_ - 1) % len(names) if names else 0
            for name in names[shift:] + names[:shift]:
                figures, error = run_once(name, args.dburl, conn, args)
                runs.append(Run(name, round_, figures, error))
                print(f"round {round_} {name}: " + (error or ", ".join(
                    f"{k} {(figures or {})[k]:,.0f}" for k, _ in METRICS)),
                    file=sys.stderr, flush=True)
    finally:
        conn.close()
    summary = summarise((Measured(r.system, r.figures, f"round {r.round}: {r.error}"
                                  if r.error else None) for r in runs), names, values=True)
    where = libpq_url(args.dburl).split("@")[-1]
    pace = f"one every {args.interval * 1000:g} ms" if args.interval else "a burst"
    print(f"\n{args.count:,} notifications per run ({pace}, after {WARMUP} unmeasured), "
          f"{args.rounds} round(s), PostgreSQL at {where}")
    print("latency from NOTIFY to the listener's code, microseconds: median (min-max) "
          "over rounds; ratios of medians")
    print(table(summary, names))
    for name, why in unavailable.items():
        print(f"{name}: not run, {why}")
    for name in names:
        for error in summary[name]["errors"]:
            print(f"{name} FAILED: {error}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": list(sys.argv[1:] if argv is None else argv), "url": args.dburl,
                       "count": args.count, "warmup": WARMUP, "rounds": args.rounds,
                       "interval": args.interval,
                       "systems": {n: SYSTEMS[n].what for n in names},
                       "unavailable": unavailable,
                       "environment": environment(libpq_url(args.dburl), "postgresql"),
                       "summary": summary,
                       "ratios": {n: {k: ratio(summary, n, k, BASELINE) for k, _ in RATIOS}
                                  for n in names},
                       "runs": [r._asdict() for r in runs]}, f, indent=1)
        print(f"JSON: {args.json}")
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
