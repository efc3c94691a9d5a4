"""[dhcp], [dnsmasq], [kea]: the DHCP servers metalboot writes host entries to.

The backends (``metalboot_framework.dhcp``) own only files they wrote; the
operator's server configuration includes them once, as shown in
``doc/boot-interfaces/dhcp.rst``.
"""

from oslo_config import cfg

dhcp_opts = [
    cfg.ListOpt("ipv4_dns_servers", default=[],
                help="DNS servers (IPv4 addresses) given in DHCPv4 option 6 by "
                     "boot interfaces that send DNS with their boot answer."),
    cfg.ListOpt("ipv6_dns_servers", default=[],
                help="DNS servers (IPv6 addresses) given in DHCPv6 option 23 with a "
                     "UEFI HTTP boot answer; the firmware resolves the boot URL's "
                     "host name with them."),
    cfg.FloatOpt("apply_timeout", default=60.0, min=1.0,
                 help="Seconds a prepare or clean-up step of an interface that answers "
                      "by DHCP (pxe, dhcp-httpboot) waits for the boot agents of the "
                      "machine's partition to apply its DHCP entries to their DHCP "
                      "servers; then the step fails naming the agents that did not."),
    cfg.FloatOpt("agent_timeout", default=30.0, min=10.0,
                 help="A boot agent that has not reported its DHCP servers' state for "
                      "this many seconds is not waited for (agents report every 5 "
                      "seconds). A partition with no agent reporting cannot be prepared "
                      "for a DHCP interface."),
]

dnsmasq_opts = [
    cfg.StrOpt("hostsdir", default="$state_path/dnsmasq/hosts",
               help="Directory dnsmasq reads with --dhcp-hostsdir. metalboot writes "
                    "one file per machine into it (named with file_prefix); dnsmasq "
                    "picks new and changed files up by inotify."),
    cfg.StrOpt("optsdir", default="$state_path/dnsmasq/opts",
               help="Directory dnsmasq reads with --dhcp-optsdir; one file per "
                    "machine and boot interface."),
    cfg.StrOpt("file_prefix", default="metalboot-",
               help="Prefix of every file metalboot writes into hostsdir and "
                    "optsdir; files without it are never touched."),
    cfg.StrOpt("ipxe_tag", default="ipxe",
               help="dnsmasq tag the operator's configuration sets for iPXE clients "
                    "(dhcp-userclass=set:ipxe,iPXE and dhcp-match=set:ipxe,175)."),
    cfg.StrOpt("efi_x64_tag", default="efi64",
               help="dnsmasq tag set for x86-64 UEFI clients "
                    "(dhcp-match=set:efi64,option:client-arch,7 and ...,9)."),
    cfg.StrOpt("efi_arm64_tag", default="efiarm64",
               help="dnsmasq tag set for ARM64 UEFI clients "
                    "(dhcp-match=set:efiarm64,option:client-arch,11)."),
    cfg.StrOpt("bios_tag", default="bios",
               help="dnsmasq tag set for x86 BIOS clients "
                    "(dhcp-match=set:bios,option:client-arch,0)."),
    cfg.StrOpt("http_client_tag", default="efihttp",
               help="dnsmasq tag set for UEFI HTTP boot clients "
                    "(dhcp-vendorclass=set:efihttp,HTTPClient)."),
    cfg.StrOpt("managed_tag", default="metalboot",
               help="Tag every host line metalboot writes sets, plus "
                    "<managed_tag>-<boot interface> for each interface the machine "
                    "has entries for; the operator's configuration keys "
                    "dhcp-option-force lines on them (e.g. option 60 HTTPClient "
                    "for metalboot-dhcp-httpboot)."),
    cfg.StrOpt("pid_file",
               help="dnsmasq's pid file. When set, the files that mark a removed "
                    "machine (dnsmasq keeps removed host lines until it restarts) "
                    "are deleted once dnsmasq has restarted after they were written."),
    cfg.StrOpt("lease_file",
               help="dnsmasq's lease file (--dhcp-leasefile, e.g. "
                    "/var/lib/misc/dnsmasq.leases), readable by metalboot. When set, a "
                    "fetch of boot.ipxe by MAC from the IPv4 address dnsmasq leased to "
                    "one of the machine's MACs proves its boot ([artifacts] "
                    "boot_network_prefixes)."),
]

kea_opts = [
    cfg.StrOpt("include_file", default="$state_path/kea/metalboot-reservations6.json",
               help="File holding metalboot's DHCPv6 host reservations, which the "
                    "operator's kea-dhcp6.conf includes inside a \"reservations\" "
                    "list with <?include \"...\"?>. Its directory must be writable; "
                    "Kea must be able to read it."),
    cfg.StrOpt("reload", default="control-socket",
               choices=[("control-socket", "send config-reload over control_socket"),
                        ("signal", "send SIGHUP to the process in pid_file"),
                        ("none", "only write the file (someone else reloads Kea)")],
               help="How Kea is made to re-read its configuration after a change."),
    cfg.StrOpt("control_socket",
               help="Path of Kea's DHCPv6 unix control socket (\"control-socket\" "
                    "in kea-dhcp6.conf); needed for reload = control-socket."),
    cfg.StrOpt("pid_file",
               help="Kea's DHCPv6 pid file (in KEA_PIDFILE_DIR, e.g. "
                    "/run/kea/kea-dhcp6.kea-dhcp6.pid); needed for reload = signal."),
    cfg.FloatOpt("control_timeout", default=10.0, min=0.1,
                 help="Seconds to wait for Kea's answer on the control socket."),
    cfg.StrOpt("lease_file",
               help="Kea's DHCPv6 memfile lease file (\"lease-database\": {\"type\": "
                    "\"memfile\", \"persist\": true, \"name\": ...}, e.g. "
                    "/var/lib/kea/kea-leases6.csv), readable by metalboot; its "
                    "cleanup's .1 and .2 files are read too. When set, a fetch of "
                    "boot.ipxe by MAC from the IPv6 address Kea leased to one of the "
                    "machine's MACs proves its boot ([artifacts] boot_network_prefixes)."),
    cfg.BoolOpt("reserve_addresses", default=True,
                help="Put a NIC's ipv6_address into its reservation (ip-addresses). "
                     "Turn off when the include sits where the addresses would be "
                     "outside the subnet, or when addresses come from SLAAC only."),
]


def register_opts(conf):
    conf.register_opts(dhcp_opts, group="dhcp")
    conf.register_opts(dnsmasq_opts, group="dnsmasq")
    conf.register_opts(kea_opts, group="kea")


def list_opts():
    return [("dhcp", dhcp_opts), ("dnsmasq", dnsmasq_opts), ("kea", kea_opts)]
