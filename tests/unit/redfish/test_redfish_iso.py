"""The iPXE ISO, checked with pycdlib (El Torito) and mtools (the FAT image)."""

import io
import os
import subprocess

import pycdlib
import pytest

from redfish_mock_bmc import IPXE_EFI, make_conf
from metalboot_framework.exceptions import BootInterfaceError
from metalboot_framework.services import Services

VMEDIA = "redfish-virtual-media-ipxe"


def partition_info(partition_id):
    """A partition with no boot configuration, as the ISO reads it."""
    from metalboot_framework.task import PartitionInfo
    return PartitionInfo(partition_id, None, None, "", None, None, {})


@pytest.fixture
def services(tmp_path):
    svc = Services.from_conf(make_conf(tmp_path / "state"))
    yield svc
    svc.db.write_engine.dispose()
    svc.db.read_engine.dispose()


def fat_read(image_path, fat_path):
    return subprocess.run(["mtype", "-i", image_path, "::" + fat_path], check=True,
                          capture_output=True).stdout


def fat_copy(image_path, fat_path, out):
    subprocess.run(["mcopy", "-n", "-i", image_path, "::" + fat_path, out], check=True)
    with open(out, "rb") as f:
        return f.read()


def test_ipxe_binary_for_tests_is_present():
    # Debian 12's ipxe (apt-get install ipxe) unless METALBOOT_TEST_IPXE_EFI names
    # trixie's; structure tests work with either.
    with open(IPXE_EFI, "rb") as f:
        assert f.read(2) == b"MZ"


def test_iso_layout(tmp_path, services):
    iface = services.interfaces.get(VMEDIA)
    spec, path = iface.ensure_iso(services, partition_info("p1"))
    iso = pycdlib.PyCdlib()
    iso.open(path)
    try:
        catalog = iso.eltorito_boot_catalog
        assert catalog is not None
        assert catalog.validation_entry.platform_id == 0xEF  # UEFI
        entry = catalog.initial_entry
        assert entry.boot_indicator == 0x88 and entry.boot_media_type == 0  # no emulation
        img = io.BytesIO()
        iso.get_file_from_iso_fp(img, iso_path="/EFI.IMG;1")
        # the El Torito entry points at efi.img
        record = iso.get_record(iso_path="/EFI.IMG;1")
        assert entry.load_rba == record.extent_location()
        script_on_iso = io.BytesIO()
        iso.get_file_from_iso_fp(script_on_iso, rr_path="/autoexec.ipxe")
    finally:
        iso.close()
    img_path = str(tmp_path / "efi.img")
    with open(img_path, "wb") as f:
        f.write(img.getvalue())
    with open(IPXE_EFI, "rb") as f:
        assert fat_copy(img_path, "/EFI/BOOT/BOOTX64.EFI", str(tmp_path / "b.efi")) == f.read()
    script = fat_read(img_path, "/autoexec.ipxe").decode()
    assert script == script_on_iso.getvalue().decode() == spec.script
    assert script.startswith("#!ipxe\n")
    url = services.mac_boot_script_url(VMEDIA, mac_variable="${net${idx}/mac}")
    assert url == "http://[fd00:b007::1]:6480/boot/mac/${net${idx}/mac}/" + VMEDIA + "/boot.ipxe"
    assert f"ifconf -c ipv6 net${{idx}} && chain {url} ||" in script
    assert "ifconf -c dhcp" not in script
    assert "partition p1" in script


def test_iso_is_cached_by_content(tmp_path, services):
    iface = services.interfaces.get(VMEDIA)
    spec1, path1 = iface.ensure_iso(services, partition_info("p1"))
    assert os.path.dirname(path1) == os.path.join(services.conf.artifacts.cache_dir,
                                                  "metalboot_redfish")
    spec_again = iface.iso_spec(services, partition_info("p1"))
    assert spec_again.name == spec1.name
    services.conf.set_override("ipxe_configurators", ["ipv6", "dhcp"], group="redfish")
    spec2, path2 = iface.ensure_iso(services, partition_info("p1"))
    assert spec2.name != spec1.name and os.path.exists(path1) and os.path.exists(path2)
    assert "ifconf -c dhcp net${idx}" in spec2.script
    # the http-url interface's ISO chains its own interface's boot.ipxe
    http_spec = services.interfaces.get("redfish-http-url").iso_spec(services, partition_info("p1"))
    assert "/redfish-http-url/boot.ipxe" in http_spec.script and http_spec.name != spec2.name


def test_missing_ipxe_binary_is_named(tmp_path, services):
    services.conf.set_override("ipxe_efi_path", str(tmp_path / "nope.efi"), group="redfish")
    with pytest.raises(BootInterfaceError) as exc:
        services.interfaces.get(VMEDIA).ensure_iso(services, partition_info("p1"))
    assert "ipxe_efi_path" in str(exc.value) and "nope.efi" in str(exc.value)


def test_template_override_from_artifacts_template_dir(tmp_path, services):
    tdir = tmp_path / "templates"
    tdir.mkdir()
    (tdir / "autoexec.ipxe.j2").write_text("#!ipxe\n# custom\nchain {{ boot_script_url }}\n")
    services.conf.set_override("template_dir", str(tdir), group="artifacts")
    spec = services.interfaces.get(VMEDIA).iso_spec(services, partition_info("p1"))
    assert spec.script.startswith("#!ipxe\n# custom\nchain http://[fd00:b007::1]:6480/boot/mac/")


def test_iso_chains_from_the_partitions_boot_agents(services):
    """A partition with a boot_url (its agents' anycast address) gets an ISO
    whose iPXE script chains boot.ipxe from there, not from the API."""
    from metalboot_framework.task import PartitionInfo
    iface = services.interfaces.get(VMEDIA)
    agents = PartitionInfo("p1", None, None, "", None, None, {},
                           boot_url="http://[2001:db8:0:b::1]:6481/")
    spec = iface.iso_spec(services, agents)
    assert "chain http://[2001:db8:0:b::1]:6481/boot/mac/${net${idx}/mac}/" in spec.script
    assert spec.name != iface.iso_spec(services, partition_info("p1")).name
    assert iface.iso_url(services, agents).startswith(
        "http://[2001:db8:0:b::1]:6481/boot/partitions/p1/")
