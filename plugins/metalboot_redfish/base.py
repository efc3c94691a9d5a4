"""What both Redfish boot interfaces share: BMC access, machine checks, the ISO."""

import logging


from metalboot_framework.boot_interface import Artifact, BootInterface, Property
from metalboot_framework.bmc import client as bmc_client
from metalboot_framework.bmc import power
from metalboot_framework.exceptions import BootInterfaceError, ValidationFailed
from metalboot_redfish import conf as redfish_conf
from metalboot_redfish import iso as iso_mod

LOG = logging.getLogger(__name__)

ISO_CONTENT_TYPE = "application/x-iso9660-image"
OVERRIDE_ACTIVE = ("Once", "Continuous")
#: The override targets metalboot's Redfish interfaces set.
METALBOOT_TARGETS = ("UefiHttp", "Cd", "UsbCd")


class RedfishBootInterface(BootInterface):
    """Base of the Redfish interfaces (not registered itself)."""

    def get_properties(self):
        return {
            "bmc.address": Property("Redfish address of the BMC, e.g. https://10.1.2.3 "
                                    "or 10.1.2.3:8443 (https by default).", required=True),
            "bmc.username": Property("BMC user allowed to change boot settings and "
                                     "power.", required=True),
            "bmc.password": Property("Its password (never logged).", required=True),
            "boot_mode": Property("Must be uefi.", required=True),
            bmc_client.SYSTEM_ID_PROPERTY: Property(
                "Id or @odata.id of the system on the BMC; needed only when the BMC "
                "manages more than one system."),
        }

    # -- helpers ------------------------------------------------------------------
    def client(self, task):
        return bmc_client.client_for_task(task)

    def check_machine(self, task):
        """The checks that need no BMC: address, credentials, UEFI."""
        fields = {}
        bmc = task.machine.bmc
        if not bmc or not bmc.address:
            fields["bmc.address"] = ["required by " + self.name]
        if not bmc or not bmc.username:
            fields["bmc.username"] = ["required by " + self.name]
        if (task.machine.boot_mode or "").lower() != "uefi":
            fields["boot_mode"] = [f"must be uefi for {self.name}, is "
                                   f"{task.machine.boot_mode}"]
        if fields:
            raise ValidationFailed(
                f"machine {task.machine.id} cannot use {self.name}: " + "; ".join(
                    f"{k} {', '.join(v)}" for k, v in fields.items()), fields=fields)

    @staticmethod
    def check_boot_mode(state):
        """Fields of a system that does not boot UEFI now: metalboot never
        switches a machine's boot mode on its own."""
        if state.mode not in (None, "UEFI"):
            return {"BootSourceOverrideMode": [
                f"the system boots {state.mode}; set its firmware to UEFI first "
                f"(metalboot does not switch boot modes)"]}
        return {}

    @staticmethod
    def staged_override_drift(state, targets):
        """Drift of an override staged in the system's settings object for the
        next reset (a reset that failed leaves one there) whose target is not
        one of ``targets``: the machine would boot it, though nothing shows in
        the system's Boot."""
        staged = state.pending_override
        if staged is None or staged[0] in targets:
            return []
        return [f"BootSourceOverrideTarget {staged[0]} (Enabled {staged[1]}) is staged in "
                f"{state.pending_boot_path} for the next reset, expected "
                f"{' or '.join(targets)}"]

    # -- the operator's own boot override -------------------------------------
    def remember_override(self, task, client, state=None):
        """In activate, from the read that precedes the override's PATCH:
        record the override as found (an operator's ``Continuous Hdd``, or a
        disabled one's target and mode) as an event, so that clean_up can
        restore it. The event is committed before the PATCH overwrites the
        override, so it survives a crash and serves any conductor; prepare
        needs no read of its own. One to a target of metalboot's Redfish
        interfaces is taken for theirs (the interface a machine migrates from
        clears its own after this one took over; a re-run activate finds its
        own) and not recorded."""
        state = state or client.boot_state()
        return self.remember_boot(task, client, {
            "BootSourceOverrideTarget": state.target,
            "BootSourceOverrideEnabled": state.enabled, "BootSourceOverrideMode": state.mode})

    def remember_boot(self, task, client, boot, again=False):
        """:meth:`remember_override` of a system's Boot section; ``again``: of
        a read after the first (a PATCH answered 412), recorded only where
        the override changed since (someone set one meanwhile)."""
        target, enabled = boot.get("BootSourceOverrideTarget"), \
            boot.get("BootSourceOverrideEnabled")
        if target in METALBOOT_TARGETS or not (target or enabled):
            return None
        found = {"target": target, "enabled": enabled,
                 "mode": boot.get("BootSourceOverrideMode")}
        if again and found == self.found_override(task):
            return found
        task.record_event("found_override",
                          f"BMC {client.address} system {client.system_label}: found "
                          f"BootSourceOverride {enabled} {target} ({found['mode']}); "
                          f"restored by clean-up", override=found)
        return found

    def on_new_read(self, task, client):
        """For ``set_boot_override``: record an override set between the read
        activate decided on and its PATCH."""
        return lambda boot: self.remember_boot(task, client, boot, again=True)

    @staticmethod
    def found(task, kind, key):
        """``key`` of the newest ``kind`` event recorded since this interface's
        last clean-up (what activate found of the operator's), or None."""
        last = task.last_event(kind, "clean_up")
        if last is None or last[0] != task.event_kind(kind):
            return None
        return last[1].get(key)

    def found_override(self, task):
        """The override :meth:`remember_override` recorded since this
        interface's last clean-up, or None."""
        return self.found(task, "found_override", "override")

    def remember_bios(self, task, client, previous):
        """In activate, before BIOS attributes are staged (``previous``: the
        value the next boot would have used of each): record them, so that
        clean_up stages them again. The first value found since the last
        clean-up wins: a re-run activate finds its own."""
        found = self.found(task, "found_bios", "attributes") or {}
        merged = dict(previous, **found)
        if merged != found:
            task.record_event("found_bios",
                              f"BMC {client.address} system {client.system_label}: found BIOS "
                              + ", ".join(f"{k}={v!r}" for k, v in sorted(merged.items()))
                              + "; staged again by clean-up", attributes=merged)

    def check_ipxe_binary(self, task):
        path = redfish_conf.get(task.conf).ipxe_efi_path
        try:
            iso_mod._ipxe_and_digest(path)  # read again only if it changed
        except BootInterfaceError as exc:
            raise ValidationFailed(exc.message, fields={"[redfish] ipxe_efi_path": [
                "missing or not an EFI binary"]}) from None

    def iso_spec(self, services, partition):
        return iso_mod.spec_for(services, partition, self.name)

    def ensure_iso(self, services, partition):
        spec = self.iso_spec(services, partition)
        return spec, iso_mod.ensure_iso(services.conf, spec)

    def reset(self, task, client):
        wait = redfish_conf.get(task.conf).wait_for_power_on
        state = power.reset(client, wait=wait)
        task.record_event("reset", f"BMC {client.address} reset system "
                          f"{client.system_label}" + (f", now {state}" if state else ""))

    def get_partition_artifact(self, services, partition, name):
        if iso_mod.ISO_NAME_RE.fullmatch(name or ""):
            spec, path = None, iso_mod.cached_path(services.conf, name)
            if path is None:
                spec = self.iso_spec(services, partition)
                if spec.name != name:
                    return None
                path = iso_mod.ensure_iso(services.conf, spec)
            return Artifact(content_type=ISO_CONTENT_TYPE, path=path)
        return None
