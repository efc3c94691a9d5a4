"""Migrations between ``pxe`` and ``dhcp-httpboot`` through the REST API of a real
metalboot-server, with real dnsmasq and Kea in network namespaces (configured as
doc/boot-interfaces/dhcp.rst says) and simulated machines that do real DHCP.

The machines have no BMC: ``activate`` records ``<interface>.reset_required``.
A :class:`DhcpMachineSimulator` plays both the one who resets the machine and
its firmware: on that event it boots the machine the way the interface means --
PXE (DHCPv4 Discover, client architecture 7, TFTP download of the boot file,
then iPXE's DHCPv4 Discover with user class iPXE) or UEFI HTTP boot (DHCPv6
Solicit with option 16 HTTPClient, or DHCPv4 Discover with option 60
HTTPClient) -- in the client namespace, with dhcp_client.py, and then fetches
the URL the DHCP server gave it. That fetch is the only way a machine's
artifacts are fetched, hence the boot evidence.
"""

import json
import os
import re
import threading
import time

import pytest
import requests

from metalboot_framework.testing.simulator import SILENT, SimulatedFleet
from tests.conftest import signer_of
from tests.functional.dhcp.conftest import SERVER_V4, SERVER_V6, server_conf
from tests.functional.test_migrations import machine_states, migrate, steps_of, wait_for

pytestmark = pytest.mark.functional

PXE, HTTPBOOT = "pxe", "dhcp-httpboot"
HTTP_CLIENT_VC4 = "HTTPClient:Arch:00016"   # EDK2's DHCPv4 vendor class for HTTP boot
HTTP_VC6_HEX = "00000157000a48545450436c69656e74"

#: Three machines: A boots HTTP over IPv4 (it has an ipv4_address), B and C
#: over IPv6, B known by DUID, C by MAC (Kea hw-address).
MACHINES = {
    "A": {"id": "00000000-0000-4000-8000-00000000000a",
          "nic": {"mac": "52:54:00:77:10:0a", "ipv4_address": "10.77.0.150"}, "stack": 4},
    "B": {"id": "00000000-0000-4000-8000-00000000000b",
          "nic": {"mac": "52:54:00:77:10:0b",
                  "duid": "00:01:00:01:2c:00:00:01:52:54:00:77:10:0b"}, "stack": 6},
    "C": {"id": "00000000-0000-4000-8000-00000000000c",
          "nic": {"mac": "52:54:00:77:10:0c"}, "stack": 6},
}




def bootfile(answer):
    if not answer:
        return None
    return answer["options"].get("boot-file-name") or answer["file"] or None


def v6_url(answer):
    value = (answer or {}).get("options", {}).get("59")
    return bytes.fromhex(value).decode() if value else None


class DhcpMachineSimulator(SimulatedFleet):
    """Machines without a BMC, booted by someone else when metalboot asks.

    Follows the server's event feed; on ``<interface>.reset_required`` it boots
    the machine (in a thread of its own) through ``interface``: real DHCP in the
    client namespace (``clients``: :class:`DhcpClients`), then the fetch of the
    URL it got. A machine whose behaviour is SILENT never comes back.
    :attr:`boots` lists (machine id, interface, [steps]) of every boot.
    """

    def __init__(self, server, clients, machines, tftp_dir, behaviour=None):
        super().__init__(server.url, server.token, behaviour=behaviour)
        self.net = clients
        self.machines = {m["id"]: m for m in machines}
        self.tftp_dir = tftp_dir
        self.errors = []
        self._threads = []
        self._lock = threading.Lock()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.settle()

    def settle(self):
        """Wait until the machines booting now are through (iPXE's steps come after
        the fetch that ended their migration)."""
        for t in list(self._threads):
            t.join(30)

    def _loop(self):
        while not self._stop.is_set():
            try:
                r = self.session.get(f"{self.api_url}/v1/events",
                                     params={"since": self.cursor, "limit": 1000}, timeout=30)
                r.raise_for_status()
                body = r.json()
            except requests.RequestException:
                self._stop.wait(self.poll_interval)
                continue
            for event in body["events"]:
                kind = event["kind"]
                if kind in (f"{PXE}.reset_required", f"{HTTPBOOT}.reset_required") \
                        and event["machine_id"] in self.machines \
                        and self.behaviour.get(event["machine_id"]) != SILENT:
                    t = threading.Thread(target=self._boot_machine, daemon=True, args=(
                        self.machines[event["machine_id"]], kind.split(".")[0]))
                    t.start()
                    self._threads.append(t)
            self.cursor = body["next_cursor"]
            if not body["events"]:
                self._stop.wait(self.poll_interval)

    def _boot_machine(self, machine, interface):
        steps = []
        try:
            if interface == PXE:
                self._pxe(machine, steps)
            else:
                self._http_boot(machine, steps)
        except Exception as exc:  # recorded; the test asserts there are none
            with self._lock:
                self.errors.append(f"{machine['id']} {interface}: {type(exc).__name__}: {exc}")
        with self._lock:
            self.boots.append((machine["id"], interface, steps))

    def _dhcp4(self, mac, want, **kw):
        """DHCPv4 Discover until the answer has a boot file (the firmware retries)."""
        return self._retry(lambda: self.net.v4(mac, **kw), want)

    @staticmethod
    def _retry(ask, want):
        # Firmware retransmits: a request may go unanswered, e.g. while Kea
        # reloads its configuration for another machine's reservation.
        deadline = time.monotonic() + 10
        while True:
            answer = ask()
            if (answer and want(answer)) or time.monotonic() > deadline:
                return answer
            time.sleep(0.2)

    def _pxe(self, machine, steps):
        mac = machine["nic"]["mac"]
        # 1. the firmware's PXE client: x86-64 UEFI (option 93 = 7)
        offer = self._dhcp4(mac, bootfile, arch=7)
        steps.append(("dhcp4 pxe", bootfile(offer)))
        # 2. it downloads the boot file by TFTP from the server in the offer
        out = self.tftp_dir / f"{machine['id']}.efi"
        got = self.net.dhcp("tftp", offer["siaddr"] if offer["siaddr"] != "0.0.0.0"
                            else SERVER_V4, bootfile(offer), out)
        steps.append(("tftp", got))
        # 3. iPXE asks again with user class iPXE and chains the URL it gets
        self._ipxe(mac, steps)

    def _ipxe(self, mac, steps):
        offer = self._dhcp4(mac, lambda a: (bootfile(a) or "").startswith("http"), arch=7,
                            user_class="iPXE")
        url = bootfile(offer)
        steps.append(("dhcp4 ipxe", url))
        steps.append(("GET", url, requests.get(url, timeout=30).status_code))

    def _http_boot(self, machine, steps):
        nic = machine["nic"]
        if machine["stack"] == 6:
            advertise = self._retry(lambda: self.net.v6(nic["mac"], duid=nic.get("duid"),
                                                        http_client=True), v6_url)
            # EDK2 takes only an Advertise that carries vendor class HTTPClient
            assert advertise["options"].get("16") == HTTP_VC6_HEX, advertise
            url = v6_url(advertise)
            steps.append(("dhcp6 httpclient", url))
        else:
            offer = self._dhcp4(nic["mac"], bootfile, vendor_class=HTTP_CLIENT_VC4)
            assert offer["options"].get("vendor_class_id") == "HTTPClient", offer
            url = bootfile(offer)
            steps.append(("dhcp4 httpclient", url))
        r = requests.get(url, timeout=30)
        steps.append(("GET", url, r.status_code, len(r.content)))
        if machine["stack"] == 4 and r.status_code == 200:
            self._ipxe(nic["mac"], steps)  # the iPXE it loaded asks DHCPv4 again

    def boots_of(self, machine_id, interface=None):
        with self._lock:
            return [b[2] for b in self.boots
                    if b[0] == machine_id and interface in (None, b[1])]


# -- what the operator finds on disk -------------------------------------------------
def dnsmasq_files(dnsmasq):
    return {f"{d.name}/{p.name}": p.read_text() for d in (dnsmasq.hostsdir, dnsmasq.optsdir)
            for p in sorted(d.iterdir()) if not p.name.startswith(".")}


def kea_reservations(kea):
    body = "".join(line for line in kea.include.read_text().splitlines(keepends=True)
                   if not line.lstrip().startswith("#"))
    return json.loads("[" + body + "]") if body.strip() else []


def header(text):
    first = text.splitlines()[0]
    assert first.startswith("# metalboot: "), text
    return json.loads(first[len("# metalboot: "):])


def assert_dnsmasq(dnsmasq, expected, tombstones, url):
    """expected: {machine id: (interface, mac)} of the machines with DHCPv4 entries;
    tombstones: {machine id: mac} of machines whose entries were removed."""
    files = dnsmasq_files(dnsmasq)
    assert set(files) == {f"hosts/metalboot-{m}" for m in [*expected, *tombstones]} | {
        f"opts/metalboot-{m}.{iface}" for m, (iface, _) in expected.items()}, files
    for mid, (iface, mac) in expected.items():
        opts = files[f"opts/metalboot-{mid}.{iface}"]
        meta = header(opts)
        tag = meta["tag"]
        assert meta == {"machine": mid, "interface": iface, "tag": tag, "macs": [mac]}
        if iface == PXE:
            lines = [f"tag:{tag},tag:!ipxe,tag:bios,67,undionly.kpxe",
                     f"tag:{tag},tag:!ipxe,tag:efi64,67,snponly.efi",
                     f"tag:{tag},tag:ipxe,67,{url(mid, PXE, 'boot.ipxe')}"]
        else:
            lines = [f"tag:{tag},tag:efihttp,60,HTTPClient",
                     f"tag:{tag},tag:!ipxe,tag:efihttp,67,{url(mid, HTTPBOOT, 'ipxe.efi')}",
                     f"tag:{tag},tag:ipxe,67,{url(mid, HTTPBOOT, 'boot.ipxe')}"]
        assert sorted(opts.splitlines()[1:]) == sorted(lines), opts
        hosts = files[f"hosts/metalboot-{mid}"]
        assert header(hosts) == {"machine": mid, "interfaces": {iface: tag}, "removed": False}
        assert hosts.splitlines()[1:] == [
            f"{mac},set:metalboot,set:{tag},set:metalboot-{iface}"], hosts
    for mid, mac in tombstones.items():
        hosts = files[f"hosts/metalboot-{mid}"]
        assert header(hosts) == {"machine": mid, "interfaces": {}, "removed": True}
        assert hosts.splitlines()[1:] == [f"{mac},set:metalboot-removed"], hosts
    return files


def assert_kea(kea, expected, url):
    """expected: ids of the machines with a DHCPv6 reservation (dhcp-httpboot)."""
    got = {r["user-context"]["metalboot"]["machine"]: r for r in kea_reservations(kea)}
    assert sorted(got) == sorted(expected), got
    for mid in expected:
        nic = next(m["nic"] for m in MACHINES.values() if m["id"] == mid)
        options = [{"code": 16, "space": "dhcp6", "csv-format": False, "always-send": True,
                    "data": HTTP_VC6_HEX.upper()},
                   {"code": 23, "space": "dhcp6", "data": SERVER_V6},
                   {"code": 59, "space": "dhcp6", "data": url(mid, HTTPBOOT, "ipxe.efi")}]
        key = {"duid": nic["duid"]} if nic.get("duid") else {"hw-address": nic["mac"]}
        # option-data by code; per interface in the order the plugin gives them
        assert got[mid] == {**key, "option-data": options, "user-context": {"metalboot": {
            "machine": mid, "interfaces": {HTTPBOOT: {"options": [options[2], *options[:2]],
                                                      "address": None}}}}}, got[mid]


def test_pxe_to_dhcp_httpboot_and_failed_migration_back(
        net, dnsmasq, kea, clients, server_factory, dhcp_agent, tmp_path):
    efi = tmp_path / "ipxe.efi"
    efi.write_bytes(b"MZ" + os.urandom(4096))
    snponly = os.urandom(3000)
    (dnsmasq.tftp / "snponly.efi").write_bytes(snponly)
    (tmp_path / "tftp-got").mkdir()
    server = server_factory(extra_conf=server_conf(dnsmasq, kea, efi)).start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    dhcp_agent(server, dnsmasq, kea, efi)
    machines = list(MACHINES.values())
    a, b, c = (m["id"] for m in machines)
    r = server.request("POST", "/v1/machines", json=[
        {"id": m["id"], "partition": "p1", "boot_interface": "fake", "boot_mode": "uefi",
         "nics": [m["nic"]]} for m in machines])
    assert r.status_code == 201, r.text
    ids = [a, b, c]
    signer = signer_of(server)

    def url(mid, interface, name):  # tokens are bound to the interface
        return f"{server.url}/boot/{mid}/{interface}/" \
               f"{signer.machine_token(mid, 1, interface)}/{name}"

    simulator = DhcpMachineSimulator(server, clients, machines, tmp_path / "tftp-got")
    with simulator as sim:
        # -- 0. fake -> pxe: the migration writes the DHCP entries -------------------
        m0 = wait_for(server, migrate(server, ids, target=PXE, max_parallel=3,
                                      boot_timeout=30)["id"])
        sim.settle()
        assert m0["state"] == "done" and m0["counts"] == {"done": 3}, (m0, sim.errors)
        per = machine_states(server, m0["id"])
        for m in machines:
            [steps] = sim.boots_of(m["id"], PXE)
            assert steps[:3] == [("dhcp4 pxe", "snponly.efi"), ("tftp", {"size": len(snponly)}),
                                 ("dhcp4 ipxe", steps[2][1])]
            got = re.fullmatch(rf"{server.url}/boot/{m['id']}/{PXE}/([^/]+)/boot\.ipxe",
                               steps[2][1])
            assert got, steps
            assert got.group(1) == signer.machine_token(m["id"], 1, PXE)
            assert steps[3] == ("GET", url(m["id"], PXE, "boot.ipxe"), 200)
            assert (tmp_path / "tftp-got" / f"{m['id']}.efi").read_bytes() == snponly
            assert per[m["id"]]["evidence"]["path"] == "boot.ipxe"
        assert_dnsmasq(dnsmasq, {m["id"]: (PXE, m["nic"]["mac"]) for m in machines}, {}, url)
        assert_kea(kea, [], url)

        # -- 1. pxe -> dhcp-httpboot: UEFI HTTP boot by DHCPv4 (A) and DHCPv6 (B, C) ---
        m1 = wait_for(server, migrate(server, ids, target=HTTPBOOT, max_parallel=3,
                                      boot_timeout=30)["id"])
        sim.settle()
        assert m1["state"] == "done" and m1["counts"] == {"done": 3}, (m1, sim.errors)
        per = machine_states(server, m1["id"])
        for m in machines:
            [steps] = sim.boots_of(m["id"], HTTPBOOT)
            stack = "dhcp4" if m["stack"] == 4 else "dhcp6"
            assert steps[:2] == [(f"{stack} httpclient", url(m["id"], HTTPBOOT, "ipxe.efi")),
                                 ("GET", url(m["id"], HTTPBOOT, "ipxe.efi"), 200,
                                  efi.stat().st_size)]
            assert per[m["id"]]["evidence"]["kind"] == "fetch"
            assert per[m["id"]]["evidence"]["path"] in ("ipxe.efi", "boot.ipxe")
            assert server.request("GET", f"/v1/machines/{m['id']}").json()[
                "boot_interface"] == HTTPBOOT
        assert sim.boots_of(a, HTTPBOOT)[0][2:] == [
            ("dhcp4 ipxe", url(a, HTTPBOOT, "boot.ipxe")),
            ("GET", url(a, HTTPBOOT, "boot.ipxe"), 200)]
        # DHCPv4 entries only for A (the only NIC with an ipv4_address); the pxe
        # entries of B and C are tombstones until dnsmasq restarts
        assert_dnsmasq(dnsmasq, {a: (HTTPBOOT, MACHINES["A"]["nic"]["mac"])},
                       {b: MACHINES["B"]["nic"]["mac"], c: MACHINES["C"]["nic"]["mac"]}, url)
        assert_kea(kea, ids, url)
        # no PXE answer any more, for any of them (dnsmasq still holds the old lines)
        answers = {}
        threads = [threading.Thread(target=lambda m=m: answers.__setitem__(
            m["id"], clients.v4(m["nic"]["mac"], arch=7))) for m in machines]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(ans and bootfile(ans) is None for ans in answers.values()), answers

        # -- 2. back to pxe: B boots; C never comes back and its migration (a short
        #    boot_timeout) rolls it back; both at once ---------------------------------
        sim.behaviour = {c: SILENT}
        m2b = migrate(server, [b], target=PXE, boot_timeout=30)
        m2c = migrate(server, [c], target=PXE, boot_timeout=3)
        m2b, m2c = wait_for(server, m2b["id"]), wait_for(server, m2c["id"])
        sim.settle()
        assert m2b["state"] == "done" and m2b["counts"] == {"done": 1}, (m2b, sim.errors)
        assert m2c["state"] == "done" and m2c["counts"] == {"rolled_back": 1}, m2c
        per = {**machine_states(server, m2b["id"]), **machine_states(server, m2c["id"])}
        assert per[b]["state"] == "done" and per[b]["evidence"]["path"] == "boot.ipxe"
        assert per[c]["state"] == "rolled_back"
        assert per[c]["last_error"] == "no boot evidence through pxe within 3 s"
        assert steps_of(server, c)[-2:] == ["rolling_back", "rolled_back"]
        assert len(sim.boots_of(b, PXE)) == 2 and len(sim.boots_of(c, PXE)) == 1
        assert server.request("GET", f"/v1/machines/{b}").json()["boot_interface"] == PXE
        assert server.request("GET", f"/v1/machines/{c}").json()["boot_interface"] == \
            HTTPBOOT
    assert sim.errors == []

    expected_v4 = {a: (HTTPBOOT, MACHINES["A"]["nic"]["mac"]),
                   b: (PXE, MACHINES["B"]["nic"]["mac"])}
    before = assert_dnsmasq(dnsmasq, expected_v4, {c: MACHINES["C"]["nic"]["mac"]}, url)
    assert_kea(kea, [a, c], url)
    kea_before = kea.include.read_text()

    # -- 3. restart dnsmasq, Kea and metalboot-server: same files, same answers -------
    dnsmasq.restart()
    kea.restart()
    server.stop()
    server.start()
    assert server.request("GET", f"/v1/machines/{c}").json()["state"] == "ready"
    assert dnsmasq_files(dnsmasq) == before and kea.include.read_text() == kea_before
    time.sleep(0.5)  # the conductor started: it must not rewrite anything
    assert dnsmasq_files(dnsmasq) == before and kea.include.read_text() == kea_before

    answers = {}

    def ask(key, *args, **kw):
        answers[key] = (clients.v6 if key.startswith("v6") else clients.v4)(*args, **kw)

    jobs = [("pxe A", (MACHINES["A"]["nic"]["mac"],), {"arch": 7}),
            ("http4 A", (MACHINES["A"]["nic"]["mac"],), {"vendor_class": HTTP_CLIENT_VC4}),
            ("pxe B", (MACHINES["B"]["nic"]["mac"],), {"arch": 7}),
            ("ipxe B", (MACHINES["B"]["nic"]["mac"],), {"arch": 7, "user_class": "iPXE"}),
            ("pxe C", (MACHINES["C"]["nic"]["mac"],), {"arch": 7})]
    threads = [threading.Thread(target=ask, args=(k, *args), kwargs=kw) for k, args, kw in jobs]
    for t in threads:
        t.start()
    for key, nic in (("v6 B", MACHINES["B"]["nic"]), ("v6 C", MACHINES["C"]["nic"])):
        ask(key, nic["mac"], duid=nic.get("duid"))
    for t in threads:
        t.join()
    assert bootfile(answers["pxe A"]) is None
    assert bootfile(answers["http4 A"]) == url(a, HTTPBOOT, "ipxe.efi")
    assert bootfile(answers["pxe B"]) == "snponly.efi"
    assert bootfile(answers["ipxe B"]) == url(b, PXE, "boot.ipxe")
    assert answers["pxe C"] and bootfile(answers["pxe C"]) is None
    assert answers["v6 B"] and v6_url(answers["v6 B"]) is None
    assert "16" not in answers["v6 B"]["options"]
    assert v6_url(answers["v6 C"]) == url(c, HTTPBOOT, "ipxe.efi")
    # the restarted server still serves C's URL (its evidence is what a boot would be)
    assert requests.get(url(c, HTTPBOOT, "ipxe.efi"), timeout=10).content == efi.read_bytes()
    assert dnsmasq.running() and kea.running()
