"""REST migrations fake -> redfish-* against the vendor mock BMC, for every vendor.

A real metalboot-server migrates machines whose BMCs are the mock serving each
vendor's real payloads (tests/redfish_corpus). After a reset the mock's
simulated firmware boots only what the vendor's rules really put in place
(BIOS attributes applied by a job or the reset, Boot through iDRAC10's
settings object, Supermicro's UsbCd with the mode sent again, a UEFI mode):
it fetches the boot URL, or the inserted ISO, and chains the ISO's
autoexec.ipxe by MAC as iPXE would. Those fetches are the machines' only
evidence, so a machine is ``done`` only if its vendor's rules were followed.
A vendor that cannot do an interface is refused by validate with a message
naming the vendor and what is missing, and nothing is changed on its BMC.
A second iDRAC stays "not ready" (SYS518): its machine is rolled back, and
its last_error names the vendor, the request and the MessageId.
"""

import copy

import pytest
import requests

from test_redfish_migrations import SERVER_CONF, RedfishMachineSimulator, autoexec_of
from tests.functional.test_migrations import machine_states, migrate, wait_for

pytestmark = pytest.mark.functional

HTTP, VMEDIA = "redfish-http-url", "redfish-virtual-media-ipxe"
PASSWORD = "Vendor-Bmc-Secret-5"
GOOD, BUSY = "d0e11000-0000-4000-8000-000000000001", "d0e11000-0000-4000-8000-000000000002"

#: vendor -> {interface: None (migrates) or what validate's refusal names}
EXPECTED = {
    "dell-idrac9": {HTTP: None, VMEDIA: None},
    "dell-idrac10": {HTTP: None, VMEDIA: None},
    "hpe-ilo5": {HTTP: None, VMEDIA: ("HPE iLO", "InsertMedia")},
    "supermicro-x12": {HTTP: ("Supermicro", "UefiHttp"), VMEDIA: None},
    "lenovo-xcc": {HTTP: ("Lenovo XCC", "UefiHttp"), VMEDIA: None},
    "dmtf-public-rackmount1": {HTTP: ("Redfish BMC", "UefiHttp"),
                               VMEDIA: ("Redfish BMC", "InsertMedia")},
}


def machine_body(machine_id, bmc, mac):
    return {"id": machine_id, "partition": "p1", "boot_interface": "fake",
            "boot_mode": "uefi", "nics": [{"mac": mac}],
            "bmc": {"address": bmc.url, "username": "root", "password": PASSWORD,
                    "verify_tls": False}}


def firmware(mac, fetches):
    """The machine's UEFI firmware and iPXE, run by the mock after each reset
    with what it boots: the URL it fetches (UEFI HTTP boot) or the ISO in
    the virtual CD; an ISO's autoexec.ipxe is chained with ``mac``."""
    def boot(outcome):
        url = outcome["url"] or outcome["media"]
        if not url:
            return  # boots from disk
        answer = requests.get(url, timeout=30)
        fetches.append((url, answer.status_code))
        if answer.status_code != 200 or answer.content[0x8001:0x8006] != b"CD001":
            return
        chain = RedfishMachineSimulator.CHAIN_RE.search(autoexec_of(answer.content))
        target = RedfishMachineSimulator.MAC_VARIABLE_RE.sub(mac, chain.group(1))
        fetches.append((target, requests.get(target, timeout=30).status_code))
    return boot


def start_server(server_factory):
    server = server_factory(extra_conf=SERVER_CONF).start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1", "boot": {
        "kernel_url": "http://127.0.0.1:1/vmlinuz", "cmdline": "console=ttyS0"}}
    ).status_code == 201
    return server


def events_of(server, machine_id):
    return server.request("GET", f"/v1/machines/{machine_id}/events",
                          params={"limit": 1000}).json()["events"]


@pytest.mark.parametrize("interface", [HTTP, VMEDIA])
def test_every_vendor_migrates_or_is_refused_untouched(server_factory, vendor_bmc, interface):
    server = start_server(server_factory)
    machines = {}  # machine id -> (vendor, mock BMC, mac, fetches)
    found = {}  # machine id -> the BMC's documents before the migration
    for index, vendor in enumerate(sorted(EXPECTED)):
        bmc = vendor_bmc(vendor, uefi=True)
        mac, fetches = f"52:54:00:7e:00:{index:02x}", []
        bmc.on_boot = firmware(mac, fetches)
        mid = f"d0e11000-0000-4000-8000-0000000001{index:02d}"
        machines[mid] = (vendor, bmc, mac, fetches)
        found[mid] = copy.deepcopy(bmc.docs)
    r = server.request("POST", "/v1/machines", json=[
        machine_body(mid, bmc, mac) for mid, (_v, bmc, mac, _f) in machines.items()])
    assert r.status_code == 201, r.text
    m = wait_for(server, migrate(server, list(machines), target=interface,
                                 max_parallel=len(machines), boot_timeout=30)["id"],
                 timeout=120)
    per = machine_states(server, m["id"])
    for mid, (vendor, bmc, mac, fetches) in machines.items():
        refusal = EXPECTED[vendor][interface]
        state = per[mid]
        if refusal is None:
            assert state["state"] == "done", (vendor, state)
            assert bmc.resets == ["ForceRestart"], vendor  # exactly one reset
            assert len(bmc.boots) == 1 and bmc.boots[0]["mode"] == "UEFI", (vendor, bmc.boots)
            booted = bmc.boots[0]["url"] if interface == HTTP else bmc.boots[0]["media"]
            assert booted and booted.endswith(".iso"), (vendor, bmc.boots)
            assert fetches[0] == (booted, 200), (vendor, fetches)
            assert fetches[-1] == (f"{server.url}/boot/mac/{mac}/{interface}/boot.ipxe",
                                   200), (vendor, fetches)
            continue
        assert state["state"] == "rolled_back", (vendor, state)
        error = state["last_error"] or ""
        for word in refusal:
            assert word in error, (vendor, error)
        assert PASSWORD not in error
        assert any(refusal[-1] in e["message"] for e in events_of(server, mid)), vendor
        # nothing half-applied: no write, no reset, nothing booted
        assert bmc.counts["PATCH"] == bmc.counts["POST"] == 0, (vendor, dict(bmc.counts))
        assert bmc.resets == [] and bmc.boots == [] and fetches == [], vendor
        assert bmc.docs == found[mid], vendor  # the BMC as it was found


def test_dell_not_ready_is_rolled_back_naming_the_bmc_error(server_factory, vendor_bmc):
    good, busy = vendor_bmc("dell-idrac9", uefi=True), vendor_bmc("dell-idrac9", uefi=True)
    fetched = []
    good.on_boot = busy.on_boot = firmware("52:54:00:de:11:01", fetched)
    server = start_server(server_factory)
    r = server.request("POST", "/v1/machines", json=[
        machine_body(GOOD, good, "52:54:00:de:11:01"),
        machine_body(BUSY, busy, "52:54:00:de:11:02")])
    assert r.status_code == 201, r.text
    busy.busy = 10 ** 6  # every change refused: "iDRAC not ready"
    m = wait_for(server, migrate(server, [GOOD, BUSY], target=HTTP,
                                 max_parallel=2, boot_timeout=30)["id"])
    per = machine_states(server, m["id"])
    assert per[GOOD]["state"] == "done", per
    assert good.resets == ["ForceRestart"]  # exactly one reset
    assert good.boots[-1]["url"].endswith("/ipxe.iso")
    assert per[BUSY]["state"] == "rolled_back", per
    error = per[BUSY]["last_error"]
    assert "Dell iDRAC" in error and "IDRAC.2.8.SYS518" in error, error
    assert "PATCH Boot.BootSourceOverrideTarget=UefiHttp" in error, error
    assert PASSWORD not in error
    events = events_of(server, BUSY)
    assert any("SYS518" in e["message"] for e in events)
    assert all(PASSWORD not in e["message"] for e in events)
    assert busy.boots == []
