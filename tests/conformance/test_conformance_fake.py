"""The conformance kit against ``fake`` and ``fake-alt`` (steps written as
coroutines) and ``fake-blocking`` and ``fake-blocking-alt`` (the same steps as
blocking functions): pure, no server, no network.

``fake`` touches nothing outside metalboot: its world is empty, and what the
kit checks here is everything around it (documentation, describe(), every
step succeeding twice, clean-up of an unprepared machine, evidence). What the
plugin did is visible in its call log, which the extra test below reads.
"""

from sqlalchemy import select

from metalboot_framework.steploop import is_coroutine_step
from metalboot_framework.store import models
from metalboot_framework.testing.conformance import BootInterfaceConformance

STEPS = ("validate", "prepare", "activate", "clean_up")


def latest_event_kinds(services, machine_id):
    with services.db.read() as s:
        return list(s.scalars(select(models.Event.kind).where(
            models.Event.machine_id == machine_id).order_by(models.Event.id)))


class TestFakeConformance(BootInterfaceConformance):
    interface_name = "fake"
    other_interface = "fake-alt"
    coroutine_steps = True

    def snapshot_world(self):
        # fake reaches no BMC, DHCP server or file ([fake] console_log is unset).
        return {}

    def invalid_machine_fields(self):
        fields = self.machine_fields(2)
        fields["properties"] = {"fake_fail": "not a mapping"}
        return fields

    def test_steps_reach_the_plugin(self):
        calls = self.interface.calls
        calls.clear()
        for step in STEPS:
            self.step(step, self.task)
        assert list(calls) == [(step, self.task.machine.id) for step in STEPS]

    def test_each_step_is_in_the_machine_history(self):
        """record_events: each call is an event, committed when the step returns
        (a coroutine step awaits the commit on the step loop)."""
        for step in STEPS:
            self.step(step, self.task)
            assert latest_event_kinds(self.services, self.task.machine.id)[-1] == \
                f"{self.interface_name}.{step}"

    def test_steps_are_coroutines_or_blocking_as_declared(self):
        assert [is_coroutine_step(getattr(self.interface, step)) for step in STEPS] == \
            [self.coroutine_steps] * len(STEPS)


class TestFakeAltConformance(BootInterfaceConformance):
    interface_name = "fake-alt"
    other_interface = "fake"
    coroutine_steps = True

    test_each_step_is_in_the_machine_history = \
        TestFakeConformance.test_each_step_is_in_the_machine_history

    def snapshot_world(self):
        return {}

    def invalid_machine_fields(self):
        fields = self.machine_fields(2)
        fields["properties"] = {"fake_fail": {"validate": "simulated refusal"}}
        return fields


class TestFakeBlockingConformance(TestFakeConformance):
    interface_name = "fake-blocking"
    other_interface = "fake-blocking-alt"
    coroutine_steps = False


class TestFakeBlockingAltConformance(TestFakeAltConformance):
    interface_name = "fake-blocking-alt"
    other_interface = "fake-blocking"
