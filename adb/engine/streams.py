"""The engine's streams: the requests a stream sends the worker that holds it.

A stream (``adb.stream``) lives in a transaction, its own or its caller's; its
requests (open, fetch the next batch, close) go through its ``StreamGate`` onto
that transaction's queue, so the worker pinned by the transaction serves them in
order with its other calls. ``Streams`` holds no state of its own: the gate is the
stream's, the transaction the transactions part's.
"""

from __future__ import annotations

from typing import Any, Generic, Optional

from ..errors import StreamTimeout
from ..frontend import F, FrontEnd
from ..jobs import CloseStream, FetchStream, OpenStream
from ..session import StreamGate
from ..telemetry import What
from ..transaction import Transaction
from .calls import Calls
from .transactions import Transactions


class Streams(Generic[F]):
    """Stream requests, each queued on its transaction's queue through its gate."""

    def __init__(self, calls: Calls[F], transactions: Transactions[F]) -> None:
        self._calls = calls
        self._transactions = transactions
        self._frontend: FrontEnd[F] = calls.frontend

    def open_stream(self, tx: Transaction, own: bool, export: bool, sql: Any, params: Any,
                    size: int, factory: Any, idle_timeout: Optional[float],
                    what: What) -> tuple[StreamGate, F]:
        """Open a stream in ``tx`` (``own``: a transaction of its own, ended with it):
        its gate, which carries its later requests, and the future of its first batch."""
        self._calls.check_open()
        record = self._transactions.record(tx)
        gate = StreamGate(record.queue, idle_timeout)
        future = self._frontend.new_future()
        gate.put(OpenStream(future, None, self._calls.statement_timeout,
                            self._calls.trace(what, record),
                            gate, own, export, sql, params, size, factory))
        return gate, future

    def fetch(self, tx: Transaction, gate: StreamGate, size: int, factory: Any,
              what: What) -> F:
        """Ask for a stream's next batch; its future."""
        self._calls.check_open()
        record = self._transactions.usable(tx)
        future = self._frontend.new_future()
        gate.put(FetchStream(future, None, self._calls.statement_timeout,
                             self._calls.trace(what, record), size, factory))
        return future

    def close_stream(self, tx: Transaction, gate: StreamGate, what: What) -> F:
        """Close a stream in a transaction that goes on; the future of that."""
        self._calls.check_open()
        future = self._frontend.new_future()
        gate.put(CloseStream(future, None, self._calls.statement_timeout,
                             self._calls.trace(what, self._transactions.record(tx))))
        return future

    def drop_stream(self, tx: Transaction, gate: StreamGate, own: bool) -> None:
        """A stream was dropped open: its worker closes it (and rolls back its own
        transaction); nobody waits for that."""
        if own:
            self._transactions.roll_back_unowned(tx)
            return
        try:
            gate.put(CloseStream(None, None, None, None))
        except StreamTimeout:
            pass


__all__ = ["Streams"]
