"""Whose CPU a level of web load took: the server's, the database server's, the load's.

On a machine where the load, the web server and the database server share the
cores, requests/s says how fast the three went together, not which of them spent
what. ``Meter`` reads, around one load run, the CPU seconds (user + system, from
``/proc``) of the web server's process group (every worker of a multi-process
server), of the database server's processes on this machine (``DATABASE_PROCESSES``
by the URL's kind; none for SQLite, which runs inside the web server), and of the
load tool (this process's waited-for children). Divided by the requests served,
they are each side's CPU per request: what the web scenario reports as
``cpu_server_us``, ``cpu_db_us`` and ``cpu_load_us`` at each level. ``Machine``
reads how busy all the cores were meanwhile, whoever ran on them.

Linux only (``/proc``); elsewhere ``available()`` is False and nothing is read.
"""

from __future__ import annotations

import os
import resource
from typing import NamedTuple, Optional

#: the process names of each kind's database server
DATABASE_PROCESSES = {"postgresql": frozenset({"postgres"}),
                      "mysql": frozenset({"mariadbd", "mysqld"})}
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def available() -> bool:
    """True where processes' CPU times can be read (``/proc``)."""
    return os.path.isdir("/proc/self/task")


class Stat(NamedTuple):
    """What one ``/proc`` stat file says of its process or thread."""

    name: str
    group: int  # the process group
    user: float  # CPU seconds so far
    system: float
    started: int  # clock ticks after boot: with the pid, names one process


def read_stat(path: str) -> Optional[Stat]:
    """A process's (``/proc/PID/stat``) or a thread's (``/proc/PID/task/TID/stat``)
    stat file; None if it ended meanwhile."""
    try:
        with open(path) as stat:
            text = stat.read()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    # after the name: state, ppid, pgrp, ... utime and stime are the 12th and 13th,
    # starttime the 20th
    return Stat(name, int(fields[2]), int(fields[11]) / _TICK, int(fields[12]) / _TICK,
                int(fields[19]))


#: one process: its pid and start time (a pid may be used again meanwhile)
Process = tuple[int, int]


def _seconds(group: Optional[int], names: frozenset[str]) -> tuple[dict[Process, float],
                                                         dict[Process, float]]:
    """CPU seconds so far of each process in ``group``, and of each named ``names``."""
    in_group: dict[Process, float] = {}
    named: dict[Process, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        seen = read_stat(f"/proc/{pid}/stat")
        if seen is None:
            continue
        process, seconds = (int(pid), seen.started), seen.user + seen.system
        if seen.group == group:
            in_group[process] = seconds
        if seen.name in names:
            named[process] = seconds
    return in_group, named


def _spent(before: dict[Process, float], after: dict[Process, float]) -> float:
    """CPU seconds the processes alive at the end spent since the beginning (all of
    it for one started meanwhile). A process that ended meanwhile took its seconds
    with it: it counts for nothing, never against the others (the database server's
    sessions of other programs on a shared machine come and go)."""
    return sum(seconds - before.get(process, 0.0) for process, seconds in after.items())


def _children_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


class Meter:
    """CPU seconds spent between ``start()`` and ``stop()`` by the server's process
    group ``group`` (None: no server of its own), the database processes of ``kind``
    (None: no database process) and this process's children that ended meanwhile
    (the load tool)."""

    def __init__(self, group: Optional[int], kind: Optional[str]) -> None:
        self.group = group
        self.names = DATABASE_PROCESSES.get(kind or "", frozenset())
        self.server = self.database = self.load = 0.0

    def start(self) -> None:
        self._server, self._database = _seconds(self.group, self.names)
        self._load = _children_seconds()

    def stop(self) -> None:
        server, database = _seconds(self.group, self.names)
        self.server = _spent(self._server, server)
        self.database = _spent(self._database, database)
        self.load = _children_seconds() - self._load

    def per_request(self, requests: int) -> dict[str, float]:
        """Microseconds per request of each side (no database side without one)."""
        if requests <= 0:
            return {}
        us = 1e6 / requests
        shares = {"cpu_server_us": self.server * us, "cpu_load_us": self.load * us}
        if self.names:
            shares["cpu_db_us"] = self.database * us
        return shares


class Machine:
    """How busy the machine's CPUs were between ``start()`` and ``stop()``, from the
    ``cpu`` line of ``/proc/stat``: every process's share, whoever ran it. When a
    client and its server share the cores and this is near 1, the run is bound by
    the CPU the two spend per row together, not by either one's latency."""

    def __init__(self) -> None:
        self.busy = 0.0

    def start(self) -> None:
        self._ticks = _cpu_ticks()

    def stop(self) -> None:
        busy, total = (now - then for now, then in zip(_cpu_ticks(), self._ticks))
        self.busy = busy / total if total > 0 else 0.0


def _cpu_ticks() -> tuple[int, int]:
    """All CPUs' busy ticks, and their busy and idle ticks together, so far. I/O wait
    counts as idle; guest time is already inside user time; time a virtual
    machine's host took (steal) counts as neither."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, irq, softirq = (
            int(field) for field in stat.readline().split()[1:8])
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait
