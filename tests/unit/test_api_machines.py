"""/v1/machines through the Flask test client: registration, listing, changes."""

import json
import logging

import pytest

from tests.conftest import machine_body


def test_register_one_and_get(api, partition):
    r = api.post("/v1/machines", json=machine_body(1, nics=[
        {"mac": "52-54-00-AA-BB-01", "duid": "00:01:00:01:2A:3B:4C:5D:52:54:00:AA:BB:01"}]))
    assert r.status_code == 201, r.json
    m = r.json
    assert m["nics"][0]["mac"] == "52:54:00:aa:bb:01"  # normalised
    assert m["nics"][0]["duid"] == "00:01:00:01:2a:3b:4c:5d:52:54:00:aa:bb:01"
    assert m["boot_interface"] == "fake"  # the default
    assert m["state"] == "enrolling" and m["prepared_interface"] is None  # no conductor
    assert m["bmc"] == {"address": "https://127.0.0.1:8000", "username": "root",
                        "verify_tls": True, "password_set": True}
    assert api.get(f"/v1/machines/{m['id']}").json == m


def test_register_list_all_or_nothing(api, partition):
    bodies = [machine_body(i) for i in range(1, 6)]
    bodies[3]["nics"][0]["mac"] = "nonsense"
    r = api.post("/v1/machines", json=bodies)
    assert r.status_code == 422
    assert "3.nics.0.mac" in r.json["error"]["fields"]
    assert api.get("/v1/machines").json["machines"] == []

    bodies[3] = machine_body(4)
    r = api.post("/v1/machines", json=bodies)
    assert r.status_code == 201
    assert r.json["count"] == 5


def test_register_conflicts(api, partition):
    assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    r = api.post("/v1/machines", json=[machine_body(2), machine_body(1)])
    assert r.status_code == 409
    assert r.json["error"]["fields"] == {"1.id": ["registered already"]}
    other = machine_body(3)
    other["nics"] = machine_body(1)["nics"]
    r = api.post("/v1/machines", json=other)
    assert r.status_code == 409
    assert "belongs to machine" in r.json["error"]["fields"]["nics.0.mac"][0]
    r = api.post("/v1/machines", json=[machine_body(5), machine_body(5)])
    assert r.status_code == 422
    assert r.json["error"]["fields"] == {"1.id": ["given twice in the request"]}
    assert len(api.get("/v1/machines").json["machines"]) == 1


@pytest.mark.parametrize("change, field", [
    ({"id": "not-a-uuid"}, "id"),
    ({"id": 7}, "id"),
    ({"partition": "nope"}, "partition"),
    ({"partition": None}, "partition"),
    ({"boot_interface": "pxe-not-enabled"}, "boot_interface"),
    ({"boot_mode": "legacy"}, "boot_mode"),
    ({"nics": [{"mac": "01:00:5e:00:00:01"}]}, "nics.0.mac"),   # multicast
    ({"nics": [{"mac": "00:00:00:00:00:00"}]}, "nics.0.mac"),
    ({"nics": [{"mac": "52:54:00:00:00:01:02"}]}, "nics.0.mac"),
    ({"nics": [{"mac": "52:54:00:00:00:01", "duid": "xyz"}]}, "nics.0.duid"),
    ({"nics": [{"mac": "52:54:00:00:00:01", "duid": "00"}]}, "nics.0.duid"),
    ({"nics": [{"mac": "52:54:00:00:00:01", "ipv4_address": "300.1.1.1"}]}, "nics.0.ipv4_address"),
    ({"nics": [{"mac": "52:54:00:00:00:01"}, {"mac": "52:54:00:00:00:01"}]}, "nics"),
    ({"nics": "52:54:00:00:00:01"}, "nics"),
    ({"bmc": {"address": "http://"}}, "bmc.address"),
    ({"bmc": {"address": "10.0.0.1:99999"}}, "bmc.address"),
    ({"bmc": {"username": "x"}}, "bmc.address"),
    ({"bmc": {"address": "10.0.0.1", "verify_tls": "maybe"}}, "bmc.verify_tls"),
    ({"properties": "x"}, "properties"),
    ({"state": "ready"}, "state"),   # not settable at registration
    ({"surprise": True}, "surprise"),
])
def test_bad_machine_is_422_naming_the_field(api, partition, change, field):
    body = machine_body(1)
    body.update(change)
    r = api.post("/v1/machines", json=body)
    assert r.status_code == 422, r.json
    assert field in r.json["error"]["fields"], r.json
    assert r.json["error"]["message"]
    assert api.get("/v1/machines").json["machines"] == []


def test_missing_partition_names_the_item(api, partition):
    r = api.post("/v1/machines", json=[machine_body(1), machine_body(2, partition="gone")])
    assert r.status_code == 422
    assert r.json["error"]["fields"] == {"1.partition": ["partition gone does not exist"]}


def test_not_json_and_not_object(api, partition):
    r = api.post("/v1/machines", data="id=1", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415
    assert r.json["error"]["code"] == 415
    r = api.post("/v1/machines", data="{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    r = api.post("/v1/machines", json="a string")
    assert r.status_code == 422
    r = api.post("/v1/machines", json=[])
    assert r.status_code == 422


def test_oversized_body_is_413(conf, services, partition, api):
    big = json.dumps([machine_body(1)]) + " " * (conf.api.max_request_body_size + 1)
    r = api.post("/v1/machines", data=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json["error"]["code"] == 413


def test_too_many_machines_is_422(conf, api, partition):
    conf.set_override("max_machines_per_request", 3, group="api")
    r = api.post("/v1/machines", json=[machine_body(i) for i in range(4)])
    assert r.status_code == 422
    assert "at most 3" in r.json["error"]["message"]


def test_list_filters_and_pagination(api, partition):
    assert api.post("/v1/partitions", json={"id": "p2"}).status_code == 201
    bodies = [machine_body(i, partition="p1" if i % 2 else "p2") for i in range(1, 26)]
    assert api.post("/v1/machines", json=bodies).status_code == 201
    seen, marker = [], None
    while True:
        url = "/v1/machines?limit=7" + (f"&marker={marker}" if marker else "")
        page = api.get(url).json
        seen += [m["id"] for m in page["machines"]]
        marker = page["next_marker"]
        if marker is None:
            break
    assert seen == sorted(b["id"] for b in bodies)
    p1 = api.get("/v1/machines?partition=p1&limit=100").json["machines"]
    assert len(p1) == 13 and {m["partition"] for m in p1} == {"p1"}
    assert api.get("/v1/machines?boot_interface=fake&state=enrolling").json["machines"]
    assert api.get("/v1/machines?state=migrating").json["machines"] == []
    for bad, field in [("limit=0", "limit"), ("limit=x", "limit"), ("limit=100000", "limit"),
                       ("state=bogus", "state"), ("color=red", "color")]:
        r = api.get(f"/v1/machines?{bad}")
        assert r.status_code == 422, bad
        assert field in r.json["error"]["fields"]


def test_patch_machine(api, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    r = api.patch(f"/v1/machines/{mid}", json={"boot_mode": "bios", "properties": {"rack": "r1"},
                                               "bmc": {"password": "new-secret"}})
    assert r.status_code == 200
    assert r.json["boot_mode"] == "bios" and r.json["properties"] == {"rack": "r1"}
    assert r.json["bmc"]["address"] == "https://127.0.0.1:8000"  # kept
    r = api.patch(f"/v1/machines/{mid}", json={"state": "maintenance"})
    assert r.json["state"] == "maintenance"
    r = api.patch(f"/v1/machines/{mid}", json={"nics": [{"mac": "aa:bb:cc:00:00:01"}]})
    assert [n["mac"] for n in r.json["nics"]] == ["aa:bb:cc:00:00:01"]
    r = api.patch(f"/v1/machines/{mid}", json={"bmc": None})
    assert r.json["bmc"] is None
    for bad, field in [({}, "_schema"), ({"state": "migrating"}, "state"), ({"id": "x"}, "id"),
                       ({"boot_interface": "nope"}, "boot_interface")]:
        r = api.patch(f"/v1/machines/{mid}", json=bad)
        assert r.status_code == 422, bad
        assert field in r.json["error"]["fields"]
    events = api.get(f"/v1/machines/{mid}/events").json["events"]
    assert [e["kind"] for e in events][:2] == ["machine.registered", "machine.updated"]


def test_patch_and_delete_of_locked_machine_is_409(api, services, partition):
    from sqlalchemy import update
    from metalboot_framework.store import models
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    with services.db.write() as s:
        s.execute(update(models.Machine).values(reservation="conductor-a",
                                                reserved_at=models.utcnow()))
    r = api.patch(f"/v1/machines/{mid}", json={"boot_mode": "bios"})
    assert r.status_code == 409
    assert "locked by conductor-a" in r.json["error"]["message"]
    assert api.delete(f"/v1/machines/{mid}").status_code == 409
    assert api.get(f"/v1/machines/{mid}").json["boot_mode"] == "uefi"
    assert api.get(f"/v1/machines/{mid}").json["lock"]["holder"] == "conductor-a"


def test_delete_machine(api, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    assert api.delete(f"/v1/machines/{mid}").status_code == 204
    assert api.get(f"/v1/machines/{mid}").status_code == 404
    assert api.delete(f"/v1/machines/{mid}").status_code == 404
    # its MAC is free again
    assert api.post("/v1/machines", json=machine_body(2, nics=machine_body(1)["nics"])) \
        .status_code == 201


def test_validate(api, partition):
    ok = api.post("/v1/machines", json=machine_body(1)).json["id"]
    r = api.post(f"/v1/machines/{ok}/validate", json={})
    assert r.status_code == 200
    assert r.json == {"machine_id": ok, "boot_interface": "fake", "valid": True,
                      "reason": None, "fields": {}}
    bad = api.post("/v1/machines", json=machine_body(
        2, properties={"fake_fail": {"validate": "no UefiHttp"}})).json["id"]
    r = api.post(f"/v1/machines/{bad}/validate", json={"boot_interface": "fake"})
    assert r.json["valid"] is False and "no UefiHttp" in r.json["reason"]
    # an unknown interface is bad input, as in POST /v1/machines and /v1/migrations
    r = api.post(f"/v1/machines/{bad}/validate", json={"boot_interface": "nope"})
    assert r.status_code == 422 and "boot_interface" in r.json["error"]["fields"]
    assert api.post("/v1/machines/00000000-0000-0000-0000-00000000ffff/validate",
                    json={}).status_code == 404


def test_bmc_password_never_in_responses_or_logs(api, partition, caplog):
    caplog.set_level(logging.DEBUG)
    body = machine_body(1)
    r1 = api.post("/v1/machines", json=body)
    r2 = api.get("/v1/machines")
    r3 = api.patch(f"/v1/machines/{body['id']}", json={"bmc": {"password": "rotated-pw"}})
    r4 = api.get(f"/v1/machines/{body['id']}")
    r5 = api.get(f"/v1/machines/{body['id']}/events")
    for r in (r1, r2, r3, r4, r5):
        assert r.status_code < 300
        assert b"bmc-secret-1" not in r.data and b"rotated-pw" not in r.data
        assert b"password\"" not in r.data
    assert "bmc-secret-1" not in caplog.text and "rotated-pw" not in caplog.text


def test_register_10000_in_one_request(api, partition):
    bodies = [machine_body(i) for i in range(10000)]
    r = api.post("/v1/machines", json=bodies)
    assert r.status_code == 201
    assert r.json["count"] == 10000
    page = api.get("/v1/machines?limit=1000").json
    assert len(page["machines"]) == 1000 and page["next_marker"]
    assert api.get("/v1/partitions/p1").json["machine_count"] == 10000
