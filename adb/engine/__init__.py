"""The engine: the plumbing under one Database's public API, built of parts.

``Engine`` wires the plumbing (the driver, the ``Dispatch``, ``Admission`` under
``max_queued``, the hand-back, the ``Pool`` of workers, the telemetry, the read
replicas) and the parts that serve the API on it, each of which owns its state
and reaches the others only through their public methods:

- ``Calls`` (``calls.py``): calls outside any transaction, the shared queue's
  entry, the Database's limits and the refusal every call gets once it closes;
- ``Transactions`` (``transactions.py``): the open transactions, their begin,
  calls and end;
- ``Streams`` (``streams.py``): a stream's requests to the worker that holds it;
- ``Routing`` (``routing.py``): which engine a call runs on, primary or replica;
- ``Listening`` (``listening.py``): the LISTEN connection, from the first listener;
- ``Lifecycle`` (``lifecycle.py``): the close sequence, a fork, the interpreter's
  exit, a Database dropped unclosed, the embedded default's file.

The engine binds each part's entry points as its own attributes, so a call from
the facade or a feature goes straight to the part that serves it (no hop through
the engine). It knows its front-end only as a ``FrontEnd`` (``adb.frontend``)
and never calls back into the Database. Nothing the pool holds refers to the
engine, except weakly, so a Database dropped unclosed is still collected (and
warns).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Generic, Optional

from .. import drivers
from ..admission import Admission
from ..dispatch import Dispatch
from ..drivers.base import Driver
from ..errors import InterfaceError
from ..frontend import F, FrontEnd
from ..options import OPTION_NAMES, PoolOptions, Settings, check_positive, check_timeout, \
    pipeline_depth
from ..pool import Pool
from ..replicas import ReplicaSet
from ..session import PoolConfig
from ..steps import Steps
from ..telemetry import Telemetry
from ..url import make_target, target_for
from .calls import Calls
from .lifecycle import EmbeddedFile, Lifecycle
from .listening import Listening
from .routing import Routing
from .streams import Streams
from .transactions import Transactions

DEFAULT_POOL_SIZE = 10


class Engine(Generic[F]):
    """The plumbing of one Database (and of each of its replicas).

    :param url: a URL, a ``Target``, or None for the embedded default (a private
        SQLite file, removed on close).
    :param settings: the Database's checked options (``adb.options.parse``).
    :param frontend: how the Database's callers wait.
    :param protected: the protected pool options (``adb.options.PoolOptions``).
    """

    def __init__(self, url: Any, settings: Settings, frontend: FrontEnd[F],
                 protected: PoolOptions) -> None:
        self.name = settings.name
        self.frontend = frontend
        replica_targets = [make_target(u, settings.driver, dict(settings.connect))
                           for u in settings.replicas.urls]
        self.driver, size, embedded, self.telemetry = _load(url, settings, protected)
        self.row_factory = settings.row_factory
        self.retries = settings.retries
        self._build_pool(settings, size, protected, embedded)
        self.calls = calls = Calls(self.name, frontend, settings.timeouts.wait,
                                   settings.timeouts.statement, self.telemetry,
                                   self._dispatch, self.admission, self.pool)
        self.transactions = transactions = Transactions(self, calls, self.driver)
        self.streams = streams = Streams(calls, transactions)
        self.listening = listening = Listening(self.name, self.driver, frontend,
                                               calls.check_open)
        self.lifecycle = lifecycle = Lifecycle(self.name, frontend, calls, transactions,
                                               listening, self.pool, self.admission,
                                               self.handback, embedded)
        # the entry points, each the part's own method: a call pays no hop through here
        self.standalone = calls.standalone
        self.hosted = calls.hosted
        self.connect = calls.connect
        self.check_open = calls.check_open
        self.wait_for_room = calls.wait_for_room
        self.begin = transactions.begin
        self.begin_pending = transactions.begin_pending
        self.in_transaction = transactions.in_transaction
        self.step_in = transactions.step_in
        self.end = transactions.end
        self.finish = transactions.finish
        self.check_tx = transactions.check_tx
        self.check_ended = transactions.check_ended
        self.count_retry = transactions.count_retry
        self.open_stream = streams.open_stream
        self.fetch = streams.fetch
        self.close_stream = streams.close_stream
        self.drop_stream = streams.drop_stream
        self.hub = listening.hub
        self.closing = lifecycle.closing
        frontend.on_new_loop(self._loop_moved)
        try:
            self.replicas = _open_replicas(self.frontend, replica_targets, settings)
        except BaseException:
            lifecycle.stop_accepting()
            raise
        routing: Routing[Engine[F]] = Routing(self, self.name, self.replicas, calls.check_open)
        self.route = routing.route
        self.reader = routing.reader
        if protected.get("start", True):
            self.pool.start()

    def _build_pool(self, settings: Settings, size: int, protected: PoolOptions,
                    embedded: Optional[EmbeddedFile]) -> None:
        """Wire the plumbing in one direction: the ``Dispatch`` first, then
        ``Admission`` (which feeds it), the hand-back (which asks it whether every
        worker is busy), and last the ``Pool``, which is handed all three. Once its
        workers have exited, the pool tells the lifecycle, or, if this engine was
        collected meanwhile, removes the embedded file itself."""
        pool = settings.pool
        config = PoolConfig(
            self.name, self.frontend.lost_error, protected.get("check_sql"),
            protected.get("warm", size), pool.max_lifetime, pool.max_idle, pool.check_idle,
            pool.autobatch, self.retries or 0, self.driver.pipeline_depth, self.telemetry)
        self._dispatch = dispatch = Dispatch()
        self.admission = None if pool.max_queued is None else \
            Admission(self.name, pool.max_queued, pool.on_full, dispatch, self.frontend.settle)
        self.handback = self.frontend.handback(
            None if self.admission is None else self.admission.after, dispatch.saturated)
        if self.admission is not None:
            self.admission.watch_deliveries(self.handback.undelivered)
        self.pool = Pool(self.driver, size, config, dispatch, self.handback,
                         self.frontend.abandoned,
                         on_exit=_weak_method(self._workers_exited,
                                              None if embedded is None else embedded.remove),
                         cancel_grace=protected.get("cancel_grace", 2.0))
        if self.telemetry is not None:
            self.telemetry.observe(self.pool, self.admission)

    def _workers_exited(self) -> None:
        self.lifecycle.workers_exited()

    def _loop_moved(self) -> None:
        """The front-end moved to another loop, its old one closed (loop thread): what
        was scheduled there never runs, so the hand-back and the listening hub's sink
        start again on the new one."""
        self.handback.restart()
        self.listening.loop_moved()

    # -- closing it with its replicas -------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True from the moment the close begins."""
        return self.lifecycle.closed

    @property
    def forked(self) -> bool:
        """True in a child forked from the process that made this engine."""
        return self.lifecycle.forked

    def _replica_engines(self) -> list[Engine[F]]:
        return [] if self.replicas is None else self.replicas.engines

    def close(self, timeout: Optional[float] = None) -> Any:
        """Close this engine and its replicas'; what ``close()`` gives its caller (None
        in a forked child, where the close is done at once: ``close_in_child``)."""
        if self.forked:
            check_timeout(timeout)
            self.close_in_child()
            return None
        closing = [engine.closing(timeout) for engine in [*self._replica_engines(), self]]
        if self.replicas is not None:
            self.replicas.stop()
        if len(closing) == 1:
            return self.frontend.returned(closing[0], None, None, self.calls)
        return self.frontend.run_steps(_each(closing))

    def close_in_child(self) -> None:
        """``close()`` in a forked child, at once (``Lifecycle.close_in_child``), for
        this engine and its replicas'."""
        for engine in self._replica_engines():
            engine.close_in_child()
        self.lifecycle.close_in_child()

    def close_blocking(self) -> None:
        """The close sequence on the calling thread, without the front-end's loop
        (the adbapi drop-in: adbapi's ``close()`` blocks, and runs while the reactor
        shuts down). At once in a forked child (``close_in_child``)."""
        if self.forked:
            self.close_in_child()
            return
        for engine in self._replica_engines():
            engine.close_blocking()
        if self.replicas is not None:
            self.replicas.stop()
        self.lifecycle.close_blocking()

    def drop(self) -> bool:
        """Its Database was collected unclosed: stop everything without waiting
        (``Lifecycle.drop``), its replicas' too. True if it was still running."""
        if not self.lifecycle.drop():
            return False
        if self.replicas is not None:
            self.replicas.stop()
            for engine in self.replicas.engines:
                engine.drop()
        return True

    # -- what the features ask of it ------------------------------------------------------

    def delay(self, seconds: float) -> F:
        """A future settled after ``seconds`` (a blocking front-end sleeps first)."""
        return self.frontend.delay(seconds)

    def connect_wait(self) -> float:
        """Seconds until the pool may try to connect again after failing to."""
        return self.pool.connect_wait()

    # -- what stats() shows ----------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """See ``BaseDatabase.stats``."""
        stats = self.pool.stats()
        stats["name"] = self.name
        stats["closed"] = self.closed
        stats["open_transactions"] = self.transactions.open_count()
        stats["streams"] = self.pool.streams()
        stats["transaction_retries"] = self.transactions.retries
        admission = self.admission
        stats["parked"] = admission.parked if admission else 0
        stats["waiting_for_room"] = admission.waiting if admission else 0
        for key in ("wakeups", "polls", "settled", "largest_batch"):
            stats[key] = getattr(self.handback, key, None)
        stats["listen"] = self.listening.stats()
        if self.replicas is not None:
            stats.update(self.replicas.stats())
        return stats

    def __repr__(self) -> str:
        return (f"{self.name!r} {self.driver.target} pool_size={len(self.pool.workers)} "
                f"{'closed' if self.closed else 'open'}")


def _load(url: Any, settings: Settings, protected: PoolOptions
          ) -> tuple[Driver, int, Optional[EmbeddedFile], Optional[Telemetry]]:
    """The driver of ``url`` (None: the embedded default, whose file is made here),
    the pool size it allows, and the telemetry; a failure leaves no file behind."""
    embedded = None
    target = make_target(url, settings.driver, dict(settings.connect))
    if target is None:
        embedded = EmbeddedFile()
        target = target_for("sqlite3", {"database": embedded.path})
    try:
        driver = drivers.load(target, settings.pool.on_connect, settings.pooler, OPTION_NAMES,
                              protected.get("native", False))
        size = _check_pool_size(settings.pool.size, driver, protected.get("fit_size", False))
        if settings.pool.autobatch > 1:
            driver.enable_autobatch()
        pipes = driver.pipelines
        driver.use_pipelines(pipeline_depth(  # a pipeline's statements autocommit
            settings.pool.pipeline, driver.url_pipeline, pipes is not None and driver.autocommit,
            pipes is not None and pipes.default))
        return driver, size, embedded, _make_telemetry(settings, driver.target)
    except BaseException:
        if embedded is not None:
            embedded.remove()
        raise


def _open_replicas(frontend: FrontEnd[F], targets: list[Any],
                   settings: Settings) -> Optional[ReplicaSet]:
    """An engine of the primary's front-end per replica, and the monitor that checks
    them; if one cannot be made, those made are stopped."""
    if not targets:
        return None
    engines: list[Engine[F]] = []
    try:
        for number, target in enumerate(targets, 1):
            engines.append(Engine(target, settings.for_replica(number), frontend, {}))
    except BaseException:
        for engine in engines:
            engine.lifecycle.stop_accepting()
        raise
    return ReplicaSet(settings.name, engines, settings.replicas.max_lag,
                      settings.replicas.fallback)


def _make_telemetry(settings: Settings, target: Any) -> Optional[Telemetry]:
    """The Database's Telemetry, or None when it has neither telemetry nor slow_call."""
    wanted = settings.telemetry
    if not wanted.wanted:
        return None
    return Telemetry(settings.name, target, traced=wanted.traced, slow_call=wanted.slow_call,
                     tracer_provider=wanted.tracer_provider,
                     meter_provider=wanted.meter_provider)


def _check_pool_size(pool_size: Optional[int], driver: Driver, fit: bool = False) -> int:
    """The pool size to use; ``fit`` caps a larger one at the driver's limit instead
    of refusing it (adbapi users open ``":memory:"`` with ``cp_max=5``)."""
    limit = driver.max_pool_size
    if pool_size is None:
        return limit or DEFAULT_POOL_SIZE
    check_positive(pool_size, "pool_size")
    if limit is not None and pool_size > limit:
        if fit:
            return limit
        raise InterfaceError(f"pool_size={pool_size} is impossible for {driver.target}: "
                             f"{driver.max_pool_size_reason}")
    return pool_size


def _each(futures: list[F]) -> Steps:
    """Steps that wait for each of ``futures`` in turn."""
    for future in futures:
        yield future


def _weak_method(method: Callable[[], None],
                 otherwise: Optional[Callable[[], None]] = None) -> Callable[[], None]:
    """``method()`` while its object lives; ``otherwise()`` (if given) once it has
    been collected."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()
        elif otherwise is not None:
            otherwise()
    return call


__all__ = ["DEFAULT_POOL_SIZE", "Engine"]
