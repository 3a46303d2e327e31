"""psycopg 3's ``execute`` as one blocking libpq call, for adb's worker threads.

psycopg 3 drives libpq's non-blocking calls step by step (send, flush, wait, read)
and lets go of the interpreter lock around each. A worker thread beside an event
loop's thread, which holds the lock most of the time, waits for the lock at every
step it takes it back: ten threads running a select beside one busy Python thread
made 13.6 voluntary context switches a call on psycopg's own ``execute`` and 2.4 on
one blocking call, and ran five times the calls a second (docs/performance.md,
"psycopg 3 and PyMySQL beside the loop thread").

``BlockingCursor.execute`` runs a statement that has parameters as one blocking call,
``PQexecParams`` (or ``PQprepare`` and ``PQexecPrepared`` where psycopg would prepare
it: its ``prepare_threshold`` and its cache of prepared statements still decide),
which lets go of the lock once, as psycopg2 does. Everything around the call is
psycopg's own: starting the query (a ``BEGIN`` outside autocommit), binding the
parameters, checking the result into psycopg's errors, and setting the cursor's
results, so rows, ``description``, ``rowcount`` and errors are what psycopg's own
``execute`` gives. A statement without parameters (which may hold several, in
PostgreSQL's simple protocol), a ``binary=`` choice, a pipeline and a template
string keep psycopg's own path. A notification (``NOTIFY``) that arrives during the
call waits in libpq's queue for psycopg's next read of that connection; adb listens on
a connection of its own (``adb.listen``), which runs no such statement.

It calls psycopg's cursor internals, as its own sync and async cursors share them;
``blocking_cursor(dbapi)`` checks that they are there, and where they are not the
driver keeps psycopg's plain ``Cursor``.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

#: the cursor methods the blocking execute calls (and an instance's ``_pgconn``)
_NEEDED = ("_start_query", "_convert_query", "_get_prepared", "_check_results",
           "_set_results")
#: the result statuses whose statement returned rows, though with no field
#: (psycopg's ``description`` test: ``select;`` has a description of no columns)
_WITH_TUPLES = ("TUPLES_OK", "SINGLE_TUPLE", "TUPLES_CHUNK")
_MADE: dict[Any, Optional[type]] = {}  # dbapi module -> its BlockingCursor (None: unavailable)


def blocking_cursor(dbapi: Any) -> Optional[type]:
    """``dbapi``'s ``Cursor`` with the blocking execute, or None where psycopg's
    internals differ from what it calls (the plain ``Cursor`` then serves)."""
    if dbapi in _MADE:
        return _MADE[dbapi]
    made: Optional[type] = None
    try:
        prepare_enum = importlib.import_module(dbapi.__name__ + "._preparing").Prepare
        fatal_error = dbapi.pq.ExecStatus.FATAL_ERROR
        no_traceback = dbapi.errors._NO_TRACEBACK
        error_from_result = dbapi.errors.error_from_result
        composable = importlib.import_module(dbapi.__name__ + ".sql").Composable
    except (ImportError, AttributeError):
        pass
    else:
        base = dbapi.Cursor
        statuses = dbapi.pq.ExecStatus
        tuples = frozenset(getattr(statuses, name) for name in _WITH_TUPLES
                           if hasattr(statuses, name))
        if all(hasattr(base, name) for name in _NEEDED):
            made = _make(base, (str, bytes, composable), prepare_enum.NO,
                         prepare_enum.SHOULD, fatal_error, no_traceback, error_from_result,
                         tuples)
    _MADE[dbapi] = made
    return made


def _make(base: Any, statements: tuple[type, ...], no: Any, should: Any, fatal_error: Any,
          no_traceback: Any, error_from_result: Any, tuples: frozenset[Any]) -> type:
    """The cursor class, made once per psycopg module (its names bound here)."""

    class BlockingCursor(base):  # type: ignore[misc,unused-ignore]
        """psycopg's ``Cursor``; a statement with parameters runs as one blocking call,
        and ``description`` is built once per result."""

        #: the result the description below was built from, and that description
        _adb_described: Optional[tuple[Any, Any]] = None

        @property
        def description(self) -> Any:
            """psycopg's own, built once per result: psycopg makes a ``Column`` per
            field at every read (2.7 us for two columns here), and adb reads it after
            every statement. Keyed on the result object itself, which this holds until
            the next read after another statement (at most one result more than the
            cursor holds)."""
            result = self.pgresult
            described = self._adb_described
            if described is not None and described[0] is result:
                return described[1]
            description = super().description
            self._adb_described = None if result is None else (result, description)
            return description

        def returns_rows(self) -> bool:
            """``description is not None``, told from the result itself without
            building the description (the driver's ``returns_rows``: adb shapes rows
            as tuples by default, which needs none)."""
            result = self.pgresult
            return result is not None and bool(result.nfields or result.status in tuples)

        def execute(self, query: Any, params: Any = None, *, prepare: Optional[bool] = None,
                    binary: Optional[bool] = None) -> Any:
            conn = self._conn
            if _empty(params) or binary is not None or conn._pipeline \
                    or not isinstance(query, statements):
                return super().execute(query, params, prepare=prepare, binary=binary)
            try:
                with conn.lock:
                    self._run(conn, query, params, prepare)
            except no_traceback as ex:
                raise ex.with_traceback(None)
            return self

        def _run(self, conn: Any, query: Any, params: Any, prepare: Optional[bool]) -> None:
            """psycopg's execute steps, the statement sent and read in one call."""
            conn.wait(self._start_query(query))
            pgq = self._convert_query(query, params)
            self._query = pgq
            prep, name = self._get_prepared(pgq, prepare)
            pgconn, fmt = self._pgconn, self.format
            if prep is no:
                result = pgconn.exec_params(pgq.query, pgq.params, pgq.types, pgq.formats, fmt)
            else:
                if prep is should:
                    made = pgconn.prepare(name, pgq.query, pgq.types)
                    if made.status == fatal_error:
                        raise error_from_result(made, encoding=self._encoding)
                result = pgconn.exec_prepared(name, pgq.params, pgq.formats, fmt)
            key = conn._prepared.maybe_add_to_cache(pgq, prep, name)
            if key is not None:
                conn._prepared.validate(key, prep, name, [result])
            self._check_results([result])
            self._set_results([result])
            self._last_query = query
            conn.wait(conn._prepared.maintain_gen(conn))

    return BlockingCursor


def _empty(params: Any) -> bool:
    """No parameters: None or an empty sequence or mapping (psycopg then sends the
    statement in the simple protocol, which may hold several)."""
    if params is None:
        return True
    try:
        return len(params) == 0
    except TypeError:  # not sized: psycopg's own execute says what it makes of it
        return True
