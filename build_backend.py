"""adb's build backend: setuptools', with the hot path compiled by mypyc where it can be.

The modules in ``COMPILED`` (a call's path: the engine's calls part, which makes its
job, and the worker's side; docs/performance.md, "Compiled") become C extensions
beside their ``.py`` files, which stay in the wheel and are what runs wherever the
extensions are not importable. ``ADB_COMPILE`` decides:

- ``1``: compile, or fail the build saying why (no C compiler, no Python headers);
- ``0``: never compile: a pure-Python ``py3-none-any`` wheel;
- unset or ``auto``: a wheel (``python -m build``, ``pip install .``) is compiled
  when a C compiler builds against this Python's headers, else pure; an editable
  install (``pip install -e .``) and the sdist are never compiled, so that edits to
  the source take effect.

mypyc comes from the build's own requirements (``get_requires_for_build_wheel``),
asked for only when the build compiles: a pure build needs setuptools alone.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from typing import Any, Optional

# (setuptools before 71 ships no types)
from setuptools import build_meta as _setuptools  # type: ignore[import-untyped, unused-ignore]
from setuptools.build_meta import (  # type: ignore[import-untyped, unused-ignore]  # noqa: F401
    build_sdist, get_requires_for_build_sdist, prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel)

#: the modules compiled, in the order a call goes through them
COMPILED = ("adb/engine/calls.py", "adb/call.py", "adb/jobs.py", "adb/dispatch.py",
            "adb/admission.py", "adb/handback.py", "adb/worker.py", "adb/session.py",
            "adb/pipeline.py", "adb/ops.py")
#: the shared library of the compiled modules, inside the adb package
GROUP = "adb._compiled"
#: the mypy that compiles them (mypyc ships with it); the generated C needs nothing at run time
MYPYC = "mypy>=1.8"
ENV = "ADB_COMPILE"

#: what the running build makes: "wheel", "editable", or None (setup.py run directly)
_target: Optional[str] = None
#: True while setuptools runs setup.py for the build's requirements, before mypyc is there
_asking = False


def mode() -> str:
    """``ADB_COMPILE`` as "1", "0" or "auto"; anything else is refused by name."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("0", "1", "auto"):
        raise SystemExit(f"{ENV}={value!r}: use 1 (compile or fail), 0 (pure Python) or auto")
    return value


def compiler_problem() -> Optional[str]:
    """None if a C compiler builds an extension against this Python's headers, else why not."""
    if sys.implementation.name != "cpython":
        return f"mypyc compiles for CPython only, not {sys.implementation.name}"
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(header):
        return f"no Python headers ({header} is missing: install the python3-dev package)"
    from setuptools._distutils import (  # type: ignore[import-untyped, unused-ignore]
        ccompiler, errors, sysconfig as dsysconfig)
    compiler: Any = ccompiler.new_compiler()
    dsysconfig.customize_compiler(compiler)
    with tempfile.TemporaryDirectory(prefix="adb-cc-") as tmp:
        probe = os.path.join(tmp, "probe.c")
        with open(probe, "w") as f:
            f.write("#include <Python.h>\nint adb_probe(void) { return Py_IsInitialized(); }\n")
        try:
            compiler.compile([probe], output_dir=tmp,
                             include_dirs=[sysconfig.get_paths()["include"]])
        except (errors.CompileError, errors.DistutilsExecError, OSError) as e:
            return f"no working C compiler ({type(e).__name__}: {e})"
    return None


def wants_compiling() -> bool:
    """Whether this build compiles (``ADB_COMPILE`` and what the build makes); raises
    SystemExit for ``ADB_COMPILE=1`` where it cannot."""
    chosen = mode()
    if chosen == "0" or (chosen == "auto" and _target != "wheel"):
        return False
    problem = compiler_problem()
    if problem is None:
        return True
    if chosen == "1":
        raise SystemExit(f"{ENV}=1 but adb cannot be compiled here: {problem}")
    print(f"adb: building pure Python: {problem}", file=sys.stderr)
    return False


def ext_modules() -> list[Any]:
    """The extensions setup.py builds: the compiled modules, or none."""
    if _asking or not wants_compiling():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        if mode() == "1":
            raise SystemExit(f"{ENV}=1 but mypyc is not installed (pip install '{MYPYC}')")
        print("adb: building pure Python: mypyc is not installed", file=sys.stderr)
        return []
    # the build's environment holds no optional dependency (OpenTelemetry, the drivers):
    # only the compiled modules' own typing matters here (``mypy --strict adb`` checks all)
    options = ["--config-file", "", "--python-version", "3.10", "--follow-imports", "silent",
               "--ignore-missing-imports"]
    print(compiling_notice(), file=sys.stderr, flush=True)
    return list(mypycify([*options, *COMPILED], opt_level="3", group_name=GROUP))


def compiling_notice() -> str:
    """The one line a compiling build prints first: the build is silent for about a
    minute after it (mypyc, then the C compiler), and what it makes runs on this
    Python only, which nothing else says. (pip shows a build's output only with
    ``-v``, or when it fails; ``python -m build`` shows it.)"""
    modules = ", ".join(os.path.basename(path) for path in COMPILED)
    return (f"adb: compiling {len(COMPILED)} modules of the per-call path with mypyc "
            f"({modules}): this takes about a minute, and the wheel is for this Python "
            f"only ({sys.implementation.cache_tag}, {sysconfig.get_platform()}); "
            f"{ENV}=0 makes a pure-Python wheel for any Python, at once")


def _requires(target: str, setuptools_requires: Any, config_settings: Any) -> list[str]:
    global _target, _asking
    _target, _asking = target, True
    try:
        found: list[str] = setuptools_requires(config_settings)
    finally:
        _asking = False
    return [*found, MYPYC] if wants_compiling() else found


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    return _requires("wheel", _setuptools.get_requires_for_build_wheel, config_settings)


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    return _requires("editable", _setuptools.get_requires_for_build_editable, config_settings)


def build_wheel(wheel_directory: str, config_settings: Any = None,
                metadata_directory: Optional[str] = None) -> str:
    global _target
    _target = "wheel"
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Any = None,
                   metadata_directory: Optional[str] = None) -> str:
    global _target
    _target = "editable"
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
