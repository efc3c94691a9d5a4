"""Vendor quirks, keyed on the Manufacturer/Model a BMC reports.

The table is data: one row per vendor, each naming the public source of what
it says (``source``). It is matched against the system's Manufacturer/Model
and, when the system names no manufacturer, its manager's. The vendor support
matrix in doc/boot-interfaces/vendors.rst is checked against it by a test.
"""

import dataclasses
import re
from typing import Optional, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class Quirks:
    #: Which table row matched (for logs and events).
    name: str = "generic"
    #: The vendor's name as users know it, for messages.
    vendor: str = "Redfish BMC"
    #: Send target, enabled and mode together in every boot-override PATCH
    #: (AMI MegaRAC and ASRock Rack BMCs ignore or reject partial requests).
    full_boot_request: bool = False
    #: Always send BootSourceOverrideEnabled, even when unchanged (Supermicro
    #: drops the override otherwise).
    always_send_enabled: bool = False
    #: Send BootSourceOverrideMode again with every target change (Supermicro
    #: falls back to Legacy otherwise; Ironic re-syncs the mode there).
    resend_mode: bool = False
    #: BIOS attribute that holds the UEFI HTTP boot URI when the system has no
    #: Boot.HttpBootUri (Dell iDRAC, HPE iLO).
    http_boot_uri_bios_attribute: Optional[str] = None
    #: BIOS attribute that enables that HTTP boot device, set to "Enabled".
    http_boot_enable_bios_attribute: Optional[str] = None
    #: BIOS attribute naming the HTTP boot device's IP version (IPv4/IPv6).
    http_boot_protocol_bios_attribute: Optional[str] = None
    #: Pending BIOS settings need a config job (POST to this manager-relative
    #: collection with TargetSettingsURI) unless @Redfish.SettingsApplyTime
    #: OnReset is advertised (Dell iDRAC).
    bios_config_job: Optional[str] = None
    #: The CD boot target for virtual media, when not Cd.
    virtual_media_target: Optional[str] = None
    #: Manager firmware major versions (first, last) with which standard
    #: virtual media boots the virtual CD; outside them ``Cd`` is the physical
    #: drive (iDRAC9 before 6.x). Managers whose Model matches
    #: ``virtual_media_newer_models`` (iDRAC10, numbered from 1.x) are exempt.
    virtual_media_firmware: Optional[Tuple[int, int]] = None
    virtual_media_newer_models: Optional[str] = None
    #: The VirtualMedia device Ids those newer models take an insert in, tried
    #: first (iDRAC10 refuses slot 2, the first it lists).
    virtual_media_newer_models_slots: Optional[Tuple[str, ...]] = None
    #: Public source of this row.
    source: str = ""


GENERIC = Quirks(source="DMTF DSP0266 (Redfish specification) and DSP2046 (schema guide)")

#: (manufacturer regex, model regex or None, quirks); first match wins.
TABLE = (
    (r"^(AMI|American Megatrends)", None,
     Quirks(name="ami", vendor="AMI MegaRAC", full_boot_request=True,
            source="openstack/sushy system.py set_system_boot_options (AMI sends all three)")),
    (r"ASRock", None, Quirks(
        name="asrock", vendor="ASRock Rack", full_boot_request=True,
        source="openstack/sushy system.py set_system_boot_options (ASRock Rack)")),
    (r"Supermicro", None, Quirks(
        name="supermicro", vendor="Supermicro", always_send_enabled=True, resend_mode=True,
        virtual_media_target="UsbCd",
        source="openstack/ironic drivers/modules/redfish/management.py (Supermicro "
               "re-sends the mode) and boot.py (UsbCd); bmc-toolbox/bmclib "
               "internal/redfishwrapper/fixtures/supermicro")),
    (r"^(HPE?|Hewlett)", None, Quirks(
        name="hpe", vendor="HPE iLO", http_boot_uri_bios_attribute="UrlBootFile",
        source="HewlettPackard/ilo-rest-api-docs iLO 5 resource definitions (Bios "
               "UrlBootFile..UrlBootFile4; no Boot.HttpBootUri)")),
    (r"^Dell", None, Quirks(
        name="dell", vendor="Dell iDRAC", http_boot_uri_bios_attribute="HttpDev1Uri",
        http_boot_enable_bios_attribute="HttpDev1EnDis",
        http_boot_protocol_bios_attribute="HttpDev1Protocol",
        bios_config_job="Jobs", virtual_media_firmware=(6, 7),
        virtual_media_newer_models=r"\b1[7-9]G\b", virtual_media_newer_models_slots=("1",),
        source="dell/iDRAC-Redfish-Scripting BiosSetAttributeREDFISH.py (config job "
               "with TargetSettingsURI); Dell iDRAC Redfish API Guide (HttpDev1*); "
               "openstack/ironic drivers/modules/drac/boot.py (virtual media on "
               "iDRAC 6.x-7.x, iDRAC10 slot 1)")),
    (r"^Lenovo", None, Quirks(
        name="lenovo", vendor="Lenovo XCC",
        source="ansible/ansible#56050 (If-Match required, 428 without it; fixed by "
               "ansible/ansible#56150); ansible-collections/community.general#11261 "
               "(412 on a stale ETag); bmc-toolbox/bmclib providers/lenovo/fixtures")),
)


@dataclasses.dataclass(frozen=True)
class BusyRefusal:
    """A 4xx with which a BMC says "not now": retried with backoff."""

    marker: str
    vendor: str
    source: str


#: MessageIds / texts with which BMCs say "busy, not ready, in POST".
BUSY_REFUSALS: Sequence[BusyRefusal] = (
    BusyRefusal("UnableToModifyDuringSystemPOST", "HPE iLO",
                "HewlettPackard/ilo-rest-api-docs iLO message registry"),
    BusyRefusal("InvalidOperationForSystemState", "HPE iLO",
                "HewlettPackard/ilo-rest-api-docs iLO message registry"),
    BusyRefusal("SystemPOSTInProgress", "HPE iLO",
                "openstack/ironic drivers/modules/redfish/utils.py"),
    BusyRefusal("SYS518", "Dell iDRAC",
                "Dell iDRAC Event and Error Message Reference (SYS518 iDRAC not ready); "
                "openstack/sushy-oem-idrac"),
    BusyRefusal("SUP0108", "Dell iDRAC",
                "Dell iDRAC Event and Error Message Reference (SUP0108 job queue busy)"),
    BusyRefusal("ServiceTemporarilyUnavailable", "DMTF",
                "DMTF Base message registry"),
)


def quirks_for(manufacturer, model=None):
    """The quirks of a BMC reporting this Manufacturer and Model."""
    manufacturer = (manufacturer or "").strip()
    model = (model or "").strip()
    for man_re, model_re, quirks in TABLE:
        if re.search(man_re, manufacturer, re.IGNORECASE) and (
                model_re is None or re.search(model_re, model, re.IGNORECASE)):
            return quirks
    return GENERIC


def missing_uri_place(quirks):
    """Why a system of this vendor cannot hold a UEFI HTTP boot URI, naming
    only what the vendor itself offers (Boot.HttpBootUri, and the BIOS
    attribute of the vendors that keep it there)."""
    attribute = quirks.http_boot_uri_bios_attribute
    return "the system has no Boot.HttpBootUri" + (
        f" and its BIOS no attribute {attribute}" if attribute else "")


def is_busy_refusal(message):
    message = str(message or "")
    return any(b.marker in message for b in BUSY_REFUSALS)



def virtual_media_slots(quirks, manager_model):
    """The device Ids to try first for an insert on a manager of this Model
    (None: the order the BMC lists them in)."""
    if quirks.virtual_media_newer_models and re.search(quirks.virtual_media_newer_models,
                                                       str(manager_model or "")):
        return quirks.virtual_media_newer_models_slots
    return None


def virtual_media_firmware_problem(quirks, manager):
    """Why this vendor's manager firmware cannot boot standard virtual media,
    or None. ``manager``: its Manager document."""
    if not quirks.virtual_media_firmware:
        return None
    model = str(manager.get("Model") or "")
    if quirks.virtual_media_newer_models and re.search(quirks.virtual_media_newer_models,
                                                       model):
        return None
    version = str(manager.get("FirmwareVersion") or "")
    match = re.match(r"(\d+)\.", version)
    first, last = quirks.virtual_media_firmware
    if match and first <= int(match.group(1)) <= last:
        return None
    return (f"{quirks.vendor} firmware {version or '(unknown)'} maps the virtual CD to the "
            f"physical drive; standard virtual media needs firmware {first}.x to {last}.x")
