"""Virtual media: find the CD devices of a system, insert and eject images.

Devices are looked up in the system's VirtualMedia collection and in those of
its managers (iDRAC, iLO, XCC, most AMI keep them there), every device of
every collection, as Ironic does. Where they are is remembered with the BMC's
connection and looked up again when one of them is gone.

Insert and eject are sent once per step: when the BMC does not answer in time
the device is read back to see what happened, never sent again. After an
eject the device is read back too: some BMCs answer an eject they did not do.

:func:`devices` reads the collections and each device once; pass its result to
:func:`eject_all` and :func:`insert_cd` so that they act on what was read
instead of reading it again.
"""

import dataclasses
import logging
from typing import Optional, Sequence

import sushy

from metalboot_framework.bmc import quirks as quirks_mod
from metalboot_framework.bmc import retry as retry_mod
from metalboot_framework.bmc.client import LINKS, Document, retry_stale_etag
from metalboot_framework.exceptions import BmcError, BmcUnsupported

LOG = logging.getLogger(__name__)

CD_TYPES = ("CD", "DVD")
INSERT, EJECT = "#VirtualMedia.InsertMedia", "#VirtualMedia.EjectMedia"


@dataclasses.dataclass(frozen=True)
class MediaDevice:
    path: str
    id: str
    media_types: Sequence[str]
    image: Optional[str]
    #: The device's Inserted, None where it does not say (DSP2046: optional).
    inserted: Optional[bool]
    #: Targets of the InsertMedia / EjectMedia actions, if the device has them.
    insert_target: Optional[str] = None
    eject_target: Optional[str] = None
    #: The device takes Image/Inserted by PATCH (Lenovo XCC: no actions, Allow PATCH).
    patchable: bool = False
    #: The device's resource as read (ETag included), for a PATCH.
    document: Optional[Document] = dataclasses.field(default=None, compare=False,
                                                     repr=False)

    @property
    def is_cd(self):
        return any(t in CD_TYPES for t in self.media_types)

    @property
    def has_media(self):
        """Inserted decides where the device gives it: some BMCs leave Image
        (and ImageName) set after an eject with Inserted false (Supermicro:
        ansible-collections/community.general #6969, #4839); only a device
        without Inserted is judged by its Image."""
        return self.inserted if self.inserted is not None else bool(self.image)

    def holds(self, image_url):
        """Whether ``image_url`` is inserted here."""
        return self.image == image_url and self.inserted is not False

    @property
    def can_insert(self):
        return bool(self.insert_target or self.patchable)

    def describe(self):
        how = "InsertMedia" if self.insert_target else "PATCH" if self.patchable \
            else "no InsertMedia"
        return f"{self.id} ({', '.join(self.media_types) or 'no media types'}; {how})"


def _collection_paths(client, conn):
    paths = client.fact(conn, "virtual media")
    if paths:
        return paths
    system, _ = client.system_json(conn, reuse=LINKS)
    found = []
    own = (system.get("VirtualMedia") or {}).get("@odata.id")
    if own:
        found.append(own)
    for ref in (system.get("Links") or {}).get("ManagedBy") or []:
        manager = client.manager_json(conn, ref["@odata.id"])
        path = (manager.get("VirtualMedia") or {}).get("@odata.id")
        if path and path.rstrip("/") not in [p.rstrip("/") for p in found]:
            found.append(path)
    if not found:
        raise BmcUnsupported(
            f"{client.where}: neither the system nor its managers have a VirtualMedia "
            f"collection",
            address=client.address, system=client.system_label, operation="VirtualMedia")
    paths = tuple(found)
    client.learn(conn, "virtual media", paths)
    return paths


def _member_paths(client, conn):
    members = client.fact(conn, "virtual media devices")
    if members is None:
        members = []
        for path in _collection_paths(client, conn):
            collection, _ = client.get_json(conn, path)
            for member in collection.get("Members") or []:
                if member["@odata.id"] not in members:
                    members.append(member["@odata.id"])
        members = tuple(members)
        client.learn(conn, "virtual media devices", members)
    return members


def _device(client, conn, path):
    doc = client.read(conn, path)
    data = doc.data
    actions = data.get("Actions") or {}
    allow = (doc.headers.get("Allow") or "").upper()
    return MediaDevice(path=path, id=data.get("Id", ""),
                       media_types=tuple(data.get("MediaTypes") or ()),
                       image=data.get("Image") or None,
                       inserted=None if data.get("Inserted") is None else bool(data["Inserted"]),
                       insert_target=(actions.get(INSERT) or {}).get("target"),
                       eject_target=(actions.get(EJECT) or {}).get("target"),
                       patchable="PATCH" in allow, document=doc)


def _read_devices(client, conn, cd_only):
    cds = client.fact(conn, "virtual media cds") if cd_only else None
    if cds is not None:
        return [_device(client, conn, path) for path in cds]
    result = [_device(client, conn, path) for path in _member_paths(client, conn)]
    client.learn(conn, "virtual media cds", tuple(d.path for d in result if d.is_cd))
    return [d for d in result if d.is_cd] if cd_only else result


def _devices(client, conn, cd_only=False):
    remembered = client.fact(conn, "virtual media") is not None
    try:
        return _read_devices(client, conn, cd_only)
    except sushy.exceptions.ResourceNotFoundError:
        if not remembered:
            raise
        # the collection or a device moved (a BMC update): look them up again
        for fact in ("virtual media", "virtual media devices", "virtual media cds"):
            client.learn(conn, fact, None)
        return _read_devices(client, conn, cd_only)


def devices(client, cd_only=False):
    """The devices of the system's VirtualMedia collections, each read now.

    ``cd_only``: only the CD/DVD devices, and once the connection knows which
    they are (from an earlier read of every device: media types do not change
    while it lives), only those are read -- on Lenovo XCC the floppy is not."""
    return client.run("read VirtualMedia", lambda conn: _devices(client, conn, cd_only))


def insertable_cds(found):
    """The devices of ``found`` that take a CD/DVD and can be given one."""
    return [d for d in found if d.is_cd and d.can_insert]


def insert_order(client, found):
    """:func:`insertable_cds` of ``found`` in the order an insert tries them:
    a vendor rule's slot first, where the manager's model (read by validate
    on this connection) calls for one (no refused insert on iDRAC10), then
    as the BMC lists them."""
    first = quirks_mod.virtual_media_slots(client.quirks_known(),
                                           client.remembered("manager model")) or ()
    return sorted(insertable_cds(found), key=lambda d: d.id not in first)


def read_device(client, device):
    return client.run(f"read VirtualMedia {device.id}",
                      lambda conn: _device(client, conn, device.path))


def _send(client, operation, device, send):
    """Run ``send(conn)`` once; None when done, else the OutcomeUnknown."""
    try:
        client.run(operation, send, idempotent=False)
        return None
    except retry_mod.OutcomeUnknown as unknown:
        LOG.warning("BMC %s system %s: %s: %s; not sent again, reading %s instead",
                    client.address, client.system_label, operation, unknown, device.id)
        return unknown


def eject(client, device):
    """Eject ``device`` and read it back; BmcError if it still holds media."""
    operation = f"POST VirtualMedia.EjectMedia ({device.id})"

    def send(conn):
        if device.eject_target:
            # a JSON body, even if empty: iLO answers 415 to a POST without one
            conn.connector.post(device.eject_target, data={})
        elif device.patchable:
            def change(fresh):
                now = _device(client, conn, device.path) if fresh else device
                if fresh and not now.has_media:
                    return  # ejected meanwhile: nothing left to write
                conn.connector.patch(device.path, data={"Image": None, "Inserted": False},
                                     etag=now.document.etag if now.document else None)
            retry_stale_etag(change)
        else:
            raise BmcUnsupported(
                f"{client.where}: VirtualMedia {device.id} has no EjectMedia action",
                address=client.address,
                system=client.system_label, operation=operation)
    _send(client, operation, device, send)
    after = read_device(client, device)
    if after.has_media:
        request = f"POST {device.eject_target}" if device.eject_target else \
            f"PATCH {device.path}"
        raise BmcError(
            f"{client.where}: {operation} was answered ({request}), but {device.id} still "
            f"holds {after.image or 'media'} (Inserted={after.inserted})",
            address=client.address, system=client.system_label, operation=operation)
    return after


def eject_all(client, only=None, found=None):
    """Eject every device holding media for which ``only(device)`` (all without
    it); ``found``: the devices as :func:`devices` read them (read here otherwise).
    Returns the ejected devices as read back after the eject."""
    ejected = []
    for device in devices(client) if found is None else found:
        if device.has_media and (only is None or only(device)):
            ejected.append(eject(client, device))
    return ejected


def replace_read(found, fresh):
    """``found`` with the devices of ``fresh`` (read later) in their place."""
    by_path = {d.path: d for d in fresh}
    return [by_path.get(d.path, d) for d in found]


def _insert_one(client, device, image_url):
    operation = f"POST VirtualMedia.InsertMedia ({device.id}, Image={image_url})"
    # the Image alone: both Inserted and WriteProtected default to true, and
    # Supermicro X11/X12 answer 400 PropertyUnknown when either is sent
    # (openstack/sushy virtual_media.py leaves them out for the same reason)
    body = {"Image": image_url}

    def send(conn):
        if device.insert_target:
            try:
                conn.connector.post(device.insert_target, data=body)
            except sushy.exceptions.BadRequestError as exc:
                # some BMCs want the protocol named (sushy does the same)
                if "TransferProtocolType" not in f"{exc.detail} {exc.extended_info}" or \
                        "TransferProtocolType" in body:
                    raise
                body["TransferProtocolType"] = image_url.split(":", 1)[0].upper()
                conn.connector.post(device.insert_target, data=body)
        else:
            def change(fresh):
                now = _device(client, conn, device.path) if fresh else device
                if fresh and now.holds(image_url):
                    return
                if fresh and now.has_media:
                    raise BmcError(
                        f"{client.where}: {device.id} was given {now.image} while the insert "
                        f"was under way; not replaced", address=client.address,
                        system=client.system_label, operation=operation, status_code=409)
                conn.connector.patch(device.path, data=dict(body, Inserted=True,
                                                            WriteProtected=True),
                                     etag=now.document.etag if now.document else None)
            retry_stale_etag(change)
    unknown = _send(client, operation, device, send)
    if unknown is not None:
        after = read_device(client, device)
        if not after.holds(image_url):
            raise BmcError(
                f"{client.where}: {operation}: {unknown}; {device.id} does not hold the image "
                f"(Image={after.image}, Inserted={after.inserted}); not sent again",
                address=client.address, system=client.system_label, operation=operation)


def insert_cd(client, image_url, found=None):
    """Insert ``image_url`` into the first CD/DVD device that takes it; returns
    the device.

    Tries every CD/DVD device with an InsertMedia action (or a PATCH-able one),
    in the order the BMC lists them (a vendor rule's slot first), skipping
    those that answer 400 or 405 (a slot the vendor does not boot from, a
    drive mapped to the host's own).
    ``found``: the devices as :func:`devices` read them (read here otherwise).
    """
    found = devices(client) if found is None else found
    cds = insert_order(client, found)
    if not cds:
        raise BmcUnsupported(
            f"{client.where}: no VirtualMedia device takes a CD or DVD with InsertMedia "
            f"(devices: {', '.join(d.describe() for d in found) or 'none'})",
            address=client.address,
            system=client.system_label, operation="VirtualMedia.InsertMedia")
    refusals = []
    for device in cds:
        try:
            _insert_one(client, device, image_url)
            return device
        except BmcError as exc:
            if exc.status_code not in (400, 405) or len(cds) == 1:
                raise
            LOG.info("BMC %s: %s refused the insert, trying the next device: %s",
                     client.address, device.id, exc)
            refusals.append(str(exc))
    raise BmcError("; ".join(refusals), address=client.address, system=client.system_label,
                   operation="VirtualMedia.InsertMedia", status_code=400)
