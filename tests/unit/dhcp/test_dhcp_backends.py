"""DHCP backends and the DHCP plugins without servers: files written, validation, loader."""

import json
import os
import subprocess
import tempfile

import pytest

from metalboot_framework.dhcp import (DhcpBackend, DhcpBackendError, DhcpOption, HostEntry,
                                      Match, get_backend, normalize_duid, normalize_mac)
from metalboot_framework.exceptions import PluginLoadError, ValidationFailed
from metalboot_framework.steploop import call_blocking
from metalboot_framework.store import models

MAC = "52:54:00:aa:bb:01"
URL = "http://[fd00:b::1]:6480/boot/m/pxe/t/boot.ipxe"


def entry(mac=MAC, duid=None, url=URL, efi="snponly.efi"):
    return HostEntry(mac=mac, duid=duid, options=(
        DhcpOption(67, url, when={Match.IPXE}),
        DhcpOption(67, efi, when={Match.NOT_IPXE, Match.ARCH_EFI_X64}),
        DhcpOption(59, url, version=6),
        DhcpOption(16, "00000157000A48545450436C69656E74", version=6, hex=True,
                   always_send=True)))


def names(directory):
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


# -- value objects ---------------------------------------------------------------------
def test_normalize_and_reject_bad_identifiers():
    assert normalize_mac("52-54-00-AA-BB-01") == MAC
    assert normalize_mac("525400aabb01") == MAC
    assert normalize_duid("0003000152540000AABB") == "00:03:00:01:52:54:00:00:aa:bb"
    for bad in ("52:54:00:aa:bb", "zz:54:00:aa:bb:01", ""):
        with pytest.raises(ValueError):
            normalize_mac(bad)
    with pytest.raises(ValueError):
        normalize_duid("abc")
    with pytest.raises(ValueError):
        DhcpOption(16, "not hex", version=6, hex=True)
    with pytest.raises(ValueError):
        DhcpOption(300, "x")
    with pytest.raises(ValueError):
        HostEntry(mac=MAC, ipv4_address="10.0.0.300")


# -- dnsmasq ----------------------------------------------------------------------------
def test_dnsmasq_files_tags_and_idempotence(dhcp_conf):
    backend = get_backend("dnsmasq", dhcp_conf)
    hosts, opts = dhcp_conf.dnsmasq.hostsdir, dhcp_conf.dnsmasq.optsdir
    open(os.path.join(hosts, "operator-own"), "w").write("52:54:00:00:00:99,set:x\n")

    assert backend.ensure_host_entries("m1", "pxe", [entry()]) is True
    assert backend.ensure_host_entries("m1", "pxe", [entry()]) is False
    assert names(hosts) == ["metalboot-m1", "operator-own"]
    assert names(opts) == ["metalboot-m1.pxe"]
    opt_lines = open(os.path.join(opts, "metalboot-m1.pxe")).read().splitlines()
    tag = json.loads(opt_lines[0].split(": ", 1)[1])["tag"]
    assert opt_lines[1:] == [f"tag:{tag},tag:!ipxe,tag:efi64,67,snponly.efi",
                             f"tag:{tag},tag:ipxe,67,{URL}"]         # v6 options left out
    host_lines = open(os.path.join(hosts, "metalboot-m1")).read().splitlines()
    assert host_lines[1] == f"{MAC},set:metalboot,set:{tag},set:metalboot-pxe"
    for name in ("metalboot-m1",):
        assert os.stat(os.path.join(hosts, name)).st_mode & 0o777 == 0o644

    # Changed content gets a new tag (dnsmasq keeps old lines in memory).
    backend.ensure_host_entries("m1", "pxe", [entry(efi="ipxe.efi")])
    new_tag = json.loads(open(os.path.join(opts, "metalboot-m1.pxe")).readline()
                         .split(": ", 1)[1])["tag"]
    assert new_tag != tag
    assert f"set:{new_tag}" in open(os.path.join(hosts, "metalboot-m1")).read()
    assert f"set:{tag}" not in open(os.path.join(hosts, "metalboot-m1")).read()
    assert open(os.path.join(hosts, "operator-own")).read() == "52:54:00:00:00:99,set:x\n"


def test_dnsmasq_two_interfaces_then_tombstone(dhcp_conf):
    backend = get_backend("dnsmasq", dhcp_conf)
    hosts = os.path.join(dhcp_conf.dnsmasq.hostsdir, "metalboot-m1")
    backend.ensure_host_entries("m1", "pxe", [entry()])
    backend.ensure_host_entries("m1", "dhcp-httpboot", [entry(url="http://x/ipxe.efi")])
    line = open(hosts).read().splitlines()[1]
    assert "set:metalboot-pxe" in line and "set:metalboot-dhcp-httpboot" in line
    assert [(e.machine_id, e.interface) for e in backend.list_host_entries("m1")] == [
        ("m1", "dhcp-httpboot"), ("m1", "pxe")]

    assert backend.remove_host_entries("m1", "pxe") is True
    line = open(hosts).read().splitlines()[1]
    assert "set:metalboot-pxe" not in line and "set:metalboot-dhcp-httpboot" in line
    assert backend.remove_host_entries("m1") is True
    text = open(hosts).read()
    assert json.loads(text.splitlines()[0].split(": ", 1)[1])["removed"] is True
    assert text.splitlines()[1] == f"{MAC},set:metalboot-removed"
    assert names(dhcp_conf.dnsmasq.optsdir) == []
    assert backend.list_host_entries() == []
    assert backend.remove_host_entries("m1") is False
    assert backend.remove_host_entries("never-seen") is False
    assert not os.path.exists(os.path.join(dhcp_conf.dnsmasq.hostsdir, "metalboot-never-seen"))


def test_dnsmasq_tombstone_purged_after_dnsmasq_restart(dhcp_conf, tmp_path):
    backend = get_backend("dnsmasq", dhcp_conf)
    pid_file = tmp_path / "dnsmasq.pid"
    dhcp_conf.set_override("pid_file", str(pid_file), group="dnsmasq")
    backend.ensure_host_entries("m1", "pxe", [entry()])
    backend.remove_host_entries("m1")
    tomb = os.path.join(dhcp_conf.dnsmasq.hostsdir, "metalboot-m1")
    os.utime(tomb, (1000, 1000))
    pid_file.write_text(f"{os.getpid()}\n")            # "dnsmasq" started after the tombstone
    backend.remove_host_entries("m2")
    assert not os.path.exists(tomb)


def test_dnsmasq_refuses_forced_options_and_odd_ids(dhcp_conf):
    backend = get_backend("dnsmasq", dhcp_conf)
    forced = HostEntry(mac=MAC, options=(DhcpOption(60, "HTTPClient", always_send=True),))
    with pytest.raises(DhcpBackendError, match="dhcp-option-force=tag:metalboot-pxe,60"):
        backend.ensure_host_entries("m1", "pxe", [forced])
    assert names(dhcp_conf.dnsmasq.optsdir) == []
    backend.ensure_host_entries("../../etc/passwd", "pxe", [entry()])
    assert all(n.startswith("metalboot-h") for n in names(dhcp_conf.dnsmasq.hostsdir))
    assert [e.machine_id for e in backend.list_host_entries()] == ["../../etc/passwd"]
    # Entries with no DHCPv4 option for this backend: nothing to write.
    v6only = HostEntry(mac=MAC, options=(DhcpOption(59, URL, version=6),))
    assert backend.ensure_host_entries("m9", "dhcp-httpboot", [v6only]) is False


# -- Kea ----------------------------------------------------------------------------------
def read_kea(conf):
    text = open(conf.kea.include_file).read()
    body = "".join(line for line in text.splitlines(True) if not line.startswith("#"))
    return json.loads("[" + body + "]")


def test_kea_include_file_merge_and_remove(dhcp_conf):
    backend = get_backend("kea", dhcp_conf)
    duid = "00:03:00:01:52:54:00:aa:bb:01"
    assert backend.ensure_host_entries("m1", "dhcp-httpboot", [entry(duid=duid)]) is True
    assert backend.ensure_host_entries("m1", "dhcp-httpboot", [entry(duid=duid)]) is False
    backend.ensure_host_entries("m2", "dhcp-httpboot",
                                [entry(mac="52:54:00:aa:bb:02", url="http://x/2")])
    [r1, r2] = read_kea(dhcp_conf)
    assert r1["duid"] == duid and r2["hw-address"] == "52:54:00:aa:bb:02"
    assert r1["option-data"] == [
        {"always-send": True, "code": 16, "csv-format": False, "space": "dhcp6",
         "data": "00000157000A48545450436C69656E74"},
        {"code": 59, "data": URL, "space": "dhcp6"}]
    assert r1["user-context"]["metalboot"]["machine"] == "m1"

    # A second interface of the same machine shares the reservation; removing one keeps it.
    backend.ensure_host_entries("m1", "other", [HostEntry(
        mac=MAC, duid=duid, options=(DhcpOption(23, "fd00::53", version=6),))])
    [r1, _] = read_kea(dhcp_conf)
    assert [o["code"] for o in r1["option-data"]] == [16, 23, 59]
    backend.remove_host_entries("m1", "dhcp-httpboot")
    [r1, _] = read_kea(dhcp_conf)
    assert [o["code"] for o in r1["option-data"]] == [23]
    assert [(e.machine_id, e.interface) for e in backend.list_host_entries()] == [
        ("m1", "other"), ("m2", "dhcp-httpboot")]
    assert backend.remove_host_entries("m1") is True
    assert backend.remove_host_entries("m1") is False
    assert [r["hw-address"] for r in read_kea(dhcp_conf)] == ["52:54:00:aa:bb:02"]

    # The same DUID cannot be reserved for two machines.
    with pytest.raises(DhcpBackendError, match="reserved for machine m2"):
        backend.ensure_host_entries("m3", "dhcp-httpboot",
                                    [entry(mac="52:54:00:aa:bb:02")])


def test_kea_refuses_unsupported_match(dhcp_conf):
    backend = get_backend("kea", dhcp_conf)
    conditional = HostEntry(mac=MAC, options=(
        DhcpOption(59, URL, version=6, when={Match.HTTP_CLIENT}),))
    with pytest.raises(DhcpBackendError, match="http-client"):
        backend.ensure_host_entries("m1", "x", [conditional])


# -- validation ------------------------------------------------------------------------------
def test_dnsmasq_validate_names_missing_and_wrong_options(dhcp_conf, tmp_path):
    backend = get_backend("dnsmasq", dhcp_conf)
    backend.validate()
    dhcp_conf.set_override("hostsdir", str(tmp_path / "nope"), group="dnsmasq")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    dhcp_conf.set_override("optsdir", str(not_a_dir), group="dnsmasq")
    dhcp_conf.set_override("pid_file", str(tmp_path / "no.pid"), group="dnsmasq")
    with pytest.raises(ValidationFailed) as err:
        backend.validate()
    assert set(err.value.fields) == {"[dnsmasq] hostsdir", "[dnsmasq] optsdir",
                                     "[dnsmasq] pid_file"}
    assert "does not exist" in err.value.message
    with pytest.raises(DhcpBackendError, match=r"\[dnsmasq\] hostsdir"):
        backend.ensure_host_entries("m1", "pxe", [entry()])


def test_dnsmasq_validate_unwritable_hostsdir(dhcp_conf, tmp_path):
    backend = get_backend("dnsmasq", dhcp_conf)
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        # root writes through file modes: use a read-only mount instead.
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "metalboot-test", str(ro)],
                       check=True)
    else:
        ro.chmod(0o555)
    try:
        dhcp_conf.set_override("hostsdir", str(ro), group="dnsmasq")
        with pytest.raises(ValidationFailed) as err:
            backend.validate()
        assert list(err.value.fields) == ["[dnsmasq] hostsdir"]
        assert "not writable" in err.value.message
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(ro)], check=True)
        else:
            ro.chmod(0o755)


def test_kea_validate_unreachable_and_missing(dhcp_conf, tmp_path):
    backend = get_backend("kea", dhcp_conf)
    backend.validate()                                        # reload = none, file exists
    dhcp_conf.set_override("reload", "control-socket", group="kea")
    with pytest.raises(ValidationFailed) as err:
        backend.validate()
    assert "[kea] control_socket" in err.value.fields and "is not set" in err.value.message
    dhcp_conf.set_override("control_socket", str(tmp_path / "kea.sock"), group="kea")
    with pytest.raises(ValidationFailed) as err:
        backend.validate()
    assert "not reachable" in err.value.message
    dhcp_conf.set_override("reload", "signal", group="kea")
    dhcp_conf.set_override("pid_file", str(tmp_path / "kea.pid"), group="kea")
    with pytest.raises(ValidationFailed) as err:
        backend.validate()
    assert list(err.value.fields) == ["[kea] pid_file"]
    dhcp_conf.set_override("include_file", str(tmp_path / "gone" / "r.json"), group="kea")
    with pytest.raises(ValidationFailed) as err:
        backend.validate()
    assert "[kea] include_file" in err.value.fields


def test_kea_unreachable_socket_rolls_the_file_back(dhcp_conf, tmp_path):
    backend = get_backend("kea", dhcp_conf)
    backend.ensure_host_entries("m1", "dhcp-httpboot", [entry()])
    before = open(dhcp_conf.kea.include_file).read()
    dhcp_conf.set_override("reload", "control-socket", group="kea")
    dhcp_conf.set_override("control_socket", str(tmp_path / "kea.sock"), group="kea")
    with pytest.raises(DhcpBackendError, match="not reachable"):
        backend.ensure_host_entries("m2", "dhcp-httpboot", [entry(mac="52:54:00:aa:bb:02")])
    assert open(dhcp_conf.kea.include_file).read() == before


# -- loader ---------------------------------------------------------------------------------
def test_loader_caches_and_names_unknown_backends(dhcp_conf):
    backend = get_backend("dnsmasq", dhcp_conf)
    assert isinstance(backend, DhcpBackend) and backend.name == "dnsmasq"
    assert get_backend("dnsmasq", dhcp_conf) is backend
    assert get_backend("kea", dhcp_conf).name == "kea"
    with pytest.raises(PluginLoadError, match="'isc-dhcpd' is not installed"):
        get_backend("isc-dhcpd", dhcp_conf)


# -- plugins ---------------------------------------------------------------------------------
def test_pxe_entries_validate_and_activate_without_bmc(services, make_task):
    pxe = services.interfaces.get("pxe")
    task = make_task("pxe", [{"mac": "52:54:00:AA:BB:01"}, {"mac": "52:54:00:aa:bb:02"}],
                     boot_mode="bios")
    [e1, e2] = pxe.host_entries(task)
    assert (e1.mac, e2.mac) == (MAC, "52:54:00:aa:bb:02")
    by_when = {frozenset(o.when): o.value for o in e1.options}
    assert by_when == {frozenset({Match.IPXE}): task.artifact_url("boot.ipxe"),
                       frozenset({Match.NOT_IPXE, Match.ARCH_EFI_X64}): "snponly.efi",
                       frozenset({Match.NOT_IPXE, Match.ARCH_BIOS}): "undionly.kpxe"}
    pxe.validate(task)
    pxe.activate(task)
    with services.db.read() as session:
        kinds = [e.kind for e in session.query(models.Event).filter_by(
            machine_id=task.machine.id)]
    assert kinds == ["pxe.reset_required"]

    no_nics = make_task("pxe", [])
    with pytest.raises(ValidationFailed) as err:
        pxe.validate(no_nics)
    assert "nics" in err.value.fields
    # the backend is the boot agent's: its configuration names it, the agent loads it
    pxe.validate(task)
    services.conf.set_override("dhcp_backend", "no-such", group="pxe")
    with pytest.raises(ValidationFailed) as err:
        pxe.dhcp_backends(services.conf)
    assert "[pxe] dhcp_backend" in err.value.fields


def test_pxe_activate_and_clean_up_with_bmc(services, make_task, monkeypatch):
    from metalboot_dhcp import bmc as bmc_mod
    calls = []
    monkeypatch.setattr(bmc_mod, "boot_once_and_reset",
                        lambda task, target: calls.append(("boot", target)) or "reset done")
    monkeypatch.setattr(bmc_mod, "clear_override",
                        lambda task, target: calls.append(("clear", target)) or [])
    pxe = services.interfaces.get("pxe")
    http = services.interfaces.get("dhcp-httpboot")
    task = make_task("pxe", [{"mac": MAC}], bmc_address="10.1.2.3")
    call_blocking(pxe.prepare, task)
    pxe.activate(task)
    http.activate(make_task("dhcp-httpboot", [{"mac": "52:54:00:aa:bb:03"}],
                            bmc_address="10.1.2.4"))
    call_blocking(pxe.clean_up, task)
    assert calls == [("boot", "Pxe"), ("boot", "UefiHttp"), ("clear", "Pxe")]
    assert get_backend("dnsmasq", services.conf).list_host_entries(task.machine.id) == []


def test_httpboot_entries_and_validation(services, make_task, tmp_path):
    http = services.interfaces.get("dhcp-httpboot")
    task = make_task("dhcp-httpboot", [
        {"mac": MAC, "duid": "00030001525400aabb01", "ipv4_address": "10.0.0.5"},
        {"mac": "52:54:00:aa:bb:02"}])
    http.validate(task)
    [e1, e2] = http.host_entries(task)
    url = task.artifact_url("ipxe.efi")
    codes1 = {(o.version, o.code, o.value) for o in e1.options}
    assert (6, 59, url) in codes1 and (6, 23, "fd00:b::53") in codes1
    assert (6, 16, "00000157000A48545450436C69656E74") in codes1
    assert (4, 67, url) in codes1 and (4, 60, "HTTPClient") in codes1
    assert (4, 67, task.artifact_url("boot.ipxe")) in codes1
    assert {o.version for o in e2.options} == {6}            # no IPv4 address: no v4 answer
    call_blocking(http.prepare, task)
    assert [e.interface for e in get_backend("kea", services.conf).list_host_entries()] == [
        "dhcp-httpboot"]
    assert len(get_backend("dnsmasq", services.conf).list_host_entries()) == 1
    call_blocking(http.clean_up, task)
    assert get_backend("kea", services.conf).list_host_entries() == []
    assert get_backend("dnsmasq", services.conf).list_host_entries() == []

    with pytest.raises(ValidationFailed) as err:
        http.validate(make_task("dhcp-httpboot", [{"mac": "52:54:00:aa:bb:09"}],
                                    boot_mode="bios"))
    assert "boot_mode" in err.value.fields
    services.conf.set_override("ipxe_efi_path", str(tmp_path / "missing.efi"),
                               group="dhcp_httpboot")
    with pytest.raises(ValidationFailed) as err:
        http.validate(task)
    assert "[dhcp_httpboot] ipxe_efi_path" in err.value.fields


def test_atomic_write_leaves_no_temp_files(tmp_path):
    from metalboot_framework.dhcp import files
    path = tmp_path / "f"
    assert files.atomic_write(str(path), "a\n") is True
    assert files.atomic_write(str(path), "a\n") is False
    assert sorted(os.listdir(tmp_path)) == ["f"]
    stale = tempfile.mkstemp(prefix=".metalboot-x.", suffix=".tmp", dir=tmp_path)[1]
    files.remove_stale_temp_files(str(tmp_path), "metalboot-")
    assert not os.path.exists(stale)


def test_httpboot_autoexec_chains_the_machines_boot_script(services, make_task):
    """iPXE loaded by HTTP boot fetches autoexec.ipxe next to itself: the answer
    configures a NIC without DHCP first and chains this machine's boot.ipxe."""
    http = services.interfaces.get("dhcp-httpboot")
    task = make_task("dhcp-httpboot", [{"mac": MAC}])
    script = http.get_artifact(task, "autoexec.ipxe").content.decode()
    assert script.startswith("#!ipxe\n")
    boot_ipxe = task.artifact_url("boot.ipxe")
    lines = script.splitlines()
    assert lines.index(f"ifconf -c ipv6 net${{idx}} && chain {boot_ipxe} ||") < \
        lines.index(f"ifconf -c dhcp net${{idx}} && chain {boot_ipxe} ||")
    services.conf.set_override("ipxe_configurators", ["ipv6"], group="dhcp_httpboot")
    assert "ifconf -c dhcp" not in http.get_artifact(task, "autoexec.ipxe").content.decode()
    assert http.get_artifact(task, "other.ipxe") is None
