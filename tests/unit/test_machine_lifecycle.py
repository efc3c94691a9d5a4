"""A machine's own lifecycle is one table, and the code names its states from it."""

import ast
import pathlib

import pytest

from metalboot_framework import machine_lifecycle
from metalboot_framework.machine_lifecycle import State
from tests.source_rules import breaches

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLE = ROOT / "metalboot_framework" / "machine_lifecycle.py"
SCHEMA_HISTORY = ROOT / "metalboot_framework" / "store" / "schema"
NAMES = frozenset(machine_lifecycle.ALL)


def test_every_state_is_reached_and_left():
    reached = {str(c.new) for c in machine_lifecycle.CHANGES}
    left = {str(old) for c in machine_lifecycle.CHANGES for old in c.old}
    assert reached - {machine_lifecycle.GONE} == set(machine_lifecycle.ALL) == left
    assert set(machine_lifecycle.SETTABLE) < set(machine_lifecycle.ALL)
    assert [str(c.new) for c in machine_lifecycle.CHANGES if not c.old] == ["enrolling"]


def test_api_and_cli_take_their_states_from_the_table():
    import subprocess
    import sys

    from metalboot_framework.api import schemas

    assert schemas.MACHINE_STATES == machine_lifecycle.ALL
    assert schemas.SETTABLE_STATES == machine_lifecycle.SETTABLE
    usage = subprocess.run([sys.executable, "-m", "metalboot_framework.cli", "machines", "list",
                            "--help"], capture_output=True, text=True, check=True).stdout
    assert "enrolling|ready|migrating|maintenance|error" in usage


def test_the_documents_are_generated_from_every_row():
    dot, table = machine_lifecycle.dot(), machine_lifecycle.rst_table()
    for c in machine_lifecycle.CHANGES:
        assert c.event in table and f'"{c.new}"' in dot
    architecture = (ROOT / "doc" / "architecture.rst").read_text()
    assert ".. metalboot-machine-lifecycle::" in architecture
    assert ".. metalboot-state-machine::" in architecture


def spelled_states(source):
    """Line numbers of ``source`` that spell a lifecycle state as a string: in a
    comparison (``==``, ``in``, SQL's ``in_``), as a ``state=`` argument, as the
    value of a ``"state"`` key or of an assignment to a ``state`` attribute."""
    lines = set()

    def is_name(node):
        return isinstance(node, ast.Constant) and node.value in NAMES or \
            isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(is_name, node.elts))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(map(is_name, [node.left, *node.comparators])):
            lines.add(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in (
                "in_", "notin_") and any(map(is_name, node.args)):
            lines.add(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg == "state" and is_name(node.value):
            lines.add(node.value.lineno)
        elif isinstance(node, ast.Dict):
            lines.update(v.lineno for k, v in zip(node.keys, node.values, strict=True)
                         if isinstance(k, ast.Constant) and k.value == "state" and is_name(v))
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "state" for t in node.targets) \
                and is_name(node.value):
            lines.add(node.lineno)
    return sorted(lines)


def test_no_module_but_the_table_spells_a_state():
    found = breaches(spelled_states, allowed=[TABLE], allowed_dirs=[SCHEMA_HISTORY])
    assert found == {}, "name the state by metalboot_framework/machine_lifecycle.py"


@pytest.mark.parametrize("source", [
    "if m.state == 'deleting':\n    pass",
    "q = q.where(M.c.state.in_(('ready', 'enrolling')))",
    "stmt = update(M).values(state='error')",
    "row = {'id': x, 'state': 'enrolling'}",
    "m.state = 'enrolling'",
])
def test_the_check_sees_each_spelling(source):
    assert spelled_states(source) == [1]


def test_the_check_lets_the_constants_be():
    assert spelled_states("if m.state == State.DELETING:\n    m.state = State.ERROR.value\n"
                          "x = {'state': State.READY.value}\n") == []
    assert State.READY == "ready" and str(State.READY) == "ready"
