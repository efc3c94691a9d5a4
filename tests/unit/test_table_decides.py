"""The tables decide: no ``if``, ``elif``, ``while``, conditional expression or
``match`` outside the table's module tests a machine's step.

Where a machine goes from a step is a row of
:data:`metalboot_framework.machine_steps.TRANSITIONS`, looked up by the
event the machine met; code elsewhere asks the table (``on``, ``find``,
``goes_on``, ``WORK``) instead of comparing steps itself. Queries that select
machines in a step are not decisions and are left alone.
"""

import ast
import pathlib

import pytest

from metalboot_framework import machine_steps
from tests.source_rules import breaches

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLE = ROOT / "metalboot_framework" / "machine_steps.py"
STEP_NAMES = frozenset(machine_steps.ALL)
# the module's groups of steps (IN_FLIGHT, FINISHED, ...)
GROUPS = frozenset(name for name, value in vars(machine_steps).items()
                   if name.isupper() and isinstance(value, tuple)
                   and value and all(isinstance(v, str) for v in value))


def _names_a_step(node, imported):
    """Whether ``node`` is a step, a group of steps, or a literal collection of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in STEP_NAMES
    if isinstance(node, ast.Attribute):
        base = node.value
        if isinstance(base, ast.Name) and base.id == "Step" or \
                isinstance(base, ast.Attribute) and base.attr == "Step":
            return True
        return node.attr in GROUPS and isinstance(base, ast.Name) and \
            base.id == "machine_steps"
    if isinstance(node, ast.Name):
        return node.id in imported
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_step(elt, imported) for elt in node.elts)
    if isinstance(node, ast.BinOp):  # (Step.X,) + machine_steps.FAILED
        return _names_a_step(node.left, imported) or _names_a_step(node.right, imported)
    return False


def _tests(tree):
    """The expressions that decide which way the code goes, with their lines."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            yield node.test
        elif isinstance(node, ast.Match):
            for case in node.cases:
                for pattern in ast.walk(case.pattern):
                    if isinstance(pattern, ast.MatchValue):
                        yield pattern.value
                if case.guard is not None:
                    yield case.guard


def step_decisions(source):
    """Line numbers of ``source`` that decide by a machine's step."""
    tree = ast.parse(source)
    imported = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(
                    "machine_steps") for alias in node.names if alias.name in GROUPS}
    lines = set()
    for test in _tests(tree):
        for node in ast.walk(test):
            if isinstance(node, ast.Compare) and any(
                    _names_a_step(operand, imported)
                    for operand in [node.left, *node.comparators]):
                lines.add(node.lineno)
            elif _names_a_step(node, imported) and not isinstance(test, ast.Compare) \
                    and node is test:
                lines.add(node.lineno)  # a case pattern of a step
    return sorted(lines)


def test_no_module_but_the_table_decides_by_a_step():
    found = breaches(step_decisions, allowed=[TABLE])
    assert found == {}, "ask metalboot_framework/machine_steps.py (on, find, goes_on, WORK)"


@pytest.mark.parametrize("source,line", [
    ("if new == Step.DONE:\n    pass", 1),
    ("if job.state != machine_steps.Step.ROLLING_BACK and cancelling:\n    pass", 1),
    ("x = a if t.new in machine_steps.FINISHED else b", 1),
    ("while state not in (Step.DONE, Step.VALID):\n    pass", 1),
    ("if state == 'awaiting_boot':\n    pass", 1),
    ("from metalboot_framework.machine_steps import IN_FLIGHT\nif s in IN_FLIGHT:\n    pass", 2),
    ("match job.state:\n    case Step.VALIDATING:\n        pass", 2),
    ("match job.state:\n    case 'verifying':\n        pass", 2),
])
def test_the_check_sees_each_form_of_decision(source, line):
    assert step_decisions(source) == [line]


def test_the_check_lets_queries_and_the_tables_lookups_be():
    assert step_decisions(
        "q = select(MM.id).where(MM.state == Step.QUEUED)\n"
        "if machine_steps.goes_on(new):\n    pass\n"
        "row = machine_steps.find(job.state, Event.CANCELLED)\n"
        "if row is not None:\n    pass\n"
        "if migration.state == states.CANCELLING:\n    pass\n") == []
