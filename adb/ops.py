"""What one call does on a cursor, run in a worker thread.

Each op is ``op(cursor, driver, *args)``. Transaction policy is not here: the
worker decides (``Worker.standalone`` / ``atomic`` / ``in_transaction``).
"""


def query(cursor, driver, sql, params, row_factory):
    """Execute and fetch every row; a statement that returns no rows gives []."""
    if params is None:
        cursor.execute(sql)
    else:
        cursor.execute(sql, params)
    if cursor.description is None:
        return []
    return row_factory(cursor.description, driver.fetchall(cursor))


def operation(cursor, driver, sql, params):
    """Execute and return the rowcount."""
    if params is None:
        cursor.execute(sql)
    else:
        cursor.execute(sql, params)
    return cursor.rowcount


def many(cursor, driver, sql, seq_of_params):
    """Execute once per parameter set through the driver's bulk path; total rowcount."""
    return driver.executemany(cursor, sql, seq_of_params)


def interaction(cursor, driver, fn, args, kwargs):
    """Run the caller's ``fn(cursor, *args, **kwargs)`` and return what it returns."""
    return fn(cursor, *args, **kwargs)
