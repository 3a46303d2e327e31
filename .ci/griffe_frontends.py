"""A Griffe extension for adb's API reference: each front-end's page documents every
public method with what it returns on that front-end.

The public methods are written, and documented, once on ``adb.core.BaseDatabase``,
where they return ``Any``: the future type differs per front-end. Each front-end
module then declares, under ``if TYPE_CHECKING:``, a stub of each method with its full
signature and its own return type (``asyncio.Future[list[Any]]``, ``Deferred[int]``,
``int``). Griffe reads those stubs but they carry no docstring, so the reference would
hide them. This extension gives each stub the docstring of the ``BaseDatabase`` method
it stands for; the page then shows the stub's signature and return type with the
shared text (its parameters, what it raises). Loaded by ``.ci/mkdocs.yml``.
"""

from __future__ import annotations

from typing import Any

import griffe

BASE = "adb.core.BaseDatabase"


class FrontEndStubs(griffe.Extension):
    """Copies ``BaseDatabase``'s method docstrings onto the front-ends' typed stubs."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "adb":
            return
        base = pkg[BASE.removeprefix("adb.")]
        for module in pkg.modules.values():
            for cls in module.classes.values():
                if BASE in (parent.path for parent in cls.mro()):
                    document_stubs(cls, base)


def document_stubs(cls: griffe.Class, base: griffe.Class) -> None:
    """Give every public, undocumented method of ``cls`` that ``base`` documents the
    docstring of ``base``'s method, parsed against the stub's own signature."""
    for name, member in cls.members.items():
        if name.startswith("_") or member.is_alias or not member.is_function:
            continue
        shared = base.members.get(name)
        if member.docstring is None and shared is not None and shared.docstring is not None:
            member.docstring = griffe.Docstring(
                shared.docstring.value, lineno=shared.docstring.lineno,
                endlineno=shared.docstring.endlineno, parent=member,
                parser=shared.docstring.parser,  # parsed as the original is (sphinx)
                parser_options=shared.docstring.parser_options)
