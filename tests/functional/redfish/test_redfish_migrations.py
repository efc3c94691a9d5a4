"""Migrations to and between the Redfish boot interfaces, through the REST API of a
real metalboot-server, against real sushy-emulator processes (the wrapper that
stores HttpBootUri per system).

The emulator cannot boot anything, so a :class:`RedfishMachineSimulator` plays
each machine's firmware: it watches its system on the emulator and, when the
system comes back on after a reset, boots what the BMC holds -- for a one-time
``Cd`` override with media inserted, it downloads the inserted ISO, reads its
``autoexec.ipxe`` and fetches the ``chain`` URL with its own MAC (as iPXE
would); for ``UefiHttp``, it downloads ``HttpBootUri`` (UEFI HTTP boot) and
then chains the script of that ISO the same way. Nothing else fetches the
machines' artifacts, so a machine is ``done`` only because of those fetches.
"""

import io
import re
import threading
import time

import pycdlib
import pytest
import requests

from redfish_emulator_harness import BMC_PASSWORD, BMC_USER, IPXE_EFI, fake_system
from metalboot_framework.testing.simulator import SimulatedFleet
from tests.functional.test_migrations import machine_states, migrate, steps_of, wait_for

pytestmark = pytest.mark.functional

VMEDIA = "redfish-virtual-media-ipxe"
HTTP = "redfish-http-url"
#: The emulator applies a reset after this many seconds; long enough for the
#: simulator (polling every 50 ms) to see the system off in between, also on a
#: loaded machine.
POWER_DELAY = (0.8, 1.2)

SERVER_CONF = f"""\
enabled_boot_interfaces = fake,{VMEDIA},{HTTP}
default_boot_interface = fake
[bmc]
connect_timeout = 2
read_timeout = 10
retry_attempts = 2
retry_interval = 0.05
retry_max_interval = 0.2
power_poll_interval = 0.1
power_timeout = 20
post_retry_interval = 0.05
post_retry_timeout = 1
[redfish]
ipxe_efi_path = {IPXE_EFI}
"""




def autoexec_of(iso_bytes):
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(iso_bytes))
    try:
        out = io.BytesIO()
        iso.get_file_from_iso_fp(out, joliet_path="/autoexec.ipxe")
        return out.getvalue().decode()
    finally:
        iso.close()


class RedfishMachineSimulator:
    """The firmware of machines behind sushy-emulator BMCs.

    One thread per system polls the emulator's ComputerSystem. When the system
    is seen ``On`` after having been seen off (a reset or power-on), it "boots"
    from what the BMC holds at that moment:

    - ``BootSourceOverrideEnabled`` Once/Continuous and target ``Cd`` with an
      inserted CD: GET the CD's image URL, read /autoexec.ipxe from the ISO and
      GET its ``chain`` URL with ``${net${idx}/mac}`` replaced by the system's MAC;
    - target ``UefiHttp`` with ``HttpBootUri``: GET that URL; when it is an ISO,
      chain its autoexec.ipxe the same way;
    - otherwise: it boots from disk, fetching nothing.

    :attr:`boots` lists each boot: (system uuid, kind, [(url, status)], snapshot
    of the BMC state it booted from).
    """

    CHAIN_RE = re.compile(r"\bchain\s+(\S+)")
    MAC_VARIABLE_RE = re.compile(r"\$\{net(\$\{idx\}|\d+)/mac\}")

    def __init__(self, emulators_and_systems, interval=0.05):
        self.targets = list(emulators_and_systems)  # (emulator, system dict; its BMC's auth)
        self.interval = interval
        self.boots = []
        self.errors = []
        self._lock = threading.Lock()
        self._booting = 0
        self._stop = threading.Event()
        self._threads = []

    def __enter__(self):
        for emulator, system in self.targets:
            t = threading.Thread(target=self._watch, args=(emulator, system), daemon=True,
                                 name=f"simulated-firmware-{system['name']}")
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def settle(self, timeout=30):
        """Wait until no machine is booting (iPXE's chain may come after the fetch
        that ended a machine's migration)."""
        deadline = time.monotonic() + timeout
        while self._booting and time.monotonic() < deadline:
            time.sleep(0.05)

    def boots_of(self, system_uuid):
        with self._lock:
            return [b for b in self.boots if b[0] == system_uuid]

    @staticmethod
    def _get(emulator, path):
        return emulator.get(path)

    def _watch(self, emulator, system):
        path = f"/redfish/v1/Systems/{system['uuid']}"
        seen_off = False
        while not self._stop.is_set():
            try:
                state = self._get(emulator, path)["PowerState"]
                if state != "On":
                    seen_off = True
                elif seen_off:
                    seen_off = False
                    with self._lock:
                        self._booting += 1
                    try:
                        self._boot(emulator, system, path)
                    finally:
                        with self._lock:
                            self._booting -= 1
            except Exception as exc:  # recorded; the test asserts there are none
                with self._lock:
                    self.errors.append(f"{system['name']}: {type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)

    def _boot(self, emulator, system, path):
        boot = self._get(emulator, path)["Boot"]
        media = self._get(emulator, path + "/VirtualMedia/Cd")
        snapshot = {"target": boot.get("BootSourceOverrideTarget"),
                    "enabled": boot.get("BootSourceOverrideEnabled"),
                    "mode": boot.get("BootSourceOverrideMode"),
                    "http_boot_uri": boot.get("HttpBootUri"),
                    "cd_inserted": media.get("Inserted"), "cd_image": media.get("Image")}
        override = snapshot["enabled"] in ("Once", "Continuous")
        fetches = []
        if override and snapshot["target"] == "Cd" and media.get("Inserted") \
                and media.get("Image"):
            kind = "virtual-media"
            iso = requests.get(media["Image"], timeout=30)
            iso.raise_for_status()
            self._chain(emulator, path, autoexec_of(iso.content), fetches)
        elif override and snapshot["target"] == "UefiHttp" and snapshot["http_boot_uri"]:
            kind = "uefi-http"
            r = requests.get(snapshot["http_boot_uri"], timeout=30)
            fetches.append((snapshot["http_boot_uri"], r.status_code))
            if r.status_code == 200 and r.content[0x8001:0x8006] == b"CD001":
                self._chain(emulator, path, autoexec_of(r.content), fetches)
        else:
            kind = "disk"
        with self._lock:
            self.boots.append((system["uuid"], kind, fetches, snapshot))

    def _chain(self, emulator, path, script, fetches):
        """What iPXE does with the ISO's autoexec.ipxe: chain by MAC, NIC after NIC."""
        match = self.CHAIN_RE.search(script)
        assert match, script
        nics = self._get(emulator, path + "/EthernetInterfaces")["Members"]
        for member in nics:
            mac = self._get(emulator, member["@odata.id"])["MACAddress"].lower()
            url = self.MAC_VARIABLE_RE.sub(mac, match.group(1))
            status = requests.get(url, timeout=30).status_code
            fetches.append((url, status))
            if status == 200:
                return


def boot_state(emulator, system):
    boot = emulator.system(system["uuid"])["Boot"]
    return {k: boot.get(k) for k in ("BootSourceOverrideTarget", "BootSourceOverrideEnabled",
                                     "BootSourceOverrideMode", "HttpBootUri")}


def machine_body(system, emulator, password=BMC_PASSWORD):
    return {"id": system["uuid"], "partition": "p1", "boot_interface": "fake",
            "boot_mode": "uefi", "nics": [{"mac": n["mac"]} for n in system["nics"]],
            "bmc": {"address": emulator.url, "username": BMC_USER, "password": password,
                    "verify_tls": False},
            "properties": {"redfish_system_id": system["uuid"]}}


def test_migrations_fake_to_virtual_media_to_http_url_and_back(
        server_factory, sushy_emulator_with_http_boot_uri):
    emulators, targets = [], []
    for e in range(2):
        systems = [fake_system(f"e{e}m{i}", power_state="On") for i in range(2 + e)]
        emulator = sushy_emulator_with_http_boot_uri(systems, auth=(BMC_USER, BMC_PASSWORD),
                                                     power_delay=POWER_DELAY)
        emulators.append(emulator)
        targets += [(emulator, s) for s in systems]
    # the last system's machine is registered with a wrong BMC password: 401
    good, (bad_emulator, bad_system) = targets[:4], targets[4]
    server = server_factory(extra_conf=SERVER_CONF).start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1", "boot": {
        "kernel_url": "http://127.0.0.1:1/vmlinuz", "cmdline": "console=ttyS0"}}
    ).status_code == 201
    bodies = [machine_body(s, emu) for emu, s in good]
    bodies.append(machine_body(bad_system, bad_emulator, password="not-the-password"))
    r = server.request("POST", "/v1/machines", json=bodies)
    assert r.status_code == 201, r.text
    ids = [b["id"] for b in bodies]
    good_ids, bad_id = ids[:4], ids[4]

    with RedfishMachineSimulator(targets) as firmware:
        # -- 1. fake -> redfish-virtual-media-ipxe; one BMC refuses the credentials ----
        m1 = wait_for(server, migrate(server, ids, target=VMEDIA, max_parallel=5,
                                      boot_timeout=30)["id"])
        firmware.settle()
        assert m1["state"] == "done" and m1["counts"] == {"done": 4, "rolled_back": 1}, m1
        per = machine_states(server, m1["id"])
        assert per[bad_id]["state"] == "rolled_back"
        error = per[bad_id]["last_error"]
        assert error.startswith(f"{VMEDIA} validate: BMC {bad_emulator.url}, system "
                                f"/redfish/v1/Systems/{bad_id}: "), error
        assert "refused the credentials" in error and "(HTTP 401)" in error, error
        assert "not-the-password" not in error
        assert per[bad_id]["evidence"] is None
        # validate changes nothing, so nothing is rolled back on the BMC that refused
        assert steps_of(server, bad_id) == ["validating", "rolled_back"]
        bad = server.request("GET", f"/v1/machines/{bad_id}").json()
        assert bad["boot_interface"] == "fake" and bad["state"] == "ready"
        # its BMC was never changed (the emulator refused every request)
        assert boot_state(bad_emulator, bad_system)["BootSourceOverrideEnabled"] == "Disabled"
        assert not bad_emulator.media(bad_system["uuid"])["Cd"]["Inserted"]
        assert firmware.boots_of(bad_system["uuid"]) == []

        iso_urls = set()
        for emulator, system in good:
            mid = system["uuid"]
            assert per[mid]["state"] == "done", per[mid]
            machine = server.request("GET", f"/v1/machines/{mid}").json()
            assert machine["boot_interface"] == VMEDIA and machine["state"] == "ready"
            # exactly one boot, from the virtual CD, whose chain fetch is the evidence
            [(_, kind, fetches, seen)] = firmware.boots_of(mid)
            assert kind == "virtual-media"
            mac = system["nics"][0]["mac"]
            assert fetches == [(f"{server.url}/boot/mac/{mac}/{VMEDIA}/boot.ipxe", 200)]
            assert per[mid]["evidence"]["kind"] == "fetch"
            assert per[mid]["evidence"]["path"] == "boot.ipxe"
            # what the BMC holds: the partition's ISO, a one-time UEFI boot from Cd
            cd = emulator.media(mid)["Cd"]
            assert cd["Inserted"] is True
            assert re.fullmatch(rf"{server.url}/boot/partitions/p1/{VMEDIA}/"
                                r"ipxe-[0-9a-f]{16}\.iso", cd["Image"]), cd
            iso_urls.add(cd["Image"])
            assert seen["cd_image"] == cd["Image"] and seen["cd_inserted"] is True
            assert boot_state(emulator, system) == {
                "BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once",
                "BootSourceOverrideMode": "UEFI", "HttpBootUri": None}
        assert len(iso_urls) == 1  # one ISO per partition

        # -- 2. redfish-virtual-media-ipxe -> redfish-http-url -------------------------
        m2 = wait_for(server, migrate(server, good_ids, target=HTTP, max_parallel=4,
                                      boot_timeout=30)["id"])
        firmware.settle()
        assert m2["state"] == "done" and m2["counts"] == {"done": 4}, m2
        per = machine_states(server, m2["id"])
        uris = set()
        for emulator, system in good:
            mid = system["uuid"]
            assert server.request("GET", f"/v1/machines/{mid}").json()["boot_interface"] \
                == HTTP
            [_, (_, kind, fetches, seen)] = firmware.boots_of(mid)
            assert kind == "uefi-http"
            uri = seen["http_boot_uri"]
            # the machine's own artifact URL of the iPXE ISO, then iPXE's chain by MAC
            assert re.fullmatch(rf"{server.url}/boot/{mid}/{HTTP}/[^/]+/ipxe\.iso", uri), uri
            mac = system["nics"][0]["mac"]
            assert fetches == [(uri, 200),
                               (f"{server.url}/boot/mac/{mac}/{HTTP}/boot.ipxe", 200)]
            assert per[mid]["evidence"]["kind"] == "fetch"
            assert per[mid]["evidence"]["path"] in ("ipxe.iso", "boot.ipxe")
            uris.add(uri)
            assert boot_state(emulator, system) == {
                "BootSourceOverrideTarget": "UefiHttp", "BootSourceOverrideEnabled": "Once",
                "BootSourceOverrideMode": "UEFI", "HttpBootUri": uri}
            # the source's clean-up ejected its ISO
            assert all(not d["Inserted"] and not d["Image"]
                       for d in emulator.media(mid).values()), emulator.media(mid)
        assert len(uris) == 4  # one URL per machine

        # -- 3. redfish-http-url -> fake: the HttpBootUri is removed ---------------------
        with SimulatedFleet(server.url, server.token, only_interfaces=["fake"]) as fleet:
            m3 = wait_for(server, migrate(server, good_ids, target="fake", max_parallel=4,
                                          boot_timeout=30)["id"])
        assert m3["state"] == "done" and m3["counts"] == {"done": 4}, m3
        assert sorted(b[0] for b in fleet.boots) == sorted(good_ids)
        for emulator, system in good:
            mid = system["uuid"]
            assert server.request("GET", f"/v1/machines/{mid}").json()["boot_interface"] \
                == "fake"
            assert len(firmware.boots_of(mid)) == 2  # fake resets nothing
            assert boot_state(emulator, system) == {
                "BootSourceOverrideTarget": "UefiHttp", "BootSourceOverrideEnabled": "Disabled",
                "BootSourceOverrideMode": "UEFI", "HttpBootUri": None}
            assert all(not d["Inserted"] for d in emulator.media(mid).values())
        assert firmware.errors == []
