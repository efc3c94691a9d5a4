"""Hooks around migrations in a real server: a veto plugin installed as a
distribution, the webhook notifier against a real HTTP receiver, and drift."""

import http.server
import json
import threading
import time

import pytest

from metalboot_framework.testing.simulator import SILENT, SimulatedFleet
from tests.conftest import free_port
from tests.functional.test_migrations import machine_states, migrate, setup_machines, wait_for

pytestmark = pytest.mark.functional

VETO_PLUGIN = '''
from metalboot_framework import hookimpl

@hookimpl
def metalboot_veto_machine(machine, migration):
    if machine["properties"].get("allocated"):
        return "metal-api says the machine is allocated"
'''


@pytest.fixture
def veto_site(tmp_path):
    site = tmp_path / "veto-site"
    dist = site / "metalboot_veto-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: metalboot-veto\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[metalboot.hooks]\nallocation-guard = metalboot_veto\n")
    (site / "metalboot_veto.py").write_text(VETO_PLUGIN)
    return site


STEP_RECORDER = '''
import json, os
from metalboot_framework import hookimpl

@hookimpl
def metalboot_machine_step_changed(machine_id, migration_id, old, new, reason):
    with open(os.environ["STEP_LOG"], "a") as f:
        f.write(json.dumps([machine_id, old, new]) + "\\n")
'''


def test_step_hooks_see_every_step_in_order(server_factory, tmp_path):
    """Some transitions are committed while the worker already runs the next
    step (validating -> preparing) or has ended (activating -> awaiting_boot):
    the hook still hears each machine's steps once each, in the order they were
    committed."""
    site = tmp_path / "recorder-site"
    dist = site / "metalboot_step_recorder-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: metalboot-step-recorder\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[metalboot.hooks]\nstep-recorder = metalboot_step_recorder\n")
    (site / "metalboot_step_recorder.py").write_text(STEP_RECORDER)
    log = tmp_path / "steps.jsonl"
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n",
                            env={"PYTHONPATH": str(site), "STEP_LOG": str(log)}).start()
    ids = setup_machines(server, 12)
    with SimulatedFleet(server.url, server.token):
        m = wait_for(server, migrate(server, ids, max_parallel=4)["id"])
    assert m["counts"] == {"done": 12}
    heard = {}
    for line in log.read_text().splitlines():
        machine_id, old, new = json.loads(line)
        heard.setdefault(machine_id, []).append((old, new))
    path = ["queued", "validating", "preparing", "activating", "awaiting_boot", "verifying",
            "done"]
    expected = list(zip(path, path[1:], strict=False))
    assert {mid: heard.get(mid) for mid in ids} == {mid: expected for mid in ids}


def test_veto_hook_skips_with_reason(server_factory, veto_site):
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n",
                            env={"PYTHONPATH": str(veto_site)}).start()
    ids = setup_machines(server, 3)
    server.request("PATCH", f"/v1/machines/{ids[1]}", json={"properties": {"allocated": True}})
    with SimulatedFleet(server.url, server.token):
        m = wait_for(server, migrate(server, ids)["id"])
    per = machine_states(server, m["id"])
    assert per[ids[1]]["state"] == "skipped"
    assert per[ids[1]]["last_error"] == \
        "veto: allocation-guard: metal-api says the machine is allocated"
    assert per[ids[0]]["state"] == "done" and per[ids[2]]["state"] == "done"
    machine = server.request("GET", f"/v1/machines/{ids[1]}").json()
    assert machine["boot_interface"] == "fake" and machine["state"] == "ready"


def test_a_machine_vetoed_when_resumed_in_validating_is_rolled_back(server_factory,
                                                                     veto_site):
    """Resumed in validating after a crash, the machine may have been prepared
    (the move to preparing is committed while prepare runs): a veto then rolls
    it back through the target's clean_up instead of skipping it."""
    from tests.functional.test_migrations import (fake_calls,
                                                  killed_in_validate_and_restarted, steps_of)

    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n",
                            env={"PYTHONPATH": str(veto_site)}).start()
    machine_id = setup_machines(server, 1)[0]
    # allocated while the conductor was down
    m = killed_in_validate_and_restarted(server, machine_id, {"allocated": True})
    wait_for(server, m["id"])
    per = machine_states(server, m["id"])
    assert per[machine_id]["state"] == "rolled_back"
    assert per[machine_id]["last_error"] == \
        "veto: allocation-guard: metal-api says the machine is allocated"
    assert steps_of(server, machine_id) == ["validating", "rolling_back", "rolled_back"]
    assert fake_calls(server, machine_id) == [("clean_up", "fake-alt")]


def test_vetoed_canary_is_replaced_by_the_next_machine(server_factory, veto_site):
    """The canary is vetoed: the next machine becomes the canary, and its failure
    halts the wave before the others start (without the replacement they would
    start at once, unproven, and finish)."""
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n",
                            env={"PYTHONPATH": str(veto_site)}).start()
    ids = setup_machines(server, 4)
    server.request("PATCH", f"/v1/machines/{ids[0]}", json={"properties": {"allocated": True}})
    with SimulatedFleet(server.url, server.token, behaviour={ids[1]: SILENT}):
        m = wait_for(server, migrate(server, ids, canary=1, max_parallel=4,
                                     boot_timeout=2)["id"])
    assert m["state"] == "halted"
    assert m["reason"].startswith(f"canary machine {ids[1]} failed"), m["reason"]
    per = machine_states(server, m["id"])
    assert per[ids[0]]["state"] == "skipped" and per[ids[0]]["canary"]
    assert per[ids[1]]["canary"] and per[ids[1]]["state"] == "rolled_back"
    for mid in ids[2:]:
        assert not per[mid]["canary"]
        assert per[mid]["state"] == "cancelled" and per[mid]["started_at"] is None
    events = server.request("GET", "/v1/events", params={
        "migration_id": m["id"], "limit": 1000}).json()["events"]
    replaced = [e for e in events if e["kind"] == "migration.canary_replaced"]
    assert [(e["machine_id"], e["data"]["replaces"]) for e in replaced] == [(ids[1], ids[0])]
    assert "vetoed: allocation-guard" in replaced[0]["data"]["reason"]


class Receiver(http.server.ThreadingHTTPServer):
    """A webhook receiver on loopback: fails the first ``failures`` POSTs with 500,
    or sleeps ``delay`` seconds per POST."""

    def __init__(self, failures=0, delay=0.0):
        self.events, self.attempts = [], 0
        self.failures, self.delay = failures, delay
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.attempts += 1
                if receiver.delay:
                    time.sleep(receiver.delay)
                if receiver.attempts <= receiver.failures:
                    self.send_response(500)
                else:
                    receiver.events.append((body, self.headers.get("Authorization")))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/metalboot"
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_webhook_delivers_every_event_once_with_retries(server_factory):
    receiver = Receiver(failures=3)
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n"
                            f"[webhook]\nurl = {receiver.url}\ntoken = hook-secret\n").start()
    ids = setup_machines(server, 3)
    with SimulatedFleet(server.url, server.token):
        wait_for(server, migrate(server, ids)["id"])
    feed = server.request("GET", "/v1/events", params={"limit": 1000}).json()["events"]
    deadline = time.monotonic() + 30
    while len(receiver.events) < len(feed) and time.monotonic() < deadline:
        time.sleep(0.1)
    received = [e for e, _ in receiver.events]
    # every event exactly once, as the feed shows it (threads that commit at
    # nearly the same time may notify in either order: the feed has the order)
    assert sorted(e["id"] for e in received) == sorted(e["id"] for e in feed)
    by_id = {e["id"]: e for e in feed}
    assert all(e == by_id[e["id"]] for e in received)
    assert {auth for _, auth in receiver.events} == {"Bearer hook-secret"}
    assert receiver.attempts == len(feed) + 3
    server.stop()
    assert "hook-secret" not in server.log()


def test_webhook_says_how_a_finished_migration_went(server_factory):
    """A migration whose machines all rolled back is done; the webhook's event
    of that change says it failed, with the counts."""
    receiver = Receiver()
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n"
                            f"[webhook]\nurl = {receiver.url}\n").start()
    ids = setup_machines(server, 2)  # nobody boots them: both roll back
    m = wait_for(server, migrate(server, ids, boot_timeout=1)["id"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        changes = [e for e, _ in receiver.events if e["kind"] == "migration.state"]
        if changes:
            break
        time.sleep(0.1)
    assert [(e["migration_id"], e["data"]["old"], e["data"]["new"], e["data"]["result"],
             e["data"]["succeeded"], e["data"]["failed"]) for e in changes] == [
        (m["id"], "running", "done", "failed", 0, 2)]
    assert changes[0]["message"].startswith("running -> done, failed (2 of 2 machines failed)")


def test_slow_webhook_never_blocks_a_migration(server_factory):
    receiver = Receiver(delay=5.0)
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n"
                            f"[webhook]\nurl = {receiver.url}\ntimeout = 10\n").start()
    ids = setup_machines(server, 5)
    started = time.monotonic()
    with SimulatedFleet(server.url, server.token):
        m = wait_for(server, migrate(server, ids, max_parallel=5)["id"], timeout=30)
    assert m["state"] == "done"
    # 5 machines produce dozens of events: delivering them takes minutes at 5 s each
    assert time.monotonic() - started < 15
    assert len(receiver.events) < 5


def test_drift_is_recorded_and_shown(server_factory):
    server = server_factory(extra_conf="[conductor]\ndrift_check_interval = 1\n").start()
    ids = setup_machines(server, 2)
    server.request("PATCH", f"/v1/machines/{ids[0]}",
                   json={"properties": {"fake_drift": "boot override is Hdd, expected Pxe"}})
    deadline = time.monotonic() + 20
    while True:
        machine = server.request("GET", f"/v1/machines/{ids[0]}").json()
        if machine["drift"]:
            break
        assert time.monotonic() < deadline, machine
        time.sleep(0.2)
    assert machine["drift"] == ["boot override is Hdd, expected Pxe"]
    assert machine["drift_checked_at"]
    other = server.request("GET", f"/v1/machines/{ids[1]}").json()
    assert other["drift"] is None and other["drift_checked_at"]
    events = server.request("GET", f"/v1/machines/{ids[0]}/events").json()["events"]
    assert [e["message"] for e in events if e["kind"] == "machine.drift"] == [
        "drift: boot override is Hdd, expected Pxe"]
    server.request("PATCH", f"/v1/machines/{ids[0]}", json={"properties": {}})
    deadline = time.monotonic() + 20
    while server.request("GET", f"/v1/machines/{ids[0]}").json()["drift"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    events = server.request("GET", f"/v1/machines/{ids[0]}/events").json()["events"]
    assert [e["message"] for e in events if e["kind"] == "machine.drift"][-1] == "drift resolved"
