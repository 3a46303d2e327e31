"""Read replicas: which replica serves a ``replica=True`` read, and the thread that
keeps each replica's health and lag known.

A Database opened with ``replicas=[url, ...]`` has one engine of the same
front-end per replica (its own pool, its own ``stats()``; ``adb.engine``), and one
monitor thread that checks each replica on a connection of its own: every
``CHECK_INTERVAL`` seconds while it serves, with backoff once it is down. The
check is the driver's (``Driver.replica_position``): MariaDB/MySQL's
``Seconds_Behind_Master`` or a Galera node's state, or, on a PostgreSQL hot
standby, how far it has received and replayed the primary's WAL. From those
positions the monitor times the lag itself: how long ago it first saw WAL
received that is still not replayed (to within one check). The server's own
``now() - pg_last_xact_replay_timestamp()`` is no measure: it grows while the
primary is idle, and counts the age of the last commit whenever WAL without one
is waiting.

A replica serves reads only once a check found it up with its lag within
``max_replica_lag``; ``pick`` hands reads out in turn among those, and gives
None when there is none (the caller then reads from the primary, or fails with
``ReplicaUnavailable`` under ``replica_fallback="raise"``). Reading from a
replica is the caller's statement that data up to ``max_replica_lag`` old is
acceptable, so nothing is ever routed there by default.
"""

from __future__ import annotations

import collections
import enum
import itertools
import logging
import threading
import time
from typing import Any, Optional, Protocol, Sequence

from .drivers.base import Connection, Driver, ReplicaPosition
from .errors import ReplicaUnavailable
from .health import Backoff

log = logging.getLogger("adb")

#: seconds between two checks of a replica that serves (or lags)
CHECK_INTERVAL = 1.0
#: the backoff between checks of a replica that is down
DOWN_BACKOFF = (0.5, 5.0)


class ReplicaState(enum.Enum):
    UNCHECKED = "unchecked"  # not checked yet: serves nothing until a check finds it fit
    HEALTHY = "healthy"      # up, lag within the bound: serves reads
    LAGGING = "lagging"      # up, but further behind than max_replica_lag
    DOWN = "down"            # no connection, or not a usable replica (the check says why)


class ReplicaEngine(Protocol):
    """What the monitor needs of a replica's own engine (``adb.engine.Engine``)."""

    name: str
    driver: Driver

    @property
    def closed(self) -> bool: ...

    def stats(self) -> dict[str, Any]: ...


class Replica:
    """One replica: its engine, and what the last check found (written by the
    monitor thread, read by whoever routes a call)."""

    def __init__(self, engine: ReplicaEngine) -> None:
        self.engine = engine
        self.state = ReplicaState.UNCHECKED
        self.lag: Optional[float] = None
        self.error: Optional[str] = None
        self.checked_at: Optional[float] = None
        self.served = 0
        self.conn: Optional[Connection] = None
        self.backoff = Backoff(*DOWN_BACKOFF)
        self.next_check = 0.0
        #: (when first seen, log position) of WAL received but not yet replayed
        self.unreplayed: collections.deque[tuple[float, int]] = collections.deque()

    def lag_of(self, position: ReplicaPosition, now: float) -> float:
        """Seconds behind: the server's own count, or how long ago the oldest WAL
        still waiting to be replayed was first seen received (monitor thread)."""
        if position.received is None or position.replayed is None:
            self.unreplayed.clear()
            return position.lag or 0.0
        while self.unreplayed and self.unreplayed[0][1] <= position.replayed:
            self.unreplayed.popleft()
        newest = self.unreplayed[-1][1] if self.unreplayed else position.replayed
        if position.received > newest:
            self.unreplayed.append((now, position.received))
        return now - self.unreplayed[0][0] if self.unreplayed else 0.0

    def stats(self) -> dict[str, Any]:
        return {"name": self.engine.name, "target": str(self.engine.driver.target),
                "state": self.state.value, "lag": self.lag, "error": self.error,
                "served": self.served}


class ReplicaSet:
    """The replicas of one Database, the choice among them, and their monitor."""

    def __init__(self, name: str, engines: Sequence[ReplicaEngine],
                 max_lag: Optional[float], fallback: str) -> None:
        self.name = name
        self.replicas = [Replica(engine) for engine in engines]
        self.max_lag = max_lag
        self.fallback = fallback
        self.fallbacks = 0  # reads asked of a replica that the primary served
        self._turn = itertools.count()
        # counts bumped by callers in any thread: ``x += 1`` is a read then a write,
        # and two threads (in parallel on a free-threaded build) lose one without it
        self._count_lock = threading.Lock()
        self._changed = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._monitor, name=f"{name}-replicas",
                                        daemon=True)
        self._thread.start()

    @property
    def engines(self) -> list[Any]:
        return [replica.engine for replica in self.replicas]

    def pick(self) -> Optional[Any]:
        """The engine of the next healthy replica in turn, or None (caller's thread):
        the caller reads from the primary then, or raises (``choose``)."""
        healthy = [r for r in self.replicas if r.state is ReplicaState.HEALTHY]
        if not healthy:
            return None
        replica = healthy[next(self._turn) % len(healthy)]
        with self._count_lock:
            replica.served += 1
        return replica.engine

    def choose(self, primary: Any) -> Any:
        """The engine a ``replica=True`` read goes to: a healthy replica, else the
        primary, or ReplicaUnavailable under ``replica_fallback="raise"``."""
        engine = self.pick()
        if engine is not None:
            return engine
        if self.fallback == "raise":
            raise ReplicaUnavailable(self._why_none())
        with self._count_lock:
            self.fallbacks += 1
        return primary

    def _why_none(self) -> str:
        states = "; ".join(f"{r.engine.driver.target}: {r.state.value}"
                           + (f" ({r.error})" if r.error else "") for r in self.replicas)
        return f"no replica of {self.name!r} can serve reads now: {states}"

    def stats(self) -> dict[str, Any]:
        return {"fallbacks": self.fallbacks,
                "replicas": [dict(r.stats(), pool=r.engine.stats()) for r in self.replicas]}

    def stop(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()

    # -- the monitor thread ----------------------------------------------------------

    def _monitor(self) -> None:
        while True:
            with self._changed:
                if self._stopping:
                    break
                due = min(r.next_check for r in self.replicas)
                wait = due - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
            for replica in self.replicas:
                if replica.next_check <= time.monotonic() and not self._stopping:
                    self._check(replica)
        for replica in self.replicas:
            self._drop_connection(replica)

    def _check(self, replica: Replica) -> None:
        """One check: connect if need be, ask the driver for the lag, update the state."""
        driver = replica.engine.driver
        try:
            if replica.conn is None:
                replica.conn = driver.connect()
            lag = replica.lag_of(driver.replica_position(replica.conn), time.monotonic())
        except Exception as exc:
            self._drop_connection(replica)
            replica.unreplayed.clear()
            delay = replica.backoff.failed(f"{type(exc).__name__}: {str(exc).strip()[:200]}")
            self._record(replica, ReplicaState.DOWN, None, replica.backoff.last_error, delay)
            return
        replica.backoff.succeeded()
        lagging = self.max_lag is not None and lag > self.max_lag
        state = ReplicaState.LAGGING if lagging else ReplicaState.HEALTHY
        error = f"{lag:.1f} s behind, over max_replica_lag={self.max_lag}" if lagging else None
        self._record(replica, state, lag, error, CHECK_INTERVAL)

    def _record(self, replica: Replica, state: ReplicaState, lag: Optional[float],
                error: Optional[str], delay: float) -> None:
        if state is not replica.state and replica.state is not ReplicaState.UNCHECKED \
                or state is ReplicaState.DOWN and replica.state is ReplicaState.UNCHECKED:
            log.warning("%s: replica %s is %s%s", self.name, replica.engine.driver.target,
                        state.value, f" ({error})" if error else "")
        with self._changed:
            replica.state, replica.lag, replica.error = state, lag, error
            replica.checked_at = time.monotonic()
            replica.next_check = replica.checked_at + delay
            self._changed.notify_all()

    @staticmethod
    def _drop_connection(replica: Replica) -> None:
        conn, replica.conn = replica.conn, None
        if conn is not None:
            try:
                replica.engine.driver.close(conn)
            except Exception:  # a dead connection may fail to close: it is gone anyway
                pass


__all__ = ["CHECK_INTERVAL", "Replica", "ReplicaEngine", "ReplicaSet", "ReplicaState"]
