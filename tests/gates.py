"""A gate the test holds shut and then opens: a statement that passes it blocks
until it opens, so a test knows its calls are still running (and others queued
behind them) however slow the machine is, instead of hoping a slow query lasts.

``Gate(target)`` holds it, as a context manager that always opens it on leaving:

- PostgreSQL: an advisory lock held by a connection of the gate's own; the gated
  statement asks for the same lock shared, for its own transaction.
- MariaDB/MySQL: a named lock (``GET_LOCK``) held by the gate's connection; the
  gated statement takes it (waiting up to ``limit`` s) and gives it back.
- SQLite: a function registered on each of the Database's connections by
  ``Gate.options`` (``on_connect=``), which waits on a ``threading.Event``.

``gate.sql`` returns ``[(1,)]`` once the gate opens (MariaDB and SQLite give
``[(0,)]`` if it stayed shut for ``limit`` seconds: a test that never opened it
fails instead of hanging). ``gate.open_when(condition)`` opens it from a thread
of its own once ``condition()`` holds: the test's thread may be the one blocked
waiting for the gated calls (adb.sync's close).
"""

import importlib
import threading
import time
import uuid
from typing import Any, Callable, Optional

from .conftest import server_kwargs_of

LIMIT = 20.0  # seconds: no gate stays shut longer; every wait here fails loudly after it


class Gate:
    """A gate on ``target``'s database; see the module docstring."""

    def __init__(self, target: Any, limit: float = LIMIT) -> None:
        self.kind = target.kind
        self.limit = limit
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._holder: Any = None
        self.options: dict[str, Any] = {}
        if self.kind == "postgresql":
            key = uuid.uuid4().int % 2**62  # never another test's (the server is shared)
            # the target's own driver: psycopg2 is not there on a free-threaded Python
            module = importlib.import_module("psycopg" if target.driver == "psycopg"
                                             else "psycopg2")
            kwargs = server_kwargs_of(target.url)
            if module.__name__ == "psycopg":
                kwargs["dbname"] = kwargs.pop("database")
            self._holder = module.connect(**kwargs)
            self._holder.autocommit = True
            self._holder.cursor().execute("select pg_advisory_lock(%s)", (key,))
            self.sql = f"select 1 from pg_advisory_xact_lock_shared({key})"
        elif self.kind == "mysql":
            name = "adb_gate_" + uuid.uuid4().hex
            kwargs = server_kwargs_of(target.url)
            self._holder = importlib.import_module("pymysql").connect(autocommit=True, **kwargs)
            cursor = self._holder.cursor()
            cursor.execute("select get_lock(%s, 0)", (name,))
            assert cursor.fetchone() == (1,), "the gate's lock is someone else's"
            self.sql = f"select get_lock('{name}', {limit:g}) * release_lock('{name}')"
        else:
            self.options = {"on_connect": self._register}
            self.sql = "select adb_gate()"

    def _register(self, conn: Any) -> None:
        """on_connect for SQLite: ``adb_gate()`` waits for the gate, 1 once open."""
        conn.create_function("adb_gate", 0, lambda: int(self._event.wait(self.limit)))

    def open(self) -> None:
        """Let every gated statement through, now and from now on (idempotent)."""
        with self._lock:
            self._event.set()
            holder, self._holder = self._holder, None
        if holder is not None:
            holder.close()  # the server drops the session's lock with it

    def open_when(self, condition: Callable[[], bool], what: str) -> "Opener":
        """Open the gate from a thread once ``condition()`` holds (polled)."""
        return Opener(self, condition, what)

    def __enter__(self) -> "Gate":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.open()


class Opener:
    """The thread behind ``Gate.open_when``. It opens the gate once the condition
    holds, or after the gate's ``limit`` anyway (so nothing stays blocked), and
    ``check()`` then fails the test, naming what was waited for."""

    def __init__(self, gate: Gate, condition: Callable[[], bool], what: str) -> None:
        self.gate, self.condition, self.what = gate, condition, what
        self.seen: Optional[float] = None  # time.monotonic() when the condition held
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + self.gate.limit
        try:
            while time.monotonic() < deadline:
                if self.condition():
                    self.seen = time.monotonic()
                    return
                time.sleep(0.005)
        finally:
            self.gate.open()

    def check(self) -> float:
        """When the condition held (time.monotonic()); fails if it never did."""
        self.thread.join(self.gate.limit + 5)
        assert self.seen is not None, f"timed out waiting for {self.what}"
        return self.seen
