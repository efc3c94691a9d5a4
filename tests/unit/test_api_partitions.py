"""/v1/partitions through the Flask test client."""

import pytest


def test_create_get_list_patch_delete(api):
    r = api.post("/v1/partitions", json={"id": "fra-equ01", "description": "Frankfurt",
                                         "boot": {"kernel_url": "http://img/k",
                                                  "cmdline": "console=ttyS1"}})
    assert r.status_code == 201
    assert r.json["boot"]["kernel_url"] == "http://img/k"
    assert r.json["machine_count"] == 0
    assert api.get("/v1/partitions/fra-equ01").json["description"] == "Frankfurt"
    assert [p["id"] for p in api.get("/v1/partitions").json["partitions"]] == ["fra-equ01"]

    r = api.patch("/v1/partitions/fra-equ01", json={"boot": {"metal_hammer_version": "v2"}})
    assert r.status_code == 200
    # fields not given stay as they were
    assert r.json["boot"] == {"kernel_url": "http://img/k", "initrd_url": None,
                              "cmdline": "console=ttyS1", "metal_boot_url": None,
                              "metal_hammer_version": "v2", "boot_url": None}
    assert r.json["updated_at"] is not None
    assert api.delete("/v1/partitions/fra-equ01").status_code == 204
    assert api.get("/v1/partitions/fra-equ01").status_code == 404


def test_duplicate_is_409(api, partition):
    r = api.post("/v1/partitions", json={"id": "p1"})
    assert r.status_code == 409
    assert r.json["error"]["fields"] == {"id": ["exists already"]}


def test_delete_with_machines_is_409(api, partition):
    from tests.conftest import machine_body
    assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    r = api.delete("/v1/partitions/p1")
    assert r.status_code == 409
    assert "1 machine" in r.json["error"]["message"]
    assert api.get("/v1/partitions/p1").status_code == 200


@pytest.mark.parametrize("body, field", [
    ({"id": "bad id"}, "id"),
    ({"id": ""}, "id"),
    ({"id": 5}, "id"),
    ({}, "id"),
    ({"id": "p", "boot": {"kernel_url": "ftp://x/k"}}, "boot.kernel_url"),
    ({"id": "p", "boot": {"kernel_url": "not a url"}}, "boot.kernel_url"),
    ({"id": "p", "boot": {"unknown": 1}}, "boot.unknown"),
    ({"id": "p", "boot": "x"}, "boot"),
    ({"id": "p", "colour": "red"}, "colour"),
    ({"id": "p", "properties": []}, "properties"),
])
def test_bad_partition_is_422_naming_the_field(api, body, field):
    r = api.post("/v1/partitions", json=body)
    assert r.status_code == 422, r.json
    assert field in r.json["error"]["fields"], r.json
    assert api.get("/v1/partitions").json["partitions"] == []


def test_patch_unknown_partition_is_404(api):
    r = api.patch("/v1/partitions/nope", json={"description": "x"})
    assert r.status_code == 404
    assert r.json["error"]["code"] == 404
