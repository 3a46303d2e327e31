"""The structure ``docs/architecture.md`` promises, held against the code.

- The public facade (``adb/core.py``'s ``BaseDatabase``) is the API only: under
  800 lines, its module under 900; no other module of ``adb/`` over 700 lines and
  no other class over 450.
- No back channel: a Protocol in a feature module names no private member of
  what it is given (features take the engine or the front-end, by their public names).
- The core and the engine never branch on which front-end they serve.
- Every front-end's typed stubs cover every public method whose return type
  differs by front-end, with the same parameters as the method itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import adb.core

ROOT = Path(__file__).resolve().parents[2]
ADB = ROOT / "adb"
FACADE = ("adb/core.py", "BaseDatabase")
FEATURES = ["stream.py", "bulk.py", "retry.py", "listener.py", "transaction.py", "savepoint.py",
            "replicas.py", "listen.py"]
#: each front-end's module and Database class whose stubs say what methods return there
FRONT_ENDS = [("asyncio.py", "Database"), ("sync.py", "Database"), ("twisted.py", "Database")]


def tree_of(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def classes(path: Path) -> list[ast.ClassDef]:
    return [node for node in ast.walk(tree_of(path)) if isinstance(node, ast.ClassDef)]


def lines(node: ast.stmt) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def test_the_facade_and_every_module_and_class_stay_small() -> None:
    too_big = []
    for path in sorted(ADB.rglob("*.py")):
        name = str(path.relative_to(ROOT))
        limit = 900 if name == FACADE[0] else 700
        if len(path.read_text().splitlines()) >= limit:
            too_big.append(f"{name}: module over {limit} lines")
        for cls in classes(path):
            limit = 800 if (name, cls.name) == FACADE else 450
            if lines(cls) >= limit:
                too_big.append(f"{name}: class {cls.name} is {lines(cls)} lines, over {limit}")
    assert too_big == []


def private_members(protocol: ast.ClassDef) -> list[str]:
    names = []
    for node in protocol.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
    return [n for n in names if n.startswith("_") and not n.startswith("__")]


def protocols(path: Path) -> list[ast.ClassDef]:
    return [cls for cls in classes(path)
            if any(isinstance(base, ast.Name) and base.id == "Protocol" for base in cls.bases)]


@pytest.mark.parametrize("module", FEATURES)
def test_no_feature_protocol_names_a_private_member(module: str) -> None:
    found = {cls.name: private_members(cls) for cls in protocols(ADB / module)}
    assert {name: members for name, members in found.items() if members} == {}


def test_the_protocol_check_can_fail(tmp_path: Path) -> None:
    path = tmp_path / "feature.py"
    path.write_text("class Db(Protocol):\n    _driver: int\n    def _begin(self): ...\n"
                    "    def __call__(self): ...\n    name: str\n")
    assert [private_members(cls) for cls in protocols(path)] == [["_driver", "_begin"]]


FRONT_END_WORDS = ("_blocking", "waiting", "Waiting", "FrontEnd", "Waiter", "Deferred", "Future",
                   "asyncio", "twisted", "tornado", "reactor", "loop")


@pytest.mark.parametrize("module", ["core.py", "engine.py"])
def test_the_core_never_branches_on_its_front_end(module: str) -> None:
    tests = [node.test for node in ast.walk(tree_of(ADB / module))
             if isinstance(node, (ast.If, ast.IfExp, ast.While))]
    text = [ast.unparse(test) for test in tests]
    assert [t for t in text if any(word in t for word in FRONT_END_WORDS)] == []


def stubs(module: str, cls_name: str) -> dict[str, ast.FunctionDef]:
    """The ``if TYPE_CHECKING:`` method stubs of class ``cls_name`` in ``adb/module``."""
    [cls] = [c for c in classes(ADB / module) if c.name == cls_name]
    found: dict[str, ast.FunctionDef] = {}
    for node in cls.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            found.update({f.name: f for f in node.body if isinstance(f, ast.FunctionDef)})
    return found


def parameters(function: ast.FunctionDef) -> list[str]:
    """Each parameter as ``kind name=default`` (annotations aside: the return
    type is what a stub changes, and a parameter's type may name the front-end's);
    defaults by value where they are literals, else as written."""
    def value(default: ast.expr | None) -> str:
        if default is None:
            return ""
        try:
            return repr(ast.literal_eval(default))
        except ValueError:
            return ast.unparse(default)
    args = function.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [f"{a.arg}={value(d)}" for a, d in zip(positional, defaults)]
    if args.vararg:
        out.append(f"*{args.vararg.arg}")
    out += [f"kw {a.arg}={value(d)}" for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        out.append(f"**{args.kwarg.arg}")
    return out


def differing_methods() -> dict[str, ast.FunctionDef]:
    """The facade's public methods whose return type is the front-end's (``Any``)."""
    [facade] = [c for c in classes(ADB / "core.py") if c.name == FACADE[1]]
    return {f.name: f for f in facade.body if isinstance(f, ast.FunctionDef)
            and not f.name.startswith("_") and not f.decorator_list and f.returns is not None
            and ast.unparse(f.returns) == "Any"}


def test_the_methods_whose_return_type_differs_are_found() -> None:
    found = set(differing_methods())
    assert {"runQuery", "runOperation", "beginTransaction", "stream", "listen"} <= found
    assert "transaction" not in found and "stats" not in found
    assert all(callable(getattr(adb.core.BaseDatabase, name)) for name in found)


@pytest.mark.parametrize("module,cls", FRONT_ENDS)
def test_each_front_end_types_every_method_whose_return_type_differs(module: str,
                                                                     cls: str) -> None:
    own = stubs(module, cls)
    missing = sorted(set(differing_methods()) - set(own))
    assert missing == [], f"adb/{module}: no typed stub for {missing}"
    for name, method in differing_methods().items():
        assert parameters(own[name]) == parameters(method), f"adb/{module}: {name}'s parameters"
        returns = own[name].returns
        assert returns is not None and ast.unparse(returns) != "Any", name
