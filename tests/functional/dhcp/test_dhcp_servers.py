"""pxe and dhcp-httpboot against real dnsmasq and Kea, asked by real DHCP clients."""

import os
import time

import pytest

from metalboot_framework.dhcp import DhcpBackendError, DhcpOption, HostEntry, get_backend
from metalboot_framework.exceptions import BootInterfaceError, ValidationFailed
from metalboot_framework.steploop import call_blocking
from metalboot_framework.store import models

pytestmark = pytest.mark.functional

M1, M2, M3 = "52:54:00:77:00:01", "52:54:00:77:00:02", "52:54:00:77:00:03"
D1 = "00:01:00:01:2c:00:00:01:52:54:00:77:00:01"
HTTP_VC_HEX = "00000157000a48545450436c69656e74"


def eventually(fn, timeout=5.0, interval=0.1):
    """fn() until it returns something truthy (inotify and reloads take a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(interval)


def bootfile(answer):
    if not answer:
        return None
    return answer["options"].get("boot-file-name") or answer["file"] or None


def v6_url(answer):
    hexval = (answer or {}).get("options", {}).get("59")
    return bytes.fromhex(hexval).decode() if hexval else None


def events(services, machine_id):
    with services.db.read() as session:
        return [(e.kind, e.message) for e in session.query(models.Event)
                .filter_by(machine_id=machine_id).order_by(models.Event.id)]


# -- pxe -------------------------------------------------------------------------------
def test_pxe_boot_file_by_architecture_ipxe_url_and_tftp(net, dnsmasq, services, make_task,
                                                         tmp_path):
    pxe = services.interfaces.get("pxe")
    task = make_task("pxe", [{"mac": M1}])
    boot_ipxe = task.artifact_url("boot.ipxe")
    payload = os.urandom(5000)
    (dnsmasq.tftp / "snponly.efi").write_bytes(payload)
    (dnsmasq.tftp / "undionly.kpxe").write_bytes(b"undi")

    assert bootfile(net.v4(M1, arch=7)) is None          # nothing before prepare
    pxe.validate(task)
    call_blocking(pxe.prepare, task)

    assert eventually(lambda: bootfile(net.v4(M1, arch=7)) == "snponly.efi")
    assert bootfile(net.v4(M1, arch=9)) == "snponly.efi"
    assert bootfile(net.v4(M1, arch=0)) == "undionly.kpxe"
    assert bootfile(net.v4(M1, arch=7, user_class="iPXE")) == boot_ipxe
    assert "/pxe/" in boot_ipxe and task.machine.id in boot_ipxe
    # An unregistered MAC gets an address, but no boot answer.
    other = net.v4(M2, arch=7)
    assert other and other["yiaddr"].startswith("10.77.0.") and bootfile(other) is None

    # The TFTP download the firmware would do next.
    out = tmp_path / "got.efi"
    result = net.dhcp("tftp", "10.77.0.1", "snponly.efi", out)
    assert result == {"size": len(payload)} and out.read_bytes() == payload

    # prepare again changes nothing; activate without a BMC asks for a reset.
    backend = get_backend("dnsmasq", services.conf)
    assert backend.ensure_host_entries(task.machine.id, "pxe", pxe.host_entries(task)) is False
    pxe.activate(task)
    assert any(kind == "pxe.reset_required" and "reset by someone else" in msg
               for kind, msg in events(services, task.machine.id))

    call_blocking(pxe.clean_up, task)
    assert eventually(lambda: bootfile(net.v4(M1, arch=7)) is None)
    assert bootfile(net.v4(M1, arch=7, user_class="iPXE")) is None
    assert backend.list_host_entries(task.machine.id) == []
    assert dnsmasq.running(), "dnsmasq must survive every change (no SIGHUP)\n" + dnsmasq.log()
    call_blocking(pxe.clean_up, task)   # idempotent
    log = dnsmasq.log()
    assert "bad dhcp-" not in log and "duplicate" not in log, log
    assert "/hosts/.metalboot" not in log and "/opts/.metalboot" not in log  # no temp files read
    assert "/hosts/metalboot-" in log and "/opts/metalboot-" in log          # inotify pick-up


def test_pxe_two_machines_change_and_restart(net, dnsmasq, services, make_task):
    pxe = services.interfaces.get("pxe")
    t1 = make_task("pxe", [{"mac": M1}])
    t2 = make_task("pxe", [{"mac": M2}, {"mac": M3}])
    call_blocking(pxe.prepare, t1)
    call_blocking(pxe.prepare, t2)
    assert eventually(lambda: bootfile(net.v4(M3, user_class="iPXE"))
                      == t2.artifact_url("boot.ipxe"))
    assert bootfile(net.v4(M1, user_class="iPXE")) == t1.artifact_url("boot.ipxe")

    # A changed answer replaces the old one while dnsmasq runs.
    services.conf.set_override("efi_x64_boot_file", "ipxe.efi", group="pxe")
    call_blocking(pxe.prepare, t1)
    assert eventually(lambda: bootfile(net.v4(M1, arch=7)) == "ipxe.efi")
    assert bootfile(net.v4(M2, arch=7)) == "snponly.efi"   # not yet re-prepared

    backend = get_backend("dnsmasq", services.conf)
    owned = {(e.machine_id, e.interface): e.identifiers for e in backend.list_host_entries()}
    assert owned == {(t1.machine.id, "pxe"): (f"mac:{M1}",),
                     (t2.machine.id, "pxe"): (f"mac:{M2}", f"mac:{M3}")}

    call_blocking(pxe.clean_up, t2)
    assert eventually(lambda: bootfile(net.v4(M2, arch=7)) is None)
    hosts = sorted(p.name for p in dnsmasq.hostsdir.iterdir() if not p.name.startswith("."))
    assert len(hosts) == 2 and all(h.startswith("metalboot-") for h in hosts)

    # After a restart dnsmasq reads only the files: same answers as before.
    dnsmasq.restart()
    assert eventually(lambda: bootfile(net.v4(M1, arch=7)) == "ipxe.efi")
    assert bootfile(net.v4(M2, arch=7)) is None and bootfile(net.v4(M3, arch=0)) is None
    # The removed machine's tombstone goes once dnsmasq has restarted after it.
    assert backend.remove_host_entries(t2.machine.id) is False
    hosts = [p.name for p in dnsmasq.hostsdir.iterdir() if not p.name.startswith(".")]
    assert hosts == [f"metalboot-{t1.machine.id}"]
    assert bootfile(net.v4(M1, user_class="iPXE")) == t1.artifact_url("boot.ipxe")
    assert dnsmasq.running()


# -- dhcp-httpboot -------------------------------------------------------------------------
def test_httpboot_v6_v4_answers_and_clean_up(net, dnsmasq, kea, services, make_task):
    http = services.interfaces.get("dhcp-httpboot")
    t1 = make_task("dhcp-httpboot", [{"mac": M1, "duid": D1, "ipv4_address": "10.77.0.150"}])
    t2 = make_task("dhcp-httpboot", [{"mac": M2}])        # v6 by hw-address, no IPv4
    url1, url2 = t1.artifact_url("ipxe.efi"), t2.artifact_url("ipxe.efi")
    assert url1 != url2

    assert v6_url(net.v6(M1, duid=D1)) is None
    for task in (t1, t2):
        http.validate(task)
        call_blocking(http.prepare, task)

    a1 = net.v6(M1, duid=D1)
    assert v6_url(a1) == url1
    assert a1["options"]["16"] == HTTP_VC_HEX
    assert a1["options"]["23"] == "fd770000000000000000000000000001"
    assert v6_url(net.v6(M2)) == url2                     # DUID-LL of M2 -> hw-address
    unknown = net.v6(M3)
    assert unknown and "59" not in unknown["options"] and "16" not in unknown["options"]

    a4 = eventually(lambda: (lambda a: a if bootfile(a) else None)(
        net.v4(M1, vendor_class="HTTPClient:Arch:00016")))
    assert bootfile(a4) == url1 and a4["options"].get("vendor_class_id") == "HTTPClient"
    assert bootfile(net.v4(M1, user_class="iPXE")) == t1.artifact_url("boot.ipxe")
    assert bootfile(net.v4(M2, vendor_class="HTTPClient:Arch:00016")) is None  # no IPv4 set
    nobody = net.v4(M3, vendor_class="HTTPClient:Arch:00016")
    assert bootfile(nobody) is None and "vendor_class_id" not in nobody["options"]

    artifact = http.get_artifact(t1, "ipxe.efi")
    assert artifact.path == services.conf.dhcp_httpboot.ipxe_efi_path
    assert artifact.content_type == "application/efi"
    assert http.get_artifact(t1, "other") is None

    call_blocking(http.clean_up, t1)
    assert v6_url(net.v6(M1, duid=D1)) is None
    assert "16" not in net.v6(M1, duid=D1)["options"]
    assert eventually(lambda: bootfile(net.v4(M1, vendor_class="HTTPClient:Arch:00016"))
                      is None)
    assert v6_url(net.v6(M2)) == url2                     # the other machine keeps its own
    call_blocking(http.clean_up, t2)
    assert v6_url(net.v6(M2)) is None
    assert kea.include.read_text().count("{") == 0


def test_kea_restart_signal_reload_and_refused_config(net, kea, services, make_task):
    http = services.interfaces.get("dhcp-httpboot")
    services.conf.set_override("ipv4_backend", "", group="dhcp_httpboot")
    t1 = make_task("dhcp-httpboot", [{"mac": M1, "duid": D1}])
    call_blocking(http.prepare, t1)
    assert v6_url(net.v6(M1, duid=D1)) == t1.artifact_url("ipxe.efi")

    kea.restart()
    assert v6_url(net.v6(M1, duid=D1)) == t1.artifact_url("ipxe.efi")
    backend = get_backend("kea", services.conf)
    [owned] = backend.list_host_entries()
    assert (owned.machine_id, owned.interface, owned.identifiers) == (
        t1.machine.id, "dhcp-httpboot", (f"duid:{D1}",))

    # A reservation Kea refuses is rolled back, and Kea goes on answering.
    before = kea.include.read_text()
    bad = [HostEntry(mac=M2, options=(DhcpOption(65001, "no-such-definition", version=6),))]
    with pytest.raises(DhcpBackendError, match="Kea refused"):
        backend.ensure_host_entries("m-bad", "dhcp-httpboot", bad)
    assert kea.include.read_text() == before
    assert v6_url(net.v6(M1, duid=D1)) == t1.artifact_url("ipxe.efi")

    # SIGHUP through the pid file works as well.
    services.conf.set_override("reload", "signal", group="kea")
    services.conf.set_override("pid_file", str(kea.pid_file), group="kea")
    t2 = make_task("dhcp-httpboot", [{"mac": M2}])
    call_blocking(http.prepare, t2)
    assert eventually(lambda: v6_url(net.v6(M2)) == t2.artifact_url("ipxe.efi"))
    call_blocking(http.clean_up, t1)
    assert eventually(lambda: v6_url(net.v6(M1, duid=D1)) is None)

    kea.restart()
    assert v6_url(net.v6(M1, duid=D1)) is None
    assert v6_url(net.v6(M2)) == t2.artifact_url("ipxe.efi")


def test_prepare_fails_clearly_when_the_agents_kea_is_down(net, kea, services, make_task):
    http = services.interfaces.get("dhcp-httpboot")
    services.conf.set_override("ipv4_backend", "", group="dhcp_httpboot")
    services.conf.set_override("apply_timeout", 3, group="dhcp")
    task = make_task("dhcp-httpboot", [{"mac": M1, "duid": D1}])
    http.validate(task)
    # the agent's own check of its backends names the option at fault
    [kea_backend] = http.dhcp_backends(services.conf).values()
    kea_backend.validate()
    kea.stop()
    with pytest.raises(ValidationFailed) as err:
        kea_backend.validate()
    assert "[kea] control_socket" in err.value.message
    assert "[kea] control_socket" in err.value.fields
    # the step fails after apply_timeout naming the agent and what it could not do
    with pytest.raises(BootInterfaceError, match="local-agent .*not reachable"):
        call_blocking(http.prepare, task)


def test_namespaces_are_removed(net):
    # The fixture removes them in its finally; here: they exist while the test runs.
    assert net.exists()
    net.teardown()
    assert not net.exists()
