"""The contract of a DHCP backend: host entries on one real DHCP server.

A boot interface that needs DHCP answers describes them server-neutrally as
:class:`HostEntry` objects (one per NIC) carrying :class:`DhcpOption` objects,
and hands them to a backend by machine and interface name. The backend turns
them into its server's configuration and makes the server use it.

Rules every backend follows:

- It owns only what it wrote (files with its prefix, reservations it marked) and
  never rewrites the operator's configuration; the operator includes metalboot's
  files once (see ``doc/boot-interfaces/dhcp.rst``).
- Every method is idempotent and safe to repeat after a crash between any two
  of its steps: ``ensure_host_entries`` with the same arguments changes nothing
  the second time, ``remove_host_entries`` succeeds when there is nothing to
  remove.
- The entries of one (machine, interface) pair replace that pair's previous
  entries as a whole; the entries of the machine's other interfaces (during a
  migration both the old and the new interface have entries) stay.
- Failures raise :class:`DhcpBackendError` (a
  :class:`~metalboot_framework.exceptions.BootInterfaceError`) naming the
  server, the file or socket and the configuration option involved;
  :meth:`DhcpBackend.validate` raises
  :class:`~metalboot_framework.exceptions.ValidationFailed`.
"""

import abc
import dataclasses
import enum
import ipaddress
import re
from typing import FrozenSet, Optional, Sequence, Tuple

from metalboot_framework.exceptions import BootInterfaceError


class DhcpBackendError(BootInterfaceError):
    """A DHCP backend could not write its entries or make the server use them."""


class Match(str, enum.Enum):
    """A property of the asking client that an option can depend on.

    Backends map each to their server's syntax (dnsmasq tags, Kea classes); an
    option with several matches is sent only when all of them hold.
    """

    IPXE = "ipxe"                  # iPXE: user class "iPXE" (v4 option 77) or option 175
    NOT_IPXE = "not-ipxe"          # any client but iPXE (firmware PXE, UEFI)
    ARCH_BIOS = "arch-bios"        # client architecture (option 93) 0: x86 BIOS
    ARCH_EFI_X64 = "arch-efi-x64"  # option 93 7 or 9: x86-64 UEFI
    ARCH_EFI_ARM64 = "arch-efi-arm64"  # option 93 11: ARM64 UEFI
    HTTP_CLIENT = "http-client"    # vendor class HTTPClient (v4 option 60, v6 option 16/343)


@dataclasses.dataclass(frozen=True)
class DhcpOption:
    """One option of an answer.

    ``value`` is the text form (a URL, a file name, comma-separated addresses);
    with ``hex=True`` it is the raw option payload in hexadecimal.
    ``always_send``: send even when the client did not request the option (a
    backend that cannot do so for a per-host option raises
    :class:`DhcpBackendError` from ``ensure_host_entries``).
    """

    code: int
    value: str
    version: int = 4
    hex: bool = False
    when: FrozenSet[Match] = frozenset()
    always_send: bool = False

    def __post_init__(self):
        if self.version not in (4, 6):
            raise ValueError(f"DHCP option {self.code}: version must be 4 or 6")
        if not 0 < self.code < (255 if self.version == 4 else 65535):
            raise ValueError(f"DHCPv{self.version} option code {self.code} out of range")
        if self.hex and not re.fullmatch(r"(?:[0-9A-Fa-f]{2})+", self.value):
            raise ValueError(f"DHCP option {self.code}: value {self.value!r} is not hex")
        object.__setattr__(self, "when", frozenset(Match(m) for m in self.when))


@dataclasses.dataclass(frozen=True)
class HostEntry:
    """What one NIC of a machine is answered.

    A DHCPv4 server identifies the NIC by ``mac``; a DHCPv6 server by ``duid``
    when set, else by ``mac`` (as hardware address). The addresses are
    reserved where the backend can do so safely (see each backend).
    """

    mac: str
    duid: Optional[str] = None
    ipv4_address: Optional[str] = None
    ipv6_address: Optional[str] = None
    options: Tuple[DhcpOption, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "mac", normalize_mac(self.mac))
        if self.duid is not None:
            object.__setattr__(self, "duid", normalize_duid(self.duid))
        if self.ipv4_address is not None:
            ipaddress.IPv4Address(self.ipv4_address)
        if self.ipv6_address is not None:
            ipaddress.IPv6Address(self.ipv6_address)
        object.__setattr__(self, "options", tuple(self.options))

    def options_for(self, version):
        return tuple(o for o in self.options if o.version == version)

    def to_dict(self):
        """The entry as JSON data: how it is stored and travels to the agents."""
        return {"mac": self.mac, "duid": self.duid, "ipv4_address": self.ipv4_address,
                "ipv6_address": self.ipv6_address,
                "options": [{"code": o.code, "value": o.value, "version": o.version,
                             "hex": o.hex, "when": sorted(m.value for m in o.when),
                             "always_send": o.always_send} for o in self.options]}

    @classmethod
    def from_dict(cls, data):
        """The entry :meth:`to_dict` made; ValueError/KeyError/TypeError if malformed."""
        return cls(mac=data["mac"], duid=data.get("duid"),
                   ipv4_address=data.get("ipv4_address"),
                   ipv6_address=data.get("ipv6_address"),
                   options=tuple(DhcpOption(code=int(o["code"]), value=str(o["value"]),
                                            version=int(o.get("version", 4)),
                                            hex=bool(o.get("hex")),
                                            when=frozenset(o.get("when") or ()),
                                            always_send=bool(o.get("always_send")))
                                 for o in data.get("options") or ()))


@dataclasses.dataclass(frozen=True)
class OwnedEntry:
    """One (machine, interface) pair's entries as found on the server side."""

    machine_id: str
    interface: str
    identifiers: Tuple[str, ...]   # e.g. ("mac:52:54:00:aa:bb:01", "duid:00:03:...")
    location: str                  # the file that holds them


_MAC = re.compile(r"^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$")
_DUID = re.compile(r"^[0-9a-f]{2}(?::[0-9a-f]{2}){1,129}$")


def normalize_mac(mac):
    """``52-54-00-AA-BB-01`` → ``52:54:00:aa:bb:01``; ValueError when malformed."""
    text = str(mac).strip().lower().replace("-", ":")
    if re.fullmatch(r"[0-9a-f]{12}", text):
        text = ":".join(text[i:i + 2] for i in range(0, 12, 2))
    if not _MAC.fullmatch(text):
        raise ValueError(f"malformed MAC address {mac!r}")
    return text


def normalize_duid(duid):
    """A DUID as colon-separated lower-case hex bytes; ValueError when malformed."""
    text = str(duid).strip().lower().replace("-", ":")
    if ":" not in text:
        if len(text) % 2 or not re.fullmatch(r"[0-9a-f]+", text):
            raise ValueError(f"malformed DUID {duid!r}")
        text = ":".join(text[i:i + 2] for i in range(0, len(text), 2))
    if not _DUID.fullmatch(text):
        raise ValueError(f"malformed DUID {duid!r}")
    return text


class DhcpBackend(abc.ABC):
    """Base class of every DHCP backend (entry-point namespace ``metalboot.dhcp_backends``).

    One instance serves a whole process and is shared by threads: methods take
    their own locks. Configuration is read from ``self.conf`` on every call, so
    a changed option takes effect without a new instance.
    """

    #: Set by the loader from the entry-point name.
    name: str = ""

    #: DHCP versions this backend's server answers (4, 6 or both).
    ip_versions: FrozenSet[int] = frozenset()

    #: The :class:`Match` conditions options may carry with this backend.
    supported_matches: FrozenSet[Match] = frozenset()

    def __init__(self, conf):
        self.conf = conf

    @abc.abstractmethod
    def validate(self) -> None:
        """Check that the backend can work now; change nothing.

        Directories and files it writes exist and are writable, the server's
        control channel (socket, pid file) is reachable where one is
        configured. Raises
        :class:`~metalboot_framework.exceptions.ValidationFailed` whose message
        and ``fields`` name the configuration option (``[group] option``) at
        fault.
        """

    @abc.abstractmethod
    def ensure_host_entries(self, machine_id: str, interface: str,
                            entries: Sequence[HostEntry]) -> bool:
        """Make the server answer ``machine_id``'s NICs as ``entries`` say, for ``interface``.

        Replaces what the pair (``machine_id``, ``interface``) had before;
        leaves other interfaces' entries of the machine alone. Writes
        atomically and makes the server pick up the change (inotify, reload).
        Returns ``True`` when something changed, ``False`` when the server had
        exactly these entries already. Options of a DHCP version this backend
        does not serve are ignored; an option it cannot express raises
        :class:`DhcpBackendError`.
        """

    @abc.abstractmethod
    def remove_host_entries(self, machine_id: str, interface: Optional[str] = None) -> bool:
        """Stop answering for ``machine_id`` (only for ``interface`` when given).

        After it returns, the server no longer gives those entries' options to
        the machine's NICs. Returns ``True`` when something was removed.
        """

    def apply_host_entries(self, changes: Sequence[Tuple[str, str, Optional[Sequence[
            HostEntry]]]]) -> bool:
        """Apply many machines' changes: ``(machine_id, interface, entries)``,
        ``entries`` empty or None to remove that pair's entries. As the calls
        of :meth:`ensure_host_entries` and :meth:`remove_host_entries` one by
        one (the default); a backend whose server reloads everything on a change
        overrides it to reload once. Returns whether something changed."""
        changed = False
        for machine_id, interface, entries in changes:
            if entries:
                changed |= bool(self.ensure_host_entries(machine_id, interface, entries))
            else:
                changed |= bool(self.remove_host_entries(machine_id, interface))
        return changed

    @abc.abstractmethod
    def list_host_entries(self, machine_id: Optional[str] = None) -> Sequence[OwnedEntry]:
        """What this backend owns on its server (of ``machine_id`` when given)."""

    def check_entries(self, entries):
        """Raise DhcpBackendError for an option this backend cannot express."""
        for entry in entries:
            for option in entry.options:
                if option.version not in self.ip_versions:
                    continue
                unsupported = option.when - self.supported_matches
                if unsupported:
                    raise DhcpBackendError(
                        f"DHCP backend {self.name}: option {option.code} depends on "
                        f"{', '.join(sorted(m.value for m in unsupported))}, which this "
                        f"backend cannot match")
