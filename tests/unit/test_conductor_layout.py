"""The conductor's modules each do one job and stay readable in one sitting."""

import ast

from tests.source_rules import ROOT, breaches

CONDUCTOR = ROOT / "metalboot_framework" / "conductor"


def test_no_module_of_the_conductor_is_over_400_lines():
    lengths = {p.name: len(p.read_text().splitlines()) for p in CONDUCTOR.glob("*.py")}
    assert len(lengths) > 10
    assert {name: n for name, n in lengths.items() if n > 400} == {}


def test_one_class_is_named_transition_the_tables_row():
    def transitions(source):
        return [node.lineno for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ClassDef) and node.name == "Transition"]

    assert list(breaches(transitions)) == ["metalboot_framework/machine_steps.py"]
