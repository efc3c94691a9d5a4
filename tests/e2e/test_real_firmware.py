"""Whole boots proven by real UEFI firmware (QEMU TCG + OVMF) and a real kernel.

Each test builds its own boot network (tests/e2e/harness.py) and drives
metalboot only over REST. A migration finishes only on the boot report of the
kernel the machine booted (metal-hammer for the tests, tests/e2e/metal_hammer.py);
the table of seconds from reset to each stage of the boot is printed at the end
of the run.
"""

import pytest

from tests.e2e import scenarios

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_pxe_smoke(boot_network, e2e_report):
    """One machine registered on pxe (metalboot writes its DHCP entries at enrolment)
    and powered on: OVMF PXEv4 -> dnsmasq TFTP snponly.efi -> iPXE -> boot.ipxe ->
    kernel and initrd -> metal-hammer's boot report. The legacy path, with DHCPv4.
    """
    h = boot_network(machines=1)
    rows = []
    try:
        rows = scenarios.pxe_smoke(h)
    finally:
        e2e_report(rows)
    assert [(r.outcome, r.evidence.split()[0]) for r in rows] == [("booted", "boot.ipxe")]
    assert [stage.split()[0] for stage in rows[0].chain.split(" > ")] == [
        "boot.ipxe", "vmlinuz", "initrd.img", "report"]


def test_migration_chain_and_rollback(boot_network, e2e_report):
    """Two machines on an IPv6-only boot network (radvd SLAAC, Kea DHCPv6; no DHCPv4
    server, no IPv4 address) migrate to redfish-virtual-media-ipxe,
    redfish-http-url (over HTTPS: a CA made by the test, enrolled into OVMF
    through fw_cfg) and dhcp-httpboot, each migration done only on the boot
    report of the kernel it booted (require_boot_report) and each boot shown
    stage by stage, all from IPv6 addresses; then a migration to a path whose
    artifact answers 404 rolls back and the machines boot through dhcp-httpboot
    to the report again."""
    h = boot_network(machines=2, ipv6_only=True)
    rows = []
    try:
        rows = scenarios.migration_chain(h)
    except scenarios.ScenarioFailed as exc:
        rows = exc.rows
        raise
    finally:
        e2e_report(rows)
    by_step = {}
    for r in rows:
        by_step.setdefault(r.step, []).append(r)
    for target in scenarios.CHAIN:
        done = by_step[f"migrate to {target}"]
        assert [r.outcome for r in done] == ["done", "done"]
        assert all(r.evidence.startswith("report from fd55:") for r in done)
        assert [[s.split()[0] for s in r.chain.split(" > ")] for r in done] == [
            scenarios.FETCHES[target] + scenarios.IMAGES + ["report"]] * 2
    assert all(r.note.startswith("HttpBootUri https://, TLS front: TLSv1.")
               for r in by_step["migrate to redfish-http-url"])
    assert [r.outcome for r in by_step["migrate to e2e-http-url-404"]] == [
        "rolled_back", "rolled_back"]
    again = by_step["after rollback"]
    assert [r.outcome for r in again] == ["booted again", "booted again"]
    assert all(r.chain.split(" > ")[-1].startswith("report") for r in again)


def test_https_boot_needs_the_enrolled_ca(boot_network, e2e_report):
    """The same HTTPS boot with a CA in OVMF that did not sign the server's
    certificate: the firmware itself breaks off the TLS handshake and reports
    that it could not get the file; nothing is fetched, no evidence."""
    h = boot_network(machines=1, ipv6_only=True, trusted_ca=False)
    row, attempts, console, evidence = scenarios.https_untrusted(h)
    e2e_report([row])
    assert evidence == []
    assert attempts and all("tls" not in a for a in attempts), attempts
    assert "Error: Could not retrieve NBP file size from HTTP server." in console, console

