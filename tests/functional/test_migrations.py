"""Migrations through a real metalboot-server, with simulated machines booting
(or not) when the fake boot interfaces activate them."""

import datetime
import signal
import threading
import time

import pytest
import requests
import sqlalchemy
from sqlalchemy import update

from metalboot_framework.testing.simulator import FETCH, FETCH_404, REPORT, SILENT, SimulatedFleet
from metalboot_framework.store import models
from metalboot_framework.store.db import Database
from tests.conftest import machine_body

pytestmark = pytest.mark.functional

FINAL_MIGRATION = ("done", "halted", "cancelled")


@pytest.fixture
def server(server_factory):
    return server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()


def setup_machines(server, count, **extra):
    """Register and enrol machines (see ServerProcess.register_enrolled)."""
    assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    return server.register_enrolled([machine_body(i, **extra) for i in range(count)])


def migrate(server, ids, target="fake-alt", **options):
    r = server.request("POST", "/v1/migrations",
                       json={"selector": {"machines": ids}, "boot_interface": target, **options})
    assert r.status_code == 202, r.text
    return r.json()


def wait_for(server, migration_id, states=FINAL_MIGRATION, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = server.request("GET", f"/v1/migrations/{migration_id}").json()
        # a halted migration is finished once its machines in flight are
        if m["state"] in states and m["finished_at"]:
            return m
        time.sleep(0.1)
    raise AssertionError(f"migration still {m['state']} after {timeout}s: {m}")


def machine_states(server, migration_id):
    out, marker = {}, None
    while True:
        params = {"limit": 1000}
        if marker is not None:
            params["marker"] = marker
        page = server.request("GET", f"/v1/migrations/{migration_id}/machines",
                              params=params).json()
        out.update({m["machine_id"]: m for m in page["machines"]})
        marker = page["next_marker"]
        if marker is None:
            return out


def all_events(server, **params):
    """Every event of ``GET /v1/events`` with ``params`` (a migration_id, say),
    read by cursor to the end."""
    feed, cursor = [], 0
    while True:
        body = server.request("GET", "/v1/events", params={
            **params, "since": cursor, "limit": 1000}).json()
        if not body["events"]:
            return feed
        feed += body["events"]
        cursor = body["next_cursor"]


def moves_by_machine(events):
    """{machine id: [(old, new), ...]} of the migration.step events, in order."""
    moves = {}
    for e in events:
        if e["kind"] == "migration.step":
            moves.setdefault(e["machine_id"], []).append((e["data"]["old"], e["data"]["new"]))
    return moves


def machine_events(server, machine_id):
    return server.request("GET", f"/v1/machines/{machine_id}/events",
                          params={"limit": 1000}).json()["events"]


def step_names(events):
    return [e["data"]["new"] for e in events if e["kind"] == "migration.step"]


def steps_of(server, machine_id):
    return step_names(machine_events(server, machine_id))


def activated_before(events, interface, moment):
    """Whether ``interface`` activated the machine of ``events`` before ``moment`` (epoch s)."""
    return any(e["kind"] == f"{interface}.activate" and datetime.datetime.fromisoformat(
        e["created_at"].replace("Z", "+00:00")).timestamp() < moment for e in events)


def fake_calls(server, machine_id):
    """The fake plugin's calls in migrations (not those of the enrolment)."""
    events = machine_events(server, machine_id)
    calls = [e["kind"].split(".", 1) for e in events
             if e["kind"].startswith("fake") and e["migration_id"]]
    # each event is named after the interface that was called, as its data say
    assert [interface for interface, _ in calls] == [
        e["data"]["interface"] for e in events
        if e["kind"].startswith("fake") and e["migration_id"]]
    return [(step, interface) for interface, step in calls]


def test_happy_path_by_fetch_and_by_report(server):
    ids = setup_machines(server, 4)
    with SimulatedFleet(server.url, server.token, behaviour={ids[1]: REPORT}) as fleet:
        m = migrate(server, ids, max_parallel=2)
        assert m["state"] == "running" and m["total"] == 4
        during = server.request("GET", f"/v1/machines/{ids[0]}").json()
        assert during["state"] == "migrating"
        assert during["migration"]["id"] == m["id"]
        m = wait_for(server, m["id"])
    assert m["state"] == "done" and m["result"] == "succeeded", m
    assert m["counts"] == {"done": 4} and m["progress"] == 1.0
    assert m["finished_at"] and m["reason"].startswith("finished")
    per = machine_states(server, m["id"])
    for mid in ids:
        machine = server.request("GET", f"/v1/machines/{mid}").json()
        assert machine["boot_interface"] == "fake-alt" and machine["state"] == "ready"
        assert machine["migration"] is None
        assert steps_of(server, mid) == ["validating", "preparing", "activating",
                                         "awaiting_boot", "verifying", "done"]
        assert fake_calls(server, mid) == [("validate", "fake-alt"), ("prepare", "fake-alt"),
                                           ("activate", "fake-alt"), ("clean_up", "fake")]
        assert per[mid]["evidence"] is not None
        assert per[mid]["seconds_to_evidence"] >= 0
    assert per[ids[1]]["evidence"]["kind"] == "report"
    assert per[ids[0]]["evidence"]["kind"] == "fetch"
    assert per[ids[0]]["evidence"]["path"] == "boot.ipxe"
    assert sorted(a for _, _, a, _ in fleet.boots) == sorted([FETCH] * 3 + [REPORT])


def test_require_boot_report_takes_only_the_report(server):
    """With require_boot_report the firmware's fetch is not enough: the machine
    that only fetched rolls back, the one whose booted system reported is done."""
    ids = setup_machines(server, 2)
    with SimulatedFleet(server.url, server.token, behaviour={ids[0]: FETCH, ids[1]: REPORT},
                        only_interfaces=["fake-alt"]):
        m = wait_for(server, migrate(server, ids, boot_timeout=3,
                                     require_boot_report=True)["id"])
    assert m["options"]["require_boot_report"] is True
    per = machine_states(server, m["id"])
    assert per[ids[0]]["state"] == "rolled_back"
    assert per[ids[0]]["last_error"] == "no boot evidence through fake-alt within 3 s"
    evidence = server.request("GET", f"/v1/machines/{ids[0]}/evidence").json()["evidence"]
    assert [(e["interface"], e["kind"]) for e in evidence] == [("fake-alt", "fetch")]
    assert per[ids[1]]["state"] == "done"
    assert per[ids[1]]["evidence"]["kind"] == "report"
    bad = server.request("POST", "/v1/migrations", json={
        "selector": {"machines": ids}, "boot_interface": "fake-alt",
        "require_boot_report": "maybe"})
    assert bad.status_code == 422 and "require_boot_report" in bad.json()["error"]["fields"]


def test_timeout_rolls_back_and_boots_the_old_path(server):
    ids = setup_machines(server, 3)
    with SimulatedFleet(server.url, server.token,
                        behaviour={ids[0]: SILENT, ids[2]: FETCH_404},
                        only_interfaces=["fake-alt"]):
        m = wait_for(server, migrate(server, ids, boot_timeout=2)["id"])
    assert m["state"] == "done" and m["counts"] == {"done": 1, "rolled_back": 2}
    assert (m["result"], m["succeeded"], m["failed"]) == ("partially_failed", 1, 2)
    per = machine_states(server, m["id"])
    for mid in (ids[0], ids[2]):
        assert per[mid]["state"] == "rolled_back"
        assert per[mid]["last_error"] == "no boot evidence through fake-alt within 2 s"
        assert per[mid]["evidence"] is None
        machine = server.request("GET", f"/v1/machines/{mid}").json()
        assert machine["boot_interface"] == "fake" and machine["state"] == "ready"
        assert steps_of(server, mid)[-2:] == ["rolling_back", "rolled_back"]
        # the target was cleaned up and the source set up and activated again
        assert fake_calls(server, mid)[-3:] == [("clean_up", "fake-alt"), ("prepare", "fake"),
                                                ("activate", "fake")]


def test_failing_prepare_rolls_back_without_reset(server):
    ids = setup_machines(server, 1, properties={"fake_fail": {"prepare": "disk full"}})
    m = wait_for(server, migrate(server, ids)["id"])
    per = machine_states(server, m["id"])[ids[0]]
    assert per["state"] == "rolled_back"
    assert per["last_error"] == f"fake-alt prepare: fake-alt prepare failed for machine " \
                                f"{ids[0]}: disk full"
    # never activated, so the old path is not re-activated (no needless reset)
    assert fake_calls(server, ids[0]) == [("validate", "fake-alt"), ("prepare", "fake-alt"),
                                          ("clean_up", "fake-alt")]


def test_failing_activate_rolls_back_and_activates_the_old_path(server):
    # an activate that failed may have got as far as the reset (a BMC that took
    # the boot override and then timed out): the source is activated again
    ids = setup_machines(server, 1, properties={"fake_fail": {"fake-alt.activate":
                                                                "BMC timed out"}})
    m = wait_for(server, migrate(server, ids)["id"])
    per = machine_states(server, m["id"])[ids[0]]
    assert per["state"] == "rolled_back"
    assert per["last_error"] == f"fake-alt activate: fake-alt activate failed for machine " \
                                f"{ids[0]}: BMC timed out"
    assert fake_calls(server, ids[0]) == [("validate", "fake-alt"), ("prepare", "fake-alt"),
                                          ("activate", "fake-alt"), ("clean_up", "fake-alt"),
                                          ("prepare", "fake"), ("activate", "fake")]
    assert steps_of(server, ids[0])[-3:] == ["activating", "rolling_back", "rolled_back"]


def test_failing_clean_up_is_rollback_failed(server):
    ids = setup_machines(server, 1, properties={"fake_fail": {"activate": "BMC said no",
                                                              "clean_up": "eject failed"}})
    m = wait_for(server, migrate(server, ids)["id"])
    per = machine_states(server, m["id"])[ids[0]]
    assert per["state"] == "rollback_failed"
    assert "eject failed" in per["last_error"] and "rollback failed" in per["last_error"]
    machine = server.request("GET", f"/v1/machines/{ids[0]}").json()
    assert machine["state"] == "error" and machine["boot_interface"] == "fake"
    # an operator repairs it and sets it ready again
    assert server.request("PATCH", f"/v1/machines/{ids[0]}",
                          json={"state": "ready"}).json()["state"] == "ready"


def test_canary_failure_halts_the_rest(server):
    ids = setup_machines(server, 6)
    with SimulatedFleet(server.url, server.token, behaviour={ids[0]: SILENT}):
        m = wait_for(server, migrate(server, ids, canary=2, max_parallel=6,
                                     boot_timeout=2)["id"])
    assert m["state"] == "halted" and m["result"] == "partially_failed"
    assert (m["succeeded"], m["failed"]) == (1, 1)
    assert m["reason"].startswith(f"canary machine {ids[0]} failed")
    per = machine_states(server, m["id"])
    assert per[ids[0]]["canary"] and per[ids[1]]["canary"] and not per[ids[2]]["canary"]
    assert per[ids[0]]["state"] == "rolled_back" and per[ids[1]]["state"] == "done"
    for mid in ids[2:]:
        assert per[mid]["state"] == "cancelled"
        assert per[mid]["started_at"] is None
        assert fake_calls(server, mid) == []  # never touched
        assert server.request("GET", f"/v1/machines/{mid}").json()["state"] == "ready"


def test_max_failures_halts(server):
    ids = setup_machines(server, 10)
    with SimulatedFleet(server.url, server.token, default=SILENT):
        m = wait_for(server, migrate(server, ids, max_parallel=2, max_failures=1,
                                     boot_timeout=1)["id"])
    assert m["state"] == "halted"
    assert "more than max_failures 1" in m["reason"]
    assert m["counts"]["rolled_back"] == 2
    assert m["counts"]["cancelled"] == 8
    m2 = wait_for(server, migrate(server, ids, max_parallel=5, max_failures="20%",
                                  boot_timeout=1)["id"])
    assert m2["state"] == "halted" and "more than max_failures 20%" in m2["reason"]


def test_halting_until_the_machines_in_flight_have_ended(server):
    """Past its failure budget a migration is halting while machines it started
    are still in flight, and halted once they have ended; its result and the
    events say how it went."""
    ids = setup_machines(server, 4)
    server.request("PATCH", f"/v1/machines/{ids[0]}", json={"properties": {
        "fake_fail": {"prepare": "disk full"}}}).raise_for_status()
    m = migrate(server, ids, max_parallel=4, max_failures=0, boot_timeout=4)
    deadline = time.monotonic() + 20
    while (m := server.request("GET", f"/v1/migrations/{m['id']}").json())["state"] == \
            "running":
        assert time.monotonic() < deadline, m
        time.sleep(0.05)
    # ids[1:] never boot (nobody simulates them): they wait out their boot_timeout
    assert m["state"] == "halting", m
    assert m["finished_at"] is None and m["result"] is None
    assert m["reason"] == "1 machines failed, more than max_failures 0"
    in_flight = {mid: step["state"] for mid, step in machine_states(server, m["id"]).items()
                 if step["state"] not in ("rolled_back", "rolling_back")}
    assert set(in_flight) == set(ids[1:]) and "queued" not in in_flight.values(), in_flight
    r = server.request("POST", f"/v1/migrations/{m['id']}/pause")
    assert r.status_code == 409 and "it is halting" in r.json()["error"]["message"]
    m = wait_for(server, m["id"], states=("halted",), timeout=30)
    assert m["result"] == "failed" and (m["succeeded"], m["failed"]) == (0, 4)
    assert m["counts"] == {"rolled_back": 4}
    assert m["reason"] == "1 machines failed, more than max_failures 0"
    listed = server.request("GET", "/v1/migrations", params={"result": "failed"}).json()
    assert [x["id"] for x in listed["migrations"]] == [m["id"]]
    assert server.request("GET", "/v1/migrations",
                          params={"result": "succeeded"}).json()["migrations"] == []
    events = server.request("GET", "/v1/events", params={"limit": 1000}).json()["events"]
    changes = [e for e in events if e["kind"] == "migration.state"]
    assert [(e["data"]["old"], e["data"]["new"]) for e in changes] == [
        ("running", "halting"), ("halting", "halted")]
    assert changes[0]["data"].get("result") is None
    assert {k: changes[1]["data"][k] for k in ("result", "succeeded", "failed")} == {
        "result": "failed", "succeeded": 0, "failed": 4}
    assert changes[1]["message"].startswith(
        "halting -> halted, failed (4 of 4 machines failed): the machines in flight have "
        "ended"), changes[1]["message"]


def test_done_says_when_machines_failed(server):
    """A migration that ran to its end is done; its result says how its
    machines fared: failed when all were rolled back, succeeded when none."""
    ids = setup_machines(server, 2)
    m = wait_for(server, migrate(server, ids, boot_timeout=1)["id"])
    assert (m["state"], m["result"], m["succeeded"], m["failed"]) == ("done", "failed", 0, 2)
    events = server.request("GET", "/v1/events", params={"limit": 1000}).json()["events"]
    done = [e for e in events if e["kind"] == "migration.state"][-1]
    assert done["data"]["new"] == "done" and done["data"]["result"] == "failed"
    assert done["message"].startswith("running -> done, failed (2 of 2 machines failed)")
    with SimulatedFleet(server.url, server.token):
        m = wait_for(server, migrate(server, ids)["id"])
    assert (m["state"], m["result"], m["succeeded"], m["failed"]) == ("done", "succeeded", 2, 0)


def test_cancel_rolls_back_machines_in_flight(server):
    ids = setup_machines(server, 5)
    with SimulatedFleet(server.url, server.token, default=SILENT):
        m = migrate(server, ids, max_parallel=2, boot_timeout=600)
        deadline = time.monotonic() + 20
        while machine_states(server, m["id"])[ids[0]]["state"] != "awaiting_boot":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = server.request("POST", f"/v1/migrations/{m['id']}/cancel")
        assert r.status_code == 200 and r.json()["state"] == "cancelling"
        m = wait_for(server, m["id"])
    assert m["state"] == "cancelled"
    per = machine_states(server, m["id"])
    assert per[ids[0]]["state"] == "rolled_back"
    assert per[ids[0]]["last_error"] == "migration cancelled"
    assert per[ids[4]]["state"] == "cancelled"
    assert all(server.request("GET", f"/v1/machines/{mid}").json()["state"] == "ready"
               for mid in ids)
    r = server.request("POST", f"/v1/migrations/{m['id']}/cancel")
    assert r.status_code == 409 and "cancelled" in r.json()["error"]["message"]


def test_pause_and_resume(server):
    ids = setup_machines(server, 4)
    with SimulatedFleet(server.url, server.token, boot_delay=0.3):
        m = migrate(server, ids, max_parallel=1)
        assert server.request("POST", f"/v1/migrations/{m['id']}/pause").json()["state"] == \
            "paused"
        time.sleep(2)
        paused = server.request("GET", f"/v1/migrations/{m['id']}").json()
        assert paused["state"] == "paused"
        # the machine in flight may finish; no further machine starts
        assert paused["counts"].get("queued", 0) >= 3
        assert server.request("POST", f"/v1/migrations/{m['id']}/pause").status_code == 409
        assert server.request("POST", f"/v1/migrations/{m['id']}/resume").json()["state"] == \
            "running"
        m = wait_for(server, m["id"])
    assert m["state"] == "done" and m["counts"] == {"done": 4}


def test_dry_run_changes_nothing(server):
    ids = setup_machines(server, 3)
    server.request("PATCH", f"/v1/machines/{ids[2]}",
                   json={"properties": {"fake_fail": {"validate": "no UefiHttp"}}})
    m = wait_for(server, migrate(server, ids, dry_run=True)["id"])
    assert m["state"] == "done" and m["counts"] == {"valid": 2, "invalid": 1}
    per = machine_states(server, m["id"])
    assert "no UefiHttp" in per[ids[2]]["last_error"]
    for mid in ids:
        assert fake_calls(server, mid) == [("validate", "fake-alt")]
        machine = server.request("GET", f"/v1/machines/{mid}").json()
        assert machine["boot_interface"] == "fake" and machine["state"] == "ready"


def test_concurrent_migrations_exactly_one_gets_each_machine(server):
    ids = setup_machines(server, 20)
    results = [None, None]
    barrier = threading.Barrier(2)

    def post(i, chosen):
        barrier.wait()
        results[i] = server.request("POST", "/v1/migrations", json={
            "selector": {"machines": chosen}, "boot_interface": "fake-alt",
            "boot_timeout": 600})

    threads = [threading.Thread(target=post, args=(0, ids[:12])),
               threading.Thread(target=post, args=(1, ids[8:]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in results)
    assert codes == [202, 409], [r.text for r in results]
    loser = next(r for r in results if r.status_code == 409).json()
    assert "already belong to an active migration" in loser["error"]["message"]
    assert any(ids[8] in f for f in loser["error"]["fields"]["selector"])
    winner = next(r for r in results if r.status_code == 202).json()
    # a direct change of boot_interface on a migrating machine is refused
    r = server.request("PATCH", f"/v1/machines/{ids[9]}", json={"boot_interface": "fake-alt"})
    assert r.status_code == 409 and winner["id"] in r.json()["error"]["message"]
    server.request("POST", f"/v1/migrations/{winner['id']}/cancel")
    wait_for(server, winner["id"])


def test_bad_migration_requests(server):
    ids = setup_machines(server, 2)
    cases = [
        ({"selector": {"machines": ids}}, "boot_interface"),
        ({"selector": {"machines": ids}, "boot_interface": "pxe-not-enabled"}, "boot_interface"),
        ({"selector": {}, "boot_interface": "fake-alt"}, "selector"),
        ({"selector": {"machines": ids, "partition": "p1"}, "boot_interface": "fake-alt"},
         "selector"),
        ({"selector": {"machines": ["00000000-0000-4000-8000-00000000ffff"]},
          "boot_interface": "fake-alt"}, "selector.machines.0"),
        ({"selector": {"partition": "nope"}, "boot_interface": "fake-alt"},
         "selector.partition"),
        ({"selector": {"machines": ids}, "boot_interface": "fake-alt", "max_failures": "x%"},
         "max_failures"),
        ({"selector": {"machines": ids}, "boot_interface": "fake-alt", "max_parallel": 0},
         "max_parallel"),
        ({"selector": {"machines": ids}, "boot_interface": "fake-alt", "canary": -1}, "canary"),
        ({"selector": {"machines": ids}, "boot_interface": "fake"}, "selector"),  # all on it
    ]
    for body, field in cases:
        r = server.request("POST", "/v1/migrations", json=body)
        assert r.status_code == 422, (body, r.text)
        assert field in r.json()["error"]["fields"], (body, r.json())
    assert server.request("GET", "/v1/migrations").json()["migrations"] == []
    assert server.request("GET", "/v1/migrations/nope").status_code == 404
    r = server.request("POST", "/v1/migrations", token="reader-token-for-tests",
                       json={"selector": {"machines": ids}, "boot_interface": "fake-alt"})
    assert r.status_code == 403


def test_partition_selector_and_skips(server):
    ids = setup_machines(server, 4)
    server.request("PATCH", f"/v1/machines/{ids[0]}", json={"state": "maintenance"})
    server.request("PATCH", f"/v1/machines/{ids[1]}", json={"boot_interface": "fake-alt"})
    with SimulatedFleet(server.url, server.token):
        m = migrate_partition = server.request("POST", "/v1/migrations", json={
            "selector": {"partition": "p1", "boot_interface": "fake"},
            "boot_interface": "fake-alt"}).json()
        m = wait_for(server, migrate_partition["id"])
    assert m["total"] == 3  # ids[1] is on the target already: not selected
    per = machine_states(server, m["id"])
    assert per[ids[0]]["state"] == "skipped"
    assert per[ids[0]]["last_error"] == "machine is in maintenance"
    assert per[ids[2]]["state"] == "done" and per[ids[3]]["state"] == "done"


def test_a_finished_machine_starts_the_next_in_its_slot(server):
    """With max_parallel 1, each machine after the first starts in the transaction
    that records the end of the one before it (its start event follows that
    machine's last events directly), not a scheduler tick later; a machine that
    fails gives its slot back to the scheduler, which checks the budget first."""
    ids = setup_machines(server, 4)
    with SimulatedFleet(server.url, server.token, behaviour={ids[2]: SILENT}):
        m = wait_for(server, migrate(server, ids, max_parallel=1, boot_timeout=2)["id"])
    assert m["counts"] == {"done": 3, "rolled_back": 1}, m
    events = server.request("GET", "/v1/events", params={"migration_id": m["id"],
                                                         "limit": 1000}).json()["events"]
    steps = [(e["machine_id"], e["data"]["old"], e["data"]["new"], e["id"]) for e in events
             if e["kind"] == "migration.step"]
    started = {mid: eid for mid, old, _, eid in steps if old == "queued"}
    ended = {mid: eid for mid, _, new, eid in steps if new in ("done", "rolled_back")}
    assert list(started) == ids  # in queue order, one at a time
    for before, after in zip(ids, ids[1:], strict=False):
        assert ended[before] < started[after]  # max_parallel 1: never two in flight
    by_id = {e["id"]: e for e in events}
    for before, after in ((ids[0], ids[1]), (ids[1], ids[2])):
        # done, then boot_interface_changed, then the successor's start: one transaction
        assert by_id[ended[before] + 1]["kind"] == "machine.boot_interface_changed"
        assert ended[before] + 2 == started[after], (before, after)
        assert by_id[started[after]]["data"]["reason"] == f"started in the slot {before} freed"
    # ids[2] rolled back: the scheduler started ids[3] on a tick
    assert by_id[started[ids[3]]]["data"]["reason"] == "started"


def test_a_machine_that_ends_while_paused_frees_its_slot_for_nobody(server):
    """Paused while a machine's source is cleaned up, the migration starts no
    queued machine in the slot that machine's end frees: the next one stays
    queued, unlocked and untouched, and starts on resume."""
    ids = setup_machines(server, 3, properties={"fake_delay": 0.5})
    with SimulatedFleet(server.url, server.token):
        m = migrate(server, ids, max_parallel=1)
        deadline = time.monotonic() + 30
        while machine_states(server, m["id"])[ids[0]]["state"] != "verifying":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert server.request("POST", f"/v1/migrations/{m['id']}/pause").status_code == 200
        while machine_states(server, m["id"])[ids[0]]["state"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.5)  # more than a validate (0.5 s): nothing follows
        per = machine_states(server, m["id"])
        assert per[ids[1]]["state"] == "queued" and per[ids[1]]["started_at"] is None
        assert steps_of(server, ids[1]) == []
        assert server.request("GET", f"/v1/machines/{ids[1]}").json()["lock"] is None
        assert server.request("POST", f"/v1/migrations/{m['id']}/resume").status_code == 200
        m = wait_for(server, m["id"])
    assert m["state"] == "done" and m["counts"] == {"done": 3}, m
    events = server.request("GET", "/v1/events", params={"migration_id": m["id"],
                                                         "limit": 1000}).json()["events"]
    reasons = {e["machine_id"]: e["data"]["reason"] for e in events
               if e["kind"] == "migration.step" and e["data"]["old"] == "queued"}
    assert reasons[ids[1]] == "started"  # by the scheduler after the resume
    assert reasons[ids[2]] == f"started in the slot {ids[1]} freed"


def test_event_feed_cursor_sees_each_event_once(server):
    ids = setup_machines(server, 5)
    seen, cursor = [], 0
    with SimulatedFleet(server.url, server.token):
        m = migrate(server, ids, max_parallel=5)
        while True:
            # read the state first: once done, one empty page means we saw everything
            state = server.request("GET", f"/v1/migrations/{m['id']}").json()["state"]
            body = server.request("GET", "/v1/events",
                                  params={"since": cursor, "limit": 7}).json()
            seen += [e["id"] for e in body["events"]]
            cursor = body["next_cursor"]
            if state == "done" and not body["events"]:
                break
    assert len(seen) == len(set(seen))
    everything = server.request("GET", "/v1/events", params={"limit": 1000}).json()["events"]
    # the same events in the same order, whatever the page size
    assert [e["id"] for e in everything] == seen
    kinds = {e["kind"] for e in everything}
    assert {"machine.registered", "migration.created", "migration.step",
            "machine.boot_interface_changed", "migration.state"} <= kinds
    only = server.request("GET", "/v1/events", params={"migration_id": m["id"],
                                                       "limit": 1000}).json()["events"]
    assert only and all(e["migration_id"] == m["id"] for e in only)


def killed_in_validate_and_restarted(server, machine_id, properties, step="validating"):
    """Migrate the machine, SIGKILL the server while its coroutine sleeps in
    ``step``'s plugin call (validate), give the machine ``properties`` in the
    database, restart; the migration."""
    server.request("PATCH", f"/v1/machines/{machine_id}",
                   json={"properties": {"fake_delay": 5}}).raise_for_status()
    m = migrate(server, [machine_id])
    deadline = time.monotonic() + 30
    while machine_states(server, m["id"])[machine_id]["state"] != step:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    server.stop(sig=signal.SIGKILL)
    db = Database(server.database_url or f"sqlite:///{server.state}/metalboot.sqlite")
    with db.write() as s:
        s.execute(update(models.Machine).where(models.Machine.id == machine_id)
                  .values(properties=properties))
    db.dispose()
    server.start()
    return m


def test_a_machine_resumed_in_validating_is_rolled_back_through_the_targets_clean_up(
        server_factory):
    """The move to preparing is committed while prepare already runs: a conductor
    killed in between leaves the machine in validating although its target may
    be prepared. Resumed there, a failing validate rolls it back through the
    target's clean_up; validated afresh, it goes straight to rolled_back."""
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()
    machine_id, fresh = setup_machines(server, 2)
    server.request("PATCH", f"/v1/machines/{fresh}", json={"properties": {
        "fake_fail": {"fake-alt.validate": "BMC unreachable"}}}).raise_for_status()
    first = wait_for(server, migrate(server, [fresh])["id"])
    assert machine_states(server, first["id"])[fresh]["state"] == "rolled_back"
    assert steps_of(server, fresh) == ["validating", "rolled_back"]
    assert fake_calls(server, fresh) == [("validate", "fake-alt")]

    # the BMC went away while the conductor was down
    m = killed_in_validate_and_restarted(
        server, machine_id, {"fake_fail": {"fake-alt.validate": "BMC unreachable"}})
    wait_for(server, m["id"])
    assert machine_states(server, m["id"])[machine_id]["state"] == "rolled_back"
    assert steps_of(server, machine_id) == ["validating", "rolling_back", "rolled_back"]
    assert fake_calls(server, machine_id) == [("validate", "fake-alt"), ("clean_up", "fake-alt")]
    machine = server.request("GET", f"/v1/machines/{machine_id}").json()
    assert machine["boot_interface"] == "fake" and machine["state"] == "ready"


def test_a_machine_resumed_in_preparing_is_rolled_back_as_if_activated(server_factory):
    """The move to activating is committed while activate already runs: a
    conductor killed in between leaves the machine in preparing although it may
    have been reset onto its target. Resumed there, a rollback sets up and
    activates its source again, and says so in the machine's migration row."""
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()
    machine_id, = setup_machines(server, 1)
    m = killed_in_validate_and_restarted(
        server, machine_id, {"fake_fail": {"fake-alt.prepare": "BMC unreachable"}},
        step="preparing")
    wait_for(server, m["id"])
    row = machine_states(server, m["id"])[machine_id]
    assert row["state"] == "rolled_back"
    assert row["activated_at"] is not None  # a second crash would reset it too
    assert steps_of(server, machine_id) == ["validating", "preparing", "rolling_back",
                                            "rolled_back"]
    # validate before the kill; prepare killed in its sleep (not recorded);
    # after the restart: prepare fails, the target is cleaned up, the source set up
    # and activated again
    assert fake_calls(server, machine_id) == [
        ("validate", "fake-alt"), ("prepare", "fake-alt"), ("clean_up", "fake-alt"),
        ("prepare", "fake"), ("activate", "fake")]
    machine = server.request("GET", f"/v1/machines/{machine_id}").json()
    assert machine["boot_interface"] == "fake" and machine["state"] == "ready"


def test_sigkill_mid_migration_and_restart(server_factory):
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()
    ids = setup_machines(server, 200, properties={"fake_delay": 0.02})
    silent = {mid for mid in ids if int(mid[-3:], 16) % 10 == 0}
    with SimulatedFleet(server.url, server.token, default=lambda mid, iface: (
            SILENT if mid in silent else FETCH), only_interfaces=["fake-alt"]) as fleet:
        m = migrate(server, ids, max_parallel=25, boot_timeout=3)
        deadline = time.monotonic() + 60
        while True:
            counts = server.request("GET", f"/v1/migrations/{m['id']}").json()["counts"]
            if counts.get("done", 0) >= 40:
                break
            assert time.monotonic() < deadline, counts
            time.sleep(0.05)
        booted_before_kill = {mid for mid, *_ in list(fleet.boots)}
        killed_at = time.time()
        server.stop(sig=signal.SIGKILL)
        in_flight_at_kill = {k: v for k, v in counts.items() if k not in ("done", "queued")}
        server.start()
        final = wait_for(server, m["id"], timeout=120)
    assert in_flight_at_kill, "the kill should have hit machines in flight"
    assert final["state"] == "done", final
    assert set(final["counts"]) <= {"done", "rolled_back"}, final["counts"]
    per = machine_states(server, m["id"])
    # A machine whose simulated boot hit the dying server may or may not have
    # proven its boot (the fetch may have been recorded before the kill).
    lost = {mid for mid, _, action, status in fleet.boots if action == FETCH and status != 200}
    # A machine activated before the kill that the fleet had not booted yet
    # boots only once the server is back (the fleet follows its event feed):
    # on a busy host that may be after its 3 s boot deadline.
    events = {mid: machine_events(server, mid) for mid in ids}
    caught = {mid for mid in ids if mid not in booted_before_kill
              and activated_before(events[mid], "fake-alt", killed_at)}
    assert len(caught) <= 25  # max_parallel
    rolled_back = {mid for mid in ids if per[mid]["state"] == "rolled_back"}
    assert silent <= rolled_back <= silent | lost | caught
    # only machines booting while the server was down can have lost their fetch
    assert len(lost) < len(ids) // 4
    for mid in ids:
        machine = server.request("GET", f"/v1/machines/{mid}").json()
        assert machine["state"] == "ready" and machine["lock"] is None
        steps = step_names(events[mid])
        if per[mid]["state"] == "done":
            assert machine["boot_interface"] == "fake-alt"
            assert steps == ["validating", "preparing", "activating", "awaiting_boot",
                             "verifying", "done"], (mid, steps)
        else:
            assert machine["boot_interface"] == "fake"
            assert steps == ["validating", "preparing", "activating", "awaiting_boot",
                             "rolling_back", "rolled_back"], (mid, steps)


def test_a_mass_enrolment_does_not_hold_back_a_migration(server_factory):
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n"
                                       "[conductor]\nworkers = 4\n").start()
    ids = setup_machines(server, 2, properties={"fake_delay": 0.1, "fake_autoboot": True})
    # 24 machines whose enrolment (validate + prepare) takes a second each: with
    # every worker on them, the migration would wait about six seconds
    slow = [machine_body(100 + i, properties={"fake_delay": 0.5}) for i in range(24)]
    assert server.request("POST", "/v1/machines", json=slow).status_code == 201
    m = migrate(server, ids)
    final = wait_for(server, m["id"], timeout=30)
    assert final["counts"] == {"done": 2}, final
    states = [server.request("GET", f"/v1/machines/{b['id']}").json()["state"] for b in slow]
    assert "enrolling" in states, "the migration waited for the whole enrolment"
    server.wait_enrolled(timeout=60)


def test_blocking_plugin_steps_migrate_and_roll_back(server_factory):
    """A plugin whose steps block (as one on sushy does) runs them in the
    conductor's worker threads; the same migrations work as with coroutine steps."""
    server = server_factory(extra_conf="enabled_boot_interfaces = fake-blocking,"
                                       "fake-blocking-alt\ndefault_boot_interface = "
                                       "fake-blocking\n").start()
    ids = setup_machines(server, 5, boot_interface="fake-blocking",
                         properties={"fake_delay": 0.05})
    server.request("PATCH", f"/v1/machines/{ids[0]}", json={"properties": {
        "fake_fail": {"fake-blocking-alt.activate": "BMC timed out"}}}).raise_for_status()
    with SimulatedFleet(server.url, server.token):
        m = wait_for(server, migrate(server, ids, target="fake-blocking-alt",
                                     max_parallel=3)["id"])
    assert m["counts"] == {"done": 4, "rolled_back": 1}, m
    assert fake_calls(server, ids[1]) == [
        ("validate", "fake-blocking-alt"), ("prepare", "fake-blocking-alt"),
        ("activate", "fake-blocking-alt"), ("clean_up", "fake-blocking")]
    assert fake_calls(server, ids[0])[-3:] == [
        ("clean_up", "fake-blocking-alt"), ("prepare", "fake-blocking"),
        ("activate", "fake-blocking")]
    assert server.request("GET", f"/v1/machines/{ids[1]}").json()["boot_interface"] == \
        "fake-blocking-alt"


def test_a_stopped_conductor_leaves_machines_awaiting_their_boot_to_its_next_run(
        server_factory):
    """Machines awaiting their boot are waited for by their coroutines, which
    hold their locks: a stop must not wait for their boot_timeout, and must leave
    them unlocked, so that the next run moves them on by their evidence."""
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()
    ids = setup_machines(server, 3)
    with SimulatedFleet(server.url, server.token, default=SILENT):
        m = migrate(server, ids, max_parallel=3, boot_timeout=600)
        deadline = time.monotonic() + 20
        while set(s["state"] for s in machine_states(server, m["id"]).values()) != \
                {"awaiting_boot"}:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        locks = {mid: server.request("GET", f"/v1/machines/{mid}").json()["lock"]
                 for mid in ids}
        assert all(locks.values()), locks  # their coroutines hold them while waiting
        started = time.monotonic()
        assert server.stop() == 0
        assert time.monotonic() - started < 15
    db = Database(server.database_url or f"sqlite:///{server.state}/metalboot.sqlite")
    with db.read() as s:
        rows = s.execute(sqlalchemy.select(models.Machine.id, models.Machine.reservation)
                         .where(models.Machine.id.in_(ids))).all()
        urls = {e.machine_id: e.data["boot_url"] for e in s.scalars(
            sqlalchemy.select(models.Event).where(models.Event.kind == "fake-alt.activate",
                                                  models.Event.migration_id == m["id"]))}
    db.dispose()
    assert {mid: lock for mid, lock in rows} == {mid: None for mid in ids}
    server.start()
    for mid in ids:  # the machines boot while nobody waits for them
        assert requests.get(urls[mid], timeout=10).status_code == 200
    final = wait_for(server, m["id"], timeout=30)
    assert final["counts"] == {"done": 3}, final
    for mid in ids:
        assert steps_of(server, mid) == ["validating", "preparing", "activating",
                                         "awaiting_boot", "verifying", "done"]


def test_migrations_start_and_resume_without_waiting_for_the_poll(server_factory):
    """The API wakes the conductor of its process when it made work for it (a
    machine to enrol, a migration created or resumed): with a poll of 30 s,
    nothing else would look before then."""
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n"
                                       "[conductor]\npoll_interval = 30\n").start()
    started = time.monotonic()
    ids = setup_machines(server, 3, properties={"fake_autoboot": True})
    assert time.monotonic() - started < 10  # enrolled
    time.sleep(1)  # the ticks that the enrolments' ends asked for are over
    started = time.monotonic()
    first = wait_for(server, migrate(server, ids[:1])["id"], timeout=20)
    assert first["counts"] == {"done": 1} and time.monotonic() - started < 10
    m = migrate(server, ids[1:], max_parallel=1)
    assert server.request("POST", f"/v1/migrations/{m['id']}/pause").status_code == 200
    deadline = time.monotonic() + 20
    # the machine in flight finishes; the paused migration starts no other
    while machine_states(server, m["id"]).get(ids[1], {}).get("state") not in (
            "done", "queued"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert machine_states(server, m["id"])[ids[2]]["state"] == "queued"
    time.sleep(1)  # the tick that the machine's end asked for is over
    resumed = time.monotonic()
    assert server.request("POST", f"/v1/migrations/{m['id']}/resume").status_code == 200
    m = wait_for(server, m["id"], timeout=20)
    assert m["counts"] == {"done": 2} and time.monotonic() - resumed < 10
