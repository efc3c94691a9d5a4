"""REST migrations fake -> redfish-http-url against the vendor mock BMC (Dell iDRAC9).

A real metalboot-server migrates machines whose BMC is the mock serving Dell's
real payloads. The mock's simulated firmware fetches the boot URL after a
reset only if the vendor's rules were satisfied (the BIOS attributes applied
by the reset, which needs SettingsApplyTime or a config job): that fetch is
the machine's evidence, so the migration is done only if Dell's rules were
followed. A second iDRAC stays "not ready" (SYS518): its machine is rolled
back, and its last_error names the vendor, the request and the MessageId.
"""

import pytest
import requests

from test_redfish_migrations import SERVER_CONF
from tests.functional.test_migrations import machine_states, migrate, wait_for

pytestmark = pytest.mark.functional

HTTP = "redfish-http-url"
PASSWORD = "Dell-Bmc-Secret-5"
GOOD, BUSY = "d0e11000-0000-4000-8000-000000000001", "d0e11000-0000-4000-8000-000000000002"


def machine_body(machine_id, bmc, mac):
    return {"id": machine_id, "partition": "p1", "boot_interface": "fake",
            "boot_mode": "uefi", "nics": [{"mac": mac}],
            "bmc": {"address": bmc.url, "username": "root", "password": PASSWORD,
                    "verify_tls": False}}


def fetch_boot_url(outcome):
    if outcome["url"]:
        requests.get(outcome["url"], timeout=10)


def test_dell_migration_boots_the_url_and_names_bmc_errors(server_factory, vendor_bmc):
    good, busy = vendor_bmc("dell-idrac9", uefi=True), vendor_bmc("dell-idrac9", uefi=True)
    good.on_boot = busy.on_boot = fetch_boot_url
    server = server_factory(extra_conf=SERVER_CONF).start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1", "boot": {
        "kernel_url": "http://127.0.0.1:1/vmlinuz", "cmdline": "console=ttyS0"}}
    ).status_code == 201
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
    events = server.request("GET", f"/v1/machines/{BUSY}/events",
                            params={"limit": 1000}).json()["events"]
    assert any("SYS518" in e["message"] for e in events)
    assert all(PASSWORD not in e["message"] for e in events)
    assert busy.boots == []
