"""Virtual media: find the CD devices of a system, insert and eject images.

The system's own VirtualMedia collection is used when it has one (sushy-tools,
newer BMCs), otherwise the first manager's (iDRAC, iLO, XCC, most AMI).
"""

import dataclasses
import logging
from typing import Optional, Sequence

from sushy.resources.manager import virtual_media as vmedia_mod

from metalboot_framework.exceptions import BmcUnsupported

LOG = logging.getLogger(__name__)

CD_TYPES = ("CD", "DVD")


@dataclasses.dataclass(frozen=True)
class MediaDevice:
    path: str
    id: str
    media_types: Sequence[str]
    image: Optional[str]
    inserted: bool

    @property
    def is_cd(self):
        return any(t in CD_TYPES for t in self.media_types)

    @property
    def has_media(self):
        return bool(self.inserted or self.image)


def _collection_path(client, conn):
    system, _ = client.system_json(conn)
    path = (system.get("VirtualMedia") or {}).get("@odata.id")
    if path:
        return path
    managers = (system.get("Links") or {}).get("ManagedBy") or []
    for ref in managers:
        manager, _ = client.get_json(conn, ref["@odata.id"])
        path = (manager.get("VirtualMedia") or {}).get("@odata.id")
        if path:
            return path
    raise BmcUnsupported(
        f"BMC {client.address}, system {client.system_label}: neither the system nor "
        f"its manager has a VirtualMedia collection", address=client.address,
        system=client.system_label, operation="VirtualMedia")


def _devices(client, conn):
    collection, _ = client.get_json(conn, _collection_path(client, conn))
    result = []
    for member in collection.get("Members") or []:
        data, _ = client.get_json(conn, member["@odata.id"])
        result.append(MediaDevice(path=member["@odata.id"], id=data.get("Id", ""),
                                  media_types=tuple(data.get("MediaTypes") or ()),
                                  image=data.get("Image") or None,
                                  inserted=bool(data.get("Inserted"))))
    return result


def devices(client):
    return client.run("read VirtualMedia", lambda conn: _devices(client, conn))


def _sushy_media(client, conn, path):
    return vmedia_mod.VirtualMedia(conn.connector, path,
                                   redfish_version=conn.root.redfish_version,
                                   registries=conn.root.lazy_registries, root=conn.root)


def eject(client, device):
    def post(conn):
        _sushy_media(client, conn, device.path).eject_media()
    client.run(f"POST VirtualMedia.EjectMedia ({device.id})", post)


def eject_all(client, only=None):
    """Eject every device holding media (or those for which ``only(device)``)."""
    ejected = []
    for device in devices(client):
        if device.has_media and (only is None or only(device)):
            eject(client, device)
            ejected.append(device)
    return ejected


def insert_cd(client, image_url):
    """Insert ``image_url`` into the first CD/DVD device; returns the device."""
    cds = [d for d in devices(client) if d.is_cd]
    if not cds:
        raise BmcUnsupported(
            f"BMC {client.address}, system {client.system_label}: no VirtualMedia device "
            f"takes a CD or DVD", address=client.address, system=client.system_label,
            operation="VirtualMedia.InsertMedia")
    device = cds[0]

    def post(conn):
        _sushy_media(client, conn, device.path).insert_media(
            image_url, inserted=True, write_protected=True)
    client.run(f"POST VirtualMedia.InsertMedia ({device.id}, Image={image_url})", post)
    return device
