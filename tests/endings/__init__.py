"""The endings checker: work ended by every way a program can end it.

Clients on every front-end run a generated mix of work (standalone calls,
transaction blocks, explicit transactions, interactions, ``runTransaction``,
savepoints, ``runMany``, ``copy_in``, streams), every write carrying a unique
token; the work is ended at a generated moment by a generated ending (``close()``,
``start()`` after ``close()`` on the drop-in, cancellation, timeouts, a killed
backend, a restarted private server, a dropped Database, SIGINT, SIGTERM, the
interpreter's exit, a fork); then the server is asked what happened and it must
agree with what every client was told (``ledger.py``). docs/failures.md has the
table of endings and the long-run command.
"""
