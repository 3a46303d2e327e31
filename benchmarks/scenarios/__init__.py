"""Scenarios: one module per published experiment.

A scenario module defines ``NAME``, ``SEED``, ``DESCRIPTION``, ``prepare(target,
rows)`` (run by the harness before each run, in the parent process),
``verify(target, rows)`` (after each run; raises ``WrongResult``) and
``statement(paramstyle)`` / ``params(rows)`` (what the systems execute). A system's
runner ``function`` serves parallel-insert; ``function_<scenario>`` serves another
scenario (``-`` read as ``_``); a system without one says it cannot run it.
"""

from . import parallel_insert, sequential

SCENARIOS = {module.NAME: module for module in (parallel_insert, sequential)}


class WrongResult(Exception):
    """A run finished but left the database in the wrong state: an error, not a result."""
