"""Redfish requests and resets per migrated machine, per vendor, on the mock BMC.

The vendor mock BMC of the tests (``tests/unit/redfish/redfish_mock_bmc.py``:
each vendor's real public payloads and documented behaviour; a mock, as no
vendor firmware runs here) counts every request it answers, by method, and
every reset. For each vendor and each Redfish interface it can do:

1. metalboot: one metalboot-server migrates ``--machines`` machines per vendor
   from ``fake`` to the interface through the REST API; after the reset the
   mock's simulated firmware fetches the boot URL or the inserted ISO and
   chains its boot.ipxe by MAC (the boot evidence), only where the vendor's
   rules were followed.
2. bare script: on fresh mocks, per machine, the sushy calls a hand-written
   migration makes for that vendor: for virtual media, read the media, eject
   a CD of someone else's, insert the ISO, set the override (Cd, UsbCd on
   Supermicro) Once/UEFI, ForceRestart, poll PowerState until On; for the HTTP
   URL, the same with the URI where the vendor keeps it (Dell ``HttpDev1*``
   BIOS attributes with SettingsApplyTime OnReset, HPE ``UrlBootFile``).

Printed: requests per machine by method and resets per machine, each side;
with ``--verbose`` also every request (method and path, in order) the first
machine of each vendor and interface got from either side. Targets: exactly
one reset per activation; no more requests than the bare script.
"""

import argparse
import collections
import os
import sys
import time

import requests
import sushy

from benchmarks.common import MetalbootServer, fmt, mac, machine_id, table, verdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "redfish"))
from redfish_mock_bmc import MockRedfishBmc, corpus_documents, set_up_for_uefi  # noqa: E402
from vendor_behaviour import PROFILES  # noqa: E402

HTTP, VMEDIA = "redfish-http-url", "redfish-virtual-media-ipxe"
IPXE_EFI = os.environ.get("METALBOOT_TEST_IPXE_EFI", "/usr/lib/ipxe/ipxe.efi")
#: vendor -> the interfaces its captured payloads can do (the others are
#: refused by validate; tests/functional/redfish/test_redfish_vendor_migrations.py)
SUPPORTED = {"dell-idrac9": (HTTP, VMEDIA), "dell-idrac10": (HTTP, VMEDIA),
             "hpe-ilo5": (HTTP,), "supermicro-x11": (VMEDIA,), "supermicro-x12": (VMEDIA,),
             "lenovo-xcc": (VMEDIA,)}
#: vendor -> BIOS attributes a bare script sets for the UEFI HTTP boot URL
URL_ATTRIBUTES = {"dell-idrac9": ("HttpDev1Uri", {"HttpDev1EnDis": "Enabled",
                                                  "HttpDev1Protocol": "IPv4"}),
                  "dell-idrac10": ("HttpDev1Uri", {"HttpDev1EnDis": "Enabled",
                                                   "HttpDev1Protocol": "IPv4"}),
                  "hpe-ilo5": ("UrlBootFile", {})}
POLL = 0.05


def mock(vendor):
    docs = corpus_documents(vendor)
    set_up_for_uefi(docs)
    return MockRedfishBmc(docs, PROFILES[vendor])


def server_conf(interfaces):
    return (f"enabled_boot_interfaces = fake,{','.join(interfaces)}\n"
            f"default_boot_interface = fake\n[fake]\nrecord_events = false\n"
            f"[conductor]\nworkers = 64\npoll_interval = 0.2\ndrift_check_interval = 0\n"
            f"[bmc]\nconnect_timeout = 5\nread_timeout = 30\nretry_attempts = 3\n"
            f"retry_interval = 0.1\nretry_max_interval = 0.5\n"
            f"power_poll_interval = {POLL}\npower_timeout = 30\n"
            f"post_retry_interval = 0.1\npost_retry_timeout = 5\n"
            f"[redfish]\nipxe_efi_path = {IPXE_EFI}\n"
            f"[artifacts]\nboot_network_prefixes = 127.0.0.0/8\n")


def firmware(session, nic):
    """What the machine's UEFI firmware and iPXE do after a reset."""
    from metalboot_framework.cli.demo.firmware import autoexec_from_iso
    from benchmarks.redfish import SimulatedMachines

    def boot(outcome):
        url = outcome["url"] or outcome["media"]
        if not url:
            return
        iso = session.get(url, timeout=60)
        match = SimulatedMachines.CHAIN_RE.search(autoexec_from_iso(iso.content))
        session.get(SimulatedMachines.MAC_RE.sub(nic, match.group(1)), timeout=60)
    return boot


def counts_of(bmcs):
    """(requests per method, resets, the first BMC's (method, path) list)
    summed over ``bmcs``."""
    made = collections.Counter()
    resets = 0
    for bmc in bmcs:
        made.update(bmc.counts)
        resets += len(bmc.resets)
    return made, resets, [(method, path) for method, path, _ in bmcs[0].log]


def metalboot_run(per):
    """{(vendor, interface): (Counter by method, resets, requests of the first
    machine)} of a REST migration."""
    server = MetalbootServer(extra_conf=server_conf([HTTP, VMEDIA]))
    bmcs, session = {}, requests.Session()
    try:
        s = server.session
        s.post(server.url + "/v1/partitions", json={"id": "bench", "boot": {
            "kernel_url": "http://images.example/vmlinuz", "cmdline": "console=ttyS0"}}
        ).raise_for_status()
        machines, n = {HTTP: [], VMEDIA: []}, 0
        body = []
        for vendor, interfaces in SUPPORTED.items():
            for interface in interfaces:
                for _ in range(per):
                    bmc, nic, mid = mock(vendor), mac(n), machine_id(n)
                    bmc.on_boot = firmware(session, nic)
                    bmcs.setdefault((vendor, interface), []).append(bmc)
                    machines[interface].append(mid)
                    body.append({"id": mid, "partition": "bench", "nics": [{"mac": nic}],
                                 "boot_interface": "fake", "boot_mode": "uefi",
                                 # the system is named, as the bare script is given it
                                 "properties": {"redfish_system_id":
                                                bmc.docs[bmc.system_path]["Id"]},
                                 "bmc": {"address": bmc.url, "username": "root",
                                         "password": "bench-password", "verify_tls": False}})
                    n += 1
        s.post(server.url + "/v1/machines", json=body, timeout=120).raise_for_status()
        for interface, ids in machines.items():
            r = s.post(server.url + "/v1/migrations", json={
                "selector": {"machines": ids}, "boot_interface": interface,
                "max_parallel": len(ids), "boot_timeout": 120}, timeout=60)
            r.raise_for_status()
            mig = r.json()["id"]
            deadline = time.monotonic() + 600
            while True:
                m = s.get(f"{server.url}/v1/migrations/{mig}", timeout=60).json()
                if m["finished_at"]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"migration to {interface} not finished: {m['counts']}")
                time.sleep(0.2)
            if m["counts"] != {"done": len(ids)}:
                raise RuntimeError(f"migration to {interface} ended with {m['counts']}; "
                                   f"server log: {server.log_path}")
        return {key: counts_of(group) for key, group in bmcs.items()}
    finally:
        server.stop()
        for group in bmcs.values():
            for bmc in group:
                bmc.stop()


def media_devices(conn, system):
    """The VirtualMedia of the system, else of its first manager."""
    try:
        return system.virtual_media.get_members()
    except sushy.exceptions.MissingAttributeError:
        manager = conn.get_manager(system.managers[0].path)
        return manager.virtual_media.get_members()


def wait_on(system):
    while True:
        time.sleep(POLL)
        system.refresh()
        if system.power_state == sushy.PowerState.ON:
            return


def bare_machine(vendor, interface, bmc, url):
    conn = sushy.Sushy(bmc.url + "/redfish/v1", auth=sushy.auth.BasicAuth("root", "x"),
                       verify=False)
    system = conn.get_system(bmc.system_path)
    if interface == VMEDIA:
        members = media_devices(conn, system)
        for vm in members:
            if vm.inserted and sushy.VirtualMediaType.CD in vm.media_types:
                vm.eject_media()
        slots = PROFILES[vendor].insert_slots  # iDRAC10 takes slot 1 only
        cd = next(vm for vm in members if sushy.VirtualMediaType.CD in vm.media_types
                  and (slots is None or vm.identity in slots))
        if PROFILES[vendor].media_patch:  # Lenovo XCC: PATCH, If-Match from the body
            conn._conn.patch(cd.path, data={"Image": url, "Inserted": True,
                                            "WriteProtected": True},
                             headers={"If-Match": cd.json.get("@odata.etag")})
        else:
            cd.insert_media(url, inserted=True, write_protected=True)
        target = sushy.BootSource.USB_CD if vendor.startswith("supermicro") \
            else sushy.BootSource.CD
    else:
        attribute, others = URL_ATTRIBUTES[vendor]
        system.bios.set_attributes(dict(others, **{attribute: url}),
                                   apply_time=sushy.ApplyTime.ON_RESET)
        target = sushy.BootSource.UEFI_HTTP
    settings = ((system.json.get("@Redfish.Settings") or {}).get("SettingsObject") or {}
                ).get("@odata.id")
    boot = {"Boot": {"BootSourceOverrideTarget": target.value,
                     "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "UEFI"}}
    if settings and PROFILES[vendor].boot_in_settings_object:
        # iDRAC10: Boot is read-only on the system, written to its settings object
        conn._conn.patch(settings, data=boot)
    elif PROFILES[vendor].etag_in == "body":  # If-Match from the body's @odata.etag
        conn._conn.patch(system.path, data=boot,
                         headers={"If-Match": system.json.get("@odata.etag")})
    else:
        system.set_system_boot_options(target, enabled=sushy.BootSourceOverrideEnabled.ONCE,
                                       mode=sushy.BootSourceOverrideMode.UEFI)
    system.reset_system(sushy.ResetType.FORCE_RESTART)
    wait_on(system)


def bare_run(per):
    out = {}
    for vendor, interfaces in SUPPORTED.items():
        for interface in interfaces:
            group = [mock(vendor) for _ in range(per)]
            try:
                for bmc in group:
                    bare_machine(vendor, interface, bmc, "http://127.0.0.1:1/ipxe.iso")
                    if not bmc.boots or not (bmc.boots[-1]["url"] or bmc.boots[-1]["media"]):
                        raise RuntimeError(f"bare script: {vendor} {interface} booted nothing: "
                                           f"{bmc.boots}")
                out[vendor, interface] = counts_of(group)
            finally:
                for bmc in group:
                    bmc.stop()
    return out


def print_requests(m, b):
    """Each request of the first machine, metalboot's and the bare script's
    side by side, in the order the BMC got them."""
    for key in m:
        print(f"\n{key[0]} {key[1]}: requests to the first machine's BMC")
        ours, bare = m[key][2], b[key][2]
        width = max(len(f"{method} {path}") for method, path in ours) + 2
        print(f"  {'metalboot':<{width}}bare sushy script")
        for i in range(max(len(ours), len(bare))):
            left = " ".join(ours[i]) if i < len(ours) else ""
            right = " ".join(bare[i]) if i < len(bare) else ""
            print(f"  {left:<{width}}{right}")


def run(per=5, verbose=False):
    m, b = metalboot_run(per), bare_run(per)
    methods = sorted({method for made, _, _ in list(m.values()) + list(b.values())
                      for method in made})
    rows, worst_resets, over = [], [], []
    for key in m:
        (m_made, m_resets, _), (b_made, b_resets, _) = m[key], b[key]
        m_total, b_total = m_made.total() / per, b_made.total() / per
        rows.append((f"{key[0]} {key[1]}",
                     " ".join(f"{x} {m_made[x] / per:.1f}" for x in methods),
                     fmt(m_total), fmt(m_resets / per),
                     " ".join(f"{x} {b_made[x] / per:.1f}" for x in methods),
                     fmt(b_total), fmt(b_resets / per), fmt(m_total / b_total, "x")))
        worst_resets.append(m_resets / per)
        if m_total > b_total:
            over.append(key)
    table(f"Redfish requests and resets per migrated machine, per vendor (mock BMC, "
          f"{per} machines each)",
          ["vendor interface", "metalboot by method", "metalboot all", "resets",
           "bare sushy by method", "bare all", "bare resets", "ratio"], rows)
    print(f"resets per machine: {sorted(set(worst_resets))}; target exactly one per "
          f"activation: {verdict(set(worst_resets) == {1.0})}")
    print(f"requests per machine no more than the bare script: {verdict(not over)}"
          + (f" (more on: {', '.join(' '.join(k) for k in over)})" if over else ""))
    if verbose:
        print_requests(m, b)
    return m, b


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=5,
                        help="machines per vendor and interface")
    parser.add_argument("--verbose", action="store_true",
                        help="list every request of the first machine of each vendor "
                             "and interface, metalboot's and the bare script's")
    args = parser.parse_args(argv)
    run(args.machines, args.verbose)


if __name__ == "__main__":
    main()
