"""The e2e scenarios, shared by the pytest tests and ``run_scenario.py``.

Each scenario drives metalboot only over REST (as metal-api would), lets real
OVMF firmware in QEMU boot a real kernel (:mod:`tests.e2e.metal_hammer`) that
posts its boot report, and returns :class:`Row` objects: one per machine and
step, with the seconds from reset to each stage of the boot (the firmware's
fetch, iPXE's fetch of boot.ipxe, the kernel and initrd fetches, the report).
Migrations require the boot report (``require_boot_report``).
"""

import dataclasses
import json
import os
import time
from typing import List, Optional

import requests

from tests.e2e.harness import DHCP_INTERFACES, KEA_POOL, PARTITION, HarnessError, utc_epoch

#: The per-machine artifact whose fetch a migration to each interface waits for
#: (the first one the firmware or iPXE fetches on that path).
FIRST_FETCH = {
    "pxe": "boot.ipxe",                          # firmware PXE -> TFTP iPXE -> iPXE GET
    "redfish-virtual-media-ipxe": "boot.ipxe",   # iPXE from the virtual CD, SLAAC, GET
    "redfish-http-url": "ipxe.iso",              # the firmware GETs HttpBootUri itself
    "dhcp-httpboot": "ipxe.efi",                 # the firmware GETs DHCPv6 option 59
}

#: The per-machine artifacts each path fetches from metalboot, in order, before
#: the kernel: the firmware's fetch (where the firmware fetches from metalboot),
#: then iPXE's fetch of boot.ipxe.
FETCHES = {
    "pxe": ["boot.ipxe"],                           # firmware TFTPs snponly.efi (dnsmasq)
    "redfish-virtual-media-ipxe": ["boot.ipxe"],    # the BMC downloads the ISO
    "redfish-http-url": ["ipxe.iso", "boot.ipxe"],
    "dhcp-httpboot": ["ipxe.efi", "boot.ipxe"],
}
#: What the kernel stage fetches from the partition's image server.
IMAGES = ["vmlinuz", "initrd.img"]

#: On the IPv6-only network machines are registered on ``fake`` (metalboot
#: does nothing to them) and migrate along CHAIN; ``pxe`` is proven on a
#: network of its own with DHCPv4 (pxe_smoke).
REGISTERED_ON = "fake"
CHAIN = ["redfish-virtual-media-ipxe", "redfish-http-url", "dhcp-httpboot"]
BROKEN = "e2e-http-url-404"
#: The path a broken migration rolls back to, and that then boots to the report again.
ROLLBACK_SOURCE = "dhcp-httpboot"
BOOT_TIMEOUT = 600  # activation to the report: OVMF, iPXE and a kernel on a busy TCG host

#: ``[artifacts] boot_network_prefixes`` of the paths that need one (no other path
#: has it). OVMF releases its DHCPv6 lease when it starts the image it fetched,
#: and the ISO's iPXE (redfish-http-url) goes on using the address from the
#: firmware's cached answer: Kea's lease file no longer binds it, Kea's pool does.
#: The DHCP paths fetch by token; SLAAC addresses are bound by their EUI-64.
BOOT_NETWORK_PREFIXES = {"redfish-http-url": [KEA_POOL]}


def prefixes(*paths):
    """The boot network prefixes a harness booting through ``paths`` needs."""
    return sorted({p for path in paths for p in BOOT_NETWORK_PREFIXES.get(path, ())})


@dataclasses.dataclass
class Row:
    step: str
    interface: str
    machine: str
    outcome: str
    seconds_api: Optional[float]      # GET /v1/migrations/{id}/machines seconds_to_evidence
    seconds_reset: Optional[float]    # BMC's QEMU start -> the evidence (the server's clock)
    evidence: str
    note: str = ""
    chain: str = ""                   # seconds from reset to each stage


def format_table(rows: List[Row]) -> str:
    head = ("step", "interface", "machine", "outcome", "s to evidence (API)",
            "s reset->evidence", "evidence", "s reset->stage", "note")
    body = [(r.step, r.interface, r.machine, r.outcome,
             "-" if r.seconds_api is None else f"{r.seconds_api:.1f}",
             "-" if r.seconds_reset is None else f"{r.seconds_reset:.1f}", r.evidence,
             r.chain or "-", r.note)
            for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


def _first_start(machine, after):
    starts = [b["time"] for b in machine.boots() if b["time"] >= after]
    return starts[0] if starts else None


def migrate(h, target, step, boot_timeout=BOOT_TIMEOUT, expect="done", timeout=900):
    """One migration of all machines to ``target``, done only on each machine's
    boot report; rows for the table, with the whole chain of each boot."""
    t0 = time.time()
    created = h.migrate(target, boot_timeout=boot_timeout, require_boot_report=True)
    return finish(h, created, target, step, t0, expect, timeout)


def finish(h, created, target, step, t0, expect="done", timeout=900):
    """Rows of migration ``created`` (started at ``t0``) once it has ended."""
    h.wait_migration(created["id"], timeout=timeout)
    per = h.migration_machines(created["id"])
    rows = []
    for m in h.machines:
        row = per[m.id]
        ev = row["evidence"]
        start = _first_start(m, t0)
        seconds_reset = None
        if ev and start:
            seconds_reset = round(h.evidence_time(ev["id"]) - start, 1)
        rows.append(Row(step, target, m.name, row["state"], row["seconds_to_evidence"],
                        seconds_reset,
                        f"{ev['kind']} from {ev['client_address']}" if ev else "none",
                        (row["last_error"] or "")[:70]))
        if row["state"] != expect:
            raise ScenarioFailed(f"{step}: machine {m.name} is {row['state']}, expected "
                                 f"{expect}: {row['last_error']}", rows, h, m)
        if expect == "done":
            if ev["kind"] != "report":
                raise ScenarioFailed(f"{step}: {m.name} done on {ev['kind']} {ev['path']}, "
                                     f"not on its boot report", rows, h, m)
            rows[-1].chain = chain_text(check_chain(h, m, target, start, rows))
    if expect == "done" and target == "redfish-http-url" and h.https:
        check_https(h, t0, rows)
    return per, rows


def check_https(h, since, rows):
    """The firmware of each machine fetched its HttpBootUri over HTTPS: the BMC
    set an https:// URI and the TLS front accepted a connection from each."""
    for m in h.machines:
        boot = [b for b in m.boots() if b["time"] >= since][0]
        if not (boot["boot_uri"] or "").startswith("https://"):
            raise ScenarioFailed(f"{m.name}: HttpBootUri is {boot['boot_uri']}, not https",
                                 rows, h, m)
    accepted = [c for c in h.tls_connections(since) if "tls" in c]
    refused = [c for c in h.tls_connections(since) if "error" in c]
    clients = {c["client"] for c in accepted}
    if len(clients) < len(h.machines) or refused:
        raise ScenarioFailed(f"TLS front: connections from {sorted(clients)}, refused "
                             f"{refused}; expected one per machine's firmware", rows, h)
    for row in rows[-len(h.machines):]:
        row.note = (f"HttpBootUri https://, TLS front: {accepted[0]['tls']} from "
                    f"{len(clients)} firmware client(s)")


def check_chain(h, m, interface, start, rows, timeout=0):
    """The stages of the machine's boot since ``start`` through ``interface``:
    [(stage, seconds from start, client address)] in the order of
    :data:`FETCHES` + :data:`IMAGES` + report, each later than the one before;
    raises unless all are there (waiting up to ``timeout`` s for the report).
    Evidence is read through ``GET /v1/machines/{id}/evidence``."""
    deadline = time.monotonic() + timeout
    while True:
        listed = h.api("GET", f"/v1/machines/{m.id}/evidence",
                       params={"limit": 1000})["evidence"]
        mine = [e for e in listed if e["interface"] == interface
                and utc_epoch(e["created_at"]) >= start - 0.5]
        report = [e for e in mine if e["kind"] == "report"]
        if report or time.monotonic() > deadline:
            break
        time.sleep(1)
    stages = []
    for name in FETCHES[interface]:
        found = [e for e in mine if e["kind"] == "fetch" and e["path"] == name]
        if found:
            stages.append((name, utc_epoch(found[0]["created_at"]) - start,
                           found[0]["client_address"]))
    # The image server knows addresses, not machines: iPXE fetches the kernel
    # from the address it fetched boot.ipxe from (SLAAC, or the firmware's
    # DHCPv6 lease that iPXE took over).
    clients = {m.slaac_address} | {e["client_address"] for e in mine if e["kind"] == "fetch"}
    for name in IMAGES:
        found = [f for f in h.image_fetches(clients, since=start)
                 if f["path"] == f"/{name}" and f["status"] == 200]
        if found:
            stages.append((name, found[0]["time"] - start, found[0]["client"]))
    if report:
        stages.append(("report", utc_epoch(report[0]["created_at"]) - start,
                       report[0]["client_address"]))
    expected = FETCHES[interface] + IMAGES + ["report"]
    if [s for s, _, _ in stages] != expected:
        raise ScenarioFailed(f"{m.name}: boot through {interface} shows stages "
                             f"{chain_text(stages)}, expected {' > '.join(expected)}",
                             rows, h, m)
    times = [t for _, t, _ in stages]
    if times != sorted(times):
        raise ScenarioFailed(f"{m.name}: stages out of order: {chain_text(stages)}", rows, h, m)
    if h.ipv6_only:
        v4 = [(s, a) for s, _, a in stages if ":" not in (a or "")]
        if v4:
            raise ScenarioFailed(f"{m.name}: requests from IPv4 on the IPv6-only network: "
                                 f"{v4}", rows, h, m)
        message = [e for e in h.evidence(m) if e["id"] == report[0]["id"]][0]["data"]
        if "ipv4 none" not in message.get("message", ""):
            raise ScenarioFailed(f"{m.name}: the kernel had an IPv4 address: {message}",
                                 rows, h, m)
    return stages


def chain_text(stages):
    return " > ".join(f"{name} {seconds:.1f}" for name, seconds, _ in stages)


class ScenarioFailed(HarnessError):
    def __init__(self, message, rows, h=None, machine=None):
        detail = ""
        if machine is not None:
            detail = ("\n--- BMC boots ---\n" + "\n".join(json.dumps(b) for b in
                                                         machine.boots()[-3:])
                      + "\n--- serial console (tail) ---\n"
                      + "\n".join(machine.serial().splitlines()[-40:]))
        super().__init__(message + "\n" + format_table(rows) + detail)
        self.rows = rows


def dhcp_by_agents(h, interface, since, rows):
    """The machines' DHCP answers for ``interface`` came from the partition's
    boot agents: ``GET /v1/partitions/{id}/dhcp-agents`` lists each agent that
    drives the DHCP servers fresh, applying ``interface`` at a cursor > 0 with
    no error; the servers' files (dnsmasq's hosts and opts, Kea's included
    reservations) hold each machine's MAC; the configuration of metalboot-server
    (or of the API and conductor) names none of their directories, and the one
    it names instead was never made; and no evidence of the machines through ``interface`` since
    ``since`` is unverified. Notes the agents on the rows."""
    if interface not in DHCP_INTERFACES:
        return
    listed = {a["agent"]: a for a in h.dhcp_agents()["agents"]}
    problems = [f"{agent_id}: {listed.get(agent_id)}" for agent_id in h.dhcp_agent_ids
                if not (listed.get(agent_id) and listed[agent_id]["fresh"]
                        and listed[agent_id]["cursor"] > 0 and not listed[agent_id]["error"]
                        and interface in listed[agent_id]["interfaces"])]
    if problems or not h.dhcp_agent_ids:
        raise ScenarioFailed(f"DHCP agents of {PARTITION} not fresh at a cursor > 0 with "
                             f"{interface}: {problems or listed}", rows, h)
    text = "\n".join(h.dhcp_files().values()).lower()
    missing = [m.name for m in h.machines if m.mac.lower() not in text]
    if missing:
        raise ScenarioFailed(f"the DHCP servers' files name no MAC of {missing}", rows, h)
    with open(h.server_conf) as f:
        conf = f.read()
    named = [path for path in h.dhcp_files() if os.path.dirname(path) in conf]
    if named:
        raise ScenarioFailed(f"{h.server_conf} names the DHCP servers' files: {named}",
                             rows, h)
    if os.path.exists(h.no_dhcp_dir):
        raise ScenarioFailed(f"{h.no_dhcp_dir} was made: something but the agents wrote "
                             f"DHCP files: {os.listdir(h.no_dhcp_dir)}", rows, h)
    ids = {m.id for m in h.machines}
    unverified = [(e["path"], e["client_address"]) for e in h.evidence(since=since)
                  if e["machine_id"] in ids and e["interface"] == interface
                  and e["kind"] not in ("fetch", "report")]
    if unverified:
        raise ScenarioFailed(f"evidence through {interface} not bound: {unverified}", rows, h)
    note = "DHCP by " + ", ".join(f"{a} at cursor {listed[a]['cursor']}"
                                  for a in h.dhcp_agent_ids)
    for row in rows:
        row.note = "; ".join(filter(None, [row.note, note]))


def enrol_and_boot(h, interface="pxe", timeout=BOOT_TIMEOUT):
    """Register the machines on ``interface``, wait until metalboot has enrolled them,
    power them on at their BMCs (no override) and wait for each one's whole boot
    (first fetch, kernel, report)."""
    h.register(interface)
    records = h.wait_enrolled()
    rows = []
    for m in h.machines:
        record = records[m.id]
        if (record["state"], record["prepared_interface"]) != ("ready", interface):
            raise ScenarioFailed(f"{m.name} not enrolled on {interface}: {record['state']}, "
                                 f"{record['last_error']}", rows, h, m)
    t0 = time.time()
    for m in h.machines:
        h.power_on(m)
    for m in h.machines:
        start = _first_start(m, t0)
        if start is None:
            raise ScenarioFailed(f"{m.name}: the BMC did not start the machine", rows, h, m)
        ev = h.wait_evidence(m, interface, since=start, timeout=timeout)
        listed = h.api("GET", f"/v1/machines/{m.id}/evidence")["evidence"]
        if ev["id"] not in [e["id"] for e in listed]:
            raise ScenarioFailed(f"{m.name}: evidence {ev['id']} not in the API's list", rows,
                                 h, m)
        rows.append(Row(f"registered on {interface}, powered on", interface, m.name,
                        "booted", None, round(ev["time"] - start, 1),
                        f"{ev['path']} from {ev['client_address']}",
                        "firmware boot order, no override"))
        if ev["path"] != FIRST_FETCH[interface]:
            raise ScenarioFailed(f"{m.name}: first fetch is {ev['path']}, expected "
                                 f"{FIRST_FETCH[interface]}", rows, h, m)
        rows[-1].chain = chain_text(check_chain(h, m, interface, start, rows, timeout))
    dhcp_by_agents(h, interface, t0, rows)
    return rows


def pxe_smoke(h):
    """One machine registered on pxe and powered on: OVMF PXEv4 -> TFTP -> iPXE -> boot.ipxe."""
    return enrol_and_boot(h, "pxe")


def single_path(h, target, source="fake"):
    """Machines registered on ``source`` (not booted) migrated to ``target``."""
    h.register(source)
    t0 = time.time()
    per, rows = migrate(h, target, "migrate",
                        boot_timeout=45 if target == BROKEN else BOOT_TIMEOUT,
                        expect="rolled_back" if target == BROKEN else "done")
    dhcp_by_agents(h, target, t0, rows)
    return rows


def _ipv6_only(h):
    v4 = h.ipv4_on_the_boot_network()
    if h.ipv6_only and v4:
        raise ScenarioFailed(f"the IPv6-only boot network offers IPv4: {v4}", [], h)


def migrate_to_report(h, target):
    """On the IPv6-only network: machines registered on fake (not booted) migrate
    to ``target``, done on each one's boot report; they end ready on it."""
    _ipv6_only(h)
    h.register(REGISTERED_ON)
    t0 = time.time()
    per, rows = migrate(h, target, f"migrate to {target}")
    for m, row in zip(h.machines, rows, strict=True):
        machine = h.machine(m)
        if machine["boot_interface"] != target or machine["state"] != "ready":
            raise ScenarioFailed(f"{m.name} is {machine['state']} on "
                                 f"{machine['boot_interface']}", rows, h, m)
        by_mac = [e for e in h.evidence(m, since=t0) if e["interface"] == target
                  and e["kind"] == "fetch" and (e["data"] or {}).get("by_mac")]
        if by_mac:
            row.note = "; ".join(filter(None, [row.note] + [
                f"{e['path']} by MAC from {e['client_address']}: {e['data']['by_mac']}"
                for e in by_mac]))
    dhcp_by_agents(h, target, t0, rows)
    return rows


def rollback_to(h, source, broken_timeout=60):
    """On the IPv6-only network: machines registered on ``source`` (enrolled, not
    booted) migrate to the broken (404) path; the rollback boots them through
    ``source`` to the report."""
    _ipv6_only(h)
    h.register(source)
    records = h.wait_enrolled()
    for m in h.machines:
        if (records[m.id]["state"], records[m.id]["prepared_interface"]) != ("ready", source):
            raise ScenarioFailed(f"{m.name} not enrolled on {source}: "
                                 f"{records[m.id]['state']}, {records[m.id]['last_error']}",
                                 [], h, m)
    t0 = time.time()
    rows = broken_and_back(h, source=source, boot_timeout=broken_timeout)
    dhcp_by_agents(h, source, t0, [r for r in rows if r.step == "after rollback"])
    return rows


def migration_chain(h, broken_timeout=60):
    """On the IPv6-only network: registered on fake, then -> virtual media -> HTTP
    URL -> DHCP HTTP boot, each done on the machine's boot report, -> broken (404)
    and back: the rollback boots the machines through dhcp-httpboot to the report
    (``run_scenario.py chain``; the pytest tests prove each step on its own)."""
    _ipv6_only(h)
    h.register(REGISTERED_ON)
    rows = []
    for target in CHAIN:
        t0 = time.time()
        per, step_rows = migrate(h, target, f"migrate to {target}")
        dhcp_by_agents(h, target, t0, step_rows)
        rows += step_rows
        for m in h.machines:
            machine = h.machine(m)
            if machine["boot_interface"] != target or machine["state"] != "ready":
                raise ScenarioFailed(f"{m.name} is {machine['state']} on "
                                     f"{machine['boot_interface']}", rows, h, m)
    rows += broken_and_back(h, source=CHAIN[-1], boot_timeout=broken_timeout)
    return rows


def broken_and_back(h, source, boot_timeout=60, timeout=300):
    """A migration whose artifact answers 404 rolls back; the machine boots ``source`` again."""
    t0 = time.time()
    created = h.migrate(BROKEN, boot_timeout=boot_timeout)
    h.wait_migration(created["id"], timeout=timeout)
    per = h.migration_machines(created["id"])
    rows = []
    for m in h.machines:
        row = per[m.id]
        broken_boot = _first_start(m, t0)
        saw_404 = "404" in _serial_since(m, broken_boot) if broken_boot else False
        rows.append(Row(f"migrate to {BROKEN}", BROKEN, m.name, row["state"],
                        row["seconds_to_evidence"], None, "none",
                        ("firmware got HTTP 404; " if saw_404 else "")
                        + (row["last_error"] or "")[:60]))
        if row["state"] != "rolled_back":
            raise ScenarioFailed(f"broken path: {m.name} is {row['state']}, expected "
                                 f"rolled_back", rows, h, m)
    for m in h.machines:
        machine = h.machine(m)
        if machine["boot_interface"] != source or machine["state"] != "ready":
            raise ScenarioFailed(f"after the rollback {m.name} is {machine['state']} on "
                                 f"{machine['boot_interface']}, expected ready on {source}",
                                 rows, h, m)
        # The rollback re-activated the source: the BMC started the machine again
        # after the migration had given up; the firmware must fetch afresh.
        rolled = _rollback_time(h, m, created["id"])
        restart = _first_start(m, rolled)
        if restart is None:
            raise ScenarioFailed(f"{m.name}: the rollback did not reset the machine", rows, h, m)
        ev = h.wait_evidence(m, source, since=restart, timeout=BOOT_TIMEOUT)
        if ev["path"] != FIRST_FETCH[source]:
            raise ScenarioFailed(f"{m.name}: fresh fetch after the rollback is {ev['path']}",
                                 rows, h, m)
        rows.append(Row("after rollback", source, m.name, "booted again", None,
                        round(ev["time"] - restart, 1),
                        f"{ev['path']} from {ev['client_address']}",
                        "whole boot after the rollback's reset"))
        rows[-1].chain = chain_text(check_chain(h, m, source, restart, rows, BOOT_TIMEOUT))
    return rows


def _rollback_time(h, m, migration_id):
    for e in h.events(m):
        data = e.get("data") or {}
        if e["kind"] == "migration.step" and e.get("migration_id") == migration_id \
                and data.get("new") == "rolling_back":
            return utc_epoch(e["created_at"])
    raise HarnessError(f"{m.name}: no rolling_back event in migration {migration_id}")


def _serial_since(m, since):
    """Serial console text of the QEMU starts at or after ``since``."""
    text = m.serial()
    marker = "==== metalboot-e2e BMC: start at "
    out, keep = [], False
    for line in text.splitlines():
        if line.startswith(marker):
            try:
                # the marker has milliseconds, boots.jsonl full precision
                keep = float(line[len(marker):].split()[0]) >= since - 0.01
            except ValueError:
                keep = False
        if keep:
            out.append(line)
    return "\n".join(out)


def https_untrusted(h, timeout=BOOT_TIMEOUT):
    """OVMF enrolled with a CA that did not sign the server's certificate: the
    firmware's HTTPS fetch of its HttpBootUri must fail in the TLS handshake.
    Returns (the TLS front's record of the attempt, the firmware's console
    lines about it); the migration is cancelled afterwards."""
    h.register(REGISTERED_ON)
    t0 = time.time()
    created = h.migrate("redfish-http-url", boot_timeout=timeout, require_boot_report=True)
    m = h.machines[0]
    deadline = time.monotonic() + timeout
    try:
        while True:
            attempts = h.tls_connections(t0)
            console = [line.strip() for line in _serial_since(m, t0).splitlines()
                       if "Error:" in line]
            if attempts and console:
                break
            if time.monotonic() > deadline:
                raise ScenarioFailed(f"{m.name}: no HTTPS attempt by the firmware within "
                                     f"{timeout} s", [], h, m)
            time.sleep(1)
    finally:
        h.api("POST", f"/v1/migrations/{created['id']}/cancel")
    evidence = [e for e in h.evidence(m, since=t0) if e["interface"] == "redfish-http-url"]
    row = Row("https with an untrusted CA", "redfish-http-url", m.name,
              "refused" if not evidence else "fetched", None,
              round(attempts[0]["time"] - _first_start(m, t0), 1),
              f"TLS front: {attempts[0].get('error') or attempts[0].get('tls')}",
              "; ".join(dict.fromkeys(console)))
    return row, attempts, console, evidence



# -- the partition's boot agent, the control plane apart (Harness(agent=True)) -------------

def fenced_partition(h):
    """What of the control plane the partition's namespace reaches: {what: None
    if a TCP connection was accepted, else why not}. PostgreSQL listens on the
    link's address too, so the control plane's own connection to it there
    shows that the firewall, not the address, keeps the partition off."""
    from tests.e2e.control_plane import API_PORT, CONTROL_V6
    pg = h.control.postgres.port
    return {"api from the partition": h.control.connect_from_partition(CONTROL_V6, API_PORT),
            "postgresql from the partition": h.control.connect_from_partition(CONTROL_V6, pg),
            "postgresql from the control plane": h.control.connect_from_control(CONTROL_V6, pg)}


def through_agent(h, since, rows, timeout=60):
    """Every evidence row of the machines since ``since`` was journaled by an
    agent and delivered by it (``delivery`` is its id and journal sequence),
    once each, and every agent's journal is empty; the /healthz of the last."""
    for url in h.agent_urls.values():
        deadline = time.monotonic() + timeout
        while True:
            health = requests.get(url + "/healthz", timeout=10).json()
            if health["journal_pending"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if health["journal_pending"]:
            raise ScenarioFailed(f"{health['agent']}'s journal still holds "
                                 f"{health['journal_pending']} record(s) after {timeout} s: "
                                 f"{health}", rows, h)
    ids = {m.id for m in h.machines}
    mine = [e for e in h.evidence(since=since) if e["machine_id"] in ids]
    delivered = [e["delivery"] for e in mine]
    if not mine or any((d or "").split(":")[0] not in h.agent_urls for d in delivered):
        raise ScenarioFailed(f"evidence not delivered by {', '.join(h.agent_urls)}: "
                             f"{[(e['path'], e['delivery']) for e in mine]}", rows, h)
    if len(set(delivered)) != len(delivered):
        raise ScenarioFailed(f"evidence stored twice: {sorted(delivered)}", rows, h)
    return health, mine


def agent_boot(h, target):
    """The machines boot through ``target`` to the report with the partition's
    agent serving them: on the IPv6-only network migrated from fake, ``pxe``
    (dual-stack) registered on it and powered on. Every fetch and report was
    journaled by the agent and delivered by it."""
    t0 = time.time()
    rows = (enrol_and_boot(h, target) if target == "pxe" else migrate_to_report(h, target))
    health, mine = through_agent(h, t0, rows)
    for row in rows:
        row.note = "; ".join(filter(None, [row.note, f"through the agent: {len(mine)} rows "
                                           f"delivered, journal empty"]))
    return rows


def replicated(h, timeout=30):
    """Until the agent's replica of the partition is at the API's cursor of now."""
    cursor = h.api("GET", f"/v1/partitions/{PARTITION}/boot-data")["cursor"]
    deadline = time.monotonic() + timeout
    for url in h.agent_urls.values():
        while True:
            health = requests.get(url + "/healthz", timeout=10).json()
            if all(p["cursor"] >= cursor for p in health["partitions"]):
                break
            if time.monotonic() > deadline:
                raise ScenarioFailed(f"{health['agent']} is not at cursor {cursor} after "
                                     f"{timeout} s: {health}", [], h)
            time.sleep(0.2)


def api_stopped_in_a_wave(h, target, pause=60, start_timeout=300):
    """A wave (all machines) to ``target``; once the BMCs have started the
    machines, the API process is stopped (SIGSTOP) for ``pause`` s while the
    conductor goes on. The machines boot through the agent meanwhile, which
    stays fresh and journals; after the API returns it delivers, and the wave
    ends done on each machine's report. Returns (rows, what the test checks)."""
    _ipv6_only(h)
    h.register(REGISTERED_ON)
    t0 = time.time()
    created = h.migrate(target, boot_timeout=BOOT_TIMEOUT, require_boot_report=True)
    deadline = time.monotonic() + start_timeout
    while not all(_first_start(m, t0) for m in h.machines):
        if time.monotonic() > deadline:
            raise ScenarioFailed(f"the BMCs did not start the machines within {start_timeout} s",
                                 [], h, h.machines[0])
        time.sleep(0.5)
    replicated(h)  # what the machines will ask for, the migration's too, is at the agent
    paused_at = time.time()
    h.control.pause_api()
    health = []
    try:
        while time.time() < paused_at + pause:
            r = requests.get(h.agent_url + "/healthz", timeout=10)
            health.append((r.status_code, r.json()["journal_pending"]))
            if len(health) == 1:
                try:
                    h.api("GET", "/v1/migrations", timeout=2)
                    raise ScenarioFailed("the API answered while it was stopped", [], h)
                except requests.Timeout:
                    pass
            time.sleep(2)
    finally:
        h.control.resume_api()
    resumed_at = time.time()
    per, rows = finish(h, created, target, f"wave, API stopped {pause} s", t0)
    _, mine = through_agent(h, t0, rows)
    during = [e for e in mine if paused_at <= e["time"] < resumed_at]
    for m, row in zip(h.machines, rows, strict=True):
        row.note = "served while the API was stopped: " + (", ".join(
            e["path"] for e in during if e["machine_id"] == m.id) or "nothing")
    return rows, {"paused_at": paused_at, "resumed_at": resumed_at, "health": health,
                  "during": during, "finished_at": utc_epoch(
                      h.api("GET", f"/v1/migrations/{created['id']}")["finished_at"])}


def agent_killed_in_a_wave(h, target="redfish-virtual-media-ipxe", timeout=300):
    """Two agents on one anycast address (``Harness(agents=2)``); a wave to
    ``target``. The agent that served the first ``boot.ipxe`` is SIGKILLed and,
    a second later, its route withdrawn (a BGP speaker's failed health check);
    the machines' further requests reach the other agent (iPXE and metal-hammer
    retry a failed one). The wave ends done; the killed agent, started again on
    its state, delivers what its journal still held. Returns (rows, what the
    test checks)."""
    _ipv6_only(h)
    h.register(REGISTERED_ON)
    t0 = time.time()
    created = h.migrate(target, boot_timeout=BOOT_TIMEOUT, require_boot_report=True)
    deadline = time.monotonic() + timeout
    while True:
        first = [e for e in h.evidence(since=t0) if e["path"] == "boot.ipxe" and e["delivery"]]
        if first:
            break
        if time.monotonic() > deadline:
            raise ScenarioFailed(f"no boot.ipxe served within {timeout} s", [], h, h.machines[0])
        time.sleep(0.2)
    victim = first[0]["delivery"].split(":")[0]
    key = victim.rsplit("-", 1)[1]
    h.kill_agent(victim)
    killed_at = time.time()
    time.sleep(1)
    h.anycast.announce(*(k for k in h.anycast.netns if k != key))
    route = h.anycast.route()
    per, rows = finish(h, created, target, f"wave, {victim} killed", t0)
    h.restart_agent(victim)  # its route stays withdrawn
    _, mine = through_agent(h, t0, rows)
    for m, row in zip(h.machines, rows, strict=True):
        row.note = "; ".join(f"{e['path']} by {e['delivery'].split(':')[0]}"
                             for e in mine if e["machine_id"] == m.id)
    return rows, {"victim": victim, "killed_at": killed_at, "route": route,
                  "evidence": mine}
