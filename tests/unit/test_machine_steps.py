"""The per-machine state machine is one table, and the runner keeps to it."""

import re
from pathlib import Path

import pytest

from metalboot_framework import machine_steps
from metalboot_framework.conductor.steps import Transition


def test_every_step_is_reached_and_only_ends_have_no_way_out():
    froms = {t.old.value for t in machine_steps.TRANSITIONS}
    tos = {t.new.value for t in machine_steps.TRANSITIONS}
    assert set(machine_steps.ALL) == {s.value for s in machine_steps.Step}
    assert tos | {"queued"} == set(machine_steps.ALL)
    assert froms == set(machine_steps.ALL) - set(machine_steps.FINISHED)
    assert not froms & set(machine_steps.FINISHED)


def test_groups_are_consistent():
    assert set(machine_steps.ACTIVE) | set(machine_steps.FINISHED) == set(machine_steps.ALL)
    assert not set(machine_steps.ACTIVE) & set(machine_steps.FINISHED)
    assert set(machine_steps.SUCCEEDED) | set(machine_steps.FAILED) < set(machine_steps.FINISHED)
    assert set(machine_steps.RUNNABLE) == set(machine_steps.IN_FLIGHT) - {"awaiting_boot"}
    forward = {old: t.new.value for old, t in machine_steps.FORWARD_MOVES.items()}
    assert forward == {"validating": "preparing", "preparing": "activating",
                       "activating": "awaiting_boot", "verifying": "done"}


def test_the_runner_makes_each_forward_call_the_table_names():
    """The runner calls what the table's forward moves name, and commits the
    moves the table marks "queued" without waiting (a crash re-runs a harmless
    step): those four and no other."""
    calls = {old: machine_steps.plugin_call(t) for old, t in machine_steps.FORWARD_MOVES.items()}
    assert calls == {"validating": ("target", "validate"), "preparing": ("target", "prepare"),
                     "activating": ("target", "activate"), "verifying": ("source", "clean_up")}
    queued = {(t.old.value, t.new.value) for t in machine_steps.TRANSITIONS
              if t.commit is machine_steps.Commit.QUEUED}
    assert queued == {("validating", "preparing"), ("preparing", "activating"),
                      ("activating", "awaiting_boot"), ("awaiting_boot", "verifying")}
    with pytest.raises(ValueError, match="not one plugin call"):
        machine_steps.plugin_call(machine_steps.TRANSITIONS[-1])


@pytest.mark.parametrize("old,new", [("done", "queued"), ("queued", "done"),
                                     ("awaiting_boot", "done"), ("rolled_back", "rolling_back"),
                                     ("validating", "nonsense")])
def test_the_runner_refuses_a_move_that_is_not_in_the_table(old, new):
    with pytest.raises(machine_steps.IllegalTransition, match=f"{old} -> {new}"):
        Transition("mig", "m1", old, new, "reason")


def test_every_move_in_the_table_is_accepted():
    for t in machine_steps.TRANSITIONS:
        assert Transition("mig", "m1", t.old.value, t.new.value, "reason").new == t.new


def test_api_cli_and_boot_server_take_their_steps_from_the_table():
    from metalboot_framework import artifacts
    from metalboot_framework.api import schemas
    from metalboot_framework.cli import migrations as cli

    assert schemas.MACHINE_STEPS == machine_steps.ALL
    assert cli.STEP_ORDER == machine_steps.ALL
    assert artifacts.BOOTING_STEPS == machine_steps.BOOTING


def test_the_dashboard_names_the_tables_steps():
    """The dashboard is static JavaScript with its own display order of the
    steps: it must name every step of the table, and only those."""
    script = (Path(machine_steps.__file__).parent / "api" / "dashboard" /
              "dashboard.js").read_text()

    def js_list(name):
        found = re.search(rf"const {name} = \[([^\]]*)\];", script)
        assert found, f"no {name} list in dashboard.js"
        return re.findall(r'"([a-z_]+)"', found.group(1))

    order = js_list("ORDER")
    assert sorted(order) == sorted(machine_steps.ALL)
    assert set(js_list("FAILED")) == set(machine_steps.FAILED)


def test_the_documents_are_generated_from_every_row():
    dot, table = machine_steps.dot(), machine_steps.rst_table()
    for t in machine_steps.TRANSITIONS:
        assert f"{t.old.value} -> {t.new.value}" in dot
        assert t.event in table
