"""``redfish-http-url``: the BMC tells UEFI firmware which URL to HTTP-boot.

activate sets, in one PATCH of the ComputerSystem (vendor quirks aside)::

    Boot.BootSourceOverrideTarget = UefiHttp
    Boot.HttpBootUri              = <the machine's URL of ipxe.iso>
    Boot.BootSourceOverrideEnabled = Once
    Boot.BootSourceOverrideMode   = UEFI

and resets the system. The firmware's HTTP boot client downloads the URL.
What it downloads must be something UEFI can start -- an EFI binary or an ISO,
not an iPXE script -- so the URL is the machine's own artifact URL
(``task.artifact_url("ipxe.iso")``, carrying machine id and token) of the
partition's iPXE ISO. UEFI HTTP boot mounts an ISO as a RAM disk and starts its
``/EFI/BOOT/BOOTX64.EFI`` (iPXE), which runs the ISO's ``autoexec.ipxe``: SLAAC,
then chain boot.ipxe looked up by MAC. The per-machine fetch of ``ipxe.iso``
is the evidence; the ISO's content is shared by the partition and cached.

``[redfish] http_boot_base_url`` replaces ``[api] public_url`` in that URL,
e.g. with the ``https://`` URL of a TLS front of the boot server: the firmware
then boots over HTTPS, iPXE and the booted system keep ``public_url``.

With ``[redfish] http_boot_artifact = efi`` the URL is the machine's
``ipxe.efi`` instead (for firmware that cannot boot ISOs; iPXE then needs DHCP
to find its script).
"""

import logging

from metalboot_framework.bmc import quirks
from metalboot_framework.boot_interface import Artifact, Capability
from metalboot_framework.exceptions import ValidationFailed
from metalboot_redfish import base
from metalboot_redfish import conf as redfish_conf
from metalboot_redfish import iso as iso_mod

LOG = logging.getLogger(__name__)

TARGET = "UefiHttp"
ARTIFACTS = {"iso": "ipxe.iso", "efi": "ipxe.efi"}


class RedfishHttpUrlBootInterface(base.RedfishBootInterface):
    """UEFI HTTP boot from a URL the BMC sets (Redfish Boot.HttpBootUri).

    The firmware fetches the machine's ipxe.iso (or ipxe.efi) URL; that fetch is
    the evidence. Needs a BMC that allows BootSourceOverrideTarget UefiHttp and
    has Boot.HttpBootUri (or the vendor's BIOS attribute: HttpDev1Uri on Dell,
    UrlBootFile on HPE).
    """

    capabilities = frozenset({Capability.NEEDS_BMC, Capability.UEFI_ONLY, Capability.IPV4,
                              Capability.IPV6, Capability.LAYER3})
    #: What the firmware fetches from the URL in HttpBootUri (first two), and the
    #: boot.ipxe iPXE chains afterwards.
    evidence_artifacts = ("ipxe.iso", "ipxe.efi", "boot.ipxe")

    def artifact_name(self, conf):
        return ARTIFACTS[redfish_conf.get(conf).http_boot_artifact]

    def expected_uri(self, task):
        uri = task.artifact_url(self.artifact_name(task.conf))
        base = (redfish_conf.get(task.conf).http_boot_base_url or "").rstrip("/")
        if base:  # the same path behind another front, e.g. TLS for the firmware
            uri = base + uri[len(task.services.urls.base_url(task.partition)):]
        return uri

    def validate(self, task):
        self.check_machine(task)
        self.check_ipxe_binary(task)
        client = self.client(task)
        # where the URI is kept is all validate needs: not the pending settings
        state = client.boot_state(http_boot_uri=True, pending=False)
        fields = self.check_boot_mode(state)
        if state.allowed_targets is not None and TARGET not in state.allowed_targets:
            fields["BootSourceOverrideTarget"] = [
                f"UefiHttp is not allowed (allowed: {', '.join(state.allowed_targets)})"]
        if state.http_boot_uri_location is None:
            fields["HttpBootUri"] = [quirks.missing_uri_place(state.quirks)]
        if fields:
            raise ValidationFailed(
                f"BMC {client.address} ({state.quirks.vendor}), system {client.system_label} "
                f"cannot UEFI HTTP boot "
                f"machine {task.machine.id}: " + "; ".join(
                    f"{k}: {', '.join(v)}" for k, v in fields.items()), fields=fields)

    def ensure_artifact(self, task):
        if self.artifact_name(task.conf) == "ipxe.iso":
            self.ensure_iso(task.services, task.partition)

    def prepare(self, task):
        self.ensure_artifact(task)

    def activate(self, task):
        self.ensure_artifact(task)
        client = self.client(task)
        uri = self.expected_uri(task)
        # the PATCH below reuses this read of the system
        self.remember_override(task, client)
        enabled = client.set_boot_override(
            TARGET, enabled="Once", mode="UEFI", http_boot_uri=uri,
            on_bios_change=lambda previous: self.remember_bios(task, client, previous),
            on_new_read=self.on_new_read(task, client))
        task.record_event("override",
                          f"BMC {client.address} system {client.system_label}: "
                          f"BootSourceOverrideTarget=UefiHttp, Enabled={enabled}, Mode=UEFI, "
                          f"HttpBootUri set",
                          quirks=client.quirks().name)
        self.reset(task, client)

    def get_artifact(self, task, name):
        if name == "ipxe.iso":
            _, path = self.ensure_iso(task.services, task.partition)
            return Artifact(content_type="application/vnd.efi-iso", path=path)
        if name == "ipxe.efi":
            path = redfish_conf.get(task.conf).ipxe_efi_path
            iso_mod._read_ipxe(path)
            return Artifact(content_type="application/efi", path=path)
        return None

    def check_drift(self, task):
        # drift is what the firmware uses now: the current attributes only,
        # and the override the next reset applies
        state = self.client(task).boot_state(http_boot_uri=True, pending=False,
                                             pending_boot=True)
        expected = self.expected_uri(task)
        drift = []
        if state.http_boot_uri != expected:
            drift.append(f"HttpBootUri ({state.http_boot_uri_location or 'absent'}) is "
                         f"{state.http_boot_uri or 'empty'}, expected {expected}")
        if state.enabled in base.OVERRIDE_ACTIVE and state.target != TARGET:
            drift.append(f"BootSourceOverrideTarget is {state.target} (Enabled "
                         f"{state.enabled}), expected UefiHttp")
        if state.enabled in base.OVERRIDE_ACTIVE and state.target == TARGET \
                and state.mode not in (None, "UEFI"):
            drift.append(f"BootSourceOverrideMode is {state.mode}, expected UEFI")
        return drift + self.staged_override_drift(state, (TARGET,))

    def clean_up(self, task):
        if not task.machine.bmc or not task.machine.bmc.address:
            return
        client = self.client(task)
        cleared = client.clear_boot_override(
            only_targets=(TARGET,), clear_http_boot_uri=True,
            bios_before=self.found(task, "found_bios", "attributes"),
            restore=self.found_override(task))
        task.record_event("clean_up",
                          f"BMC {client.address} system {client.system_label}: cleared "
                          + (", ".join(cleared) if cleared else "nothing (already clean)"))
