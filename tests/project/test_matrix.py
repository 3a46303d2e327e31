"""The supported Pythons are declared once and tested: setup.cfg's ``python_requires``
and classifiers, mypy's target and ``.ci/noxfile.py``'s matrix say the same versions,
and CI runs that matrix."""

import ast
import configparser
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOXFILE = ROOT / ".ci" / "noxfile.py"


def noxfile_constant(name):
    tree = ast.parse(NOXFILE.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{NOXFILE} has no constant {name}")


def setup_cfg():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def as_tuple(version):
    return tuple(int(part) for part in version.split("."))


def test_the_classifiers_name_exactly_the_noxfile_versions():
    classifiers = setup_cfg()["metadata"]["classifiers"]
    declared = re.findall(r"Programming Language :: Python :: (3\.\d+)\s*$", classifiers, re.M)
    assert declared == list(noxfile_constant("SUPPORTED"))


def test_python_requires_starts_at_the_oldest_tested_version():
    supported = noxfile_constant("SUPPORTED")
    assert setup_cfg()["options"]["python_requires"].strip() == f">={min(supported, key=as_tuple)}"


def test_mypy_checks_for_the_oldest_supported_version():
    supported = noxfile_constant("SUPPORTED")
    assert setup_cfg()["mypy"]["python_version"].strip() == min(supported, key=as_tuple)


def test_the_supported_versions_are_consecutive_minor_releases():
    minors = [as_tuple(version)[1] for version in noxfile_constant("SUPPORTED")]
    assert minors == list(range(minors[0], minors[0] + len(minors)))


def test_every_core_test_module_exists():
    for path in noxfile_constant("CORE"):
        assert (ROOT / path).is_file(), path


def test_ci_runs_the_side_phases_side_by_side_after_the_readme_command():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    readme = next(i for i, line in enumerate(lines) if ".venv/bin/python -m pytest" in line and "pip install" in line)
    after = lines[readme + 1:]
    loops = [line.removeprefix("for phase in ").removesuffix("; do").split()
             for line in after if line.startswith("for phase in ")]
    assert len(loops) == 3 and loops[0] == loops[1]  # started, then waited for, each one
    assert loops[0] == ["matrix", "compiled", "run-freethreaded"]
    assert all((ROOT / ".ci" / phase).is_file() for phase in loops[0])
    assert loops[2] == ["main", *loops[0]]  # the summary: every phase's result and time
    assert '[ "$status" -eq 0 ] || failed+=("$phase")' in after and "exit 1" in after
    # started after the main suite (CI is bound by CPU here: .ci/run says why), whatever
    # its result: its failure is recorded, not fatal
    started = after.index(f"for phase in {' '.join(loops[0])}; do")
    assert after.index("timed \"$phase\" &") == started + 1
    assert after.index("readme_tests || main_status=$?") < started
    assert "-s core" in (ROOT / ".ci" / "matrix").read_text()
    # the side phases take their tools from CI's own environment, not the README's .venv
    assert "export ADB_CI_TOOLS=" in "\n".join(lines[:readme])
    for phase in ("matrix", "compiled"):
        assert "${ADB_CI_TOOLS:-.venv}" in (ROOT / ".ci" / phase).read_text()
