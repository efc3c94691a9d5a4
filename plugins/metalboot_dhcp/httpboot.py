"""``dhcp-httpboot``: UEFI HTTP boot whose URL comes from DHCP, not from the BMC.

DHCPv6 (``[dhcp_httpboot] ipv6_backend``, Kea): a reservation per NIC (by DUID,
else by MAC) with option 59 = the machine's own URL of the boot artifact,
option 16 = vendor class 343 ``HTTPClient`` (always sent; EDK2 ignores answers
without it) and option 23 = ``[dhcp] ipv6_dns_servers``.

DHCPv4 (``ipv4_backend``, dnsmasq), for NICs with an ``ipv4_address``: to
vendor class ``HTTPClient`` option 60 ``HTTPClient`` + option 67 = the same
URL; to iPXE the machine's boot.ipxe URL.

The boot artifact (``[dhcp_httpboot] boot_artifact``, default ``ipxe.efi``) is
served per machine by :meth:`get_artifact` from ``ipxe_efi_path``. iPXE
(trixie's build or newer) first fetches ``autoexec.ipxe`` from the directory
it was loaded from: the machine's own, so :meth:`get_artifact` answers it with
a script that configures the NIC (SLAAC first) and chains the machine's
boot.ipxe. That second stage needs no DHCP at all, so it works on an IPv6-only
boot network where Kea 2.2 could not tell iPXE from the firmware (a
reservation's options go to every packet of the host). An older iPXE DHCPs
again as user class iPXE and gets the boot.ipxe URL over DHCPv4. A fetch of
ipxe.efi or boot.ipxe under this interface's URLs is evidence. activate sets the BMC boot
override ``UefiHttp`` without a URI and resets the machine.
"""

import os

from metalboot_framework.boot_interface import Artifact, Capability, Property
from metalboot_framework.dhcp import DhcpOption, HostEntry, Match
from metalboot_framework.exceptions import ValidationFailed
from metalboot_dhcp import conf as plugin_conf
from metalboot_dhcp.base import DhcpBootInterface

#: What iPXE fetches from the directory it was loaded from before anything else.
AUTOEXEC = "autoexec.ipxe"

#: DHCPv6 option 16 payload: enterprise 343, one vendor-class item "HTTPClient".
HTTP_CLIENT_VENDOR_CLASS = "00000157000A48545450436C69656E74"


class DhcpHttpBootInterface(DhcpBootInterface):
    """UEFI HTTP boot with the URL from DHCPv6 option 59 (Kea) / DHCPv4 option 67 (dnsmasq)."""

    capabilities = frozenset({Capability.NEEDS_DHCP, Capability.UEFI_ONLY, Capability.IPV4,
                              Capability.IPV6, Capability.LAYER3})
    conf_group = "dhcp_httpboot"
    bmc_target = "UefiHttp"
    evidence_artifacts = ("ipxe.efi", "boot.ipxe")

    def get_properties(self):
        props = self.common_properties()
        props["boot_mode"] = Property("Must be uefi.", required=True)
        return props

    def dhcp_backends(self, conf):
        opts = plugin_conf.get(conf, self.conf_group)
        return {option: self._backend(conf, option)
                for option in ("ipv6_backend", "ipv4_backend") if getattr(opts, option)}

    def validate(self, task):
        if (task.machine.boot_mode or "").lower() != "uefi":
            raise ValidationFailed(f"machine {task.machine.id}: {self.name} needs boot_mode "
                                   f"uefi, not {task.machine.boot_mode}",
                                   fields={"boot_mode": ["must be uefi"]})
        self.validate_nics(task)
        opts = self.options(task)
        if not opts.ipv4_backend and not opts.ipv6_backend:
            raise ValidationFailed(
                "[dhcp_httpboot] ipv4_backend and ipv6_backend are both empty",
                fields={"[dhcp_httpboot] ipv6_backend": ["required"]})
        if not opts.ipv6_backend and not any(n.ipv4_address for n in task.machine.nics):
            raise ValidationFailed(
                f"machine {task.machine.id} has no NIC with an ipv4_address and "
                f"[dhcp_httpboot] ipv6_backend is empty: nothing would answer it",
                fields={"nics": ["needs an ipv4_address without ipv6_backend"]})
        if not os.path.isfile(opts.ipxe_efi_path):
            raise ValidationFailed(
                f"[dhcp_httpboot] ipxe_efi_path: {opts.ipxe_efi_path} does not exist",
                fields={"[dhcp_httpboot] ipxe_efi_path": ["missing"]})

    def host_entries(self, task):
        opts = self.options(task)
        url = task.artifact_url(opts.boot_artifact)
        v6 = [DhcpOption(59, url, version=6),
              DhcpOption(16, HTTP_CLIENT_VENDOR_CLASS, version=6, hex=True, always_send=True)]
        dns6 = [a.strip() for a in task.conf.dhcp.ipv6_dns_servers if a.strip()]
        if dns6:
            v6.append(DhcpOption(23, ",".join(dns6), version=6))
        entries = []
        for nic in task.machine.nics:
            options = list(v6)
            if nic.ipv4_address and opts.ipv4_backend:
                options += [
                    DhcpOption(60, "HTTPClient", when={Match.HTTP_CLIENT}),
                    DhcpOption(67, url, when={Match.HTTP_CLIENT, Match.NOT_IPXE}),
                    DhcpOption(67, task.artifact_url("boot.ipxe"), when={Match.IPXE}),
                ]
                dns4 = [a.strip() for a in task.conf.dhcp.ipv4_dns_servers if a.strip()]
                if dns4:
                    options.append(DhcpOption(6, ",".join(dns4)))
            entries.append(HostEntry(mac=nic.mac, duid=nic.duid, ipv4_address=nic.ipv4_address,
                                     ipv6_address=nic.ipv6_address, options=tuple(options)))
        return entries


    def get_artifact(self, task, name):
        opts = self.options(task)
        if name == AUTOEXEC:
            return Artifact(content_type="text/plain",
                            content=autoexec_script(task, opts.ipxe_configurators).encode())
        if name != opts.boot_artifact:
            return None
        return Artifact(content_type="application/efi", path=opts.ipxe_efi_path)


def autoexec_script(task, configurators):
    """iPXE's second stage without DHCP: each NIC in turn, each configurator in
    turn, until one chains the machine's boot.ipxe."""
    url = task.artifact_url("boot.ipxe")
    tries = "".join(f"ifconf -c {c} net${{idx}} && chain {url} ||\n" for c in configurators)
    return ("#!ipxe\n"
            f"# metalboot dhcp-httpboot: machine {task.machine.id}\n"
            "set idx:int32 0\n"
            ":next\n"
            "isset ${net${idx}/mac} || goto failed\n"
            f"{tries}"
            "inc idx\n"
            "goto next\n"
            ":failed\n"
            "echo metalboot: no network interface could fetch its boot.ipxe, "
            "rebooting in 60 s\n"
            "sleep 60\n"
            "reboot\n")
