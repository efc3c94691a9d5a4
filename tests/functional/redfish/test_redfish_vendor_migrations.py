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
Every fault the mock can inject fails its machine with a last_error and an
event naming the vendor, the request that failed (method and URI path) and
the BMC's MessageId, and never the BMC password.
"""

import copy
import dataclasses
import re
from typing import Callable, Optional, Tuple

import pytest
import requests

from test_redfish_migrations import SERVER_CONF, RedfishMachineSimulator, autoexec_of
from vendor_behaviour import DELL_SYSTEM, PROFILES
from tests.functional.test_migrations import machine_states, migrate, wait_for

pytestmark = pytest.mark.functional

HTTP, VMEDIA = "redfish-http-url", "redfish-virtual-media-ipxe"
PASSWORD = "Vendor-Bmc-Secret-5"

#: vendor -> {interface: None (migrates) or what validate's refusal names}
EXPECTED = {
    "dell-idrac9": {HTTP: None, VMEDIA: None},
    "dell-idrac10": {HTTP: None, VMEDIA: None},
    "hpe-ilo5": {HTTP: None, VMEDIA: ("HPE iLO", "InsertMedia")},
    "supermicro-x11": {HTTP: ("Supermicro", "UefiHttp"), VMEDIA: None},
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


def start_server(server_factory, conf=SERVER_CONF):
    server = server_factory(extra_conf=conf).start()
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


def _operators_iso_in_the_only_cd(bmc):
    """The iLO 5 stand-in with the DMTF media actions on its one CD/DVD
    device (the captured payload offers only HPE's OEM ones), holding an
    operator's ISO that activate has to eject."""
    device = bmc.device("2")
    device["Actions"] = {f"#VirtualMedia.{name}": {
        "target": f"/redfish/v1/Managers/1/VirtualMedia/2/Actions/VirtualMedia.{name}"}
        for name in ("InsertMedia", "EjectMedia")}
    device.update(Image="http://192.168.1.2/operator.iso", Inserted=True)


def test_a_rollback_leaves_every_vendors_bmc_as_found(server_factory, vendor_bmc):
    """Machines whose firmware never fetches anything (no evidence) are rolled
    back at their boot_timeout: the target's clean-up leaves the BIOS
    attributes, Boot properties and media of the next boot as they were
    before activation, on every vendor, for each interface it migrates with
    -- the attributes a vendor rule changed (Dell HttpDev1Protocol) and an
    operator's image ejected from iLO's only CD device included."""
    server = start_server(server_factory)
    machines = {}  # machine id -> (vendor, interface, mock BMC, next boot before)
    cases = [(vendor, interface, None) for vendor in sorted(EXPECTED)
             for interface in (HTTP, VMEDIA) if EXPECTED[vendor][interface] is None]
    cases.append(("hpe-ilo5", VMEDIA, _operators_iso_in_the_only_cd))
    for index, (vendor, interface, before) in enumerate(cases):
        bmc = vendor_bmc(vendor, uefi=True)
        if before is not None:
            before(bmc)
        mid = f"d0e12000-0000-4000-8000-0000000001{index:02d}"
        machines[mid] = (vendor, interface, bmc, bmc.next_boot())
        mac = f"52:54:00:7f:00:{index:02x}"
        assert server.request("POST", "/v1/machines", json=machine_body(
            mid, bmc, mac)).status_code == 201
    for interface in (HTTP, VMEDIA):
        ids = [mid for mid, (_v, i, _b, _n) in machines.items() if i == interface]
        m = wait_for(server, migrate(server, ids, target=interface, max_parallel=len(ids),
                                     boot_timeout=2)["id"], timeout=120)
        per = machine_states(server, m["id"])
        for mid in ids:
            vendor, _i, bmc, found = machines[mid]
            assert per[mid]["state"] == "rolled_back", (vendor, interface, per[mid])
            assert bmc.resets == ["ForceRestart"], (vendor, interface)  # it was activated
            assert bmc.next_boot() == found, (vendor, interface)


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault of the mock BMC, set up by ``inject(bmc)`` before the
    migration, and the request whose failure the error must name."""

    vendor: str
    interface: str
    inject: Callable
    #: (method, URI path) of the request that fails
    request: Tuple[str, str]
    #: the MessageId of the BMC's answer (None: it gave no answer)
    message_id: Optional[str]


SMC_SYSTEM = "/redfish/v1/Systems/1"
SMC_CD = "/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VirtualMedia."
ILO_SYSTEM = "/redfish/v1/Systems/1"
RESET = "/Actions/ComputerSystem.Reset"
ROTATED = "Rotated-Elsewhere-8"  # the password someone set on the BMC meanwhile


def _from_insert_on(change):
    return lambda bmc: bmc.when("POST", "VirtualMedia.InsertMedia", change)


def _someone_elses_iso(bmc, **flags):
    bmc.device("CD1").update(Image="http://other/old.iso", Inserted=True)
    for name, value in flags.items():
        setattr(bmc, name, value)


def _refuse(method, suffix, *fault):
    return lambda bmc: bmc.refuse.update({(method, suffix): fault})


def _profile(**changes):
    def inject(bmc):
        bmc.profile = dataclasses.replace(bmc.profile, **changes)
    return inject


def _no_boot_settings_object(bmc):
    del bmc.docs[DELL_SYSTEM]["@Redfish.Settings"]


def _jobs_missing(bmc):
    del bmc.docs[DELL_SYSTEM + "/Bios"]["@Redfish.Settings"]["SupportedApplyTimes"]
    bmc.refuse[("POST", "/Jobs")] = (404, "Base.1.0.ResourceMissingAtURI",
                                     "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs")


FAULTS = {
    "503 to every request from the insert on": Fault(
        "supermicro-x12", VMEDIA, _from_insert_on(lambda bmc: setattr(bmc, "fail_rate", 1.0)),
        ("POST", SMC_CD + "InsertMedia"), "Base.1.8.ServiceTemporarilyUnavailable"),
    "503 to every reset": Fault(
        "supermicro-x12", VMEDIA, _refuse("POST", RESET, *PROFILES["supermicro-x12"].busy),
        ("POST", SMC_SYSTEM + RESET), "Base.1.8.ServiceTemporarilyUnavailable"),
    "PATCH answered past the read timeout": Fault(
        "supermicro-x12", VMEDIA, lambda bmc: bmc.slow.update({("PATCH", SMC_SYSTEM): 2.5}),
        ("PATCH", SMC_SYSTEM), None),
    "409 to the eject": Fault(
        "supermicro-x12", VMEDIA, lambda bmc: _someone_elses_iso(bmc, eject_conflict=True),
        ("POST", SMC_CD + "EjectMedia"), "Base.1.8.ResourceInUse"),
    "409 to the eject (X11)": Fault(
        "supermicro-x11", VMEDIA, lambda bmc: _someone_elses_iso(bmc, eject_conflict=True),
        ("POST", SMC_CD + "EjectMedia"), "Base.1.8.ResourceInUse"),
    "eject answered, media kept": Fault(
        "supermicro-x12", VMEDIA, lambda bmc: _someone_elses_iso(bmc, eject_ignored=True),
        ("POST", SMC_CD + "EjectMedia"), None),
    "401: the password changed on the BMC": Fault(
        "supermicro-x12", VMEDIA,
        _from_insert_on(lambda bmc: setattr(bmc, "password", ROTATED)),
        ("POST", SMC_CD + "InsertMedia"), "Base.1.8.NoValidSession"),
    "dead BMC from the insert on": Fault(
        "supermicro-x12", VMEDIA, _from_insert_on(lambda bmc: bmc.kill()),
        ("GET", "/redfish/v1/"), None),
    "428: If-Match required, no ETag given": Fault(
        "dell-idrac9", HTTP, _profile(if_match_required=True, etag_in="none"),
        ("PATCH", DELL_SYSTEM + "/Bios/Settings"), "Base.1.8.PreconditionRequired"),
    "400: Boot read-only, no settings object": Fault(
        "dell-idrac10", VMEDIA, _no_boot_settings_object,
        ("PATCH", DELL_SYSTEM), "Base.1.12.PropertyNotWritable"),
    "415 to the reset": Fault(
        "hpe-ilo5", HTTP, _refuse("POST", RESET, 415, "Base.1.8.UnsupportedMediaType",
                                  "The request body is missing or not JSON."),
        ("POST", ILO_SYSTEM + RESET), "Base.1.8.UnsupportedMediaType"),
    "iDRAC not ready (SYS518)": Fault(
        "dell-idrac9", HTTP, lambda bmc: setattr(bmc, "busy", 10 ** 6),
        ("PATCH", DELL_SYSTEM + "/Bios/Settings"), "IDRAC.2.8.SYS518"),
    "iLO in POST": Fault(
        "hpe-ilo5", HTTP, lambda bmc: setattr(bmc, "busy", 10 ** 6),
        ("PATCH", "/redfish/v1/systems/1/bios/settings"),
        "iLO.2.15.UnableToModifyDuringSystemPOST"),
    "no virtual media slot takes the insert": Fault(
        "dell-idrac10", VMEDIA, _profile(insert_slots=()),
        ("POST", DELL_SYSTEM + "/VirtualMedia/2/Actions/VirtualMedia.InsertMedia"),
        "IDRAC.2.8.VRM0021"),
    "404 to the BIOS config job": Fault(
        "dell-idrac9", HTTP, _jobs_missing,
        ("POST", "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs"), "Base.1.0.ResourceMissingAtURI"),
}

#: corpus name -> the vendor as the quirk table names it
VENDOR_NAMES = {"supermicro-x11": "Supermicro", "supermicro-x12": "Supermicro",
                "dell-idrac9": "Dell iDRAC",
                "dell-idrac10": "Dell iDRAC", "hpe-ilo5": "HPE iLO", "lenovo-xcc": "Lenovo XCC"}

#: corpus name -> the path of its system
SYSTEM_PATHS = {"supermicro-x11": SMC_SYSTEM, "supermicro-x12": SMC_SYSTEM,
                "dell-idrac9": DELL_SYSTEM,
                "dell-idrac10": DELL_SYSTEM, "hpe-ilo5": ILO_SYSTEM}

#: SERVER_CONF with a read timeout short enough for the slow answers here
FAULT_CONF = SERVER_CONF.replace("read_timeout = 10", "read_timeout = 1")
REQUEST_RE = re.compile(r"\b(GET|POST|PATCH) /redfish/v1/\S*")


def test_every_bmc_fault_names_vendor_request_and_message_id(server_factory, vendor_bmc):
    """One machine per fault, migrated in one migration per interface: each
    is rolled back (or left in error when the BMC is still broken for the
    rollback), and its last_error and the event of the failed step name the
    vendor, the request that failed and the MessageId; no password anywhere,
    the server's log included."""
    assert "read_timeout = 1\n" in FAULT_CONF
    server = start_server(server_factory, FAULT_CONF)
    machines = {}  # machine id -> (fault name, mock BMC)
    for index, (name, fault) in enumerate(FAULTS.items()):
        bmc = vendor_bmc(fault.vendor, uefi=True, password=PASSWORD)
        fault.inject(bmc)
        machines[f"d0e12000-0000-4000-8000-0000000002{index:02d}"] = (name, bmc)
    r = server.request("POST", "/v1/machines", json=[
        machine_body(mid, bmc, f"52:54:00:fa:00:{i:02x}")
        for i, (mid, (_name, bmc)) in enumerate(machines.items())])
    assert r.status_code == 201, r.text
    by_interface = {}
    for mid, (name, _bmc) in machines.items():
        by_interface.setdefault(FAULTS[name].interface, []).append(mid)
    per = {}
    for interface, ids in by_interface.items():
        m = wait_for(server, migrate(server, ids, target=interface, max_parallel=len(ids),
                                     boot_timeout=30)["id"], timeout=120)
        per.update(machine_states(server, m["id"]))
    problems = []  # every row's failures at once: (fault, what is wrong, the text)
    for mid, (name, bmc) in machines.items():
        problems += _problems(server, name, bmc, per[mid])
    assert not problems, "\n".join(repr(p) for p in problems)
    log = server.log()
    assert PASSWORD not in log and ROTATED not in log
    assert "(Supermicro)" in log  # the log was written, and names the vendor too


def _problems(server, name, bmc, state):
    """What is wrong with the error reports of one fault's machine."""
    fault = FAULTS[name]
    vendor = VENDOR_NAMES[fault.vendor]
    method, path = fault.request
    system = f"system {SYSTEM_PATHS[fault.vendor]}"
    wanted = [f"({vendor})", system, f"{method} {path}"] + \
        ([fault.message_id] if fault.message_id else [])
    found = []
    if fault.message_id and (method, path, fault.message_id) not in [
            (m, p, i) for m, p, _status, i in bmc.faults]:
        found.append((name, "the mock did not answer so", bmc.faults))
    if state["state"] not in ("rolled_back", "rollback_failed"):
        found.append((name, "state", state))
    error = state["last_error"] or ""
    if state["state"] == "rollback_failed":
        # the BMC is still broken: last_error is the clean-up's failure, of
        # another request, with the same fault
        wanted_last = [f"({vendor})", system] + \
            ([fault.message_id] if fault.message_id else [])
        if not REQUEST_RE.search(error):
            found.append((name, "last_error names no request", error))
    else:
        wanted_last = wanted
    if not all(w in error for w in wanted_last):
        found.append((name, f"last_error lacks {wanted_last}", error))
    messages = [e["message"] for e in events_of(server, state["machine_id"])]
    if not any(all(w in m for w in wanted) for m in messages):
        found.append((name, f"no event names {wanted}", messages))
    machine = server.request("GET", f"/v1/machines/{state['machine_id']}").json()
    if state["state"] == "rollback_failed":  # the BMC is still broken
        if machine["state"] != "error" or machine["last_error"] != error:
            found.append((name, "machine", machine))
    texts = [error, machine["last_error"] or "", *messages]
    if any(PASSWORD in t or ROTATED in t for t in texts):
        found.append((name, "a password", texts))
    if bmc.boots:
        found.append((name, "booted the half-done change", bmc.boots))
    return found
