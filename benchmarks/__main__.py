"""Command line: ``python -m benchmarks [--dburl URL] [--rows N] [--pool_size N]``."""

import argparse
import asyncio
import sys

from . import parallel_insert


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Seed 000: N parallel single-row inserts through adb (asyncio front-end).")
    parser.add_argument("--dburl", default=None,
                        help="database URL; default: SQLite in a temporary file")
    parser.add_argument("--rows", type=int, default=100_000, help="rows to insert (100000)")
    parser.add_argument("--pool_size", type=int, default=10, help="worker threads (10)")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.pool_size < 1:
        parser.error("--rows and --pool_size must be positive")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    result = asyncio.run(parallel_insert.run(args.dburl, args.rows, args.pool_size))
    print(f"parallel-insert on {result['target']}: {result['rows']:,} rows, "
          f"pool {result['pool_size']}")
    print(f"  {result['seconds']:.2f} s, {result['rows_per_s']:,.0f} rows/s, "
          f"peak RSS {result['peak_rss_mb']:.0f} MB, "
          f"{result['wakeups']:,} loop wake-ups (largest batch {result['largest_batch']})")
    if args.dburl is None:
        print("  (embedded default. Compare servers with --dburl "
              "postgresql://user@host/db or --dburl mysql://user@host/db)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
