"""Whole boots proven by real UEFI firmware (QEMU TCG + OVMF) and a real kernel.

Each test builds its own boot network (tests/e2e/harness.py) and drives
metalboot only over REST. A migration finishes only on the boot report of the
kernel the machine booted (metal-hammer for the tests, tests/e2e/metal_hammer.py);
the table of seconds from reset to each stage of the boot is printed at the end
of the run.

Every test is parametrised with the boot path it proves (``path``), so its id
names the path (``test_migration_boots_to_the_report[dhcp-httpboot]``) and
``tox -e e2e -- -k <path>`` runs that path's tests alone (conftest.py makes
``-k`` with a path's exact name select that path only: ``-k pxe`` is not also
``redfish-virtual-media-ipxe``).
"""

import pytest

from tests.e2e import scenarios
from tests.e2e.harness import DHCP_INTERFACES

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def reported(e2e_report, scenario, *args):
    """The rows of ``scenario(*args)``, in the e2e table also when it failed."""
    rows = []
    try:
        rows = scenario(*args)
    except scenarios.ScenarioFailed as exc:
        rows = exc.rows
        raise
    finally:
        e2e_report(rows)
    return rows


@pytest.mark.parametrize("path", ["pxe"])
def test_enrolled_machine_boots_to_the_report(boot_network, e2e_report, path):
    """One machine registered on pxe (the partition's boot agent writes its DHCP
    entries to dnsmasq at enrolment) and powered on: OVMF PXEv4 -> dnsmasq TFTP
    snponly.efi -> iPXE -> boot.ipxe -> kernel and initrd -> metal-hammer's boot
    report. The legacy path, with DHCPv4."""
    rows = reported(e2e_report, scenarios.enrol_and_boot, boot_network(machines=1), path)
    assert [(r.outcome, r.evidence.split()[0]) for r in rows] == [("booted", "boot.ipxe")]
    assert all("DHCP by e2e-dhcp-agent at cursor " in r.note for r in rows), rows
    assert [stage.split()[0] for stage in rows[0].chain.split(" > ")] == [
        "boot.ipxe", "vmlinuz", "initrd.img", "report"]


def reported_wave(e2e_report, scenario, *args):
    """(rows, what it saw) of a scenario that returns both, as :func:`reported`."""
    seen = {}

    def rows_only(*a):
        rows, found = scenario(*a)
        seen.update(found)
        return rows
    return reported(e2e_report, rows_only, *args), seen


#: How each path's fetch of boot.ipxe by MAC may be bound (address_binding)
BY_MAC = {"redfish-virtual-media-ipxe": {"eui64"},
          "redfish-http-url": {"eui64", "prefix", "dhcp-lease"},
          "dhcp-httpboot": set()}


@pytest.mark.parametrize("path", scenarios.CHAIN)
def test_migration_boots_to_the_report(boot_network, e2e_report, path):
    """Two machines on an IPv6-only boot network (radvd SLAAC, Kea DHCPv6; no DHCPv4
    server, no IPv4 address) registered on ``fake`` migrate to ``path``
    (redfish-http-url over HTTPS: a CA made by the test, enrolled into OVMF
    through fw_cfg), done only on the boot report of the kernel they booted
    (require_boot_report), each boot shown stage by stage, all from IPv6
    addresses."""
    rows = reported(e2e_report, scenarios.migrate_to_report,
                    boot_network(machines=2, ipv6_only=True,
                                 boot_network_prefixes=scenarios.prefixes(path)), path)
    assert [r.outcome for r in rows] == ["done", "done"]
    assert all(r.evidence.startswith("report from fd55:") for r in rows)
    assert [[s.split()[0] for s in r.chain.split(" > ")] for r in rows] == [
        scenarios.FETCHES[path] + scenarios.IMAGES + ["report"]] * 2
    if path == "redfish-http-url":
        assert all(r.note.startswith("HttpBootUri https://, TLS front: TLSv1.") for r in rows)
    # iPXE from the ISO chains boot.ipxe by MAC: from its SLAAC address, or on
    # redfish-http-url from the address of the firmware's cached DHCPv6 answer,
    # whose lease OVMF released (bound only by the pool as boot network prefix).
    # dhcp-httpboot's iPXE chains the machine's token URL instead.
    bindings = {part.rsplit(": ", 1)[1] for r in rows for part in r.note.split("; ")
                if " by MAC from " in part}
    assert bindings <= BY_MAC[path] and bool(bindings) == bool(BY_MAC[path]), [
        r.note for r in rows]
    # pxe's and dhcp-httpboot's DHCP answers came from the partition's agent
    assert all(("DHCP by " in r.note) == (path in DHCP_INTERFACES) for r in rows), rows


@pytest.mark.parametrize("path", [scenarios.ROLLBACK_SOURCE])
def test_rollback_boots_the_source_to_the_report(boot_network, e2e_report, path):
    """Machines registered on ``path`` (IPv6-only network) migrate to a path whose
    artifact answers 404: the migration rolls back, and the rollback's reset boots
    them through ``path`` to the report again."""
    rows = reported(e2e_report, scenarios.rollback_to,
                    boot_network(machines=1, ipv6_only=True), path)
    assert [r.outcome for r in rows if r.step == f"migrate to {scenarios.BROKEN}"] == [
        "rolled_back"]
    again = [r for r in rows if r.step == "after rollback"]
    assert [r.outcome for r in again] == ["booted again"]
    assert [s.split()[0] for s in again[0].chain.split(" > ")] == (
        scenarios.FETCHES[path] + scenarios.IMAGES + ["report"])
    assert "DHCP by e2e-dhcp-agent at cursor " in again[0].note, again


@pytest.mark.parametrize("path", ["redfish-http-url"])
def test_https_boot_needs_the_enrolled_ca(boot_network, e2e_report, path):
    """The same HTTPS boot with a CA in OVMF that did not sign the server's
    certificate: the firmware itself breaks off the TLS handshake and reports
    that it could not get the file; nothing is fetched, no evidence."""
    h = boot_network(machines=1, ipv6_only=True, trusted_ca=False)
    row, attempts, console, evidence = scenarios.https_untrusted(h)
    e2e_report([row])
    assert evidence == []
    assert attempts and all("tls" not in a for a in attempts), attempts
    assert "Error: Could not retrieve NBP file size from HTTP server." in console, console


# -- the partition's boot agent, the control plane in a namespace of its own ----------------

@pytest.mark.parametrize("path", ["pxe", *scenarios.CHAIN])
def test_agent_boots_to_the_report(boot_network, e2e_report, path):
    """The control plane (PostgreSQL, metalboot-api, metalboot-conductor) in a
    namespace of its own, which the partition's namespace reaches only at the
    API's port (ip6tables), and metalboot-boot-agent on [fd55::1]:8080 in the
    partition with a token made through the API, the partition's boot_url
    pointing at it. A machine boots through ``path`` to metal-hammer's report
    (``pxe`` registered on it on a dual-stack network, the others migrated on
    the IPv6-only one); every fetch and the report were journaled by the agent
    and delivered by it, and the migration ended done on the report."""
    h = boot_network(machines=1, ipv6_only=path != "pxe", agent=True,
                     boot_network_prefixes=scenarios.prefixes(path))
    reach = scenarios.fenced_partition(h)
    assert reach["api from the partition"] is None, reach
    assert reach["postgresql from the control plane"] is None, reach
    assert reach["postgresql from the partition"] is not None, reach
    rows = reported(e2e_report, scenarios.agent_boot, h, path)
    assert [r.outcome for r in rows] == ["booted" if path == "pxe" else "done"]
    assert [s.split()[0] for s in rows[0].chain.split(" > ")] == (
        scenarios.FETCHES[path] + scenarios.IMAGES + ["report"])
    assert rows[0].evidence.startswith("boot.ipxe from " if path == "pxe"
                                       else "report from fd55:"), rows[0].evidence
    assert ("DHCP by e2e-agent at cursor " in rows[0].note) == (path in DHCP_INTERFACES), rows


@pytest.mark.parametrize("path", ["redfish-virtual-media-ipxe"])
def test_agent_serves_a_wave_while_the_api_is_stopped(boot_network, e2e_report, path):
    """The same split; two machines migrate to ``path`` and, once their BMCs
    have started them, the API process is stopped for 60 s (the conductor goes
    on). The agent stays fresh and serves the boots meanwhile, journaling what
    it cannot deliver; when the API is back it delivers, and the wave ends done
    on each machine's report."""
    h = boot_network(machines=2, ipv6_only=True, agent=True)
    rows, seen = reported_wave(e2e_report, scenarios.api_stopped_in_a_wave, h, path)
    assert [r.outcome for r in rows] == ["done", "done"]
    assert all(r.evidence.startswith("report from fd55:") for r in rows)
    assert seen["resumed_at"] - seen["paused_at"] >= 60
    assert seen["health"] and all(status == 200 for status, _ in seen["health"]), seen
    # journaled while the API was away, delivered after it returned
    assert max(pending for _, pending in seen["health"]) > 0, seen["health"]
    served = {(e["machine_id"], e["path"]) for e in seen["during"]}
    assert {m.id for m in h.machines} == {machine for machine, _ in served}, served
    assert seen["finished_at"] > seen["resumed_at"]


@pytest.mark.parametrize("path", ["redfish-virtual-media-ipxe"])
def test_agent_killed_behind_the_anycast_address(boot_network, e2e_report, path):
    """The same split with two agents on one anycast address, each in a
    namespace of its own, behind an ECMP route of the partition's router. In a
    wave of two machines to ``path`` the agent that served the first
    ``boot.ipxe`` is SIGKILLed and its route withdrawn a second later: the
    wave ends done on both reports, the rest of the boots through the other
    agent; the killed agent, started again, has nothing left undelivered, and
    every evidence row is stored once, the two agents' in the one database."""
    h = boot_network(machines=2, ipv6_only=True, agents=2)
    rows, seen = reported_wave(e2e_report, scenarios.agent_killed_in_a_wave, h, path)
    assert [r.outcome for r in rows] == ["done", "done"]
    assert all(r.evidence.startswith("report from fd55:") for r in rows)
    assert seen["route"].count("nexthop") <= 1 and "fd58:" in seen["route"], seen["route"]
    agents = {e["delivery"].split(":")[0] for e in seen["evidence"]}
    assert agents == set(h.agent_urls) and seen["victim"] in agents, agents
    after = [e for e in seen["evidence"] if e["time"] > seen["killed_at"] + 1]
    assert after and {e["delivery"].split(":")[0] for e in after} == (
        agents - {seen["victim"]}), [(e["path"], e["delivery"]) for e in after]
