"""The per-machine state machine is one table, and the runner keeps to it."""

import re
from pathlib import Path

import pytest

from metalboot_framework import machine_steps
from metalboot_framework.machine_steps import Event, Lock, Step, Write


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
def test_a_move_that_is_not_in_the_table_is_refused(old, new):
    with pytest.raises(machine_steps.IllegalTransition, match=f"{old} -> {new}"):
        machine_steps.check(old, new)


@pytest.mark.parametrize("step,event", [("done", "started"), ("rolling_back", "cancelled"),
                                        ("queued", "evidence"), ("verifying", "vetoed")])
def test_an_event_a_step_cannot_meet_has_no_row(step, event):
    assert machine_steps.find(step, event) is None
    with pytest.raises(machine_steps.IllegalTransition, match=f"in {step} cannot meet {event}"):
        machine_steps.on(step, event)


def test_each_event_names_one_row_and_a_takeover_its_own_where_it_differs():
    keys = [(t.old, t.on, t.taken_over) for t in machine_steps.TRANSITIONS]
    assert len(keys) == len(set(keys))
    assert machine_steps.on("validating", "step_failed").new == Step.ROLLED_BACK
    assert machine_steps.on("validating", "step_failed", taken_over=True).new == \
        Step.ROLLING_BACK
    assert machine_steps.on("validating", "vetoed").new == Step.SKIPPED
    assert machine_steps.on("validating", "vetoed", taken_over=True).new == Step.ROLLING_BACK
    # a machine taken over in preparing may have been activated: its rollback resets it
    assert Write.ACTIVATED_AT in machine_steps.on("preparing", "cancelled", True).writes
    assert Write.ACTIVATED_AT not in machine_steps.on("preparing", "cancelled").writes
    # where the takeover has no row of its own, the machine's applies
    assert machine_steps.on("verifying", "step_failed", True) is \
        machine_steps.on("verifying", "step_failed")


def test_the_columns_agree_with_the_groups_of_steps():
    """The lock is released exactly with the moves that end the machine's work,
    and the ends are what the runner's coroutine stops at."""
    for t in machine_steps.TRANSITIONS:
        ended = t.new.value in machine_steps.FINISHED
        assert (Write.FINISHED in t.writes) == ended, t
        assert machine_steps.goes_on(t.new.value) == (not ended), t
        if t.old == Step.QUEUED:
            assert t.lock in (Lock.TAKEN, Lock.NOT_HELD), t
        else:
            assert (t.lock is Lock.RELEASED) == ended, t
        assert (Write.AT_REST in t.writes) == (t.new.value in machine_steps.AT_REST), t
    # the moves of one pair of steps are written alike, but for a takeover's own rows
    writes = {}
    for t in machine_steps.TRANSITIONS:
        if not t.taken_over:
            assert writes.setdefault((t.old, t.new), t.writes) == t.writes, t
    events = {t.on for t in machine_steps.TRANSITIONS}
    assert events == set(Event)


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
