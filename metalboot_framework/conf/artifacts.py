"""[artifacts]: boot scripts and files that booting machines download."""

import ipaddress

from oslo_config import cfg


def parse_prefix_entry(text):
    """``PREFIX`` or ``PARTITION=PREFIX`` -> (partition or None, network)."""
    partition, _, prefix = text.strip().rpartition("=")
    try:
        network = ipaddress.ip_network(prefix.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not PREFIX or PARTITION=PREFIX (e.g. "
                         f"fra-1=2001:db8:1::/64 or 10.0.0.0/24)") from None
    return partition.strip() or None, network


def prefix_entry(text):
    """oslo.config item type of ``boot_network_prefixes``: the entry, checked."""
    parse_prefix_entry(text)
    return text.strip()


opts = [
    cfg.StrOpt("template_dir",
               help="Directory searched before the built-in templates, so that a "
                    "deployment can override boot.ipxe.j2 and friends."),
    cfg.StrOpt("boot_script_template", default="boot.ipxe.j2",
               help="Template rendered into each machine's boot.ipxe."),
    cfg.StrOpt("cache_dir", default="$state_path/artifacts",
               help="Directory for built artifacts (ISOs), named by content hash."),
    cfg.ListOpt("boot_network_prefixes", default=[],
                item_type=prefix_entry,
                help="Prefixes of the boot network, each PREFIX (every partition) or "
                     "PARTITION=PREFIX (e.g. fra-1=2001:db8:1::/64, 10.1.0.0/24). A fetch "
                     "of boot.ipxe by MAC from an address in a prefix of the machine's "
                     "partition proves the machine's boot, as one from the EUI-64 "
                     "(SLAAC) address of one of its MACs, one of its registered NIC "
                     "addresses or a DHCP lease of one of its MACs ([dnsmasq] "
                     "lease_file, [kea] lease_file) does; from any other address it is recorded as "
                     "unverified and does not finish a migration step. Loopback is bound "
                     "only by a prefix that is itself loopback (never by a NIC address, "
                     "a lease or a catch-all such as ::/0): list 127.0.0.0/8 and "
                     "::1/128 only where the machines really fetch from this host "
                     "(tests, demos)."),
    cfg.IntOpt("max_unverified_evidence", default=20, min=1,
               help="Unverified boot evidence rows (fetches and boot reports with a "
                    "machine's unbound token, which anyone who knows a MAC can cause) "
                    "kept per machine: the newest; older ones are deleted as new ones "
                    "come, and counted in metalboot_unverified_evidence_dropped_total."),
]


def register_opts(conf):
    conf.register_opts(opts, group="artifacts")


def list_opts():
    return [("artifacts", opts)]
