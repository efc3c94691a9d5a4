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
    assert ("hook metalboot_machine_registered of "
            "tests.unit.test_hooks.Failing.metalboot_machine_registered failed") in caplog.text
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


def _boot_script(app, api, services, mid):
    path = services.task(mid, "fake").artifact_url("boot.ipxe").split("6480", 1)[1]
    r = app.test_client().get(path)
    assert r.status_code == 200
    return r.data.decode()


def test_amenders_fold_in_pluggy_order_inside_a_wrapper(app, api, services, partition):
    """Each amender sees the script as amended so far; the wrapper sees the
    text before and after them; tryfirst amends first whatever the order of
    registration."""
    seen = []

    class First:
        @hookimpl(tryfirst=True)
        def metalboot_amend_boot_script(self, script):
            seen.append(("first", script.text.count("# amended")))
            script.text += "# amended by first\n"

    class Second:
        @hookimpl
        def metalboot_amend_boot_script(self, machine, script):
            seen.append(("second", script.text.count("# amended")))
            script.text += f"# amended by second for {machine.id}\n"

    class Wrapper:
        @hookimpl(wrapper=True)
        def metalboot_amend_boot_script(self, script):
            before = script.text
            answers = yield
            seen.append(("wrapper", script.text.startswith(before), answers))
            script.text += "# wrapped\n"
            return answers

    services.hooks.pm.register(Second(), name="second")  # registered first: called last
    services.hooks.pm.register(First(), name="first")    # tryfirst anyway
    services.hooks.pm.register(Wrapper(), name="wrapper")
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    text = _boot_script(app, api, services, mid)
    assert text.endswith(f"# amended by first\n# amended by second for {mid}\n# wrapped\n")
    assert seen[:3] == [("first", 0), ("second", 1), ("wrapper", True, [])]


def test_a_failing_amender_is_skipped_and_the_others_still_amend(
        app, api, services, partition, caplog):
    class Broken:
        @hookimpl(tryfirst=True)
        def metalboot_amend_boot_script(self, script):
            script.text += "# half"
            raise RuntimeError("broken amender")

    class Good:
        @hookimpl
        def metalboot_amend_boot_script(self, script):
            script.text += "\n# good\n"

    services.hooks.pm.register(Good(), name="good")
    services.hooks.pm.register(Broken(), name="broken")
    caplog.set_level(logging.ERROR)
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    assert _boot_script(app, api, services, mid).endswith("# good\n")
    assert "Broken.metalboot_amend_boot_script failed" in caplog.text


def test_an_amender_that_sets_no_string_leaves_the_script_as_rendered(
        app, api, services, partition, caplog):
    class Bad:
        @hookimpl
        def metalboot_amend_boot_script(self, script):
            script.text = None

    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    rendered = _boot_script(app, api, services, mid)
    services.hooks.pm.register(Bad(), name="bad")
    caplog.set_level(logging.ERROR)
    assert _boot_script(app, api, services, mid) == rendered
    assert "not a string" in caplog.text


def test_a_wrapper_of_a_notification_hook_runs_and_a_failing_one_is_contained(
        api, services, partition, caplog):
    calls = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def metalboot_machine_registered(self, machine):
            calls.append(("before", machine["id"]))
            result = yield
            calls.append(("after", machine["id"]))
            return result

    class RaisingWrapper:
        @hookimpl(wrapper=True)
        def metalboot_machine_registered(self, machine):
            yield
            raise RuntimeError("wrapper broke")

    recorder = Recorder()
    services.hooks.pm.register(recorder, name="recorder")
    services.hooks.pm.register(Wrapper(), name="wrapper")
    services.hooks.pm.register(RaisingWrapper(), name="raising")
    caplog.set_level(logging.ERROR)
    mid = machine_body(1)["id"]
    assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    assert calls == [("before", mid), ("after", mid)]
    assert ("registered", mid) in recorder.calls
    assert "hook metalboot_machine_registered failed; ignored" in caplog.text
    assert api.get(f"/v1/machines/{mid}").status_code == 200


def test_a_missing_argument_is_the_callers_error_not_the_plugins(services):
    import pluggy
    import pytest

    services.hooks.pm.register(Recorder(), name="recorder")
    # pluggy warns of the missing argument, then refuses the call
    with pytest.warns(UserWarning, match="'changes'"), pytest.raises(pluggy.HookCallError):
        services.hooks.notify("metalboot_machine_updated", machine={"id": "m"})


def test_veto_reasons_name_their_plugin_and_a_failing_veto_is_no_answer(services, caplog):
    class Allocated:
        @hookimpl
        def metalboot_veto_machine(self, machine):
            return f"{machine['id']} is allocated"

    class Silent:
        @hookimpl
        def metalboot_veto_machine(self, machine, migration):
            return None

    class Broken:
        @hookimpl
        def metalboot_veto_machine(self, migration):
            raise RuntimeError("metal-api is down")

    for plugin, name in ((Allocated(), "allocation"), (Silent(), "silent"),
                         (Broken(), "broken")):
        services.hooks.pm.register(plugin, name=name)
    caplog.set_level(logging.ERROR)
    assert services.hooks.veto_reasons(machine={"id": "m1"}, migration={"id": "x"}) == [
        ("allocation", "m1 is allocated")]
    assert "Broken.metalboot_veto_machine failed" in caplog.text


def test_a_veto_wrapper_runs_once_around_every_answer(services):
    calls = []

    class Allocated:
        @hookimpl
        def metalboot_veto_machine(self, machine):
            return f"{machine['id']} is allocated"

    class Maintenance:
        @hookimpl
        def metalboot_veto_machine(self, machine):
            return "in maintenance"

    class Counting:
        @hookimpl(wrapper=True)
        def metalboot_veto_machine(self, machine):
            answers = yield
            calls.append(list(answers))
            return answers

    for plugin, name in ((Allocated(), "allocation"), (Maintenance(), "maintenance"),
                         (Counting(), "counting")):
        services.hooks.pm.register(plugin, name=name)
    assert services.hooks.veto_reasons(machine={"id": "m1"}, migration={"id": "x"}) == [
        ("maintenance", "in maintenance"), ("allocation", "m1 is allocated")]
    assert calls == [["in maintenance", "m1 is allocated"]]


def test_a_veto_wrapper_decides_the_answers(services):
    class Allocated:
        @hookimpl
        def metalboot_veto_machine(self, machine):
            return "allocated"

    class Overruling:
        @hookimpl(wrapper=True)
        def metalboot_veto_machine(self):
            yield
            return ["frozen fleet"]

    services.hooks.pm.register(Allocated(), name="allocation")
    services.hooks.pm.register(Overruling(), name="overruling")
    assert services.hooks.veto_reasons(machine={"id": "m1"}, migration={"id": "x"}) == [
        ("overruling", "frozen fleet")]
