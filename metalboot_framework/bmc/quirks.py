"""Vendor quirks, keyed on the Manufacturer/Model a BMC reports.

Facts gathered from Ironic, sushy and operators' reports (see
doc/boot-interfaces/redfish.rst). The table is matched against the system's
Manufacturer/Model and, when the system names no manufacturer, its manager's.
"""

import dataclasses
import re
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Quirks:
    #: Which table row matched (for logs and events).
    name: str = "generic"
    #: Send target, enabled and mode together in every boot-override PATCH
    #: (AMI MegaRAC and ASRock Rack BMCs ignore or reject partial requests).
    full_boot_request: bool = False
    #: Always send BootSourceOverrideEnabled, even when unchanged (Supermicro
    #: drops the override otherwise).
    always_send_enabled: bool = False
    #: Retry changes the BMC refuses while the system is in POST (HPE iLO).
    retry_during_post: bool = False
    #: BIOS attribute that holds the UEFI HTTP boot URI when the system has no
    #: Boot.HttpBootUri (Dell iDRAC, Lenovo XCC).
    http_boot_uri_bios_attribute: Optional[str] = None
    #: BIOS attribute that enables that HTTP boot device, set to "Enabled".
    http_boot_enable_bios_attribute: Optional[str] = None


GENERIC = Quirks()

#: (manufacturer regex, model regex or None, quirks); first match wins.
TABLE = (
    (r"^(AMI|American Megatrends)", None,
     Quirks(name="ami", full_boot_request=True)),
    (r"ASRock", None, Quirks(name="asrock", full_boot_request=True)),
    (r"Supermicro", None, Quirks(name="supermicro", always_send_enabled=True)),
    (r"^(HPE?|Hewlett)", None, Quirks(name="hpe", retry_during_post=True)),
    (r"^Dell", None, Quirks(name="dell", http_boot_uri_bios_attribute="HttpDev1Uri",
                            http_boot_enable_bios_attribute="HttpDev1EnDis")),
    (r"^Lenovo", None, Quirks(name="lenovo", http_boot_uri_bios_attribute="HttpDev1Uri")),
)

#: MessageIds / texts with which a BMC says "not now, the system is in POST".
POST_REFUSAL_MARKERS = ("UnableToModifyDuringSystemPOST", "InvalidOperationForSystemState",
                        "SystemPOSTInProgress", "SYS518")


def quirks_for(manufacturer, model=None):
    """The quirks of a BMC reporting this Manufacturer and Model."""
    manufacturer = (manufacturer or "").strip()
    model = (model or "").strip()
    for man_re, model_re, quirks in TABLE:
        if re.search(man_re, manufacturer, re.IGNORECASE) and (
                model_re is None or re.search(model_re, model, re.IGNORECASE)):
            return quirks
    return GENERIC


def is_post_refusal(message):
    message = str(message or "")
    return any(marker in message for marker in POST_REFUSAL_MARKERS)
