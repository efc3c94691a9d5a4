"""The per-machine state machine is one table, and the runner keeps to it."""

import pytest

from metalboot_framework.conductor import fsm
from metalboot_framework.conductor.steps import Transition


def test_every_step_is_reached_and_only_ends_have_no_way_out():
    froms = {t.old.value for t in fsm.TRANSITIONS}
    tos = {t.new.value for t in fsm.TRANSITIONS}
    assert set(fsm.ALL) == {s.value for s in fsm.Step}
    assert tos | {"queued"} == set(fsm.ALL)
    assert froms == set(fsm.ALL) - set(fsm.FINISHED)
    assert not froms & set(fsm.FINISHED)


def test_groups_are_consistent():
    assert set(fsm.ACTIVE) | set(fsm.FINISHED) == set(fsm.ALL)
    assert not set(fsm.ACTIVE) & set(fsm.FINISHED)
    assert set(fsm.SUCCEEDED) | set(fsm.FAILED) < set(fsm.FINISHED)
    assert set(fsm.RUNNABLE) == set(fsm.IN_FLIGHT) - {"awaiting_boot"}
    assert fsm.FORWARD == {"validating": "preparing", "preparing": "activating",
                           "activating": "awaiting_boot", "verifying": "done"}


@pytest.mark.parametrize("old,new", [("done", "queued"), ("queued", "done"),
                                     ("awaiting_boot", "done"), ("rolled_back", "rolling_back"),
                                     ("validating", "nonsense")])
def test_the_runner_refuses_a_move_that_is_not_in_the_table(old, new):
    with pytest.raises(fsm.IllegalTransition, match=f"{old} -> {new}"):
        Transition("mig", "m1", old, new, "reason")


def test_every_move_in_the_table_is_accepted():
    for t in fsm.TRANSITIONS:
        assert Transition("mig", "m1", t.old.value, t.new.value, "reason").new == t.new


def test_api_cli_and_boot_server_take_their_steps_from_the_table():
    from metalboot_framework import artifacts, inventory, migrations
    from metalboot_framework.api import schemas
    from metalboot_framework.cli import migrations as cli

    assert schemas.MACHINE_STEPS == fsm.ALL
    assert cli.STEP_ORDER == fsm.ALL
    assert inventory.ACTIVE_MIGRATION_STEPS == fsm.ACTIVE
    assert migrations.FINISHED == fsm.FINISHED
    assert artifacts.BOOTING_STEPS == fsm.BOOTING


def test_the_documents_are_generated_from_every_row():
    dot, table = fsm.dot(), fsm.rst_table()
    for t in fsm.TRANSITIONS:
        assert f"{t.old.value} -> {t.new.value}" in dot
        assert t.event in table
