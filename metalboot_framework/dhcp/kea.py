"""DHCPv6 host reservations for Kea (``kea-dhcp6``, Debian 12's Kea 2.2).

metalboot owns exactly one file, ``[kea] include_file``: a comma-separated
list of host reservations that the operator's ``kea-dhcp6.conf`` pulls into a
``"reservations"`` list with Kea's include directive, once::

    "subnet6": [{ "id": 1, "subnet": "fd00:b007::/64", ...,
                  "reservations": [
    <?include "/var/lib/metalboot/kea/metalboot-reservations6.json"?>
                  ] }]

(or the global ``"reservations"`` list, with ``"reservations-global": true``).
The file must exist before Kea starts; an empty file is valid. Each reservation
is keyed by DUID (``duid``) or, without one, by MAC (``hw-address``) and
carries its options in ``option-data`` and its owner in
``user-context.metalboot`` (machine, and the options of each boot interface).
Kea 2.2 cannot make a reservation's option depend on a client class, so
reservation options go to the reserved client whatever its vendor class:
options without ``always-send`` only when the client requests them (ORO).

After a change metalboot makes Kea re-read its configuration: ``config-reload``
over the control socket (default; Kea's answer is checked, and a refused file
is rolled back and reloaded again, because Kea 2.2 serves nothing after a
failed reload), or SIGHUP to the pid in ``[kea] pid_file``.
"""

import csv
import json
import logging
import os
import signal
import socket

from metalboot_framework.dhcp import files
from metalboot_framework.dhcp.base import DhcpBackend, DhcpBackendError, OwnedEntry
from metalboot_framework.dhcp.leases import LeaseFile, lease_ip
from metalboot_framework.exceptions import ValidationFailed

LOG = logging.getLogger(__name__)

# Kea runs as its own user (_kea on Debian): signalling it takes CAP_KILL
_NO_CAP_KILL = ("Kea (pid %d) runs as another user and this process may not signal it: "
                "reload = signal needs CAP_KILL (systemd: AmbientCapabilities=CAP_KILL, "
                "etc/systemd/drop-ins/) or use reload = control-socket")

FILE_HEADER = ("# metalboot DHCPv6 host reservations. Written by metalboot: do not edit.\n"
               "# kea-dhcp6.conf includes this file inside a \"reservations\" list.\n")


class KeaBackend(DhcpBackend):
    """DHCPv6 host reservations in a Kea include file, reloaded over Kea's control socket."""

    ip_versions = frozenset({6})
    supported_matches = frozenset()

    @property
    def _c(self):
        return self.conf.kea

    # -- contract ----------------------------------------------------------------
    def validate(self):
        problems, fields = [], {}

        def problem(option, reason):
            problems.append(f"[kea] {option}: {reason}")
            fields[f"[kea] {option}"] = [reason]

        path = self._c.include_file
        reason = files.check_writable_dir(os.path.dirname(path) if path else None)
        if reason:
            problem("include_file", f"directory {reason}" if path else reason)
        elif not os.path.isfile(path):
            problem("include_file", f"{path} does not exist (create it empty and include "
                                    f"it in kea-dhcp6.conf before Kea starts)")
        elif not os.access(path, os.W_OK):
            problem("include_file", f"{path} is not writable by this process")
        if self._c.reload == "control-socket":
            if not self._c.control_socket:
                problem("control_socket", "is not set (needed for reload = control-socket)")
            else:
                try:
                    answer = self._command("status-get")
                    if answer.get("result") != 0:
                        problem("control_socket", f"Kea refused status-get: "
                                                  f"{answer.get('text')}")
                except DhcpBackendError as exc:
                    problem("control_socket", str(exc))
        elif self._c.reload == "signal":
            try:
                self._pid()
            except DhcpBackendError as exc:
                problem("pid_file", str(exc))
        if problems:
            raise ValidationFailed("Kea backend unusable: " + "; ".join(problems),
                                   fields=fields)

    def ensure_host_entries(self, machine_id, interface, entries):
        self.check_entries(entries)
        changed = self._update(self._ensure_change(machine_id, interface, entries))
        if changed:
            LOG.info("Kea: wrote %s reservations of machine %s", interface, machine_id)
        return changed

    def _ensure_change(self, machine_id, interface, entries):
        """What ensure_host_entries does to the reservations, as a function."""
        wanted = {}
        for entry in entries:
            options = entry.options_for(6)
            if not options:
                continue
            key = ("duid", entry.duid) if entry.duid else ("hw-address", entry.mac)
            spec = wanted.setdefault(key, {"options": [], "address": None})
            spec["options"].extend(_option_json(o) for o in options)
            if entry.ipv6_address and self._c.reserve_addresses:
                spec["address"] = entry.ipv6_address

        def change(reservations):
            kept = []
            for res in reservations:
                owner = _owner(res)
                if owner.get("machine") == machine_id:
                    owner.get("interfaces", {}).pop(interface, None)
                    if _key(res) in wanted:
                        continue  # rebuilt below
                    if not owner.get("interfaces"):
                        continue
                    _rebuild(res)
                kept.append(res)
            existing = {_key(r): r for r in reservations
                        if _owner(r).get("machine") == machine_id}
            for res in kept:
                if _key(res) in wanted and _owner(res).get("machine") != machine_id:
                    kind, value = _key(res)
                    raise DhcpBackendError(
                        f"Kea backend: {kind} {value} of machine {machine_id} is reserved "
                        f"for machine {_owner(res).get('machine')} already")
            for key, spec in wanted.items():
                old = existing.get(key)
                interfaces = dict(_owner(old).get("interfaces", {})) if old else {}
                interfaces[interface] = {"options": spec["options"],
                                         "address": spec["address"]}
                res = {key[0]: key[1],
                       "user-context": {"metalboot": {"machine": machine_id,
                                                      "interfaces": interfaces}}}
                _rebuild(res)
                kept.append(res)
            return kept

        return change

    def remove_host_entries(self, machine_id, interface=None):
        changed = self._update(self._remove_change(machine_id, interface))
        if changed:
            LOG.info("Kea: removed %s reservations of machine %s", interface or "all",
                     machine_id)
        return changed

    def _remove_change(self, machine_id, interface):
        """What remove_host_entries does to the reservations, as a function."""
        def change(reservations):
            kept = []
            for res in reservations:
                owner = _owner(res)
                if owner.get("machine") == machine_id:
                    if interface is None:
                        continue
                    owner.get("interfaces", {}).pop(interface, None)
                    if not owner.get("interfaces"):
                        continue
                    _rebuild(res)
                kept.append(res)
            return kept

        return change

    def apply_host_entries(self, changes):
        """All ``changes`` in one write of the include file and one reload:
        Kea re-reads every reservation on each reload, so a wave of machines
        applied one by one costs a reload per machine."""
        steps = []
        for machine_id, interface, entries in changes:
            if entries:
                self.check_entries(entries)
                steps.append(self._ensure_change(machine_id, interface, entries))
            else:
                steps.append(self._remove_change(machine_id, interface))

        def change(reservations):
            for step in steps:
                reservations = step(reservations)
            return reservations

        changed = self._update(change)
        if changed:
            LOG.info("Kea: applied the reservations of %d machine(s) in one reload",
                     len({machine_id for machine_id, _, _ in changes}))
        return changed

    def list_host_entries(self, machine_id=None):
        by_pair = {}
        for res in self._read(self._c.include_file):
            owner = _owner(res)
            if not owner or (machine_id is not None and owner.get("machine") != machine_id):
                continue
            for interface in owner.get("interfaces", {}):
                ids = by_pair.setdefault((owner["machine"], interface), [])
                kind, value = _key(res)
                ids.append(f"{'mac' if kind == 'hw-address' else kind}:{value}")
        return [OwnedEntry(machine_id=m, interface=i, identifiers=tuple(ids),
                           location=self._c.include_file)
                for (m, i), ids in sorted(by_pair.items())]

    # -- the include file --------------------------------------------------------
    def _update(self, change):
        path = self._c.include_file
        directory = os.path.dirname(path)
        reason = files.check_writable_dir(directory)
        if reason:
            raise DhcpBackendError(f"Kea backend: [kea] include_file: directory {reason}")
        with files.locked(path + ".lock"):
            # Only under the lock: a concurrent writer's temporary file is not stale.
            files.remove_stale_temp_files(directory, os.path.basename(path))
            try:
                with open(path, encoding="utf-8") as f:
                    before = f.read()
            except FileNotFoundError:
                before = None
            reservations = self._parse(before or "", path)
            after = _render(change(reservations))
            if after == before:
                return False
            files.atomic_write(path, after)
            try:
                self._reload()
            except DhcpBackendError:
                if before is not None:
                    files.atomic_write(path, before)
                    try:
                        self._reload()
                    except DhcpBackendError as exc:
                        LOG.error("Kea: reload after rolling %s back failed too: %s", path, exc)
                raise
            return True

    def _read(self, path):
        try:
            with open(path, encoding="utf-8") as f:
                return self._parse(f.read(), path)
        except FileNotFoundError:
            return []

    @staticmethod
    def _parse(text, path):
        body = "".join(line for line in text.splitlines(keepends=True)
                       if not line.lstrip().startswith("#"))
        if not body.strip():
            return []
        try:
            return json.loads("[" + body + "]")
        except ValueError as exc:
            raise DhcpBackendError(f"Kea backend: [kea] include_file {path} is not a "
                                   f"list of reservations metalboot wrote: {exc}")

    # -- talking to Kea ----------------------------------------------------------
    def _reload(self):
        how = self._c.reload
        if how == "none":
            return
        if how == "signal":
            pid = self._pid()
            try:
                os.kill(pid, signal.SIGHUP)
            except ProcessLookupError:
                raise DhcpBackendError(f"Kea backend: [kea] pid_file: process {pid} from "
                                       f"{self._c.pid_file} is gone")
            except PermissionError:
                raise DhcpBackendError(f"Kea backend: [kea] pid_file: {_NO_CAP_KILL % pid}")
            return
        answer = self._command("config-reload")
        if answer.get("result") != 0:
            raise DhcpBackendError(f"Kea refused the configuration with metalboot's "
                                   f"reservations ([kea] include_file "
                                   f"{self._c.include_file}): {answer.get('text')}")

    def _pid(self):
        if not self._c.pid_file:
            raise DhcpBackendError("is not set (needed for reload = signal)")
        try:
            with open(self._c.pid_file) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError) as exc:
            raise DhcpBackendError(f"cannot read a pid from {self._c.pid_file}: {exc}")
        try:
            os.kill(pid, 0)  # the same permission check as the SIGHUP it is for
        except ProcessLookupError:
            raise DhcpBackendError(f"Kea (pid {pid} from {self._c.pid_file}) is not running")
        except PermissionError:
            raise DhcpBackendError(_NO_CAP_KILL % pid)
        return pid

    def _command(self, command):
        """Send one command over the control socket; Kea's answer as a dict."""
        path = self._c.control_socket
        if not path:
            raise DhcpBackendError("[kea] control_socket is not set")
        chunks = []
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self._c.control_timeout)
                sock.connect(path)
                sock.sendall(json.dumps({"command": command}).encode())
                while True:
                    data = sock.recv(65536)
                    if not data:
                        break
                    chunks.append(data)
                    if _complete(b"".join(chunks)):
                        break
        except OSError as exc:
            raise DhcpBackendError(f"Kea control socket {path} not reachable: "
                                   f"{type(exc).__name__}: {exc}")
        try:
            answer = json.loads(b"".join(chunks))
        except ValueError as exc:
            raise DhcpBackendError(f"Kea control socket {path}: no readable answer to "
                                   f"{command}: {exc}")
        if isinstance(answer, list):
            answer = answer[0] if answer else {}
        return answer


def _complete(data):
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _option_json(option):
    data = {"code": option.code, "space": "dhcp6"}
    if option.hex:
        data.update({"csv-format": False, "data": option.value.upper()})
    else:
        data["data"] = option.value
    if option.always_send:
        data["always-send"] = True
    return data


def _owner(res):
    if not res:
        return {}
    return (res.get("user-context") or {}).get("metalboot") or {}


def _key(res):
    if "duid" in res:
        return ("duid", res["duid"])
    return ("hw-address", res.get("hw-address"))


def _rebuild(res):
    """Recompute option-data and ip-addresses from the per-interface parts."""
    interfaces = _owner(res).get("interfaces", {})
    by_code, addresses = {}, []
    for name in sorted(interfaces):
        part = interfaces[name]
        for option in part.get("options", []):
            by_code[option["code"]] = option
        if part.get("address") and part["address"] not in addresses:
            addresses.append(part["address"])
    res["option-data"] = [by_code[c] for c in sorted(by_code)]
    if addresses:
        res["ip-addresses"] = addresses
    else:
        res.pop("ip-addresses", None)


def _render(reservations):
    reservations = sorted(reservations, key=lambda r: (_owner(r).get("machine", ""), _key(r)))
    return FILE_HEADER + ",\n".join(json.dumps(r, sort_keys=True) for r in reservations) + (
        "\n" if reservations else "")


class KeaLeases(LeaseFile):
    """The DHCPv6 address leases in Kea's memfile lease file (``lease-database``
    ``{"type": "memfile", "persist": true, "name": ...}``).

    Kea appends a row (``address,duid,valid_lifetime,expire,...,lease_type,...,
    hwaddr,state,...`` as its header names them) for every change; the last
    row of an address holds. Its lease file cleanup (LFC) moves older rows to
    ``<name>.2`` and ``<name>.1``, which are read first. A lease counts while it
    is an address lease (``lease_type`` 0 or 1, not a delegated prefix), in
    the default state (not declined, not reclaimed), with a valid lifetime
    (0: released) and not expired, for the MAC Kea learnt for it (``hwaddr``:
    from the client's DUID-LL/LLT, link-local address, or a relay's option 79).
    """

    ip_version = 6
    server = "Kea"

    def paths(self):
        return [self.path + ".2", self.path + ".1", self.path]

    def parse(self, files):
        latest = {}
        for f in files:
            for row in csv.DictReader(f):
                ip = lease_ip(row.get("address") or "")
                if ip is None or ip.version != 6:
                    continue
                try:
                    valid, expire = int(row["valid_lifetime"]), int(row["expire"])
                    live = row.get("lease_type", "0") in ("0", "1") \
                        and row.get("state", "0") in ("0", "") and valid > 0
                except (KeyError, TypeError, ValueError):
                    continue
                mac = (row.get("hwaddr") or "").lower()
                latest[ip] = (mac, expire) if live and len(mac) == 17 else None
        leases = {}
        for ip, held in latest.items():
            if held:
                leases.setdefault(held[0], []).append((ip, held[1]))
        return leases
