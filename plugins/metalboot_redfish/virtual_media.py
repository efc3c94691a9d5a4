"""``redfish-virtual-media-ipxe``: the BMC mounts an iPXE ISO and boots it once.

activate: eject an ISO of this interface left in a CD/DVD device, insert the
partition's iPXE ISO into the first free CD/DVD device that takes it
(``services.partition_artifact_url``; the BMC downloads or streams it) -- an
operator's image is ejected only where no free device takes ours, recorded
first, and inserted again by clean-up; other kinds (a floppy) are never
touched -- set
``BootSourceOverrideTarget=Cd`` (``UsbCd`` where the BMC offers only that),
``Enabled=Once``, ``Mode=UEFI``, and reset. The firmware boots the ISO's El Torito
EFI image, i.e. iPXE, which runs ``autoexec.ipxe``: SLAAC (``ifconf -c ipv6``)
and ``chain`` of boot.ipxe looked up by MAC. That boot.ipxe fetch is the
evidence when it comes from an address bound to the machine, its SLAAC
(EUI-64) address first of all (``metalboot_framework.address_binding``); the
ISO download is the BMC's, not the machine's.
"""

import logging

from metalboot_framework.bmc import media, quirks
from metalboot_framework.boot_interface import Capability
from metalboot_framework.exceptions import BmcError, ValidationFailed
from metalboot_redfish import base
from metalboot_redfish import iso as iso_mod

LOG = logging.getLogger(__name__)

CD_TARGETS = ("Cd", "UsbCd")


class RedfishVirtualMediaIpxeBootInterface(base.RedfishBootInterface):
    """Boot an iPXE ISO the BMC mounts as virtual CD (Redfish VirtualMedia).

    The ISO is one per partition; iPXE on it does SLAAC and chains boot.ipxe by
    MAC, and that fetch is the evidence.
    """

    capabilities = frozenset({Capability.NEEDS_BMC, Capability.UEFI_ONLY,
                              Capability.VIRTUAL_MEDIA, Capability.IPV6, Capability.LAYER3})
    evidence_artifacts = ("boot.ipxe",)

    def iso_url(self, services, partition):
        spec = self.iso_spec(services, partition)
        return services.partition_artifact_url(partition.id, self.name, spec.name,
                                               partition=partition)

    def is_ours(self, image):
        """Whether a media URL is an ISO of this interface (any configuration)."""
        if not image:
            return False
        head, _, name = image.rstrip("/").rpartition("/")
        return bool(iso_mod.ISO_NAME_RE.fullmatch(name)) and head.endswith("/" + self.name)

    @staticmethod
    def cd_target(state):
        allowed = state.allowed_targets
        # Supermicro X11/X12 list both, but boot virtual media only as UsbCd.
        wanted = state.quirks.virtual_media_target
        if wanted and allowed and wanted in allowed:
            return wanted
        if allowed is None or "Cd" in allowed:
            return "Cd"
        if "UsbCd" in allowed:
            return "UsbCd"
        return None

    def validate(self, task):
        self.check_machine(task)
        self.check_ipxe_binary(task)
        client = self.client(task)
        state = client.boot_state()
        fields = self.check_boot_mode(state)
        if self.cd_target(state) is None:
            fields["BootSourceOverrideTarget"] = [
                f"neither Cd nor UsbCd is allowed (allowed: "
                f"{', '.join(state.allowed_targets)})"]
        problem = quirks.virtual_media_firmware_problem(state.quirks, client.manager()) \
            if state.quirks.virtual_media_firmware else None
        if problem:
            fields["Manager.FirmwareVersion"] = [problem]
        found = media.devices(client)
        if not media.insertable_cds(found):
            fields["VirtualMedia"] = [
                "no CD/DVD device takes an InsertMedia (devices: "
                + (", ".join(d.describe() for d in found) or "none") + ")"]
        if fields:
            raise ValidationFailed(
                f"BMC {client.address} ({state.quirks.vendor}), system {client.system_label} "
                f"cannot boot machine {task.machine.id} from virtual media: " + "; ".join(
                    f"{k}: {', '.join(v)}" for k, v in fields.items()), fields=fields)

    def prepare(self, task):
        self.ensure_iso(task.services, task.partition)

    def activate(self, task):
        spec, _ = self.ensure_iso(task.services, task.partition)
        url = task.services.partition_artifact_url(task.partition.id, self.name, spec.name,
                                                   partition=task.partition)
        client = self.client(task)
        # read once: eject and insert act on it; only the boot type's devices
        # (another kind's media is the operator's)
        found = media.devices(client, cd_only=True)
        # ours of an earlier activation goes; an operator's image stays
        ejected = media.eject_all(client, only=lambda d: self.is_ours(d.image), found=found)
        # the insert acts on the devices as read back after the eject (their ETags)
        device = self.insert(task, client, url, media.replace_read(found, ejected))
        # read after the insert: the PATCH below and the reset reuse this read
        state = client.boot_state()
        self.remember_override(task, client, state)
        target = self.cd_target(state) or "Cd"
        enabled = client.set_boot_override(target, enabled="Once", mode="UEFI",
                                           on_new_read=self.on_new_read(task, client))
        task.record_event("override",
                          f"BMC {client.address} system {client.system_label}: "
                          f"ejected {len(ejected)}, inserted {url} into {device.id}, "
                          f"BootSourceOverrideTarget={target}, Enabled={enabled}, Mode=UEFI",
                          quirks=client.quirks().name)
        self.reset(task, client)

    def insert(self, task, client, url, found):
        """Insert ``url`` into a CD/DVD device that holds nothing; only where
        none takes it, eject an operator's image, recorded first (committed
        before the eject) so that clean-up inserts it again. Returns the
        device."""
        free = [d for d in found if not d.has_media]
        refused = None
        if media.insertable_cds(free):
            try:
                return media.insert_cd(client, url, found=free)
            except BmcError as exc:
                if exc.status_code not in (400, 405):
                    raise
                refused = exc  # no free device takes it: try the taken ones
        taken = [d for d in media.insert_order(client, found) if d.has_media]
        if not taken:
            if refused is not None:
                raise refused
            return media.insert_cd(client, url, found=found)  # names the devices
        device = taken[0]
        task.record_event("found_media",
                          f"BMC {client.address} system {client.system_label}: "
                          f"{device.id} holds {device.image} and no free CD/DVD device "
                          f"takes the boot ISO; ejected, inserted again by clean-up",
                          media={"path": device.path, "id": device.id,
                                 "image": device.image})
        after = media.eject(client, device)
        return media.insert_cd(client, url, found=[after])

    def restore_media(self, task, client, found):
        """In clean_up, after ours is ejected: insert the operator's image
        that activate ejected into its device again, unless that device
        holds something else now."""
        recorded = self.found(task, "found_media", "media")
        if not recorded:
            return None
        device = next((d for d in found if d.path == recorded["path"]), None)
        if device is None or device.holds(recorded["image"]):
            return None
        if device.has_media:
            return (f"left {device.id} with {device.image} (it held "
                    f"{recorded['image']} before activation)")
        media.insert_cd(client, recorded["image"], found=[device])
        return f"inserted {recorded['image']} into {device.id} again"

    def check_drift(self, task):
        client = self.client(task)
        expected = self.iso_url(task.services, task.partition)
        drift = []
        # first: finding the media reuses this read
        state = client.boot_state(pending_boot=True)
        devices = media.devices(client)
        if not any(d.holds(expected) for d in devices):
            held = [f"{d.id}: {d.image}" for d in devices if d.has_media]
            drift.append(f"virtual media does not hold {expected}"
                         + (f" (holds {'; '.join(held)})" if held else " (nothing inserted)"))
        if state.enabled in base.OVERRIDE_ACTIVE and state.target not in CD_TARGETS:
            drift.append(f"BootSourceOverrideTarget is {state.target} (Enabled "
                         f"{state.enabled}), expected Cd")
        return drift + self.staged_override_drift(state, CD_TARGETS)

    def clean_up(self, task):
        if not task.machine.bmc or not task.machine.bmc.address:
            return
        client = self.client(task)
        # ours is only ever inserted into a CD/DVD device
        found = media.devices(client, cd_only=True)
        ejected = media.eject_all(client, only=lambda d: self.is_ours(d.image), found=found)
        cleared = client.clear_boot_override(only_targets=CD_TARGETS,
                                             clear_http_boot_uri=False,
                                             restore=self.found_override(task))
        restored = self.restore_media(task, client, media.replace_read(found, ejected))
        task.record_event("clean_up",
                          f"BMC {client.address} system {client.system_label}: ejected "
                          f"{', '.join(d.id for d in ejected) or 'nothing'}; cleared "
                          f"{', '.join(cleared) or 'no override'}"
                          + (f"; {restored}" if restored else ""))
