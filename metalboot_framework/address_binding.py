"""Whether a fetch of boot.ipxe by MAC came from an address its machine can have.

``GET /boot/mac/<mac>/<interface>/boot.ipxe`` carries no secret: anyone on the
boot network who knows (or guesses) a MAC can ask for it. Such a fetch proves
the machine's boot only when it comes from an address the machine can have on
that path (see ``doc/architecture.rst``, "Threat model"):

- ``eui64``: an IPv6 address whose interface identifier is the modified
  EUI-64 of one of the machine's MACs -- what SLAAC gives it (iPXE's
  ``ifconf -c ipv6`` always forms its addresses so), under any prefix;
- ``nic-address``: the ``ipv4_address`` or ``ipv6_address`` registered for
  one of its NICs (what a DHCP reservation hands it, e.g. Kea's with
  ``[kea] reserve_addresses``);
- ``dhcp-lease``: an IPv4 address dnsmasq leased to one of its MACs, read
  from dnsmasq's lease file (``[dnsmasq] lease_file``), or an IPv6 address
  Kea leased to one of them by DHCPv6, read from Kea's memfile lease file
  (``[kea] lease_file``);
- ``prefix``: an address in a prefix ``[artifacts] boot_network_prefixes``
  gives the machine's partition (or every partition).

Anything else is unbound: the fetch is served, but recorded as
``unverified`` evidence with a script whose token proves nothing either
(:mod:`metalboot_framework.tokens`).

Loopback (``127.0.0.0/8``, ``::1``) is bound only by a configured prefix
that is itself loopback (``127.0.0.0/8``, ``::1/128``: tests and demos that
play the machines on the server's host): never by a NIC address or lease
that names it, nor by a catch-all prefix such as ``::/0``. Any process on the
server's host, a reverse proxy in front of it included, fetches from
loopback; that is no machine's boot.
"""

import ipaddress

from metalboot_framework.conf.artifacts import parse_prefix_entry
from metalboot_framework.dhcp.dnsmasq import DnsmasqLeases
from metalboot_framework.dhcp.kea import KeaLeases

_LOW64 = (1 << 64) - 1


def eui64_interface_id(mac):
    """The modified EUI-64 interface identifier (RFC 4291, appendix A) of ``mac``."""
    b = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    return int.from_bytes(bytes([b[0] ^ 0x02]) + b[1:3] + b"\xff\xfe" + b[3:6], "big")


def client_ip(address):
    """The client's address as an ip_address (an IPv4-mapped IPv6 address as
    IPv4, without a zone), or None if it is none."""
    try:
        ip = ipaddress.ip_address(str(address).split("%", 1)[0])
    except ValueError:
        return None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class Binding(str):
    """The name of a binding; ``lease``: for ``dhcp-lease``, the lease that
    made it (address, mac, expiry, server), kept with the evidence."""

    lease = None

    @classmethod
    def of_lease(cls, ip, mac, expiry, server):
        binding = cls("dhcp-lease")
        binding.lease = {"address": str(ip), "mac": mac, "expires": int(expiry),
                         "server": server}
        return binding


class AddressBinding:
    """The rule above, from the configuration (one per process)."""

    def __init__(self, conf):
        self.prefixes = [parse_prefix_entry(entry)
                         for entry in conf.artifacts.boot_network_prefixes]
        self.leases = [reader(path) for reader, path in (
            (DnsmasqLeases, conf.dnsmasq.lease_file), (KeaLeases, conf.kea.lease_file))
            if path]

    def bound_by(self, machine, client_address):
        """How ``client_address`` is bound to ``machine`` (a MachineInfo):
        ``eui64``, ``nic-address``, ``prefix`` or ``dhcp-lease``; None if it is not."""
        ip = client_ip(client_address)
        if ip is None:
            return None
        if ip.is_loopback:
            return "prefix" if self.in_prefix(machine, ip, loopback=True) else None
        nics = machine.nics
        if ip.version == 6 and any(int(ip) & _LOW64 == eui64_interface_id(nic.mac)
                                   for nic in nics):
            return "eui64"
        for nic in nics:
            for registered in (nic.ipv4_address, nic.ipv6_address):
                if registered and client_ip(registered) == ip:
                    return "nic-address"
        if self.in_prefix(machine, ip):
            return "prefix"
        for leases in self.leases:
            held = leases.lease_of([nic.mac for nic in nics], ip)
            if held is not None:
                return Binding.of_lease(ip, held[0], held[1], leases.server)
        return None

    def in_prefix(self, machine, ip, loopback=False):
        """Whether a configured prefix of the machine's partition (or of every
        partition) holds ``ip``; with ``loopback``, only a loopback prefix."""
        return any(partition in (None, machine.partition_id)
                   and ip.version == network.version and ip in network
                   and (network.is_loopback or not loopback)
                   for partition, network in self.prefixes)
