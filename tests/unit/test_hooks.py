"""Hooks are called after changes commit; a failing hook changes nothing."""

import logging

from metalboot_framework import hookimpl
from tests.conftest import machine_body


class Recorder:
    def __init__(self):
        self.calls = []

    @hookimpl
    def metalboot_machine_registered(self, machine):
        self.calls.append(("registered", machine["id"]))

    @hookimpl
    def metalboot_machine_updated(self, machine, changes):
        self.calls.append(("updated", machine["id"], tuple(changes)))

    @hookimpl
    def metalboot_machine_deleted(self, machine):
        self.calls.append(("deleted", machine["id"]))

    @hookimpl
    def metalboot_boot_interface_changed(self, machine, old, new, reason):
        self.calls.append(("interface", machine["id"], old, new))

    @hookimpl
    def metalboot_event(self, event):
        self.calls.append(("event", event["kind"]))


class Failing:
    @hookimpl
    def metalboot_machine_registered(self, machine):
        raise RuntimeError("metal-api is down")

    @hookimpl
    def metalboot_machine_updated(self, machine, changes):
        raise RuntimeError("metal-api is down")


def test_hooks_see_changes_and_failures_corrupt_nothing(api, services, partition, caplog):
    recorder = Recorder()
    services.hooks.pm.register(Failing(), name="failing")
    services.hooks.pm.register(recorder, name="recorder")
    caplog.set_level(logging.ERROR)
    mid = machine_body(1)["id"]
    assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    assert api.patch(f"/v1/machines/{mid}", json={"boot_mode": "bios"}).status_code == 200
    assert api.delete(f"/v1/machines/{mid}").status_code == 204
    assert ("registered", mid) in recorder.calls
    assert ("updated", mid, ("boot_mode",)) in recorder.calls
    assert ("deleted", mid) in recorder.calls
    assert ("event", "machine.registered") in recorder.calls
    assert ("event", "machine.deleted") in recorder.calls
    assert "hook metalboot_machine_registered of plugin failing failed" in caplog.text
    # the failing hook did not undo the registration or the update
    assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    assert api.get(f"/v1/machines/{mid}").json["boot_mode"] == "uefi"


def test_boot_interface_changed_hook(api, services, partition):
    recorder = Recorder()
    services.hooks.pm.register(recorder)
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    # only one interface is enabled in unit tests: a same-name change is no change
    api.patch(f"/v1/machines/{mid}", json={"boot_interface": "fake"})
    assert not [c for c in recorder.calls if c[0] == "interface"]


def test_entry_point_hooks_are_loaded(monkeypatch):
    from importlib import metadata

    from metalboot_framework import hooks

    class EP:
        name = "recorder"
        group = "metalboot.hooks"
        value = "tests.unit.test_hooks:RECORDER"

        def load(self):
            return RECORDER

    class Dist:
        entry_points = [EP()]
        metadata = {"name": "metalboot-recorder"}
        _normalized_name = "metalboot_recorder"

    monkeypatch.setattr(metadata, "distributions", lambda: [Dist()])
    pm = hooks.make_plugin_manager()
    assert pm.get_plugin("recorder") is RECORDER
    pm2 = hooks.make_plugin_manager(disabled=["recorder"])
    assert pm2.get_plugin("recorder") is None


RECORDER = Recorder()
