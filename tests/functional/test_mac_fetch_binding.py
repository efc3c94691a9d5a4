"""A fetch of boot.ipxe by MAC proves a boot only from an address bound to the
machine: through metalboot-server (Flask) and metalboot-boot-server alike, with
real client addresses (127.0.0.1 is the partition's configured prefix here,
127.0.0.2 is anyone else on the boot network)."""

import http.client
import json
import time

import pytest

from tests.conftest import free_port, machine_body, signer_of
from tests.functional.test_boot_server import BootServerProcess, _conf
from tests.functional.test_migrations import machine_states, migrate, wait_for

pytestmark = pytest.mark.functional

BOUND, FOREIGN = "127.0.0.1", "127.0.0.2"
PREFIXES = f"[artifacts]\nboot_network_prefixes = p1={BOUND}/32\n"


def call(url, path, source, method="GET", body=None, headers=None):
    """An HTTP request sent from the local address ``source``."""
    host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30,
                                      source_address=(source, 0))
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=dict(headers or {}, **(
                         {"Content-Type": "application/json"} if body is not None else {})))
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.fixture(params=["metalboot-server", "metalboot-boot-server"])
def servers(request, server_factory):
    """(the API server, the URL booting machines fetch from)."""
    if request.param == "metalboot-server":
        api = server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n"
                             + PREFIXES).start()
        yield api, api.url
        return
    port = free_port()
    api = server_factory(extra_conf=_conf(port, extra=PREFIXES)).start()
    boot = BootServerProcess(api, port).start()
    yield api, boot.url
    boot.stop()


def evidence(api, machine_id):
    return api.request("GET", f"/v1/machines/{machine_id}/evidence").json()["evidence"]


def token_in(script):
    return script.decode().split("METAL_BOOT_TOKEN=", 1)[1].split()[0]


def test_a_fetch_by_mac_from_a_foreign_address_does_not_finish_the_migration(servers):
    api, boot_url = servers
    assert api.request("POST", "/v1/partitions", json={"id": "p1", "boot": {
        "kernel_url": "http://images.example/vmlinuz"}}).status_code == 201
    [mid] = api.register_enrolled([machine_body(0)])
    mac = "52:54:00:00:00:00"  # machine_body(0)'s NIC
    m = migrate(api, [mid], boot_timeout=120)
    deadline = time.monotonic() + 30
    while machine_states(api, m["id"])[mid]["state"] != "awaiting_boot":
        assert time.monotonic() < deadline, machine_states(api, m["id"])
        time.sleep(0.1)
    own_token = signer_of(api).machine_token(mid, 1, "fake-alt")

    # anyone on the boot network: served (a real machine must boot), but its
    # script's token proves nothing either
    status, script = call(boot_url, f"/boot/mac/{mac}/fake-alt/boot.ipxe", FOREIGN)
    assert status == 200 and f"METAL_MACHINE_ID={mid}" in script.decode()
    unbound = token_in(script)
    assert unbound != own_token
    status, _ = call(boot_url, f"/boot/{mid}/fake-alt/{unbound}/boot.ipxe", FOREIGN)
    assert status == 200
    status, body = call(boot_url, f"/v1/machines/{mid}/boot-report", FOREIGN, "POST",
                        {"boot_interface": "fake-alt", "message": "forged"},
                        {"Authorization": f"Bearer {unbound}"})
    assert status == 201, body
    rows = evidence(api, mid)
    assert [(e["kind"], e["path"], e["client_address"]) for e in rows] == [
        ("unverified", "boot.ipxe", FOREIGN), ("unverified", "boot.ipxe", FOREIGN),
        ("unverified", "boot-report", FOREIGN)]
    time.sleep(2)  # 20 conductor polls
    state = machine_states(api, m["id"])[mid]
    assert state["state"] == "awaiting_boot" and state["evidence"] is None, state

    # the machine itself, from its partition's boot network prefix
    status, script = call(boot_url, f"/boot/mac/{mac}/fake-alt/boot.ipxe", BOUND)
    assert status == 200 and token_in(script) == own_token
    done = wait_for(api, m["id"])
    assert done["state"] == "done" and done["counts"] == {"done": 1}, done
    proof = machine_states(api, m["id"])[mid]["evidence"]
    assert (proof["kind"], proof["path"], proof["client_address"]) == \
        ("fetch", "boot.ipxe", BOUND)
