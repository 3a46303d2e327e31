"""SQL text the benchmarks share."""


def placeholder(paramstyle: str) -> str:
    """The mark of one statement parameter in a DB-API ``paramstyle``: ``?`` for
    qmark (sqlite3), ``%s`` for format and pyformat (psycopg2, PyMySQL, and what the
    benchmarks' async drivers are given)."""
    return "?" if paramstyle == "qmark" else "%s"
