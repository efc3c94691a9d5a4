"""The e2e scenarios, shared by the pytest tests and ``run_scenario.py``.

Each scenario drives metalboot only over REST (as metal-api would), lets real
OVMF firmware in QEMU boot, and returns :class:`Row` objects: one per machine
and step, with the seconds from reset to the firmware's (or iPXE's) fetch of
the machine's own artifact.
"""

import dataclasses
import json
import time
from typing import List, Optional

from tests.e2e.harness import HarnessError

#: The per-machine artifact whose fetch a migration to each interface waits for
#: (the first one the firmware or iPXE fetches on that path).
FIRST_FETCH = {
    "pxe": "boot.ipxe",                          # firmware PXE -> TFTP iPXE -> iPXE GET
    "redfish-virtual-media-ipxe": "boot.ipxe",   # iPXE from the virtual CD, SLAAC, GET
    "redfish-http-url": "ipxe.iso",              # the firmware GETs HttpBootUri itself
    "dhcp-httpboot": "ipxe.efi",                 # the firmware GETs DHCPv6 option 59
}

#: Machines are registered on ``pxe``: metalboot enrols them (writes their DHCP
#: entries) and the operator powers them on; they boot by PXE, then migrate.
REGISTERED_ON = "pxe"
CHAIN = ["redfish-virtual-media-ipxe", "redfish-http-url", "dhcp-httpboot"]
BROKEN = "e2e-http-url-404"


@dataclasses.dataclass
class Row:
    step: str
    interface: str
    machine: str
    outcome: str
    seconds_api: Optional[float]      # GET /v1/migrations/{id}/machines seconds_to_evidence
    seconds_reset: Optional[float]    # BMC's QEMU start -> the fetch (the server's clock)
    evidence: str
    note: str = ""


def format_table(rows: List[Row]) -> str:
    head = ("step", "interface", "machine", "outcome", "s to evidence (API)",
            "s reset->fetch", "evidence", "note")
    body = [(r.step, r.interface, r.machine, r.outcome,
             "-" if r.seconds_api is None else f"{r.seconds_api:.1f}",
             "-" if r.seconds_reset is None else f"{r.seconds_reset:.1f}", r.evidence, r.note)
            for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


def _first_start(machine, after):
    starts = [b["time"] for b in machine.boots() if b["time"] >= after]
    return starts[0] if starts else None


def migrate(h, target, step, boot_timeout=180, expect="done", timeout=600):
    """One migration of all machines to ``target``; rows for the table."""
    t0 = time.time()
    created = h.migrate(target, boot_timeout=boot_timeout)
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
                        f"{ev['path']} from {ev['client_address']}" if ev else "none",
                        (row["last_error"] or "")[:70]))
        if row["state"] != expect:
            raise ScenarioFailed(f"{step}: machine {m.name} is {row['state']}, expected "
                                 f"{expect}: {row['last_error']}", rows, h, m)
    return per, rows


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


def check_first_fetch(rows, per, target):
    expected = FIRST_FETCH[target]
    for row in per.values():
        if row["evidence"]["path"] != expected:
            raise ScenarioFailed(f"{target}: evidence is {row['evidence']['path']}, expected "
                                 f"the firmware's first fetch {expected}", rows)


def enrol_and_boot(h, interface=REGISTERED_ON, timeout=180):
    """Register the machines on ``interface``, wait until metalboot has enrolled them,
    power them on at their BMCs (no override) and wait for each one's first fetch."""
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
    return rows


def pxe_smoke(h):
    """One machine registered on pxe and powered on: OVMF PXEv4 -> TFTP -> iPXE -> boot.ipxe."""
    return enrol_and_boot(h, "pxe")


def single_path(h, target, source="fake"):
    """Machines registered on ``source`` (not booted) migrated to ``target``."""
    h.register(source)
    per, rows = migrate(h, target, "migrate", boot_timeout=45 if target == BROKEN else 180,
                        expect="rolled_back" if target == BROKEN else "done")
    if target in FIRST_FETCH:
        check_first_fetch(rows, per, target)
    return rows


def migration_chain(h, broken_timeout=60):
    """Registered on pxe and PXE-booted, then -> virtual media -> HTTP URL -> DHCP HTTP
    boot -> broken (404) and back."""
    rows = enrol_and_boot(h, REGISTERED_ON)
    for target in CHAIN:
        per, step_rows = migrate(h, target, f"migrate to {target}")
        rows += step_rows
        check_first_fetch(rows, per, target)
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
        ev = h.wait_evidence(m, source, since=restart, timeout=180)
        if ev["path"] != FIRST_FETCH[source]:
            raise ScenarioFailed(f"{m.name}: fresh fetch after the rollback is {ev['path']}",
                                 rows, h, m)
        rows.append(Row("after rollback", source, m.name, "booted again", None,
                        round(ev["time"] - restart, 1),
                        f"{ev['path']} from {ev['client_address']}",
                        "fresh fetch after the rollback's reset"))
        if source == "dhcp-httpboot":
            rows.append(_second_stage(h, m, source, restart))
    return rows


def _second_stage(h, m, interface, restart, timeout=90):
    """iPXE (from ipxe.efi) DHCPs again and fetches boot.ipxe: over DHCPv4 only.

    The machines' NICs carry an ipv4_address, so dhcp-httpboot also writes
    dnsmasq entries that answer iPXE with the boot.ipxe URL. Kea cannot tell
    iPXE from the firmware (doc/boot-interfaces/dhcp.rst), so an IPv6-only
    second stage is not covered.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in h.evidence(m, since=restart)
                 if e["interface"] == interface and e["path"] == "boot.ipxe"]
        if found:
            ev = found[0]
            return Row("second stage", interface, m.name, "chained", None,
                       round(ev["time"] - restart, 1), f"boot.ipxe from {ev['client_address']}",
                       "iPXE from ipxe.efi, boot.ipxe URL by DHCPv4 (dnsmasq)")
        if time.monotonic() > deadline:
            raise ScenarioFailed(f"{m.name}: iPXE did not fetch boot.ipxe through {interface} "
                                 f"within {timeout} s", [], h, m)
        time.sleep(0.5)


def _rollback_time(h, m, migration_id):
    for e in h.events(m):
        data = e.get("data") or {}
        if e["kind"] == "migration.step" and e.get("migration_id") == migration_id \
                and data.get("new") == "rolling_back":
            from tests.e2e.harness import utc_epoch
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
