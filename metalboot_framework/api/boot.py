"""What booting machines (and their BMCs) call: artifacts and boot reports.

Per-machine artifact URLs carry the machine's token, so only what the machine
booted knows them; every fetch of one is recorded as boot evidence with time
and client address. Partition artifacts (ISOs) are the same for every machine
of a partition and are not evidence: a BMC, not the machine, downloads them.
Answers are plain files, with HTTP Range and ETag support, since BMCs read
ISOs in ranges.

What is served, to whom, and what a fetch records is decided in
:mod:`metalboot_framework.artifacts`, which metalboot-boot-server (the asyncio
artifact server for boot storms) shares.
"""

import io

from flask import Blueprint, jsonify, request, send_file

from metalboot_framework import artifacts
from metalboot_framework.api import schemas
from metalboot_framework.api.spec import current_services, endpoint
from metalboot_framework.exceptions import NotFound

bp = Blueprint("boot", __name__)


def _record(services, rows):
    """Insert evidence rows (committed before the answer leaves); their ids."""
    with services.db.write_conn() as conn:
        ids = artifacts.insert_evidence(conn, rows, with_ids=True)
    for evidence_id, row in zip(ids, rows, strict=True):
        artifacts.log_evidence(evidence_id, row)
    return ids


def _serve(artifact, name):
    if artifact.path is not None:
        return send_file(artifact.path, mimetype=artifact.content_type, conditional=True,
                         etag=True, download_name=name)
    return send_file(io.BytesIO(artifact.content), mimetype=artifact.content_type,
                     conditional=True, etag=artifacts.content_etag(artifact.content),
                     download_name=name, max_age=0)


def _artifact_response(services, machine, partition, interface, token, name, by_mac=None):
    artifact, bound = artifacts.machine_artifact(services, machine, partition, interface,
                                                 token, name, request.remote_addr)
    response = _serve(artifact, name)
    if response.status_code in artifacts.EVIDENCE_STATUSES:
        _record(services, [artifacts.fetch_evidence(machine.id, interface, name,
                                                    request.remote_addr,
                                                    request.headers.get("Range"),
                                                    bound=bound, by_mac=by_mac)])
    return response


@bp.get("/boot/<machine_id>/<interface>/<token>/<name>")
def machine_artifact(machine_id, interface, token, name):
    """A per-machine artifact; its fetch is boot evidence."""
    services = current_services()
    with services.db.read_conn() as conn:
        try:
            machine, partition = services.snapshot(conn, machine_id)
        except NotFound:
            machine = partition = None
    return _artifact_response(services, machine, partition, interface, token, name)


@bp.get("/boot/mac/<mac>/<interface>/boot.ipxe")
def boot_script_by_mac(mac, interface):
    """boot.ipxe found by MAC, for scripts shared by a partition (virtual-media ISO).

    Answers only while the machine is on ``interface`` or is being migrated to it.
    The fetch is boot evidence only from an address bound to the machine
    (:func:`artifacts.mac_binding`); from any other it is unverified.
    """
    services = current_services()
    key = (artifacts.normalize_mac(mac), interface)
    with services.db.read_conn() as conn:
        machine_id = artifacts.machines_by_mac(conn, services, [key]).get(key)
        if machine_id is None:
            raise artifacts.not_found()
        machine, partition = services.snapshot(conn, machine_id)
    binding = artifacts.mac_binding(services, machine, request.remote_addr)
    return _artifact_response(services, machine, partition, interface,
                              artifacts.script_token(services, machine, interface, binding),
                              artifacts.SCRIPT_NAME, by_mac=binding)


@bp.get("/boot/partitions/<partition_id>/<interface>/<name>")
def partition_artifact(partition_id, interface, name):
    """An artifact shared by a partition (e.g. the iPXE ISO); not evidence."""
    services = current_services()
    with services.db.read_conn() as conn:
        partition = artifacts.load_partitions(conn, [partition_id]).get(partition_id)
    return _serve(artifacts.partition_artifact(services, partition, interface, name), name)


@bp.post("/v1/machines/<machine_id>/boot-report")
@endpoint(role="machine", body=schemas.BootReportSchema,
          responses={201: schemas.BootReportResultSchema}, extra_errors=(401,),
          tags=["boot"], example={"boot_interface": "fake", "message": "booted"})
def report_boot(machine_id, body):
    """A booted machine reports in, with the per-machine token its boot carried.

    The token comes as a bearer token or in the body; it is the one in the
    METAL_BOOT_TOKEN kernel parameter of the machine's boot.ipxe.
    """
    services = current_services()
    machine_id = schemas.canonical_machine_id(machine_id)
    token = artifacts.bearer_token(request.headers.get("Authorization")) or body.get("token")
    with services.db.read_conn() as conn:
        bound = artifacts.check_report(services, conn, machine_id, token,
                                       body["boot_interface"])
    [evidence_id] = _record(services, [artifacts.report_evidence(
        machine_id, body, request.remote_addr, bound=bound)])
    return jsonify({"machine_id": machine_id, "evidence_id": evidence_id}), 201
