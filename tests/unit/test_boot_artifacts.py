"""boot.ipxe per machine, fetch evidence, and boot reports with machine tokens."""

from sqlalchemy import select

from metalboot_framework.store import models
from tests.conftest import machine_body


def _evidence(services):
    with services.db.read() as s:
        return list(s.scalars(select(models.BootEvidence).order_by(models.BootEvidence.id)))


def test_boot_script_fetch_is_recorded(app, api, services, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    task = services.task(mid, "fake")
    url = task.artifact_url("boot.ipxe")
    path = url.split("6480", 1)[1]
    assert mid in path and "/fake/" in path and task.token in path
    client = app.test_client()
    r = client.get(path, environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert r.status_code == 200
    script = r.data.decode()
    assert script.startswith("#!ipxe")
    assert "kernel http://images.example/metal-hammer/vmlinuz console=ttyS0" in script
    assert f"METAL_MACHINE_ID={mid}" in script
    assert f"METAL_BOOT_TOKEN={task.token}" in script
    assert "METAL_BOOT_INTERFACE=fake" in script
    assert "METAL_HAMMER_VERSION=v0.13.0" in script
    assert "initrd --name initrd http://images.example/metal-hammer/initrd.img" in script
    [ev] = _evidence(services)
    assert (ev.machine_id, ev.interface, ev.kind, ev.path, ev.client_address) == \
        (mid, "fake", "fetch", "boot.ipxe", "10.1.2.3")
    # range and conditional requests work (BMCs read in ranges)
    r2 = client.get(path, headers={"Range": "bytes=0-5"})
    assert r2.status_code == 206 and r2.data == b"#!ipxe"
    r3 = client.get(path, headers={"If-None-Match": r.headers["ETag"]})
    assert r3.status_code == 304


def test_partition_change_shows_in_next_script(app, api, services, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    path = services.task(mid, "fake").artifact_url("boot.ipxe").split("6480", 1)[1]
    api.patch("/v1/partitions/p1", json={"boot": {"metal_hammer_version": "v0.14.0"}})
    assert "METAL_HAMMER_VERSION=v0.14.0" in app.test_client().get(path).data.decode()


def test_wrong_token_or_interface_is_404_and_not_evidence(app, api, services, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    token = services.task(mid, "fake").token
    client = app.test_client()
    for path in (f"/boot/{mid}/fake/{'0' * 32}/boot.ipxe",
                 f"/boot/{mid}/pxe/{token}/boot.ipxe",
                 f"/boot/{mid}/fake/{token}/other.efi",
                 f"/boot/00000000-0000-0000-0000-000000000000/fake/{token}/boot.ipxe"):
        r = client.get(path)
        assert r.status_code == 404, path
        assert r.json["error"]["message"] == "no such boot artifact"
    assert _evidence(services) == []


def test_boot_script_by_mac_only_for_the_machines_interface(app, api, services, partition):
    api.post("/v1/machines", json=machine_body(1))
    client = app.test_client()
    r = client.get("/boot/mac/52-54-00-00-00-01/fake/boot.ipxe")
    assert r.status_code == 200
    assert "METAL_BOOT_INTERFACE=fake" in r.data.decode()
    assert client.get("/boot/mac/52:54:00:00:00:99/fake/boot.ipxe").status_code == 404
    assert [e.path for e in _evidence(services)] == ["boot.ipxe"]


def test_boot_report_needs_the_machine_token(app, api, services, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    other = api.post("/v1/machines", json=machine_body(2)).json["id"]
    token = services.task(mid, "fake").token
    client = app.test_client()
    url = f"/v1/machines/{mid}/boot-report"
    assert client.post(url, json={"boot_interface": "fake"}).status_code == 401
    assert client.post(url, json={"boot_interface": "fake", "token": "x" * 32}).status_code == 401
    other_token = services.task(other, "fake").token
    assert client.post(url, json={"boot_interface": "fake"},
                       headers={"Authorization": f"Bearer {other_token}"}).status_code == 401
    r = client.post(url, json={"boot_interface": "fake", "message": "metal-hammer up"},
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 201
    assert client.post(url, json={"boot_interface": "nope", "token": token}).status_code == 422
    [ev] = _evidence(services)
    assert (ev.kind, ev.interface, ev.data) == ("report", "fake", {"message": "metal-hammer up"})


def test_amend_boot_script_hook(app, api, services, partition):
    from metalboot_framework import hookimpl

    class Amender:
        @hookimpl
        def metalboot_amend_boot_script(self, machine, interface, script):
            script.text += f"# amended for {machine.id} on {interface}\n"

    class Broken:
        @hookimpl
        def metalboot_amend_boot_script(self, script):
            raise RuntimeError("broken hook")

    services.hooks.pm.register(Amender())
    services.hooks.pm.register(Broken())
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    path = services.task(mid, "fake").artifact_url("boot.ipxe").split("6480", 1)[1]
    r = app.test_client().get(path)
    assert r.status_code == 200
    assert r.data.decode().endswith(f"# amended for {mid} on fake\n")
