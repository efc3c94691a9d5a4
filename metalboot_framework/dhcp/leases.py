"""A DHCP server's lease file, read again when it changed: which addresses it
has leased to which MACs (the ``dhcp-lease`` binding of
:mod:`metalboot_framework.address_binding`).

A lease found in what was read at most :data:`RECHECK` seconds ago costs no
system call, so that a boot storm's fetches do not each stat a file the server
rewrites with every lease; an address not found there makes the files be
looked at (and read again if one changed) at once, so a lease granted a
moment ago is still seen. The readers of each server's format are next to its
backend (:class:`~metalboot_framework.dhcp.dnsmasq.DnsmasqLeases`,
:class:`~metalboot_framework.dhcp.kea.KeaLeases`).
"""

import ipaddress
import logging
import os
import threading
import time

LOG = logging.getLogger(__name__)

#: seconds for which a lease found in the files read last is trusted without a look
RECHECK = 1.0


def lease_ip(text):
    """An address as a lease file writes it, or None."""
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


class LeaseFile:
    """Leases ``{mac: [(ip_address, expiry epoch or 0 for never)]}`` read by
    :meth:`parse` from :meth:`paths`, cached by the files' identity."""

    #: the IP version the server leases (no look at the files for another)
    ip_version = None
    server = "DHCP server"

    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()
        self._stamp, self._leases = None, {}
        self._checked_at = float("-inf")  # time.monotonic() of the last look

    def paths(self):
        """The files holding the leases, oldest first."""
        return [self.path]

    def parse(self, files):
        """``{mac: [(ip, expiry)]}`` from the open ``files`` (oldest first)."""
        raise NotImplementedError

    def holds(self, macs, ip, now=None):
        """Whether one of ``macs`` holds an unexpired lease of ``ip``."""
        return self.lease_of(macs, ip, now) is not None

    def lease_of(self, macs, ip, now=None):
        """``(mac, expiry)`` of the unexpired lease of ``ip`` one of ``macs``
        holds, or None."""
        if ip.version != self.ip_version:
            return None
        now = time.time() if now is None else now
        fresh = time.monotonic() - self._checked_at < RECHECK
        return fresh and self._lease(self._leases, macs, ip, now) or \
            self._lease(self._current(), macs, ip, now)

    @staticmethod
    def _lease(leases, macs, ip, now):
        for mac in macs:
            for leased, expiry in leases.get(mac.lower(), ()):
                if leased == ip and (expiry == 0 or expiry > now):
                    return mac.lower(), expiry
        return None

    def _current(self):
        stamp = []
        for path in self.paths():
            try:
                st = os.stat(path)
            except OSError:
                continue
            stamp.append((path, st.st_ino, st.st_mtime_ns, st.st_size))
        stamp = tuple(stamp)
        self._checked_at = time.monotonic()
        with self._lock:
            if stamp != self._stamp:
                self._leases, self._stamp = self._read([s[0] for s in stamp]), stamp
            return self._leases

    def _read(self, paths):
        opened = []
        try:
            for path in paths:
                try:
                    opened.append(open(path, encoding="ascii", errors="replace"))
                except OSError as exc:
                    LOG.warning("cannot read the %s lease file %s: %s", self.server, path,
                                exc.strerror)
            return self.parse(opened)
        finally:
            for f in opened:
                f.close()
