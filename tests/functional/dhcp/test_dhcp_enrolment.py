"""Enrolment with real dnsmasq and Kea: a machine registered on ``pxe`` gets its
DHCP entries without any migration, and a boot interface changed at rest moves
the machine's entries from one DHCP server to the other.

What a booting machine would see is asked with real DHCP in the client
namespace (dhcp_client.py), and the iPXE stage's URL is fetched: that fetch is
recorded as boot evidence like any other.
"""

import re
import time

import pytest
import requests

from tests.conftest import signer_of
from tests.functional.dhcp.conftest import server_conf
from tests.functional.dhcp.test_dhcp_migrations import (
    HTTPBOOT, MACHINES, PXE, assert_dnsmasq, assert_kea, bootfile, v6_url)

pytestmark = pytest.mark.functional


def test_registered_on_pxe_is_enrolled_and_moves_at_rest(net, dnsmasq, kea, clients,
                                                          server_factory, dhcp_agent, tmp_path):
    efi = tmp_path / "ipxe.efi"
    efi.write_bytes(b"MZ" + bytes(4096))
    server = server_factory(extra_conf=server_conf(dnsmasq, kea, efi)).start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    dhcp_agent(server, dnsmasq, kea, efi)
    a, c = MACHINES["A"], MACHINES["C"]
    r = server.request("POST", "/v1/machines", json=[
        {"id": m["id"], "partition": "p1", "boot_interface": PXE, "nics": [m["nic"]]}
        for m in (a, c)])
    assert r.status_code == 201, r.text
    assert {m["state"] for m in r.json()["machines"]} == {"enrolling"}

    machines = {m["id"]: m for m in server.wait_enrolled()}
    for m in (a, c):
        got = machines[m["id"]]
        assert (got["state"], got["prepared_interface"], got["last_error"]) == (
            "ready", PXE, None), got
        events = server.request("GET", f"/v1/machines/{m['id']}/events").json()["events"]
        assert [e["kind"] for e in events if e["kind"].startswith("machine.")] == [
            "machine.registered", "machine.enrolled"], events

    # the firmware's PXE client gets the iPXE binary, iPXE gets the machine's script
    offer = clients.v4(a["nic"]["mac"], arch=7)
    assert bootfile(offer) == "snponly.efi", offer
    url = bootfile(clients.v4(a["nic"]["mac"], arch=7, user_class="iPXE"))
    found = re.fullmatch(rf"{server.url}/boot/{a['id']}/{PXE}/([^/]+)/boot\.ipxe", url or "")
    assert found, url
    signer = signer_of(server)
    assert found.group(1) == signer.machine_token(a["id"], 1, PXE)
    assert re.search(rf"/boot/{c['id']}/{PXE}/([^/]+)/boot\.ipxe",
                     (dnsmasq.optsdir / f"metalboot-{c['id']}.{PXE}").read_text()
                     ).group(1) == signer.machine_token(c["id"], 1, PXE)

    def url_of(mid, interface, name):  # tokens are bound to the interface
        return f"{server.url}/boot/{mid}/{interface}/" \
               f"{signer.machine_token(mid, 1, interface)}/{name}"

    assert_dnsmasq(dnsmasq, {m["id"]: (PXE, m["nic"]["mac"]) for m in (a, c)}, {}, url_of)
    assert_kea(kea, [], url_of)
    assert requests.get(url, timeout=10).status_code == 200
    evidence = server.request("GET", f"/v1/machines/{a['id']}/evidence").json()
    assert [(e["interface"], e["path"]) for e in evidence["evidence"]] == [(PXE, "boot.ipxe")]

    # C's boot interface changed at rest: pxe cleaned up, dhcp-httpboot prepared
    r = server.request("PATCH", f"/v1/machines/{c['id']}", json={"boot_interface": HTTPBOOT})
    assert r.status_code == 200 and r.json()["state"] == "enrolling", r.text
    got = {m["id"]: m for m in server.wait_enrolled()}[c["id"]]
    assert (got["state"], got["prepared_interface"]) == ("ready", HTTPBOOT), got
    assert_dnsmasq(dnsmasq, {a["id"]: (PXE, a["nic"]["mac"])}, {c["id"]: c["nic"]["mac"]},
                   url_of)
    assert_kea(kea, [c["id"]], url_of)
    advertise = clients.v6(c["nic"]["mac"], http_client=True)
    assert v6_url(advertise) == url_of(c["id"], HTTPBOOT, "ipxe.efi"), advertise
    events = server.request("GET", f"/v1/machines/{c['id']}/events").json()["events"]
    enrolled = [e for e in events if e["kind"] == "machine.enrolled"]
    assert enrolled[-1]["message"] == f"enrolled: prepared for {HTTPBOOT} ({PXE} cleaned up)"

    # a machine whose enrolment fails is in error, says why, and is retried on request
    r = server.request("POST", "/v1/machines", json={
        "id": "00000000-0000-4000-8000-0000000000ff", "partition": "p1",
        "boot_interface": HTTPBOOT, "nics": [{"mac": "52:54:00:77:10:ff"}],
        "boot_mode": "bios"})
    assert r.status_code == 201, r.text
    bad = {m["id"]: m for m in server.wait_enrolled()}["00000000-0000-4000-8000-0000000000ff"]
    assert bad["state"] == "error" and HTTPBOOT in bad["last_error"], bad
    assert bad["prepared_interface"] is None
    r = server.request("PATCH", f"/v1/machines/{bad['id']}", json={"boot_mode": "uefi",
                                                                  "state": "ready"})
    assert r.status_code == 200 and r.json()["state"] == "enrolling", r.text
    fixed = {m["id"]: m for m in server.wait_enrolled()}[bad["id"]]
    assert (fixed["state"], fixed["last_error"]) == ("ready", None), fixed

    # a NIC changed at rest: enrolled again, the DHCP entries follow the new MAC
    r = server.request("PATCH", f"/v1/machines/{a['id']}",
                       json={"nics": [dict(a["nic"], mac="52:54:00:77:10:aa")]})
    assert r.status_code == 200 and r.json()["state"] == "enrolling", r.text
    got = {m["id"]: m for m in server.wait_enrolled()}[a["id"]]
    assert (got["state"], got["prepared_interface"]) == ("ready", PXE), got
    hosts = (dnsmasq.hostsdir / f"metalboot-{a['id']}").read_text()
    assert "52:54:00:77:10:aa," in hosts and a["nic"]["mac"] not in hosts, hosts
    assert bootfile(clients.v4("52:54:00:77:10:aa", arch=7)) == "snponly.efi"

    # deleted: the conductor removes the machines' entries before it forgets them
    for m in (a, c, fixed):
        r = server.request("DELETE", f"/v1/machines/{m['id']}")
        assert r.status_code == 202 and r.json()["state"] == "deleting", r.text
    deadline = time.monotonic() + 30
    while server.request("GET", "/v1/machines").json()["machines"]:
        assert time.monotonic() < deadline, "machines still there after their deletion"
        time.sleep(0.2)
    assert_kea(kea, [], url_of)
    assert_dnsmasq(dnsmasq, {}, {a["id"]: "52:54:00:77:10:aa", c["id"]: c["nic"]["mac"]},
                   url_of)
    assert bootfile(clients.v4("52:54:00:77:10:aa", arch=7)) is None
