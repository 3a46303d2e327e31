"""SQL text the benchmarks share: the parameter mark, the bulk scenario's tables
and rows (its scenario module and the C clients' runner both need them), and the
web scenario's table (its scenario module and the web apps both read it).

Every table a benchmark creates is named ``adb_bench_*``, so that a run never
touches a table of the database's own (the CLI drops them at the end of a run).
"""

#: bulk: the table every reader reads, the one every loader fills, and their columns
BULK_SOURCE, BULK_TARGET, BULK_COLUMNS = "adb_bench_bulk_rows", "adb_bench_bulk_load", ("k", "v")
#: bulk: the width of a row's text (seed 000's ``varchar(100)``, filled)
BULK_WIDTH = 100
#: web: the TechEmpower ``world`` table, 10,000 rows read by the servers' ``/db``
WEB_TABLE = "adb_bench_world"


def placeholder(paramstyle: str) -> str:
    """The mark of one statement parameter in a DB-API ``paramstyle``: ``?`` for
    qmark (sqlite3), ``%s`` for format and pyformat (psycopg2, PyMySQL, and what the
    benchmarks' async drivers are given)."""
    return "?" if paramstyle == "qmark" else "%s"


def bulk_text(key: int) -> str:
    """Row ``key``'s text: the key zero-padded to 100 characters, so a check can
    recompute it in SQL (``lpad``, ``printf``) from the key alone."""
    return format(key, f"0{BULK_WIDTH}d")


def bulk_select(table: str = BULK_SOURCE) -> str:
    """The statement every bulk reader runs: every row, in no particular order."""
    return f"select {', '.join(BULK_COLUMNS)} from {table}"


def bulk_key_sum(rows: int) -> int:
    """The sum of the keys 0..rows-1: what a reader of ``rows`` rows must add up to."""
    return rows * (rows - 1) // 2
