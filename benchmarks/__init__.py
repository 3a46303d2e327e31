"""``python -m benchmarks``: adb against its peers on published experiments.

This first version runs the seed 000 experiment (parallel inserts) on adb's
asyncio front-end; the harness with every peer, repeats and reports comes next
(see docs/benchmarks.md once it exists).
"""
