"""Migrations proven by real UEFI firmware (QEMU TCG + OVMF) fetching its own artifacts.

Each test builds its own boot network (tests/e2e/harness.py) and drives
metalboot only over REST. A migration finishes only because the firmware or
iPXE fetched the machine's per-machine artifact; the table of seconds from
reset to that fetch is printed at the end of the run.
"""

import pytest

from tests.e2e import scenarios

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_pxe_smoke(boot_network, e2e_report):
    """One machine registered on pxe (metalboot writes its DHCP entries at enrolment)
    and powered on: OVMF PXEv4 -> dnsmasq TFTP snponly.efi -> iPXE -> boot.ipxe.

    Small enough for every CI run (one firmware boot, about 20 s on TCG).
    """
    h = boot_network(machines=1)
    rows = scenarios.pxe_smoke(h)
    e2e_report(rows)
    assert [(r.outcome, r.evidence.split()[0]) for r in rows] == [("booted", "boot.ipxe")]


def test_migration_chain_and_rollback(boot_network, e2e_report):
    """Two machines registered on pxe and powered on boot by PXE; then migrations to
    redfish-virtual-media-ipxe,
    redfish-http-url and dhcp-httpboot, each proven by a fresh fetch, then a
    migration to a path whose artifact answers 404 rolls back and the machines
    boot through dhcp-httpboot again (firmware fetch of ipxe.efi, then iPXE's
    fetch of boot.ipxe)."""
    h = boot_network(machines=2)
    rows = []
    try:
        rows = scenarios.migration_chain(h)
    except scenarios.ScenarioFailed as exc:
        e2e_report(exc.rows)
        raise
    e2e_report(rows)
    by_step = {}
    for r in rows:
        by_step.setdefault(r.step, []).append(r.outcome)
    assert by_step["registered on pxe, powered on"] == ["booted", "booted"]
    assert by_step["migrate to redfish-virtual-media-ipxe"] == ["done", "done"]
    assert by_step["migrate to redfish-http-url"] == ["done", "done"]
    assert by_step["migrate to dhcp-httpboot"] == ["done", "done"]
    assert by_step["migrate to e2e-http-url-404"] == ["rolled_back", "rolled_back"]
    assert by_step["after rollback"] == ["booted again", "booted again"]
    assert by_step["second stage"] == ["chained", "chained"]
