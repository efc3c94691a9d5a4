"""[redfish]: options of the Redfish boot interfaces."""

from oslo_config import cfg

GROUP = "redfish"

opts = [
    cfg.StrOpt("ipxe_efi_path", default="/usr/lib/ipxe/ipxe.efi",
               help="The iPXE EFI binary put on boot media as /EFI/BOOT/BOOTX64.EFI. "
                    "It must run autoexec.ipxe from the medium it booted from: "
                    "Debian trixie's ipxe package (2025) does, Debian 12's (2019) "
                    "does not. Use the full ipxe.efi, not snponly.efi (which drives "
                    "only the device it was loaded from, the virtual CD)."),
    cfg.ListOpt("ipxe_configurators", default=["ipv6"],
                help="iPXE ifconf configurators tried, in order, on each network "
                     "interface before chaining boot.ipxe (ipv6 = SLAAC, no DHCP; "
                     "add dhcp for a DHCP fallback)."),
    cfg.StrOpt("iso_volume_label", default="METALBOOT",
               help="ISO 9660 volume label of the built iPXE ISO."),
    cfg.StrOpt("ipxe_script_template", default="autoexec.ipxe.j2",
               help="Template of the autoexec.ipxe on the ISO; looked up in "
                    "[artifacts] template_dir first, then in the plugin."),
    cfg.StrOpt("http_boot_artifact", default="iso", choices=["iso", "efi"],
               help="What redfish-http-url puts in HttpBootUri: 'iso' = the "
                    "machine's URL of the iPXE ISO (UEFI HTTP boot mounts it as a "
                    "RAM disk and runs iPXE, which runs the ISO's autoexec.ipxe); "
                    "'efi' = the machine's URL of the bare iPXE EFI binary, for "
                    "firmware that cannot boot ISOs over HTTP (iPXE then needs "
                    "DHCP to find its script)."),
    cfg.URIOpt("http_boot_base_url", schemes=["http", "https"],
               help="Base URL of the HttpBootUri that redfish-http-url gives the BMC, "
                    "in place of [api] public_url, e.g. https://boot.example:8443 "
                    "for a TLS front of the boot server, so that the firmware "
                    "fetches over HTTPS (it must trust the server's CA, see "
                    "doc/metal-hammer.rst) while iPXE and the booted system keep "
                    "public_url. Unset: public_url."),
    cfg.BoolOpt("wait_for_power_on", default=True,
                help="activate waits until the BMC reports the system On after the "
                     "reset ([bmc] power_timeout)."),
]


def register_opts(conf):
    try:
        conf.register_opts(opts, group=GROUP)
    except cfg.DuplicateOptError:
        pass


def get(conf):
    """The [redfish] group of ``conf``, registering it on first use."""
    if GROUP not in conf:
        register_opts(conf)
    return conf[GROUP]


def list_opts():
    return [(GROUP, opts)]


register_opts(cfg.CONF)
