"""``python -m benchmarks``: see benchmarks/cli.py and docs/benchmarks.md."""

import sys

from .cli import main

sys.exit(main(prog=f"python -m {__package__}"))
