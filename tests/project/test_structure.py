"""The structure ``docs/architecture.md`` promises, held against the code.

Each rule reads the code's structure (what a module imports, what it calls, which
module writes an attribute), never a list of names written here:

- Only the engine makes jobs: the job kinds are the classes ``adb/jobs.py``
  derives from ``Job``, and no module outside ``adb/engine/`` (the engine and its
  parts) calls one.
- The engine's parts keep to their own: no part writes an attribute of another
  object than itself, nor reads another object's private member; only the
  transaction module reads a handle's record, which the engine gets through
  ``record_of``.
- The job queue's vocabulary stays on the engine side: no module outside it imports
  ``Job``, ``Queued`` or a job kind, so none can put a job on a queue.
- No feature, front-end or facade module imports the worker's modules
  (``session``, ``ops``, ``worker``, ``pipeline``, ``watchdog``, ``dispatch``).
- No identity test on what a job runs: no ``is``/``in`` comparison names a
  ``Session`` method, an ``ops`` function, or a job kind (a kind's flags say what
  a worker may do with it).
- Every shared structure has one writer: each row of the ownership table whose
  state names an attribute is written only by the modules the row names.
- No back channel: a Protocol in a feature module names no private member of
  what it is given (features take the engine or the front-end, by their public names).
- The core and the engine never branch on which front-end they serve.
- Every front-end's typed stubs cover every public method whose return type
  differs by front-end, with the same parameters as the method itself.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import adb.core

ROOT = Path(__file__).resolve().parents[2]
ADB = ROOT / "adb"
FACADE = ("adb/core.py", "BaseDatabase")
FEATURES = ["stream.py", "bulk.py", "retry.py", "listener.py", "transaction.py", "savepoint.py",
            "replicas.py", "listen.py"]
#: each front-end's module and Database class whose stubs say what methods return there
FRONT_ENDS = [("asyncio.py", "FutureDatabase"), ("sync.py", "Database"), ("twisted.py", "Database")]


def tree_of(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def classes(path: Path) -> list[ast.ClassDef]:
    return [node for node in ast.walk(tree_of(path)) if isinstance(node, ast.ClassDef)]


#: the engine and its parts
ENGINE = sorted(str(path.relative_to(ADB)) for path in (ADB / "engine").glob("*.py"))
#: the engine side: the engine, the job vocabulary (the kinds, the ops), and the worker's modules
ENGINE_SIDE = {*ENGINE, "jobs.py", "op.py", "txrecord.py", "session.py", "worker.py",
               "pipeline.py", "watchdog.py", "pool.py", "dispatch.py", "admission.py", "ops.py",
               "call.py", "handback.py"}
WORKER_MODULES = {"session", "ops", "worker", "pipeline", "watchdog", "dispatch"}


def modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(ADB)), tree_of(path)) for path in sorted(ADB.rglob("*.py"))]


def imported(tree: ast.Module) -> set[str]:
    """The ``adb`` modules ``tree`` imports (relative or absolute), by last name."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = (node.module or "").split(".")
            if node.level or base[0] == "adb":
                names.add(base[-1] if base[-1] not in ("", "adb") else "")
                names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[-1] for alias in node.names
                         if alias.name.startswith("adb."))
    return names - {""}


def names_from(tree: ast.Module, module: str) -> dict[str, str]:
    """What ``tree`` binds from the ``adb`` module ``module``: each local name and
    the name it stands for there (``""``: the module itself)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("adb")):
            source = (node.module or "").split(".")[-1]
            for alias in node.names:
                if source == module:
                    bound[alias.asname or alias.name] = alias.name
                elif alias.name == module and source in ("", "adb"):
                    bound[alias.asname or alias.name] = ""
    return bound


def job_kinds() -> set[str]:
    """The classes of ``adb/jobs.py`` that derive from ``Job``, directly or not."""
    bases = {cls.name: {ast.unparse(base) for base in cls.bases}
             for cls in classes(ADB / "jobs.py")}
    kinds: set[str] = set()
    grew = True
    while grew:
        grown = {name for name, of in bases.items() if of & (kinds | {"Job"})}
        grew, kinds = grown != kinds, grown
    return kinds


def uses_of(tree: ast.Module, module: str, wanted: set[str]) -> list[ast.AST]:
    """The nodes of ``tree`` that name one of ``wanted`` from ``module``: a name it
    imported from there, or an attribute of the module imported whole."""
    bound = names_from(tree, module)
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and bound.get(node.id) in wanted:
            found.append(node)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and bound.get(node.value.id) == "" and node.attr in wanted:
            found.append(node)
    return found


def job_makers(tree: ast.Module) -> list[str]:
    """The calls in ``tree`` that make a job: a job kind called."""
    kinds = set(uses_of(tree, "jobs", job_kinds()))
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and node.func in kinds]


def test_the_job_kinds_are_found() -> None:
    kinds = job_kinds()
    assert {"Query", "Operation", "TxStatement", "Begin", "Finish", "Abandon",
            "OpenStream", "Hosted", "Statement", "Work"} <= kinds
    assert "Op" not in kinds


def test_only_the_engine_makes_jobs() -> None:
    found = {name: job_makers(tree) for name, tree in modules() if name not in ENGINE}
    assert {name: calls for name, calls in found.items() if calls} == {}
    # the check sees the calls it allows
    assert job_makers(tree_of(ADB / "engine" / "transactions.py"))


def foreign_writes(tree: ast.Module) -> list[str]:
    """The statements of ``tree`` that write an attribute of something other than
    ``self``: assign it, assign or delete an item of it, or call a mutator on it."""
    def foreign(target: ast.AST) -> bool:
        target = target.value if isinstance(target, ast.Subscript) else target
        return isinstance(target, ast.Attribute) \
            and not (isinstance(target.value, ast.Name) and target.value.id == "self")
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = list(node.targets) if isinstance(node, ast.Delete) else [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS:
            targets = [node.func.value]
        found += [ast.unparse(node) for t in targets if foreign(t)]
    return found


def foreign_privates(tree: ast.Module) -> list[str]:
    """The private members of something other than ``self`` that ``tree`` names."""
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")]


@pytest.mark.parametrize("part", ENGINE)
def test_each_engine_part_writes_only_its_own_state(part: str) -> None:
    tree = tree_of(ADB / part)
    assert foreign_writes(tree) == [] and foreign_privates(tree) == []


def test_only_the_transaction_module_reads_a_handles_record() -> None:
    found = {name: [read for read in foreign_privates(tree) if read.endswith("._record")]
             for name, tree in modules() if name != "transaction.py"}
    assert {name: reads for name, reads in found.items() if reads} == {}
    takers = {name for name, tree in modules() if "record_of" in names_from(tree, "transaction")}
    assert takers == {"engine/transactions.py"}


def test_the_ownership_checks_can_fail() -> None:
    tree = ast.parse("self.a = 1\nself.b.append(2)\nother.c = 3\nother.d.add(4)\n"
                     "del other.e[0]\nx = self._f + other._g + tx._record.__len__()\n")
    assert sorted(foreign_writes(tree)) == ["del other.e[0]", "other.c = 3", "other.d.add(4)"]
    assert foreign_privates(tree) == ["other._g", "tx._record"]


def queue_vocabulary(tree: ast.Module) -> list[str]:
    """The job queue's names ``tree`` imports: ``Job``, ``Queued``, a job kind."""
    wanted = {"call": {"Job"}, "dispatch": {"Queued"}, "jobs": job_kinds()}
    return sorted({name for module, names in wanted.items()
                   for name, original in names_from(tree, module).items() if original in names})


def test_no_module_outside_the_engine_side_can_queue_a_job() -> None:
    found = {name: queue_vocabulary(tree) for name, tree in modules()
             if name not in ENGINE_SIDE}
    assert {name: names for name, names in found.items() if names} == {}


def test_no_feature_front_end_or_facade_imports_the_worker_modules() -> None:
    found = {name: sorted(imported(tree) & WORKER_MODULES) for name, tree in modules()
             if name not in ENGINE_SIDE and not name.startswith("drivers/")}
    assert {name: bad for name, bad in found.items() if bad} == {}


def job_functions(tree: ast.Module) -> set[ast.AST]:
    """The nodes of ``tree`` that name what a job runs: a ``Session`` method, an
    ``ops`` function, a job kind."""
    ops = {node.name for node in tree_of(ADB / "ops.py").body
           if isinstance(node, ast.FunctionDef)}
    found = set(uses_of(tree, "ops", ops)) | set(uses_of(tree, "jobs", job_kinds()))
    sessions = set(uses_of(tree, "session", {"Session"}))
    found |= {node for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and node.value in sessions}
    return found


def identity_tests(tree: ast.Module) -> list[str]:
    """``is``/``in`` comparisons one of whose operands names what a job runs."""
    named = job_functions(tree)
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Compare)
            and any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops)
            and any(sub in named for operand in [node.left, *node.comparators]
                    for sub in ast.walk(operand))]


def test_no_identity_test_on_what_a_job_runs() -> None:
    found = {name: identity_tests(tree) for name, tree in modules()}
    assert {name: tests for name, tests in found.items() if tests} == {}


def test_the_rule_checks_can_fail() -> None:
    tree = ast.parse("from .session import Session\nfrom . import ops, jobs\n"
                     "from .jobs import Finish as End\nfrom .dispatch import Queued\n"
                     "if fn is Session.standalone: pass\n"
                     "if op is not ops.interaction: pass\n"
                     "if type(job) in (End, jobs.Query): pass\n"
                     "tx.queue.put(End(None, None, None, None, tx, False))\n"
                     "gate.put(jobs.CloseStream(None, None, None, None))\n")
    assert imported(tree) >= {"session", "Session", "ops"}
    assert len(identity_tests(tree)) == 3
    assert job_makers(tree) == ["End(None, None, None, None, tx, False)",
                                "jobs.CloseStream(None, None, None, None)"]
    assert queue_vocabulary(tree) == ["End", "Queued"]


def ownership_rows() -> list[tuple[str, list[str]]]:
    """The ownership table's rows that name an attribute written through
    ``.name``: the attribute, and the modules its writer cell names."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not line.startswith("| "):
            continue
        attribute = re.search(r"`(?:\w+\.)+(\w+)`", cells[0])
        writers = re.findall(r"`(?:adb/)?(\w+\.py)`", cells[1])
        if attribute and writers:
            rows.append((attribute.group(1), writers))
    return rows


MUTATORS = {"pop", "append", "add", "discard", "remove", "clear", "update", "setdefault"}


def written(node: ast.AST, attribute: str) -> bool:
    """True when ``node`` writes ``<x>.attribute`` (not ``self.attribute``: its own
    class's): assigns it, assigns or deletes an item of it, or calls a mutator on it."""
    def outside(target: ast.AST) -> bool:
        return isinstance(target, ast.Attribute) and target.attr == attribute \
            and not (isinstance(target.value, ast.Name) and target.value.id == "self")
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = list(node.targets)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in MUTATORS:
        targets = [node.func.value]
    return any(outside(t.value if isinstance(t, ast.Subscript) else t) for t in targets)


def writers_of(attribute: str) -> set[str]:
    """The modules that write ``<x>.attribute`` (see ``written``)."""
    return {name.split("/")[-1] for name, tree in modules()
            if any(written(node, attribute) for node in ast.walk(tree))}


def test_every_shared_structure_has_the_writers_the_table_names() -> None:
    rows = ownership_rows()
    assert ("late", ["pool.py"]) in rows and ("connections", ["session.py", "twisted.py"]) in rows
    assert "session.py" in writers_of("connections")  # the check sees a write it must allow
    for attribute, writers in rows:
        assert writers_of(attribute) <= set(writers), attribute


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
                   "asyncio", "twisted", "tornado", "trio", "reactor", "loop")


@pytest.mark.parametrize("module", ["core.py", *ENGINE])
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
