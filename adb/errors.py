"""adb's own exceptions.

Driver errors (``psycopg2.IntegrityError``, ``pymysql.err.ProgrammingError``,
``sqlite3.OperationalError``...) reach the caller unchanged; the classes here are
only for failures that belong to adb itself. Every message names the Database.
"""


class Error(Exception):
    """Base class of every exception raised by adb itself."""


class InterfaceError(Error, ValueError):
    """A bad URL, bad option or bad argument, detected before anything ran."""


class PoolClosed(Error):
    """The Database is closed (or closing) and takes no more work."""


class PoolTimeout(Error):
    """No worker became free for the call within its timeout; it never ran."""


class QueueFull(Error):
    """More calls are queued than ``max_queued`` allows; this one never ran."""


class TransactionError(Error):
    """A transaction handle was used after it finished, or on the wrong Database."""


class ConnectionLost(Error):
    """The connection broke under a call.

    ``may_have_run`` tells whether the statement may have reached the server
    (and so may have taken effect); adb never re-runs such a statement itself.
    """

    def __init__(self, message, may_have_run=True):
        super().__init__(message)
        self.may_have_run = may_have_run


class ForkError(Error):
    """The Database was created in another process; create it after forking."""
