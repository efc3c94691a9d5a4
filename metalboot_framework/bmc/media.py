"""Virtual media: find the CD devices of a system, insert and eject images.

The system's own VirtualMedia collection is used when it has one (sushy-tools,
newer BMCs), otherwise the first manager's (iDRAC, iLO, XCC, most AMI). Where
it is and which devices it lists are remembered with the BMC's connection, and
looked up again when one of them is gone.

:func:`devices` reads the collection and each device once; pass its result to
:func:`eject_all` and :func:`insert_cd` so that they act on what was read
instead of reading it again.
"""

import dataclasses
import logging
from typing import Optional, Sequence

import sushy
from sushy.resources.manager import virtual_media as vmedia_mod

from metalboot_framework.bmc.client import LINKS, Document
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
    #: The device's resource as read (actions included), for the insert/eject.
    document: Optional[Document] = dataclasses.field(default=None, compare=False,
                                                     repr=False)

    @property
    def is_cd(self):
        return any(t in CD_TYPES for t in self.media_types)

    @property
    def has_media(self):
        return bool(self.inserted or self.image)


def _collection_path(client, conn):
    path = client.fact(conn, "virtual media")
    if path:
        return path
    system, _ = client.system_json(conn, reuse=LINKS)
    path = (system.get("VirtualMedia") or {}).get("@odata.id")
    for ref in (system.get("Links") or {}).get("ManagedBy") or []:
        if path:
            break
        manager, _ = client.get_json(conn, ref["@odata.id"])
        path = (manager.get("VirtualMedia") or {}).get("@odata.id")
    if not path:
        raise BmcUnsupported(
            f"BMC {client.address}, system {client.system_label}: neither the system nor "
            f"its manager has a VirtualMedia collection", address=client.address,
            system=client.system_label, operation="VirtualMedia")
    client.learn(conn, "virtual media", path)
    return path


def _member_paths(client, conn):
    members = client.fact(conn, "virtual media devices")
    if members is None:
        collection, _ = client.get_json(conn, _collection_path(client, conn))
        members = tuple(m["@odata.id"] for m in collection.get("Members") or [])
        client.learn(conn, "virtual media devices", members)
    return members


def _read_devices(client, conn, stop):
    result = []
    for path in _member_paths(client, conn):
        doc = client.read(conn, path)
        data = doc.data
        result.append(MediaDevice(path=path, id=data.get("Id", ""),
                                  media_types=tuple(data.get("MediaTypes") or ()),
                                  image=data.get("Image") or None,
                                  inserted=bool(data.get("Inserted")), document=doc))
        if stop is not None and stop(result[-1]):
            break
    return result


def _devices(client, conn, stop=None):
    remembered = client.fact(conn, "virtual media") is not None
    try:
        return _read_devices(client, conn, stop)
    except sushy.exceptions.ResourceNotFoundError:
        if not remembered:
            raise
        # the collection or a device moved (a BMC update): look them up again
        client.learn(conn, "virtual media", None)
        client.learn(conn, "virtual media devices", None)
        return _read_devices(client, conn, stop)


def devices(client):
    return client.run("read VirtualMedia", lambda conn: _devices(client, conn))


def find_cd(client):
    """The first device that takes a CD or DVD, or None (reads no further)."""
    found = client.run("read VirtualMedia",
                       lambda conn: _devices(client, conn, stop=lambda d: d.is_cd))
    return found[-1] if found and found[-1].is_cd else None


def _sushy_media(client, conn, device, attempt):
    # the first attempt acts on the device as read; a retry reads it again
    return client.sushy_resource(conn, vmedia_mod.VirtualMedia, device.path,
                                 device.document if attempt == 1 else None)


def _post(client, operation, device, action):
    attempts = [0]

    def post(conn):
        attempts[0] += 1
        action(_sushy_media(client, conn, device, attempts[0]))
    client.run(operation, post)


def eject(client, device):
    _post(client, f"POST VirtualMedia.EjectMedia ({device.id})", device,
          lambda medium: medium.eject_media())


def eject_all(client, only=None, found=None):
    """Eject every device holding media (or those for which ``only(device)``);
    ``found``: the devices as :func:`devices` read them (read here otherwise)."""
    ejected = []
    for device in devices(client) if found is None else found:
        if device.has_media and (only is None or only(device)):
            eject(client, device)
            ejected.append(device)
    return ejected


def insert_cd(client, image_url, found=None):
    """Insert ``image_url`` into the first CD/DVD device; returns the device.

    ``found``: the devices as :func:`devices` read them (read here otherwise),
    the first CD emptied by :func:`eject_all` if it held something.
    """
    cds = [d for d in (devices(client) if found is None else found) if d.is_cd]
    if not cds:
        raise BmcUnsupported(
            f"BMC {client.address}, system {client.system_label}: no VirtualMedia device "
            f"takes a CD or DVD", address=client.address, system=client.system_label,
            operation="VirtualMedia.InsertMedia")
    device = cds[0]
    _post(client, f"POST VirtualMedia.InsertMedia ({device.id}, Image={image_url})", device,
          lambda medium: medium.insert_media(image_url, inserted=True, write_protected=True))
    return device
