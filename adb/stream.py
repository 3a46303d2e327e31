"""Streams: the rows of one statement, batch by batch, with bounded memory.

A stream holds one worker the way a transaction does: in a transaction of its
own (read-only where the server allows it) or in the caller's. The worker keeps
a cursor open across jobs (the engine's ``open_stream``/``fetch``; a
server-side cursor where the driver has one) and fetches a batch only when the
consumer asks for one. The consumer asks for the next batch as it starts on
the current one, so at most two batches are held: the one being read and the
one being fetched. A slow consumer slows the fetching; memory does not grow.

Every way out closes the cursor and frees the worker: the end of the rows, an
early ``close()``, the stream being dropped (``break`` out of a loop, an
exception in it, a cancelled task), an idle consumer (``idle_timeout``), the
Database closing, and a lost connection. The errors of the last three say how
many rows had reached the consumer (``delivered``).

``Stream`` is the asynchronous form (asyncio, Tornado, Twisted), ``SyncStream``
the blocking one; ``StreamCore`` is what they share.
"""

from __future__ import annotations

import enum
import logging
from operator import length_hint
from typing import Any, Iterator, Optional, Protocol

from .dropwatch import watch
from .errors import Error
from .rows import Batch, RowFactory
from .steps import Steps, run_async, run_blocking
from .telemetry import FETCH, Operation, What
from .transaction import Transaction

log = logging.getLogger("adb")

#: the span name of the job that closes a stream before its end
CLOSE_STREAM = Operation("close_stream")


class StreamState(enum.Enum):
    OPEN = "open"      # batches are still being fetched
    ENDED = "ended"    # every row was fetched; some may not have been read yet
    CLOSED = "closed"  # finished: read to the end, or closed early
    FAILED = "failed"  # an error ended it; the consumer got that error


class Streamer(Protocol):
    """What a stream uses of its engine (``adb.engine.Engine``)."""

    name: str
    frontend: Any

    def check_open(self) -> None: ...
    def begin_pending(self, read_only: bool,
                      timeout: Optional[float]) -> tuple[Transaction, Any]: ...
    def open_stream(self, tx: Transaction, own: bool, export: bool, sql: Any, params: Any,
                    size: int, factory: RowFactory, idle_timeout: Optional[float],
                    what: What) -> tuple[Any, Any]: ...
    def fetch(self, tx: Transaction, gate: Any, size: int, factory: RowFactory,
              what: What) -> Any: ...
    def close_stream(self, tx: Transaction, gate: Any, what: What) -> Any: ...
    def drop_stream(self, tx: Transaction, gate: Any, own: bool) -> None: ...
    def end(self, tx: Transaction, commit: bool) -> Any: ...


class StreamCore:
    """A stream's requests and state, whatever its front-end. A subclass waits for
    the futures (``await`` or a blocking wait) and iterates."""

    def __init__(self, engine: Streamer, sql: Any, params: Any, tx: Optional[Transaction],
                 size: int, factory: RowFactory, timeout: Optional[float],
                 idle_timeout: Optional[float], export: bool) -> None:
        self._engine = engine
        self._size = size
        self._factory = factory
        self.state = StreamState.OPEN
        self._own = tx is None
        self._begun: Any = None
        if tx is None:  # (a caller's tx was checked by the Database)
            tx, self._begun = engine.begin_pending(True, timeout)
        self._tx = tx
        self._rows: Iterator[Any] = iter(())
        self._taken = 0  # rows received in batches
        self._ending: Any = None  # the commit of its own transaction, sent at the end
        self._error: Optional[BaseException] = None  # a request that could not be sent
        #: carries the stream's requests to its worker (the engine's)
        self._gate, self._pending = engine.open_stream(
            tx, self._own, export, sql, params, size, factory, idle_timeout,
            Operation("", sql, (("adb.stream", True),)))
        self._watch = watch(self, engine.drop_stream, tx, self._gate, self._own)

    def __repr__(self) -> str:
        return (f"<adb stream of {self._engine.name!r} {self.state.value}, "
                f"{self.delivered} rows delivered>")

    @property
    def delivered(self) -> int:
        """How many rows have reached the consumer."""
        return self._taken - length_hint(self._rows)

    # -- the requests ------------------------------------------------------------------

    def _take_pending(self) -> Any:
        """The future of the next batch; None once every row was fetched."""
        if self._error is not None:
            error, self._error = self._error, None
            raise self._failed(error)
        pending, self._pending = self._pending, None
        return pending

    def _received(self, batch: Batch) -> list[Any]:
        """A batch arrived: ask for the next one at once (the second buffered batch),
        or, after the last, end the stream's own transaction."""
        rows, done = batch
        self._taken += len(rows)
        self._rows = iter(rows)
        if done:
            self.state = StreamState.ENDED
            self._watch.detach()
            if self._own:
                self._ending = self._send_end(commit=True)
        else:
            try:
                self._pending = self._request()
            except Exception as exc:  # raised when the consumer reaches it
                self._error = exc
        return rows

    def _request(self) -> Any:
        return self._engine.fetch(self._tx, self._gate, self._size, self._factory, FETCH)

    def _send_end(self, commit: bool) -> Any:
        """End the stream's own transaction; the future of that, or None if it is over."""
        if not self._tx.active:
            return None
        try:
            return self._engine.end(self._tx, commit)
        except Error:  # the Database is closing: it rolls the transaction back itself
            return None

    def _stop(self) -> StreamState:
        """Stop asking for batches: the pending request and an unfinished begin are
        cancelled (a worker skips them). Returns the state it was in."""
        was, self.state = self.state, StreamState.CLOSED
        self._watch.detach()
        self._rows = iter(())
        for future in (self._pending, self._begun):
            if future is not None:
                self._engine.frontend.discard(future)
        self._pending = self._begun = None
        return was

    def _close_requests(self) -> Any:
        """Send what closes the stream; the future to wait for, or None."""
        if self.state in (StreamState.CLOSED, StreamState.FAILED):
            return None
        was = self._stop()
        if self._ending is not None:
            ending, self._ending = self._ending, None
            return ending
        if self._own:
            return self._send_end(commit=False)
        if was is StreamState.ENDED:
            return None
        try:
            return self._engine.close_stream(self._tx, self._gate, CLOSE_STREAM)
        except Error:  # idle-closed already, or the Database is closing
            return None

    def _close_quietly(self) -> None:
        """Close without waiting (after an error, or in a cancelled task): the jobs
        that close it carry no future, so nothing can cancel them."""
        if self.state in (StreamState.CLOSED, StreamState.FAILED):
            return
        if self._stop() is StreamState.OPEN:
            self._engine.drop_stream(self._tx, self._gate, self._own)

    def _failed(self, exc: BaseException) -> BaseException:
        """The stream ends with ``exc``: close it, and say in adb's own errors how
        many rows had reached the consumer."""
        delivered = self.delivered
        self._close_quietly()
        self.state = StreamState.FAILED
        if isinstance(exc, Error) and exc.delivered is None:
            exc.delivered = delivered
            if exc.args and isinstance(exc.args[0], str):
                exc.args = (f"{exc.args[0]} (the stream had delivered {delivered} rows)",
                            *exc.args[1:])
        return exc


    # -- the steps both forms run (``adb.steps``) ----------------------------------------

    def _next_steps(self) -> Steps:
        """The next batch's rows; None at the end (its own transaction then ended)."""
        pending = self._take_pending()
        if pending is None:
            yield from self._end_steps()
            return None
        try:
            if self._begun is not None:
                begun, self._begun = self._begun, None
                yield begun
            batch = yield pending
        except BaseException as exc:
            raise self._failed(exc)
        return self._received(batch)

    def _end_steps(self) -> Steps:
        ending, self._ending = self._ending, None
        self.state = StreamState.CLOSED
        if ending is not None:
            try:
                yield ending
            except Exception as exc:  # every row arrived: the read-only commit is moot
                log.info("%r: its transaction did not commit: %s", self, exc)

    def _fetch_steps(self) -> Steps:
        """The rest of the current batch, or the next batch; [] at the end."""
        rest = list(self._rows)
        if rest:
            return rest
        rows = yield from self._next_steps()
        self._rows = iter(())  # all of it goes to the caller
        return [] if rows is None else rows

    def _close_steps(self) -> Steps:
        future = self._close_requests()
        if future is not None:
            yield future


class Stream(StreamCore):
    """``async for row in db.stream(...)``, or ``async with db.stream(...) as rows``.

    ``await fetch()`` gives the rest of the current batch, or the next batch
    ([] at the end); ``await aclose()`` ends it early. Breaking out of the loop
    or raising in it closes it too (at once: the stream is dropped).
    """

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Any:
        for row in self._rows:
            return row
        while True:
            rows = await run_async(self._next_steps())
            if rows is None:
                raise StopAsyncIteration
            if rows:
                return next(self._rows)

    async def fetch(self) -> list[Any]:
        """The rest of the current batch, or the next batch; [] at the end."""
        rows: list[Any] = await run_async(self._fetch_steps())
        return rows

    async def aclose(self) -> None:
        """End the stream now: its cursor is closed and its worker freed."""
        await run_async(self._close_steps())

    async def __aenter__(self) -> Stream:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


class SyncStream(StreamCore):
    """``for row in db.stream(...)``, or ``with db.stream(...) as rows`` (adb.sync).

    ``fetch()`` gives the rest of the current batch, or the next ([] at the
    end); ``close()`` ends it early. Breaking out of the loop closes it too.
    """

    def __iter__(self) -> SyncStream:
        return self

    def __next__(self) -> Any:
        for row in self._rows:
            return row
        while True:
            rows = run_blocking(self._next_steps())
            if rows is None:
                raise StopIteration
            if rows:
                return next(self._rows)

    def fetch(self) -> list[Any]:
        """The rest of the current batch, or the next batch; [] at the end."""
        rows: list[Any] = run_blocking(self._fetch_steps())
        return rows

    def close(self) -> None:
        """End the stream now: its cursor is closed and its worker freed."""
        run_blocking(self._close_steps())

    def __enter__(self) -> SyncStream:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


__all__ = ["Stream", "StreamCore", "StreamState", "Streamer", "SyncStream"]
