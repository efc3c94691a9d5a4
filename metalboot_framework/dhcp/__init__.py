"""DHCP backends: host entries for real DHCP servers (dnsmasq, Kea, a site's own).

Boot interfaces that need DHCP answers build
:class:`~metalboot_framework.dhcp.base.HostEntry` objects and hand them to a
backend from :func:`get_backend`; see :mod:`.base` for the contract,
:mod:`.dnsmasq` and :mod:`.kea` for the two built-in backends.
"""

from metalboot_framework.dhcp.base import (DhcpBackend, DhcpBackendError, DhcpOption,  # noqa: F401
                                           HostEntry, Match, OwnedEntry, normalize_duid,
                                           normalize_mac)
from metalboot_framework.dhcp.loader import NAMESPACE, clear_cache, get_backend  # noqa: F401
