"""Plugin steps against the mock BMC: real Services (SQLite in tmp), a machine
on a vendor's BMC, and the boot interfaces' public methods."""

import pytest

from redfish_mock_bmc import make_conf
from metalboot_framework.store import models
from metalboot_framework.task import BootTask
from tests.redfish_conf import services_factory

HTTP, VMEDIA = "redfish-http-url", "redfish-virtual-media-ipxe"
PASSWORD = "Plugin-Secret-9"


@pytest.fixture
def services(tmp_path):
    def conf_for(index, **bmc_overrides):
        return make_conf(tmp_path / f"state{index}", **bmc_overrides)
    with services_factory(conf_for) as make:
        yield make


def task_for(services, bmc, interface, machine_id="m1", properties=None):
    with services.transactions.now() as unit:
        s = unit.session
        if s.get(models.Partition, "p1") is None:
            s.add(models.Partition(id="p1", kernel_url="http://127.0.0.1:1/k",
                                   cmdline="console=ttyS0", properties={}))
            s.flush()
        s.add(models.Machine(id=machine_id, partition_id="p1", bmc_address=bmc.url,
                             bmc_username="root", bmc_password=services.password_key.seal(PASSWORD),
                             bmc_verify_tls=False, boot_interface=interface,
                             boot_mode="uefi", state="ready", properties=properties or {},
                             token_generation=1))
        s.flush()
        mac = f"52:54:00:00:00:{len(machine_id) + ord(machine_id[-1]) % 256:02x}"
        s.add(models.Nic(mac=mac, machine_id=machine_id, position=0))
    return BootTask(services, None, None, interface, machine_id=machine_id)


def plugin(services, interface):
    return services.interfaces.get(interface)


def activated(services, vendor_bmc, vendor, interface, boot=None, before=None):
    """(mock BMC, task, interface) after validate, prepare and activate of a
    machine on ``vendor``'s BMC, set up for UEFI (and ``boot`` set in its Boot,
    and ``before(bmc)`` called first)."""
    bmc = vendor_bmc(vendor, uefi=True)
    bmc.boot.update(boot or {})
    if before is not None:
        before(bmc)
    task, iface = machine_on(services, bmc, interface)
    iface.validate(task)
    iface.prepare(task)
    iface.activate(task)
    return bmc, task, iface


def machine_on(services, bmc, interface):
    """(task, interface) of a new machine on ``bmc`` (new Services)."""
    svc = services()
    return task_for(svc, bmc, interface), plugin(svc, interface)
