"""Configuration, Services and machine rows for the DHCP unit tests (no servers)."""

import uuid

import pytest

from tests.dhcp_agent import LocalDhcpAgent

from metalboot_framework.conf import CONF
from metalboot_framework.dhcp import clear_cache
from metalboot_framework.store import models
import metalboot_dhcp.conf  # noqa: F401  (registers [pxe], [dhcp_httpboot])


@pytest.fixture
def dhcp_conf(tmp_path):
    CONF.clear()
    CONF([], project="metalboot", default_config_files=[], default_config_dirs=[])
    o = CONF.set_override
    o("state_path", str(tmp_path / "state"))
    o("enabled_boot_interfaces", ["pxe", "dhcp-httpboot", "fake"])
    o("default_boot_interface", "pxe")
    o("public_url", "http://[fd00:b::1]:6480", group="api")
    for d in ("hosts", "opts", "kea"):
        (tmp_path / d).mkdir()
    o("hostsdir", str(tmp_path / "hosts"), group="dnsmasq")
    o("optsdir", str(tmp_path / "opts"), group="dnsmasq")
    o("include_file", str(tmp_path / "kea" / "res6.json"), group="kea")
    (tmp_path / "kea" / "res6.json").write_text("")
    o("reload", "none", group="kea")
    o("ipv6_dns_servers", ["fd00:b::53"], group="dhcp")
    efi = tmp_path / "ipxe.efi"
    efi.write_bytes(b"MZ-not-really")
    o("ipxe_efi_path", str(efi), group="dhcp_httpboot")
    clear_cache()
    yield CONF
    clear_cache()
    CONF.clear()
    CONF.reset()


@pytest.fixture
def services(dhcp_conf):
    from metalboot_framework.services import Services
    svc = Services.from_conf(dhcp_conf)
    yield svc
    svc.db.dispose()


@pytest.fixture
def local_agent(services):
    """The DHCP half of a boot agent for partition p1 (the steps wait for it)."""
    with LocalDhcpAgent(services) as agent:
        yield agent


@pytest.fixture
def make_task(services, local_agent):
    def make(interface, nics, boot_mode="uefi", bmc_address=None):
        machine_id = str(uuid.uuid4())
        with services.transactions.now() as unit:
            session = unit.session
            if session.get(models.Partition, "p1") is None:
                session.add(models.Partition(id="p1", cmdline=""))
                session.flush()
            session.add(models.Machine(id=machine_id, partition_id="p1",
                                       boot_interface=interface, boot_mode=boot_mode,
                                       bmc_address=bmc_address, bmc_username="admin",
                                       bmc_password=services.password_key.seal("secret"),
                                       properties={}))
            session.flush()
            for i, nic in enumerate(nics):
                session.add(models.Nic(machine_id=machine_id, position=i, **nic))
        return services.task(machine_id, interface)
    return make
