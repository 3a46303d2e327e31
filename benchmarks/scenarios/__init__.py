"""Scenarios: one module per published experiment.

A scenario module defines ``NAME``, ``SEED``, ``DESCRIPTION``, ``prepare(target,
rows)`` (run by the harness before each run, in the parent process),
``verify(target, rows)`` (after each run; raises ``WrongResult``) and
``statements(paramstyle, rows)`` (what the systems execute). Systems implement
``run_<scenario module name>``.
"""

from . import parallel_insert

SCENARIOS = {module.NAME: module for module in (parallel_insert,)}


class WrongResult(Exception):
    """A run finished but left the database in the wrong state: an error, not a result."""
