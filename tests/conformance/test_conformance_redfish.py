"""The conformance kit against ``redfish-http-url`` and ``redfish-virtual-media-ipxe``.

Each test gets a real sushy-emulator (``tests/functional/redfish``: the stock
fake driver plus per-system HttpBootUri) with three systems, the harness's
Services (both Redfish interfaces enabled, SQLite in tmp) and its partition
artifact server, from which the emulator downloads inserted ISOs. The world
is what the BMC does with each system's next boot: the boot override (by
effect), ``HttpBootUri``, the virtual media and the power state.
"""

import pytest

from metalboot_framework.testing.conformance import BootInterfaceConformance
# conftest.py puts tests/functional/redfish on sys.path and provides its fixtures
from redfish_emulator_harness import BMC_PASSWORD, BMC_USER, add_machine, fake_system
from tests.conformance.worlds import bmc_system_world, without_power

pytestmark = pytest.mark.functional

HTTP = "redfish-http-url"
VMEDIA = "redfish-virtual-media-ipxe"


class RedfishConformance(BootInterfaceConformance):
    """World = the emulator's view of the machine's and the bystander's systems."""

    @pytest.fixture
    def conformance_services(self, sushy_emulator_with_http_boot_uri, redfish_services):
        # 0: the machine under test, 1: the bystander, 2: for invalid_machine_fields
        self.systems = [fake_system(f"conformance-{i}") for i in range(3)]
        self.emulator = sushy_emulator_with_http_boot_uri(self.systems)
        return redfish_services()

    def make_machine(self, services, index):
        return add_machine(services, self.emulator.url, self.systems[index],
                           interface=self.interface_name)

    def invalid_machine_fields(self):
        system = self.systems[2]
        return {"boot_interface": self.interface_name, "boot_mode": "bios",
                "nics": [{"mac": system["nics"][0]["mac"]}],
                "bmc": {"address": self.emulator.url, "username": BMC_USER,
                        "password": BMC_PASSWORD, "verify_tls": False},
                "properties": {"redfish_system_id": system["uuid"]}}

    def snapshot_world(self):
        return {f"bmc {system['name']}": bmc_system_world(self.emulator, system["uuid"],
                                                          media=True)
                for system in self.systems}

    def without_declared_residue(self, world):
        """The machines' power state (see ``worlds.without_power``)."""
        return without_power(world)


class TestRedfishHttpUrlConformance(RedfishConformance):
    interface_name = HTTP
    other_interface = VMEDIA

    def test_world_is_observed(self):
        self.interface.prepare(self.task)
        self.interface.activate(self.task)
        world = self.snapshot_world()["bmc conformance-0"]
        assert world["override"] == ("UefiHttp", "Once", "UEFI")
        assert world["http_boot_uri"] == self.task.artifact_url("ipxe.iso")


class TestRedfishVirtualMediaConformance(RedfishConformance):
    interface_name = VMEDIA
    other_interface = HTTP

    def test_world_is_observed(self):
        self.interface.prepare(self.task)
        self.interface.activate(self.task)
        world = self.snapshot_world()["bmc conformance-0"]
        assert world["override"] == ("Cd", "Once", "UEFI")
        assert any(inserted and image.endswith(".iso")
                   for inserted, image in world["media"].values())
