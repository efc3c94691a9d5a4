"""Per-machine tokens are bound to a boot interface, compare any input safely,
stay out of the logs wherever a client puts them; only answers that gave the
artifact count as evidence."""

import pytest
from sqlalchemy import select

from metalboot_framework import logs
from metalboot_framework.store import models
from tests.conftest import machine_body


@pytest.fixture
def conf(conf):
    conf.set_override("enabled_boot_interfaces", ["fake", "fake-alt"])
    return conf


def _evidence(services):
    with services.db.read() as s:
        return list(s.scalars(select(models.BootEvidence).order_by(models.BootEvidence.id)))


def test_a_token_proves_a_boot_through_its_own_interface_only(app, api, services, partition):
    """The by-MAC script (no token needed) of the interface a machine is on now
    holds a token: it must not prove a boot through the interface it is being
    migrated to."""
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    client = app.test_client()
    script = client.get("/boot/mac/52:54:00:00:00:01/fake/boot.ipxe").data.decode()
    token = script.split("METAL_BOOT_TOKEN=", 1)[1].split()[0]
    assert token == services.task(mid, "fake").token
    assert client.get(f"/boot/{mid}/fake-alt/{token}/boot.ipxe").status_code == 404
    r = client.post(f"/v1/machines/{mid}/boot-report",
                    json={"boot_interface": "fake-alt", "token": token})
    assert r.status_code == 401
    assert [e.interface for e in _evidence(services)] == ["fake"]  # the by-MAC fetch only
    alt = services.task(mid, "fake-alt").token
    assert alt != token
    assert client.get(f"/boot/{mid}/fake-alt/{alt}/boot.ipxe").status_code == 200
    assert client.post(f"/v1/machines/{mid}/boot-report",
                       json={"boot_interface": "fake-alt", "token": alt}).status_code == 201
    assert [e.interface for e in _evidence(services)] == ["fake", "fake-alt", "fake-alt"]


@pytest.mark.parametrize("token", ["%C3%A9", "%ff", "\u00e9" * 32, "\ud800"])
def test_any_token_text_is_a_wrong_token_not_a_500(app, api, partition, token):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    client = app.test_client()
    if token != "\ud800":  # a lone surrogate only comes in JSON ("\\ud800")
        assert client.get(f"/boot/{mid}/fake/{token}/boot.ipxe").status_code == 404
    r = client.post(f"/v1/machines/{mid}/boot-report",
                    json={"boot_interface": "fake", "token": token})
    # the token is checked before the body: a lone surrogate is a wrong token too
    assert r.status_code == 401, r.json


def test_a_failed_conditional_request_is_not_evidence(app, api, services, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    path = services.task(mid, "fake").artifact_url("boot.ipxe").split("6480", 1)[1]
    client = app.test_client()
    assert client.get(path, headers={"If-Match": '"other"'}).status_code == 412
    assert client.get(path, headers={"Range": "bytes=9999-"}).status_code == 416
    assert _evidence(services) == []
    etag = client.get(path).headers["ETag"]
    assert client.get(path, headers={"If-None-Match": etag}).status_code == 304
    assert client.head(path).status_code == 200
    assert len(_evidence(services)) == 3


@pytest.mark.parametrize("line", [
    "GET /boot/{mid}/fake/{token} 404",
    "GET /boot/{mid}/fake/{token}?x=1 404",
    "GET /boot/{mid}/fake//{token}/boot.ipxe 308",
    "POST /v1/machines/{mid}/boot-report/{token} 404",
    "POST /v1/machines/{mid}/boot-report?t={token} 422",
])
def test_a_token_anywhere_in_a_boot_path_is_masked(line):
    mid, token = "00000000-0000-4000-8000-000000000001", "bd9de2fa0123456789abcdef01234567"
    masked = logs.redact(line.format(mid=mid, token=token))
    assert token not in masked and logs.MASK in masked and mid in masked
