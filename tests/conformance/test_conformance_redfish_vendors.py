"""The conformance kit for each vendor x Redfish interface, against the vendor mock BMC.

Each class runs the whole kit (validate, prepare, activate, check_drift via the
world, clean_up, evidence) with machine 0 and the bystander on two mock BMCs of
the same vendor, each serving that vendor's real payloads set up for UEFI (see
tests/unit/redfish/redfish_mock_bmc.py). The world is what each BMC will do
with its system's next boot: the override (by effect), the HTTP boot URI where
the vendor keeps it (BIOS attributes as the next boot will see them: pending
over current), and the virtual media.
"""

import pytest

from metalboot_framework.testing.conformance import BootInterfaceConformance, add_machine

HTTP, VMEDIA = "redfish-http-url", "redfish-virtual-media-ipxe"
PASSWORD = "Conformance-Secret-3"
#: BIOS attributes holding or enabling a UEFI HTTP boot URL.
URI_ATTRIBUTES = ("HttpDev1Uri", "HttpDev1EnDis", "UrlBootFile")


class VendorMockConformance(BootInterfaceConformance):
    vendor = ""

    @pytest.fixture
    def conformance_services(self, tmp_path, vendor_bmc):
        from metalboot_framework.testing.conformance import close_services, make_services
        from redfish_mock_bmc import IPXE_EFI
        self.bmcs = [vendor_bmc(self.vendor, uefi=True) for _ in range(3)]
        services = make_services(tmp_path / "metalboot-state",
                                 [self.interface_name, self.other_interface],
                                 options={"redfish": {"ipxe_efi_path": IPXE_EFI},
                                          "bmc": {"retry_interval": 0.01,
                                                  "power_poll_interval": 0.01,
                                                  "power_timeout": 5}})
        yield services
        close_services(services)

    def machine_fields(self, index):
        fields = super().machine_fields(index)
        fields["bmc"] = {"address": self.bmcs[index].url, "username": "root",
                         "password": PASSWORD, "verify_tls": False}
        return fields

    def invalid_machine_fields(self):
        fields = self.machine_fields(2)
        fields["boot_mode"] = "bios"
        return fields

    def make_machine(self, services, index):
        return add_machine(services, **self.machine_fields(index))

    def snapshot_world(self):
        return {f"bmc {i}": self.bmc_world(bmc) for i, bmc in enumerate(self.bmcs)}

    @staticmethod
    def bmc_world(bmc):
        from redfish_mock_bmc import is_bios_settings
        # the override of the next boot: what is staged for it over the current
        boot = dict(bmc.boot, **(bmc.pending_system.get("Boot") or {}))
        enabled = boot.get("BootSourceOverrideEnabled")
        override = "Disabled" if enabled in (None, "Disabled") else (
            boot.get("BootSourceOverrideTarget"), enabled, boot.get("BootSourceOverrideMode"))
        world = {"override (next boot)": override,
                 "http_boot_uri": boot.get("HttpBootUri"), "power": boot and
                 bmc.docs[bmc.system_path].get("PowerState")}
        bios = dict(bmc.bios_attributes)
        for path, doc in bmc.docs.items():
            if is_bios_settings(path):
                bios.update(doc.get("Attributes") or {})
        world["bios (next boot)"] = {k: bios.get(k) for k in URI_ATTRIBUTES if k in bios}
        world["media"] = {doc.get("Id"): (bool(doc.get("Inserted")), doc.get("Image"))
                          for doc in bmc.docs.values() if "MediaTypes" in doc}
        return world

    def without_declared_residue(self, world):
        """The power state: activate resets (powers on) the machine and clean_up
        does not power it off again, nor should it."""
        return {key: {k: v for k, v in value.items() if k != "power"}
                for key, value in world.items()}


def vendor_class(vendor, interface):
    other = VMEDIA if interface == HTTP else HTTP
    name = "Test" + "".join(p.capitalize() for p in vendor.split("-")) + \
        ("HttpUrl" if interface == HTTP else "VirtualMedia") + "Conformance"
    return type(name, (VendorMockConformance,), {"vendor": vendor, "interface_name": interface,
                                                 "other_interface": other})


TestDellIdrac9HttpUrlConformance = vendor_class("dell-idrac9", HTTP)
TestDellIdrac9VirtualMediaConformance = vendor_class("dell-idrac9", VMEDIA)
TestDellIdrac10HttpUrlConformance = vendor_class("dell-idrac10", HTTP)
TestDellIdrac10VirtualMediaConformance = vendor_class("dell-idrac10", VMEDIA)
TestHpeIlo5HttpUrlConformance = vendor_class("hpe-ilo5", HTTP)
TestSupermicroX11VirtualMediaConformance = vendor_class("supermicro-x11", VMEDIA)
TestSupermicroX12VirtualMediaConformance = vendor_class("supermicro-x12", VMEDIA)
TestLenovoXccVirtualMediaConformance = vendor_class("lenovo-xcc", VMEDIA)
