"""A lock the conductor could not release is not held until it restarts."""

import datetime
import time

import pytest
from sqlalchemy import update

from metalboot_framework.store import models
from metalboot_framework.store.db import Database
from tests.conftest import hook_plugin_site, machine_body

pytestmark = pytest.mark.functional


def test_a_leaked_lock_of_a_live_conductor_is_released(server_factory):
    server = server_factory(extra_conf="host = conductor-x\n"
                                       "[conductor]\nheartbeat_interval = 1\n").start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    machine_id = server.register_enrolled([machine_body(1)])[0]
    # what a worker leaves when the database was away as it released the machine
    db = Database(server.database_url or f"sqlite:///{server.state}/metalboot.sqlite")
    old = models.utcnow() - datetime.timedelta(seconds=30)
    with db.write() as s:
        s.execute(update(models.Machine).where(models.Machine.id == machine_id)
                  .values(reservation="conductor-x", reserved_at=old))
    db.dispose()
    locked = server.request("PATCH", f"/v1/machines/{machine_id}",
                            json={"properties": {"rack": "r1"}})
    assert locked.status_code == 409, locked.text
    assert "conductor-x" in locked.json()["error"]["message"]

    deadline = time.monotonic() + 15
    while server.request("GET", f"/v1/machines/{machine_id}").json()["lock"] is not None:
        assert time.monotonic() < deadline, "the leaked lock was never released"
        time.sleep(0.2)
    r = server.request("PATCH", f"/v1/machines/{machine_id}", json={"properties": {"rack": "r1"}})
    assert r.status_code == 200, r.text
    assert "released 1 lock(s) of conductor-x on machines none of its workers runs" in \
        server.log()


# Holds the answer to a DELETE that hands the machine to the conductor until the
# conductor has cleaned it up and forgotten it (the hook of the request's
# machine.deleting event runs after its commit and before its answer).
SLOW_ANSWER = """
import collections, threading
from metalboot_framework import hookimpl

deleted = collections.defaultdict(threading.Event)
lock = threading.Lock()

@hookimpl
def metalboot_event(event):
    with lock:
        gone = deleted[event["machine_id"]]
    if event["kind"] == "machine.deleted":
        gone.set()
    elif event["kind"] == "machine.deleting":
        gone.wait(10)
"""


def test_a_deletion_the_conductor_finishes_first_still_answers_202(server_factory, tmp_path):
    site = hook_plugin_site(tmp_path / "site", "slow_answer", SLOW_ANSWER)
    server = server_factory(env={"PYTHONPATH": str(site)}).start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    machine_id = server.register_enrolled([machine_body(1)])[0]
    r = server.request("DELETE", f"/v1/machines/{machine_id}")
    assert r.status_code == 202, r.text
    assert (r.json()["id"], r.json()["state"]) == (machine_id, "deleting")
    assert server.request("GET", f"/v1/machines/{machine_id}").status_code == 404


def _wait_gone(server, machine_id, timeout=20):
    deadline = time.monotonic() + timeout
    while server.request("GET", f"/v1/machines/{machine_id}").status_code != 404:
        assert time.monotonic() < deadline, "the machine was never deleted"
        time.sleep(0.1)


def test_deleting_a_prepared_machine_cleans_up_its_interface_first(server_factory):
    server = server_factory(extra_conf="[fake]\nrecord_events = true\n").start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    kept, broken = server.register_enrolled([machine_body(1), machine_body(2)])
    r = server.request("DELETE", f"/v1/machines/{kept}")
    assert r.status_code == 202, r.text
    assert r.json()["state"] == "deleting" and r.json()["prepared_interface"] == "fake"
    # while it is deleting, it cannot be changed
    patched = server.request("PATCH", f"/v1/machines/{kept}", json={"properties": {}})
    assert patched.status_code in (409, 404), patched.text
    _wait_gone(server, kept)
    kinds = [e["kind"] for e in server.request(
        "GET", "/v1/events", params={"machine_id": kept, "limit": 1000}).json()["events"]]
    assert kinds[-3:] == ["machine.deleting", "fake.clean_up", "machine.deleted"], kinds

    # a clean-up that fails: error with the reason, then forced
    r = server.request("PATCH", f"/v1/machines/{broken}",
                       json={"properties": {"fake_fail": {"clean_up": "BMC unreachable"}}})
    assert r.status_code == 200, r.text
    assert server.request("DELETE", f"/v1/machines/{broken}").status_code == 202
    deadline = time.monotonic() + 20
    while (m := server.request("GET", f"/v1/machines/{broken}").json())["state"] != "error":
        assert time.monotonic() < deadline, m
        time.sleep(0.1)
    assert "BMC unreachable" in m["last_error"]
    bad = server.request("DELETE", f"/v1/machines/{broken}", params={"force": "maybe"})
    assert bad.status_code == 422 and "force" in bad.json()["error"]["fields"], bad.text
    r = server.request("DELETE", f"/v1/machines/{broken}", params={"force": "true"})
    assert r.status_code == 204, r.text
    assert server.request("GET", f"/v1/machines/{broken}").status_code == 404
    events = server.request("GET", "/v1/events",
                            params={"machine_id": broken, "limit": 1000}).json()["events"]
    assert events[-1]["kind"] == "machine.deleted" and events[-1]["data"]["forced"] is True
