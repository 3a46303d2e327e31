"""adb: DB-API drivers (psycopg2, PyMySQL, sqlite3, any PEP 249 module) on a
thread pool, with results handed back to asyncio, Tornado, Twisted or plain code.

``from adb import Database`` is the asyncio front-end; ``adb.tornado``,
``adb.twisted`` and ``adb.sync`` hold the others.
"""

from . import errors
from .asyncio import Database
from .errors import (ConnectionLost, ConnectionRejected, Error, ForkError, InterfaceError, PoolClosed,
                     PoolTimeout, QueueFull, ReplicaUnavailable, ServerUnavailable,
                     StatementTimeout,
                     StreamTimeout, TransactionError)
from .listen import Notification, NotificationGap
from .options import EMBEDDED
from .listener import Listener, SyncListener
from .replicas import ReplicaState
from .rows import dict_row, namedtuple_row, tuple_row
from .savepoint import Savepoint, SavepointState, savepoint
from .transaction import Transaction, TxState

__version__ = "0.1.0"

__all__ = [
    "Database", "EMBEDDED", "Transaction", "TxState", "Savepoint", "SavepointState", "savepoint",
    "errors", "Error", "InterfaceError", "ConnectionRejected", "PoolClosed", "PoolTimeout",
    "QueueFull", "TransactionError", "ConnectionLost", "ForkError", "ServerUnavailable",
    "ReplicaUnavailable", "StatementTimeout", "StreamTimeout", "ReplicaState", "Listener",
    "SyncListener", "Notification", "NotificationGap", "tuple_row", "dict_row",
    "namedtuple_row", "__version__",
]
