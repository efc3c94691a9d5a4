"""[pxe] and [dhcp_httpboot]: options of the DHCP boot interfaces."""

from oslo_config import cfg

pxe_opts = [
    cfg.StrOpt("dhcp_backend", default="dnsmasq",
               help="DHCPv4 backend (metalboot.dhcp_backends entry point) that gets "
                    "the per-machine PXE entries."),
    cfg.StrOpt("efi_x64_boot_file", default="snponly.efi",
               help="TFTP path of the iPXE binary given to x86-64 UEFI PXE clients "
                    "(client architecture 7 or 9)."),
    cfg.StrOpt("bios_boot_file", default="undionly.kpxe",
               help="TFTP path of the iPXE binary given to legacy BIOS PXE clients "
                    "(client architecture 0)."),
    cfg.StrOpt("efi_arm64_boot_file", default="",
               help="TFTP path of the iPXE binary for ARM64 UEFI clients "
                    "(architecture 11); empty: ARM64 machines get no answer."),
    cfg.BoolOpt("use_bmc", default=True,
                help="activate sets the BMC boot override to Pxe and resets the "
                     "machine when it has a BMC address; otherwise (or without a "
                     "BMC) it records that someone else must reset the machine."),
]

httpboot_opts = [
    cfg.StrOpt("ipv4_backend", default="dnsmasq",
               help="DHCPv4 backend for option 60 HTTPClient + option 67 URL, used "
                    "for NICs with an ipv4_address; empty: no DHCPv4 answers."),
    cfg.StrOpt("ipv6_backend", default="kea",
               help="DHCPv6 backend for option 59 (+16, 23); empty: no DHCPv6 answers."),
    cfg.StrOpt("boot_artifact", default="ipxe.efi",
               help="Name of the per-machine artifact the firmware fetches (the URL "
                    "in option 59/67); the plugin serves [dhcp_httpboot] "
                    "ipxe_efi_path under it."),
    cfg.StrOpt("ipxe_efi_path", default="/usr/lib/ipxe/ipxe.efi",
               help="The iPXE EFI binary served as boot_artifact. An iPXE that "
                    "runs autoexec.ipxe from where it was loaded (Debian trixie's "
                    "build or newer) fetches the machine's autoexec.ipxe next to "
                    "it, which configures the NIC (ipxe_configurators) and chains "
                    "boot.ipxe: no second DHCP. An older iPXE asks DHCP again, as "
                    "user class iPXE, and gets the machine's boot.ipxe URL "
                    "(DHCPv4 only)."),
    cfg.ListOpt("ipxe_configurators", default=["ipv6", "dhcp"],
                help="iPXE ifconf configurators that autoexec.ipxe tries, in order, "
                     "on each network interface before chaining boot.ipxe (ipv6 = "
                     "SLAAC; dhcp = DHCPv4 and DHCPv6)."),
    cfg.BoolOpt("use_bmc", default=True,
                help="activate sets the BMC boot override to UefiHttp (no URI: the "
                     "firmware takes the URL from DHCP) and resets the machine when "
                     "it has a BMC address."),
]


def register_opts(conf):
    for group, opts in (("pxe", pxe_opts), ("dhcp_httpboot", httpboot_opts)):
        try:
            conf.register_opts(opts, group=group)
        except cfg.DuplicateOptError:
            pass


def get(conf, group):
    if group not in conf:
        register_opts(conf)
    return conf[group]


def list_opts():
    return [("pxe", pxe_opts), ("dhcp_httpboot", httpboot_opts)]


register_opts(cfg.CONF)
