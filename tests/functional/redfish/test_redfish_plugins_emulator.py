"""Both Redfish boot interfaces, run as the conductor would, against sushy-emulator.

A real Services (sqlite in tmp_path) and machine rows; the emulator's state is
read back over Redfish after each step.
"""

import hashlib
import threading

import pytest

from redfish_emulator_harness import add_machine, events, fake_system
from metalboot_framework.exceptions import BmcError, ValidationFailed
from metalboot_redfish import iso as iso_mod

pytestmark = pytest.mark.functional

HTTP = "redfish-http-url"
VMEDIA = "redfish-virtual-media-ipxe"


def partition_info(partition_id):
    """A partition with no boot configuration, as the ISO reads it."""
    from metalboot_framework.task import PartitionInfo
    return PartitionInfo(partition_id, None, None, "", None, None, {})


def test_http_url_full_cycle(sushy_emulator_with_http_boot_uri, redfish_services):
    s, bystander = fake_system("m1"), fake_system("m2")
    emu = sushy_emulator_with_http_boot_uri([s, bystander])
    services = redfish_services()
    add_machine(services, emu.url, s)
    task = services.task("m1", HTTP)
    iface = services.interfaces.get(HTTP)

    iface.validate(task)
    assert emu.system(s["uuid"])["Boot"]["BootSourceOverrideEnabled"] == "Disabled"  # read only
    iface.prepare(task)
    iface.activate(task)
    iface.activate(task)  # idempotent: re-applies and resets again

    url = task.artifact_url("ipxe.iso")
    system = emu.system(s["uuid"])
    assert system["Boot"]["BootSourceOverrideTarget"] == "UefiHttp"
    assert system["Boot"]["BootSourceOverrideEnabled"] == "Once"
    assert system["Boot"]["BootSourceOverrideMode"] == "UEFI"
    assert system["Boot"]["HttpBootUri"] == url
    assert system["PowerState"] == "On"
    # what the firmware fetches is an evidence artifact, served per machine
    assert url.rsplit("/", 1)[1] in iface.evidence_artifacts
    assert "/m1/" in url and task.token in url
    artifact = iface.get_artifact(task, "ipxe.iso")
    with open(artifact.path, "rb") as f:
        assert f.read(0x8800)[0x8001:0x8006] == b"CD001"
    assert artifact.content_type == "application/vnd.efi-iso"
    assert emu.system(bystander["uuid"])["Boot"]["HttpBootUri"] is None

    assert iface.check_drift(task) == []
    emu.patch_boot(s["uuid"], BootSourceOverrideTarget="Pxe")
    drift = iface.check_drift(task)
    assert len(drift) == 1 and "Pxe" in drift[0] and "UefiHttp" in drift[0]
    emu.patch_boot(s["uuid"], BootSourceOverrideTarget="UefiHttp", HttpBootUri="http://x/y")
    assert any("http://x/y" in d and url in d for d in iface.check_drift(task))
    emu.patch_boot(s["uuid"], HttpBootUri=url)

    iface.clean_up(task)
    boot = emu.system(s["uuid"])["Boot"]
    assert boot["HttpBootUri"] is None
    assert boot["BootSourceOverrideEnabled"] == "Disabled"
    iface.clean_up(task)  # nothing left: still succeeds
    kinds = [k for k, _ in events(services, "m1")]
    assert kinds.count(f"{HTTP}.override") == 2 and f"{HTTP}.clean_up" in kinds


def test_http_url_validate_refuses_system_without_uefi_http(sushy_emulator_with_http_boot_uri,
                                                            redfish_services):
    s = fake_system("legacy", boot_mode="Legacy")
    emu = sushy_emulator_with_http_boot_uri([s])
    services = redfish_services()
    add_machine(services, emu.url, s)
    task = services.task("legacy", HTTP)
    with pytest.raises(ValidationFailed) as exc:
        services.interfaces.get(HTTP).validate(task)
    assert emu.url in str(exc.value) and "UefiHttp is not allowed" in str(exc.value)
    # a Legacy system is refused for its mode too: metalboot never switches it
    assert set(exc.value.fields) == {"BootSourceOverrideTarget", "HttpBootUri",
                                     "BootSourceOverrideMode"}
    assert emu.system(s["uuid"])["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_validate_refuses_bios_machine_without_calling_bmc(redfish_services):
    from redfish_emulator_harness import free_port
    services = redfish_services()
    s = fake_system("bios")
    add_machine(services, f"http://127.0.0.1:{free_port()}", s, boot_mode="bios")
    for name in (HTTP, VMEDIA):
        with pytest.raises(ValidationFailed) as exc:
            services.interfaces.get(name).validate(services.task("bios", name))
        assert "boot_mode" in exc.value.fields


def test_http_url_on_several_emulators_in_parallel(sushy_emulator_with_http_boot_uri,
                                                   redfish_services):
    services = redfish_services()
    machines = []
    for e in range(2):
        systems = [fake_system(f"e{e}s{i}") for i in range(3)]
        emu = sushy_emulator_with_http_boot_uri(systems)
        for system in systems:
            machines.append((emu, system, add_machine(services, emu.url, system)))
    iface = services.interfaces.get(HTTP)
    errors = []

    def run(machine_id):
        try:
            iface.activate(services.task(machine_id, HTTP))
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(m,)) for _, _, m in machines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    uris = set()
    for emu, system, machine_id in machines:
        boot = emu.system(system["uuid"])["Boot"]
        assert boot["HttpBootUri"] == services.task(machine_id, HTTP).artifact_url("ipxe.iso")
        uris.add(boot["HttpBootUri"])
    assert len(uris) == len(machines)


def test_http_url_activate_through_flaky_bmc(sushy_emulator_with_http_boot_uri,
                                             fault_injecting_proxy, redfish_services):
    s = fake_system("flaky")
    emu = sushy_emulator_with_http_boot_uri([s])
    proxy = fault_injecting_proxy(emu.port, fail_every=4)
    services = redfish_services(retry_attempts=4)
    add_machine(services, proxy.url, s)
    task = services.task("flaky", HTTP)
    services.interfaces.get(HTTP).activate(task)
    assert proxy.failed >= 1
    assert emu.system(s["uuid"])["Boot"]["HttpBootUri"] == task.artifact_url("ipxe.iso")


def test_http_url_unreachable_bmc_error_names_bmc(redfish_services):
    from redfish_emulator_harness import free_port
    services = redfish_services(retry_attempts=2)
    url = f"http://127.0.0.1:{free_port()}"
    s = fake_system("gone")
    add_machine(services, url, s)
    with pytest.raises(BmcError) as exc:
        services.interfaces.get(HTTP).activate(services.task("gone", HTTP))
    assert url in str(exc.value) and s["uuid"] in str(exc.value)


def test_virtual_media_full_cycle(sushy_emulator_with_http_boot_uri, redfish_services,
                                  partition_artifact_server):
    s = fake_system("vm1")
    emu = sushy_emulator_with_http_boot_uri([s])
    services = redfish_services()
    add_machine(services, emu.url, s, interface=VMEDIA)
    task = services.task("vm1", VMEDIA)
    iface = services.interfaces.get(VMEDIA)
    # an operator's image in the only CD device: ejected for the boot,
    # inserted again by clean-up
    partition_artifact_server.extra["/foreign.iso"] = b"foreign"
    foreign = partition_artifact_server.url + "/foreign.iso"
    emu.insert(s["uuid"], foreign)

    iface.validate(task)
    iface.prepare(task)
    iface.activate(task)

    spec = iface.iso_spec(services, partition_info("p1"))
    iso_url = services.partition_artifact_url("p1", VMEDIA, spec.name)
    cd = emu.media(s["uuid"])["Cd"]
    assert cd["Inserted"] is True and cd["Image"] == iso_url
    system = emu.system(s["uuid"])
    assert system["Boot"]["BootSourceOverrideTarget"] == "Cd"
    assert system["Boot"]["BootSourceOverrideEnabled"] == "Once"
    assert system["Boot"]["BootSourceOverrideMode"] == "UEFI"
    assert system["PowerState"] == "On"
    # the emulator (as a BMC) downloaded the ISO from the partition URL
    path = iso_url.split(partition_artifact_server.url, 1)[1]
    assert path in partition_artifact_server.log
    with open(iso_mod.cached_path(services.conf, spec.name), "rb") as f:
        built = f.read()
    artifact = iface.get_partition_artifact(services, task.partition, spec.name)
    with open(artifact.path, "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(built).digest()

    assert iface.check_drift(task) == []
    emu.eject(s["uuid"])
    drift = iface.check_drift(task)
    assert len(drift) == 1 and iso_url in drift[0] and "nothing inserted" in drift[0]
    emu.insert(s["uuid"], iso_url)

    iface.clean_up(task)
    media = emu.media(s["uuid"])
    assert media.pop("Cd")["Image"] == foreign
    assert all(not m["Inserted"] and not m["Image"] for m in media.values())
    assert emu.system(s["uuid"])["Boot"]["BootSourceOverrideEnabled"] == "Disabled"
    iface.clean_up(task)
    assert emu.media(s["uuid"])["Cd"]["Image"] == foreign


def test_virtual_media_iso_cached_per_partition(redfish_services):
    services = redfish_services()
    iface = services.interfaces.get(VMEDIA)
    spec1, path1 = iface.ensure_iso(services, partition_info("p1"))
    mtime = __import__("os").stat(path1).st_mtime_ns
    spec1b, path1b = iface.ensure_iso(services, partition_info("p1"))
    assert (spec1b.name, path1b) == (spec1.name, path1)
    assert __import__("os").stat(path1).st_mtime_ns == mtime
    spec2, path2 = iface.ensure_iso(services, partition_info("p2"))
    assert spec2.name != spec1.name and path2 != path1
    from metalboot_framework.task import PartitionInfo
    p1 = PartitionInfo("p1", None, None, "", None, None, {})
    assert iface.get_partition_artifact(services, p1, spec1.name).path == path1
    assert iface.get_partition_artifact(services, p1, "ipxe-0000000000000000.iso") is None
    assert iface.get_partition_artifact(services, p1, "../../etc/passwd") is None


def _requests(proxy, start=0):
    """(method, last path segment) of what the proxy forwarded since ``start``."""
    return [(method, path.rstrip("/").rsplit("/", 1)[-1]) for method, path, _ in
            proxy.log[start:]]


def test_virtual_media_reads_each_resource_once_per_step(
        sushy_emulator_with_http_boot_uri, fault_injecting_proxy, redfish_services,
        partition_artifact_server):
    """The Redfish requests of validate and activate, counted at the BMC: each
    resource is read at most once per step (the system after the insert, for the
    override's PATCH and the reset), nothing is ejected from empty devices, and
    the power is polled only after the reset."""
    s = fake_system("count", power_state="On")
    emu = sushy_emulator_with_http_boot_uri([s])
    proxy = fault_injecting_proxy(emu.port)
    services = redfish_services()
    add_machine(services, proxy.url, s, interface=VMEDIA)
    iface = services.interfaces.get(VMEDIA)
    uuid = s["uuid"]

    iface.validate(services.task("count", VMEDIA))
    # every collection (the system's, its manager's: the same one here) and
    # every device is read, as a CD device may be refused and the next one
    # tried; not the service root: the machine names its system
    assert _requests(proxy) == [("GET", uuid), ("GET", uuid),
                                ("GET", "VirtualMedia"), ("GET", "Cd"), ("GET", "Floppy")]
    iface.prepare(services.task("count", VMEDIA))

    for again in (False, True):  # the second activate finds the ISO inserted
        start = len(proxy.log)
        iface.activate(services.task("count", VMEDIA))
        made = _requests(proxy, start)
        reset = made.index(("POST", "ComputerSystem.Reset")) + 1
        # the devices validate found are remembered with the BMC connection,
        # and which take a CD: the floppy is not read again; an eject is read
        # back: the BMC may answer one it did not do
        assert made[:reset] == [("GET", "Cd")] + (
            [("POST", "VirtualMedia.EjectMedia"), ("GET", "Cd")] if again else []) + [
            ("POST", "VirtualMedia.InsertMedia"), ("GET", uuid), ("PATCH", uuid),
            ("POST", "ComputerSystem.Reset")]
        polls = made[reset:]
        assert polls and set(polls) == {("GET", uuid)}
        # polled every power_poll_interval (0.05 s) for a change applied after
        # 0.2-0.6 s, the first read one interval after the reset
        assert len(polls) <= 0.6 / 0.05 + 2
    system = emu.system(uuid)
    assert system["Boot"]["BootSourceOverrideTarget"] == "Cd" and system["PowerState"] == "On"
    assert emu.media(uuid)["Cd"]["Inserted"] is True


def test_http_url_activate_reads_the_system_once(sushy_emulator_with_http_boot_uri,
                                                 fault_injecting_proxy, redfish_services):
    s = fake_system("count-http", power_state="On")
    emu = sushy_emulator_with_http_boot_uri([s])
    proxy = fault_injecting_proxy(emu.port)
    services = redfish_services()
    add_machine(services, proxy.url, s)
    uuid = s["uuid"]
    services.interfaces.get(HTTP).activate(services.task("count-http", HTTP))
    made = _requests(proxy)
    reset = made.index(("POST", "ComputerSystem.Reset")) + 1
    assert made[:reset] == [("GET", uuid), ("PATCH", uuid),
                            ("POST", "ComputerSystem.Reset")]
    assert set(made[reset:]) == {("GET", uuid)}
    assert emu.system(uuid)["Boot"]["HttpBootUri"] == \
        services.task("count-http", HTTP).artifact_url("ipxe.iso")


def test_http_url_base_url_for_the_firmware(sushy_emulator_with_http_boot_uri, redfish_services):
    """[redfish] http_boot_base_url puts the firmware's URL behind another front
    (HTTPS): same path as the machine's artifact URL, another base; no drift."""
    s = fake_system("https-http", power_state="On")
    emu = sushy_emulator_with_http_boot_uri([s])
    services = redfish_services()
    services.conf.set_override("http_boot_base_url", "https://[fd00::1]:8443/", group="redfish")
    add_machine(services, emu.url, s)
    task = services.task("https-http", HTTP)
    http = services.interfaces.get(HTTP)
    http.activate(task)
    plain = task.artifact_url("ipxe.iso")
    path = plain[len(services.public_url):]
    assert path.startswith("/boot/") and plain.startswith("http://")
    assert emu.system(s["uuid"])["Boot"]["HttpBootUri"] == "https://[fd00::1]:8443" + path
    assert http.check_drift(task) == []
    # anything but an http(s) URL is refused with the configuration
    with pytest.raises(ValueError, match="ftp"):
        services.conf.set_override("http_boot_base_url", "ftp://x", group="redfish")
