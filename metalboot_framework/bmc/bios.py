"""The UEFI HTTP boot URI where a system keeps it in BIOS attributes.

Dell iDRAC (``HttpDev1Uri``) and HPE iLO (``UrlBootFile``) have no
``Boot.HttpBootUri``. BIOS attributes are changed in the BIOS's settings object
and stay pending until the BIOS applies them at a reset -- on Dell only if a
config job exists or the PATCH asked for ``@Redfish.SettingsApplyTime``
``OnReset`` (Dell iDRAC Redfish API Guide; iDRAC-Redfish-Scripting
BiosSetAttributeREDFISH.py). The *current* attributes say what the firmware
uses now (drift); the pending ones what the next boot will use.
"""

import dataclasses
import logging
import urllib.parse
from typing import Mapping, Optional, Sequence

import sushy

from metalboot_framework.exceptions import BmcError

LOG = logging.getLogger(__name__)

BOOT_URI = "Boot.HttpBootUri"
JOB_STATES_OK = ("Scheduled", "Running", "New", "Starting", "Completed", None)


@dataclasses.dataclass(frozen=True)
class UriPlace:
    """Where the system keeps the HTTP boot URI, and its values."""

    #: "Boot.HttpBootUri", "Bios.<attribute>", or None (nowhere).
    location: Optional[str]
    #: The value in effect now, and the one the next boot will use.
    current: Optional[str] = None
    next: Optional[str] = None
    attributes: Mapping = dataclasses.field(default_factory=dict)
    pending: Mapping = dataclasses.field(default_factory=dict)
    settings_path: Optional[str] = None
    settings_etag: Optional[str] = None
    apply_times: Sequence[str] = ()

    @property
    def attribute(self):
        return self.location[5:] if self.location and self.location.startswith("Bios.") \
            else None

    def next_value(self, name):
        return self.pending.get(name, self.attributes.get(name))


def find(client, conn, system, read_pending=True):
    """The :class:`UriPlace` of ``system`` (a ComputerSystem document).

    ``read_pending=False``: without the settings object (one GET saved where only
    the place and the current value matter: validate, drift); ``next`` is then
    the current value and there is no ETag to stage a change with."""
    boot = system.get("Boot") or {}
    if "HttpBootUri" in boot:
        value = boot.get("HttpBootUri") or None
        return UriPlace(BOOT_URI, value, value)
    quirks = client.quirks_known()
    attribute = quirks.http_boot_uri_bios_attribute or "HttpDev1Uri"
    bios_path = (system.get("Bios") or {}).get("@odata.id")
    if not bios_path:
        return UriPlace(None)
    try:
        bios = client.read(conn, bios_path).data
    except sushy.exceptions.ResourceNotFoundError:
        return UriPlace(None)  # linked but not served: no BIOS settings to use
    attributes = bios.get("Attributes") or {}
    redfish_settings = bios.get("@Redfish.Settings") or {}
    settings = (redfish_settings.get("SettingsObject") or {}).get("@odata.id") \
        or bios_path.rstrip("/") + "/Settings"
    if attribute not in attributes:
        return UriPlace(None, attributes=attributes, settings_path=settings)
    pending, etag = {}, None
    try:
        if read_pending:
            document = client.read(conn, settings)
            pending, etag = document.data.get("Attributes") or {}, document.etag
    except sushy.exceptions.ResourceNotFoundError:
        pass
    current = attributes.get(attribute) or None
    nxt = pending.get(attribute, attributes.get(attribute)) or None
    return UriPlace(f"Bios.{attribute}", current, nxt, attributes, pending, settings, etag,
                    tuple(redfish_settings.get("SupportedApplyTimes") or ()))


def protocol_for(uri):
    """IPv6 for a URL whose host is an IPv6 literal, IPv4 for an IPv4 one."""
    host = urllib.parse.urlsplit(uri).hostname or ""
    if ":" in host:
        return "IPv6"
    if host.replace(".", "").isdigit():
        return "IPv4"
    return None


def uri_change(client, place, uri):
    """The attributes to stage so that the next boot fetches ``uri``
    (or, with ``uri`` None, no longer fetches anything)."""
    quirks = client.quirks_known()
    change = {}
    if (place.next or None) != (uri or None):
        change[place.attribute] = uri or ""
    enable = quirks.http_boot_enable_bios_attribute
    if enable and enable in place.attributes:
        wanted = "Enabled" if uri else "Disabled"
        if place.next_value(enable) != wanted:
            change[enable] = wanted
    protocol_attr = quirks.http_boot_protocol_bios_attribute
    protocol = protocol_for(uri) if uri else None
    if protocol and protocol_attr and protocol_attr in place.attributes \
            and place.next_value(protocol_attr) != protocol:
        change[protocol_attr] = protocol
    return change


def restore_change(place, before):
    """The attributes to stage so that the next boot has the values of
    ``before`` again ({attribute: value}; those the BIOS no longer has are
    left out)."""
    return {name: value for name, value in before.items()
            if name in place.attributes and place.next_value(name) != value}


def stage(client, conn, place, change, system):
    """PATCH ``change`` into the BIOS settings object (If-Match where the BMC
    gave an ETag) and make sure the next reset applies it: where the vendor
    needs it, ``@Redfish.SettingsApplyTime`` OnReset if the BIOS advertises it,
    else a config job on the manager's Jobs collection."""
    quirks = client.quirks_known()
    body = {"Attributes": dict(change)}
    job = bool(quirks.bios_config_job)
    if job and "OnReset" in place.apply_times:
        body["@Redfish.SettingsApplyTime"] = {"ApplyTime": "OnReset"}
        job = False
    conn.connector.patch(place.settings_path, data=body, etag=place.settings_etag)
    if job:
        create_job(client, conn, place.settings_path, system)


def create_job(client, conn, settings_path, system):
    managers = (system.get("Links") or {}).get("ManagedBy") or []
    if not managers:
        raise BmcError(f"{client.where}: the system names no manager to create the "
                       f"BIOS config job on", address=client.address,
                       system=client.system_label, operation="Jobs")
    jobs = managers[0]["@odata.id"].rstrip("/") + "/" + client.quirks_known().bios_config_job
    response = conn.connector.post(jobs, data={"TargetSettingsURI": settings_path})
    location = response.headers.get("Location")
    if location:
        state = client.read(conn, location).data.get("JobState")
        if state not in JOB_STATES_OK:
            raise BmcError(f"{client.where}: BIOS config job {location} is {state}, "
                           f"not scheduled", address=client.address,
                           system=client.system_label, operation="Jobs")
    LOG.debug("BMC %s: BIOS config job %s for %s", client.address, location, settings_path)
    return location
