"""``pxe``: legacy PXE through dnsmasq: DHCPv4 + TFTP iPXE, then iPXE fetches boot.ipxe.

Per machine, the DHCPv4 backend gets one entry per NIC:

- a client that is not iPXE gets the iPXE binary by TFTP, chosen by its
  architecture (option 93): ``[pxe] efi_x64_boot_file`` for x86-64 UEFI,
  ``bios_boot_file`` for BIOS, ``efi_arm64_boot_file`` for ARM64 UEFI;
- iPXE (user class ``iPXE``, option 175) gets the machine's boot.ipxe URL.

The entries are published to the machine's partition (prepare waits until its
boot agents hold them); each agent writes them to the backend its ``[pxe]
dhcp_backend`` names. Machines without an entry get no boot answer. activate sets the BMC boot
override ``Pxe`` and resets the machine (without a BMC it records that someone
else must reset it); clean_up removes the entries, so the machine gets no boot
answer any more.
"""

from metalboot_framework.boot_interface import Capability
from metalboot_framework.dhcp import DhcpOption, HostEntry, Match
from metalboot_dhcp.base import DhcpBootInterface

BOOTFILE = 67


class PxeBootInterface(DhcpBootInterface):
    """Legacy PXE: DHCPv4 and TFTP hand out iPXE, which fetches the machine's boot.ipxe."""

    capabilities = frozenset({Capability.NEEDS_DHCP, Capability.BIOS, Capability.IPV4})
    conf_group = "pxe"
    bmc_target = "Pxe"

    def get_properties(self):
        return self.common_properties()

    def dhcp_backends(self, conf):
        return {"dhcp_backend": self._backend(conf, "dhcp_backend")}

    def validate(self, task):
        self.validate_nics(task)

    def host_entries(self, task):
        opts = self.options(task)
        options = [DhcpOption(BOOTFILE, task.artifact_url("boot.ipxe"), when={Match.IPXE})]
        for match, path in ((Match.ARCH_EFI_X64, opts.efi_x64_boot_file),
                            (Match.ARCH_BIOS, opts.bios_boot_file),
                            (Match.ARCH_EFI_ARM64, opts.efi_arm64_boot_file)):
            if path:
                options.append(DhcpOption(BOOTFILE, path, when={Match.NOT_IPXE, match}))
        return [HostEntry(mac=nic.mac, options=tuple(options)) for nic in task.machine.nics]
