"""The build's one hook: the compiled modules, if this build compiles (build_backend.py).

Everything else about the package is in setup.cfg."""

from setuptools import setup

from build_backend import ext_modules

setup(ext_modules=ext_modules())
