"""What booting machines (and their BMCs) call: artifacts and boot reports.

Per-machine artifact URLs carry the machine's token, so only what the machine
booted knows them; every fetch of one is recorded as boot evidence with time
and client address. Partition artifacts (ISOs) are the same for every machine
of a partition and are not evidence: a BMC, not the machine, downloads them.
Answers are plain files, with HTTP Range and ETag support, since BMCs read
ISOs in ranges.
"""

import hashlib
import io
import logging

from flask import Blueprint, jsonify, request, send_file
from sqlalchemy import select

from metalboot_framework import inventory
from metalboot_framework.api import auth, schemas
from metalboot_framework.api.spec import current_services, endpoint
from metalboot_framework.exceptions import NotFound
from metalboot_framework.services import partition_info
from metalboot_framework.store import models
from metalboot_framework.task import BootTask

LOG = logging.getLogger(__name__)

bp = Blueprint("boot", __name__)

# Steps in which a machine migrating to an interface may fetch by MAC.
BOOTING_STEPS = ("activating", "awaiting_boot", "verifying")


def _not_found():
    # The same answer for an unknown machine, a wrong token and a missing
    # artifact: a prober learns nothing.
    return NotFound("no such boot artifact")


def _record(services, machine_id, interface, kind, path, data=None):
    with services.write() as unit:
        ev = models.BootEvidence(machine_id=machine_id, interface=interface, kind=kind,
                                 path=path, client_address=request.remote_addr, data=data,
                                 created_at=models.utcnow())
        unit.session.add(ev)
        unit.session.flush()
        evidence_id = ev.id
    LOG.info("boot evidence %s: machine %s %s %s via %s from %s", evidence_id, machine_id,
             kind, path, interface, request.remote_addr)
    return evidence_id


def _serve(artifact_bytes=None, artifact=None, name="boot.ipxe"):
    if artifact_bytes is not None:
        etag = hashlib.sha256(artifact_bytes).hexdigest()[:32]
        return send_file(io.BytesIO(artifact_bytes), mimetype="text/plain; charset=utf-8",
                         conditional=True, etag=etag, download_name=name, max_age=0)
    if artifact.path is not None:
        return send_file(artifact.path, mimetype=artifact.content_type, conditional=True,
                         etag=True, download_name=name)
    etag = hashlib.sha256(artifact.content).hexdigest()[:32]
    return send_file(io.BytesIO(artifact.content), mimetype=artifact.content_type,
                     conditional=True, etag=etag, download_name=name)


def _artifact_response(services, machine_id, interface, token, name):
    if interface not in services.interfaces:
        raise _not_found()
    with services.db.read() as s:
        try:
            machine, partition = services.snapshot(s, machine_id)
        except NotFound:
            raise _not_found()
    if not services.tokens.verify(machine.id, machine.token_generation, token):
        LOG.warning("artifact %s of machine %s requested with a wrong token from %s",
                    name, machine_id, request.remote_addr)
        raise _not_found()
    iface = services.interfaces.get(interface)
    if name == "boot.ipxe":
        body = services.render_boot_script(machine, partition, interface, token).encode()
        response = _serve(artifact_bytes=body, name=name)
    else:
        task = BootTask(services, machine, partition, interface)
        artifact = iface.get_artifact(task, name)
        if artifact is None:
            raise _not_found()
        response = _serve(artifact=artifact, name=name)
    _record(services, machine.id, interface, "fetch", name,
            data={"range": request.headers.get("Range")} if request.headers.get("Range") else None)
    return response


@bp.get("/boot/<machine_id>/<interface>/<token>/<name>")
def machine_artifact(machine_id, interface, token, name):
    """A per-machine artifact; its fetch is boot evidence."""
    return _artifact_response(current_services(), machine_id, interface, token, name)


@bp.get("/boot/mac/<mac>/<interface>/boot.ipxe")
def boot_script_by_mac(mac, interface):
    """boot.ipxe found by MAC, for scripts shared by a partition (virtual-media ISO).

    Answers only while the machine is on ``interface`` or is being migrated to it.
    """
    services = current_services()
    mac = mac.lower().replace("-", ":")
    with services.db.read() as s:
        nic = s.get(models.Nic, mac)
        if nic is None or interface not in services.interfaces:
            raise _not_found()
        machine = s.get(models.Machine, nic.machine_id)
        allowed = machine.boot_interface == interface
        if not allowed:
            row = s.execute(
                select(models.MigrationMachine.state, models.Migration.target_boot_interface)
                .join(models.Migration,
                      models.Migration.id == models.MigrationMachine.migration_id)
                .where(models.MigrationMachine.machine_id == machine.id,
                       models.MigrationMachine.state.in_(BOOTING_STEPS))).first()
            allowed = row is not None and row.target_boot_interface == interface
        if not allowed:
            raise _not_found()
        token = services.tokens.machine_token(machine.id, machine.token_generation)
        machine_id = machine.id
    return _artifact_response(services, machine_id, interface, token, "boot.ipxe")


@bp.get("/boot/partitions/<partition_id>/<interface>/<name>")
def partition_artifact(partition_id, interface, name):
    """An artifact shared by a partition (e.g. the iPXE ISO); not evidence."""
    services = current_services()
    if interface not in services.interfaces:
        raise _not_found()
    with services.db.read() as s:
        p = s.get(models.Partition, partition_id)
        if p is None:
            raise _not_found()
        partition = partition_info(p)
    artifact = services.interfaces.get(interface).get_partition_artifact(
        services, partition, name)
    if artifact is None:
        raise _not_found()
    return _serve(artifact=artifact, name=name)


@bp.post("/v1/machines/<machine_id>/boot-report")
@endpoint(role=None, body=schemas.BootReportSchema,
          responses={201: schemas.BootReportResultSchema}, extra_errors=(401,),
          tags=["boot"])
def boot_report(machine_id, body):
    """A booted machine reports in, with the per-machine token its boot carried.

    The token comes as a bearer token or in the body; it is the one in the
    METAL_BOOT_TOKEN kernel parameter of the machine's boot.ipxe.
    """
    services = current_services()
    token = auth.bearer_token() or body.get("token")
    with services.db.read() as s:
        machine = s.get(models.Machine, machine_id)
        valid = machine is not None and services.tokens.verify(
            machine.id, machine.token_generation, token)
    if not valid:
        raise auth.Unauthorized("unknown machine or wrong machine token")
    if body["boot_interface"] not in services.interfaces:
        raise inventory.InvalidInput(
            f"{body['boot_interface']} is not an enabled boot interface",
            fields={"boot_interface": ["not an enabled boot interface"]})
    evidence_id = _record(services, machine_id, body["boot_interface"], "report", "boot-report",
                          data={"message": body.get("message", "")})
    return jsonify({"machine_id": machine_id, "evidence_id": evidence_id}), 201
