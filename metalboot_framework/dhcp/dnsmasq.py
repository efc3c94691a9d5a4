"""DHCPv4 host entries for dnsmasq, through --dhcp-hostsdir and --dhcp-optsdir.

What metalboot writes (only files whose names start with ``[dnsmasq]
file_prefix``; the operator's configuration is never touched):

- ``<optsdir>/<prefix><machine>.<interface>``: the options of one machine and
  boot interface, each line keyed on a tag unique to that content
  (``mb-<hash>``) plus the match tags of the operator's configuration
  (``tag:!ipxe,tag:efi64``...).
- ``<hostsdir>/<prefix><machine>``: one ``dhcp-host`` line per MAC that sets
  the content tags of all the machine's interfaces, ``<managed_tag>`` and
  ``<managed_tag>-<interface>``.

How changes reach dnsmasq, and why it is done this way (dnsmasq 2.90):

- New and changed files in both directories are read by inotify; no signal is
  sent. SIGHUP is never used: dnsmasq crashes on the next request after a
  SIGHUP once a client has matched a host line with ``set:`` tags.
- dnsmasq only *adds* what it reads from those directories: a deleted or
  rewritten file's old lines stay in memory until dnsmasq restarts. Of several
  host lines for one MAC the one read last wins. So a change writes options
  under a new content tag first, then rewrites the host line to set the new
  tag; the old options stay in memory but no client carries their tag any
  more. Removal rewrites the host file into a *tombstone* (the MACs with a tag
  nothing uses) instead of deleting it; tombstones are deleted once dnsmasq has
  restarted after they were written (when ``[dnsmasq] pid_file`` is set).
- Host lines carry no IPv4 address: dnsmasq rejects a host line whose address
  another (even stale) line already has ("duplicate dhcp-host IP address"), so
  an address in the line would block every later change. Addresses come from
  the operator's dhcp-range.
- Options from an opts file cannot be forced (``dhcp-option-force``); an option
  that must be sent unrequested (option 60 ``HTTPClient``) belongs in the
  operator's configuration, keyed on ``tag:<managed_tag>-<interface>``.
"""

import contextlib
import hashlib
import json
import logging
import os
import re

from metalboot_framework.dhcp import files
from metalboot_framework.dhcp.base import (DhcpBackend, DhcpBackendError, Match, OwnedEntry)
from metalboot_framework.dhcp.leases import LeaseFile, lease_ip
from metalboot_framework.exceptions import ValidationFailed

LOG = logging.getLogger(__name__)

HEADER = "# metalboot: "
LOCK_NAME = ".metalboot.lock"
_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


def file_key(text):
    """A file-name-safe key for a machine id or interface name."""
    if _SAFE.fullmatch(text):
        return text
    return "h" + hashlib.sha256(text.encode()).hexdigest()[:32]


class DnsmasqBackend(DhcpBackend):
    """DHCPv4 through dnsmasq's --dhcp-hostsdir / --dhcp-optsdir (inotify, no SIGHUP)."""

    ip_versions = frozenset({4})
    supported_matches = frozenset(Match)

    @property
    def _c(self):
        return self.conf.dnsmasq

    # -- paths -------------------------------------------------------------------
    def _hosts_path(self, machine_id):
        return os.path.join(self._c.hostsdir, self._c.file_prefix + file_key(machine_id))

    def _opts_path(self, machine_id, interface):
        return os.path.join(self._c.optsdir, f"{self._c.file_prefix}{file_key(machine_id)}"
                                             f".{file_key(interface)}")

    def _match_tag(self, match):
        c = self._c
        return {
            Match.IPXE: f"tag:{c.ipxe_tag}",
            Match.NOT_IPXE: f"tag:!{c.ipxe_tag}",
            Match.ARCH_BIOS: f"tag:{c.bios_tag}",
            Match.ARCH_EFI_X64: f"tag:{c.efi_x64_tag}",
            Match.ARCH_EFI_ARM64: f"tag:{c.efi_arm64_tag}",
            Match.HTTP_CLIENT: f"tag:{c.http_client_tag}",
        }[match]

    # -- contract ----------------------------------------------------------------
    def validate(self):
        problems, fields = [], {}
        for option in ("hostsdir", "optsdir"):
            reason = files.check_writable_dir(getattr(self._c, option))
            if reason:
                problems.append(f"[dnsmasq] {option}: {reason}")
                fields[f"[dnsmasq] {option}"] = [reason]
        if self._c.pid_file:
            reason = self._check_pid_file()
            if reason:
                problems.append(f"[dnsmasq] pid_file: {reason}")
                fields["[dnsmasq] pid_file"] = [reason]
        if problems:
            raise ValidationFailed("dnsmasq backend unusable: " + "; ".join(problems),
                                   fields=fields)

    def _check_pid_file(self):
        try:
            with open(self._c.pid_file) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError) as exc:
            return f"cannot read a pid from {self._c.pid_file}: {exc}"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"dnsmasq (pid {pid} from {self._c.pid_file}) is not running"
        except PermissionError:
            pass
        return None

    def ensure_host_entries(self, machine_id, interface, entries):
        self.check_entries(entries)
        lines, macs = [], []
        for entry in entries:
            options = entry.options_for(4)
            if not options:
                continue
            if entry.mac not in macs:
                macs.append(entry.mac)
            for option in options:
                if option.always_send:
                    raise DhcpBackendError(
                        f"dnsmasq cannot force option {option.code} from --dhcp-optsdir; "
                        f"add dhcp-option-force=tag:{self._c.managed_tag}-{interface},"
                        f"{option.code},... to the dnsmasq configuration instead")
                lines.append(self._option_line(option))
        with self._locked():
            if not macs:
                return self._remove(machine_id, interface)
            lines = sorted(set(lines))
            tag = "mb-" + hashlib.sha256(
                json.dumps([machine_id, interface, macs, lines]).encode()).hexdigest()[:16]
            meta = {"machine": machine_id, "interface": interface, "tag": tag, "macs": macs}
            text = HEADER + json.dumps(meta, sort_keys=True) + "\n" + "".join(
                f"tag:{tag},{line}\n" for line in lines)
            # Options first: inert until a host line sets their tag.
            changed = files.atomic_write(self._opts_path(machine_id, interface), text)
            changed |= self._write_hosts(machine_id)
        if changed:
            LOG.info("dnsmasq: wrote %s entries of machine %s (%s)", interface, machine_id,
                     ", ".join(macs))
        return changed

    def remove_host_entries(self, machine_id, interface=None):
        with self._locked():
            changed = self._remove(machine_id, interface)
            self._purge_tombstones()
        if changed:
            LOG.info("dnsmasq: removed %s entries of machine %s", interface or "all",
                     machine_id)
        return changed

    def list_host_entries(self, machine_id=None):
        result = []
        for path, meta in self._opts_files(machine_id):
            result.append(OwnedEntry(machine_id=meta["machine"], interface=meta["interface"],
                                     identifiers=tuple(f"mac:{m}" for m in meta["macs"]),
                                     location=path))
        return sorted(result, key=lambda e: (e.machine_id, e.interface))

    # -- internals ---------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self):
        for option in ("hostsdir", "optsdir"):
            reason = files.check_writable_dir(getattr(self._c, option))
            if reason:
                raise DhcpBackendError(f"dnsmasq backend: [dnsmasq] {option}: {reason}")
        with files.locked(os.path.join(self._c.hostsdir, LOCK_NAME)):
            # Only under the lock: a concurrent writer's temporary file is not stale.
            files.remove_stale_temp_files(self._c.hostsdir, self._c.file_prefix)
            files.remove_stale_temp_files(self._c.optsdir, self._c.file_prefix)
            yield

    def _option_line(self, option):
        value = option.value
        if "\n" in value or "\r" in value:
            raise DhcpBackendError(f"dnsmasq: option {option.code} value contains a newline")
        if option.hex:
            value = ":".join(value[i:i + 2] for i in range(0, len(value), 2)).lower()
        elif "," in value and option.code in (66, 67):
            value = '"' + value.replace('"', '') + '"'
        tags = sorted(self._match_tag(m) for m in option.when)
        return ",".join(tags + [str(option.code), value])

    def _opts_files(self, machine_id=None):
        directory, prefix = self._c.optsdir, self._c.file_prefix
        wanted = None if machine_id is None else prefix + file_key(machine_id) + "."
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if not name.startswith(prefix) or (wanted and not name.startswith(wanted)):
                continue
            path = os.path.join(directory, name)
            meta = _read_header(path)
            if meta and "interface" in meta and (
                    machine_id is None or meta.get("machine") == machine_id):
                found.append((path, meta))
        return found

    def _write_hosts(self, machine_id, exclude=()):
        """Rewrite the machine's host file from its opts files (or a tombstone)."""
        path = self._hosts_path(machine_id)
        tags_by_mac = {}
        interfaces = {}
        for opts_path, meta in self._opts_files(machine_id):
            if opts_path in exclude:
                continue
            interfaces[meta["interface"]] = meta["tag"]
            for mac in meta["macs"]:
                tags_by_mac.setdefault(mac, []).extend(
                    [f"{self._c.managed_tag}-{meta['interface']}", meta["tag"]])
        if tags_by_mac:
            meta = {"machine": machine_id, "interfaces": interfaces, "removed": False}
            lines = [",".join([mac, f"set:{self._c.managed_tag}"]
                              + [f"set:{t}" for t in sorted(set(tags))])
                     for mac, tags in sorted(tags_by_mac.items())]
        else:
            old = _read_header(path)
            if old is None or old.get("removed"):
                return False
            macs = sorted(_macs_in(path))
            meta = {"machine": machine_id, "interfaces": {}, "removed": True}
            lines = [f"{mac},set:{self._c.managed_tag}-removed" for mac in macs]
        text = HEADER + json.dumps(meta, sort_keys=True) + "\n" + "".join(
            line + "\n" for line in lines)
        return files.atomic_write(path, text)

    def _remove(self, machine_id, interface):
        victims = {p for p, m in self._opts_files(machine_id)
                   if interface is None or m["interface"] == interface}
        # Move the host line off the victims' tags first, then drop their options.
        changed = self._write_hosts(machine_id, exclude=victims)
        for path in victims:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        return changed or bool(victims)

    def _purge_tombstones(self):
        """Delete tombstones written before dnsmasq's current process started."""
        if not self._c.pid_file or self._check_pid_file():
            return
        try:
            started = os.stat(self._c.pid_file).st_mtime
        except OSError:
            return
        prefix = self._c.file_prefix
        with os.scandir(self._c.hostsdir) as it:
            for item in it:
                if not item.name.startswith(prefix) or item.stat().st_mtime >= started:
                    continue
                meta = _read_header(item.path)
                if meta and meta.get("removed"):
                    try:
                        os.unlink(item.path)
                    except FileNotFoundError:
                        pass


def _read_header(path):
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if not first.startswith(HEADER):
        return None
    try:
        return json.loads(first[len(HEADER):])
    except ValueError:
        return None


def _macs_in(path):
    macs = set()
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                macs.add(line.split(",", 1)[0].strip())
    except FileNotFoundError:
        pass
    return macs


class DnsmasqLeases(LeaseFile):
    """The IPv4 leases in dnsmasq's lease file (``--dhcp-leasefile``).

    Lines ``<expiry> <mac> <address> <hostname> <client id>`` (DHCPv6 lines,
    after ``duid ...``, have no MAC and are skipped); expiry 0 never expires.
    """

    ip_version = 4
    server = "dnsmasq"

    def parse(self, files):
        leases = {}
        for f in files:
            for line in f:
                parts = line.split()
                if len(parts) < 3 or len(parts[1]) != 17 or parts[1].count(":") != 5:
                    continue
                ip = lease_ip(parts[2])
                if ip is None or ip.version != 4 or not parts[0].isdigit():
                    continue
                leases.setdefault(parts[1].lower(), []).append((ip, int(parts[0])))
        return leases
