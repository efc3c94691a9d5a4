"""The step runner against the table of :mod:`metalboot_framework.machine_steps`.

In one process: a real SQLite store, the API app (served on loopback for the
``fake`` plugin's simulated boots), a conductor with its scheduler and step
loop, and the ``fake``/``fake-alt`` plugins. The paths machines take are heard
through the ``metalboot_machine_step_changed`` hook, in commit order.

Crashes are injected by :class:`Crash`, a ``BaseException`` raised from inside a
plugin step: nothing in the runner handles it, so the machine's coroutine dies
in the middle of its step (its lock is given back, as a dead conductor's is
taken over), and the conductor's next scan resumes it from what was persisted.
For moves the runner commits while the next step already runs, the crash can
also come before that commit: the test then puts the persisted step back, as
the commit would have been lost.
"""

import threading
import time

import pytest
from sqlalchemy import update
from werkzeug.serving import make_server

from metalboot_framework import hookimpl
from metalboot_framework import machine_steps
from metalboot_framework.conductor import manager as manager_mod
from metalboot_framework.store import models
from tests.conftest import ApiClient, free_port, machine_body

SOURCE, TARGET = "fake", "fake-alt"
HAPPY = ["validating", "preparing", "activating", "awaiting_boot", "verifying", "done"]


class Crash(BaseException):
    """The conductor dies here (injected by the test; no handler catches it)."""


class StepRecorder:
    def __init__(self):
        self.paths = {}
        self.lock = threading.Lock()

    @hookimpl
    def metalboot_machine_step_changed(self, machine_id, old, new):
        with self.lock:
            self.paths.setdefault(machine_id, []).append((old, new))


class Vetoer:
    @hookimpl
    def metalboot_veto_machine(self, machine):
        return "held by the test" if machine["properties"].get("veto") else None


class World:
    """An in-process metalboot: API, store, conductor, fake plugins."""

    def __init__(self, services, api, conductor, recorder):
        self.services, self.api, self.conductor, self.recorder = (
            services, api, conductor, recorder)

    def register(self, n, **properties):
        body = machine_body(n, properties={"fake_autoboot": True, **properties})
        fail = body["properties"].pop("fake_fail", None)
        r = self.api.post("/v1/machines", json=body)
        assert r.status_code == 201, r.json
        self.wait(lambda: self.api.get(f"/v1/machines/{body['id']}").json["state"] == "ready")
        if fail:
            props = dict(body["properties"], fake_fail=fail)
            assert self.api.patch(f"/v1/machines/{body['id']}",
                                  json={"properties": props}).status_code == 200
        return body["id"]

    def migrate(self, ids, **options):
        r = self.api.post("/v1/migrations", json={"selector": {"machines": ids},
                                                  "boot_interface": TARGET, **options})
        assert r.status_code == 202, r.json
        return r.json["id"]

    def finished(self, migration_id, timeout=60):
        self.wait(lambda: self.api.get(f"/v1/migrations/{migration_id}").json["finished_at"],
                  timeout)
        return self.states(migration_id)

    def states(self, migration_id):
        return {m["machine_id"]: m["state"] for m in self.api.get(
            f"/v1/migrations/{migration_id}/machines?limit=1000").json["machines"]}

    def path(self, machine_id):
        moves = self.recorder.paths.get(machine_id, [])
        return [new for _, new in moves]

    def calls(self, interface, machine_id):
        return [step for step, mid in self.services.interfaces.get(interface).calls
                if mid == machine_id]

    @staticmethod
    def wait(condition, timeout=60):
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.02)


@pytest.fixture
def world(conf):
    from metalboot_framework.api import create_app
    from metalboot_framework.services import Services

    port = free_port()
    conf.set_override("public_url", f"http://127.0.0.1:{port}", group="api")
    conf.set_override("poll_interval", 0.05, group="conductor")
    conf.set_override("workers", 16, group="conductor")
    services = Services.from_conf(conf)
    recorder = StepRecorder()
    services.hooks.pm.register(recorder, name="step-recorder")
    services.hooks.pm.register(Vetoer(), name="vetoer")
    app = create_app(services)
    httpd = make_server("127.0.0.1", port, app, threaded=True)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                     daemon=True).start()
    conductor = manager_mod.Conductor(services)
    conductor.start()
    api = ApiClient(app.test_client())
    assert api.post("/v1/partitions", json={"id": "p1"}).status_code == 201
    try:
        yield World(services, api, conductor, recorder)
    finally:
        conductor.stop()
        httpd.shutdown()
        services.step_loop.close()
        services.db.dispose()


# (properties, migration options, the path the machine takes, its last step)
SCENARIOS = {
    "booted": ({}, {}, HAPPY),
    "validate failed": ({"fake_fail": {f"{TARGET}.validate": "no"}}, {},
                        ["validating", "rolled_back"]),
    "vetoed": ({"veto": True}, {}, ["validating", "skipped"]),
    "prepare failed": ({"fake_fail": {f"{TARGET}.prepare": "no"}}, {},
                       ["validating", "preparing", "rolling_back", "rolled_back"]),
    "activate failed": ({"fake_fail": {f"{TARGET}.activate": "no"}}, {},
                        ["validating", "preparing", "activating", "rolling_back",
                         "rolled_back"]),
    "never booted": ({"fake_autoboot": False}, {"boot_timeout": 1},
                     HAPPY[:4] + ["rolling_back", "rolled_back"]),
    "source clean_up failed": ({"fake_fail": {f"{SOURCE}.clean_up": "no"}}, {},
                               HAPPY[:5] + ["rolling_back", "rolled_back"]),
    "rollback failed": ({"fake_fail": {f"{TARGET}.prepare": "no", f"{TARGET}.clean_up": "no"}},
                        {}, ["validating", "preparing", "rolling_back", "rollback_failed"]),
    "dry run valid": ({}, {"dry_run": True}, ["validating", "valid"]),
    "dry run invalid": ({"fake_fail": {f"{TARGET}.validate": "no"}}, {"dry_run": True},
                        ["validating", "invalid"]),
}


def test_each_scenario_takes_its_path_and_together_they_cover_the_table(world):
    """Every row of the table but the cancellations and resumes (tested below) is
    taken by one scenario, and no machine makes a move outside the table."""
    started = {}
    for n, (name, (props, options, path)) in enumerate(SCENARIOS.items()):
        machine_id = world.register(n, **props)
        started[name] = (world.migrate([machine_id], max_failures="100%", **options),
                         machine_id, path)
    for name, (migration_id, machine_id, path) in started.items():
        states = world.finished(migration_id)
        assert states[machine_id] == path[-1], name
        assert world.path(machine_id) == path, name
    seen = {move for moves in world.recorder.paths.values() for move in moves}
    table = {(t.old.value, t.new.value) for t in machine_steps.TRANSITIONS}
    assert seen <= table
    not_seen = table - seen
    assert not_seen == {("queued", "cancelled"), ("validating", "rolling_back")}


def test_a_rollback_after_activation_sets_the_source_up_again(world):
    machine_id = world.register(1, fake_autoboot=False)
    migration_id = world.migrate([machine_id], boot_timeout=1)
    assert world.finished(migration_id)[machine_id] == "rolled_back"
    assert world.calls(TARGET, machine_id)[-1] == "clean_up"
    assert world.calls(SOURCE, machine_id)[-2:] == ["prepare", "activate"]


def test_cancelling_cancels_the_queued_and_rolls_back_the_ones_in_flight(world):
    waiting = world.register(1, fake_autoboot=False)
    queued = world.register(2)
    migration_id = world.migrate([waiting, queued], max_parallel=1, boot_timeout=600)
    world.wait(lambda: world.path(waiting)[-1:] == ["awaiting_boot"])
    assert world.api.post(f"/v1/migrations/{migration_id}/cancel").status_code in (200, 202)
    states = world.finished(migration_id)
    assert states == {waiting: "rolled_back", queued: "cancelled"}
    assert world.path(waiting) == HAPPY[:4] + ["rolling_back", "rolled_back"]
    assert world.path(queued) == ["cancelled"]


# The steps in which the conductor can die inside a plugin call, the move into
# that step, and whether the runner commits that move while the step runs (so
# that a crash may lose it): from the table.
_INTO = {t.new.value: t.old.value for t in machine_steps.TRANSITIONS
         if t.old.value in machine_steps.IN_FLIGHT and t.new.value in machine_steps.IN_FLIGHT
         and t.new != machine_steps.Step.ROLLING_BACK}
_COMMIT = {(t.old.value, t.new.value): t.commit for t in machine_steps.TRANSITIONS}
CRASH_POINTS = [("validating", "queued", False)] + [
    (step, _INTO[step], _COMMIT[(_INTO[step], step)] == machine_steps.Commit.QUEUED)
    for step in ("preparing", "activating", "verifying")]
STEP_CALLS = {"validating": (TARGET, "validate"), "preparing": (TARGET, "prepare"),
              "activating": (TARGET, "activate"), "verifying": (SOURCE, "clean_up")}


def _crash_cases():
    for step, before, queued in CRASH_POINTS:
        yield pytest.param(step, before, False, id=f"{step}-committed")
        if queued:
            yield pytest.param(step, before, True, id=f"{step}-commit-lost")


@pytest.mark.parametrize("step,before,lost", list(_crash_cases()))
def test_a_conductor_that_dies_in_a_step_is_resumed_to_the_end(world, monkeypatch,
                                                               step, before, lost):
    """The runner dies inside the step's plugin call; resumed from what was
    persisted, the machine still ends ``done``, and the step that died (and,
    where its move was lost, the one before) is called again."""
    from metalboot_fake.boot_interface import FakeBootInterface

    interface, call = STEP_CALLS[step]
    crashed = threading.Event()
    original_end = FakeBootInterface._end

    def end(self, step_name, task):
        if self.name == interface and step_name == call and not crashed.is_set():
            crashed.set()
            raise Crash(f"conductor died in {interface}.{call}")
        return original_end(self, step_name, task)

    monkeypatch.setattr(FakeBootInterface, "_end", end)
    # the scan that resumes machines nobody runs: held back until the test says
    monkeypatch.setattr(manager_mod, "RESCAN_INTERVAL", 3600.0)
    world.conductor._last_scan = time.monotonic()

    machine_id = world.register(1)
    migration_id = world.migrate([machine_id])
    world.wait(crashed.is_set)
    world.wait(lambda: world.api.get(f"/v1/machines/{machine_id}").json["lock"] is None)
    assert world.states(migration_id)[machine_id] == step
    if lost:
        with world.services.db.write() as s:
            assert s.execute(update(models.MigrationMachine).where(
                models.MigrationMachine.machine_id == machine_id,
                models.MigrationMachine.state == step).values(state=before)).rowcount == 1
    calls_before = {name: list(world.calls(name, machine_id)) for name in (SOURCE, TARGET)}
    world.conductor._last_scan = float("-inf")
    world.conductor._wake.set()
    assert world.finished(migration_id)[machine_id] == "done"
    again = world.calls(interface, machine_id)[len(calls_before[interface]):]
    assert again[0] == (STEP_CALLS[before][1] if lost and before in STEP_CALLS else call)
    assert call in again
    assert world.path(machine_id)[-1] == "done"


def test_a_machine_left_awaiting_its_boot_is_taken_by_the_scan_and_moves_on(world,
                                                                             monkeypatch):
    """A conductor that stops leaves machines awaiting their boot unlocked
    (see Conductor.stop); the next scan takes them, and their coroutines wait
    for their evidence until the deadline persisted with their move."""
    monkeypatch.setattr(manager_mod, "RESCAN_INTERVAL", 3600.0)
    world.conductor._last_scan = time.monotonic()
    booted, silent = world.register(1, fake_autoboot=False), world.register(2,
                                                                            fake_autoboot=False)
    migration_id = world.migrate([booted, silent], boot_timeout=3)
    world.wait(lambda: all(world.path(m)[-1:] == ["awaiting_boot"] for m in (booted, silent)))
    world.conductor.runner.stopping = True  # their waits end as in a stop
    world.conductor.evidence.wake()
    world.wait(lambda: all(world.api.get(f"/v1/machines/{m}").json["lock"] is None
                           for m in (booted, silent)))
    world.conductor.runner.stopping = False
    assert world.states(migration_id) == {booted: "awaiting_boot", silent: "awaiting_boot"}
    with world.services.db.write_conn() as conn:
        conn.execute(models.BootEvidence.__table__.insert(), {
            "machine_id": booted, "interface": TARGET, "kind": "report", "path": "",
            "client_address": "127.0.0.1", "created_at": models.utcnow()})
    time.sleep(3)  # both deadlines pass while nobody waits for them
    world.conductor._last_scan = float("-inf")
    world.conductor._wake.set()
    assert world.finished(migration_id) == {booted: "done", silent: "rolled_back"}
    assert world.path(booted) == HAPPY
    assert world.path(silent) == HAPPY[:4] + ["rolling_back", "rolled_back"]
