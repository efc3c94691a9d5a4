"""The conformance kit against ``fake`` and ``fake-alt``: pure, no server, no network.

``fake`` touches nothing outside metalboot: its world is empty, and what the
kit checks here is everything around it (documentation, describe(), every
step succeeding twice, clean-up of an unprepared machine, evidence). What the
plugin did is visible in its call log, which the extra test below reads.
"""

from metalboot_framework.testing.conformance import BootInterfaceConformance


class TestFakeConformance(BootInterfaceConformance):
    interface_name = "fake"
    other_interface = "fake-alt"

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
        self.interface.validate(self.task)
        self.interface.prepare(self.task)
        self.interface.activate(self.task)
        self.interface.clean_up(self.task)
        assert list(calls) == [(step, self.task.machine.id)
                               for step in ("validate", "prepare", "activate", "clean_up")]


class TestFakeAltConformance(BootInterfaceConformance):
    interface_name = "fake-alt"
    other_interface = "fake"

    def snapshot_world(self):
        return {}

    def invalid_machine_fields(self):
        fields = self.machine_fields(2)
        fields["properties"] = {"fake_fail": {"validate": "simulated refusal"}}
        return fields
