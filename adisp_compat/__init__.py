"""The 2011 adisp yield-callback style on Python 3 (``@process``, ``@async_``).

Not written yet: it comes with the Twisted front-end. See docs/README.md.
"""
