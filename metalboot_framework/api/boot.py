"""What booting machines (and their BMCs) call: artifacts and boot reports.

Per-machine artifact URLs carry the machine's token, so only what the machine
booted knows them; every fetch of one is recorded as boot evidence with time
and client address. Partition artifacts (ISOs) are the same for every machine
of a partition and are not evidence: a BMC, not the machine, downloads them.
Answers are plain files, with HTTP Range and ETag support, since BMCs read
ISOs in ranges.

What is served, to whom, and what a fetch records is decided in
:mod:`metalboot_framework.artifacts`; how an answer is made (routes, Range and
conditional requests, headers) in :mod:`metalboot_framework.boot_endpoints`.
metalboot-boot-server (the asyncio artifact server for boot storms) answers
through both too; this blueprint only reads its request and sends the reply.
"""

import time

from flask import Blueprint, Response, jsonify, request
from werkzeug.http import http_date

from metalboot_framework import artifacts, boot_endpoints
from metalboot_framework.api import auth, schemas
from metalboot_framework.api.spec import current_services, endpoint
from metalboot_framework.boot_endpoints import Answer, Incoming
from metalboot_framework.exceptions import NotFound

bp = Blueprint("boot", __name__)


def _record(services, rows):
    """Insert evidence rows (committed before the answer leaves); their ids."""
    with services.transactions.now(core=True) as unit:
        ids = artifacts.insert_evidence(unit.session, rows, with_ids=True)
        artifacts.prune_unverified(unit.session, rows,
                                   services.conf.artifacts.max_unverified_evidence)
    for evidence_id, row in zip(ids, rows, strict=True):
        artifacts.log_evidence(evidence_id, row)
    return ids


def _incoming():
    return Incoming(request.method, request.headers, request.remote_addr)


def _file_span(opened, start, stop):
    """The bytes [start, stop) of an opened file, in chunks."""
    while start < stop:
        count = min(stop - start, boot_endpoints.FILE_CHUNK)
        yield boot_endpoints.read_span(opened, start, count)
        start += count


def _body(reply):
    """The body of ``reply`` for the WSGI server, and whether it is the
    server's own file wrapper (to be passed through untouched).

    A span that runs to the end of its file goes to the server's
    ``wsgi.file_wrapper`` where it has one: waitress then sends the file from
    where it stands, no more than the Content-Length, instead of spooling
    every answer over 1 MB (an ISO) to a temporary file first. A span that
    ends before the file does stays a generator: a file wrapper sends to the
    end of the file unless the server stops at the Content-Length, which
    PEP 3333 asks of servers but not every one does."""
    if reply.opened is None:
        return reply.body, False
    wrapper = request.environ.get("wsgi.file_wrapper")
    if wrapper is None or reply.stop != reply.opened.stat.st_size:
        return _file_span(reply.opened, reply.start, reply.stop), False
    reply.opened.file.seek(reply.start)
    return wrapper(reply.opened.file, boot_endpoints.FILE_CHUNK), True


def _serve(answer, reply_of):
    """The :class:`boot_endpoints.Reply` that ``reply_of()`` makes of
    ``answer``, as a Flask response; the answer's file (if any) is closed
    when the response is."""
    try:
        reply = reply_of()
        body, passthrough = _body(reply)
        response = Response(body, status=reply.status, headers=reply.headers,
                            direct_passthrough=passthrough)
        if not any(name == "Content-Type" for name, _ in reply.headers):
            del response.headers["Content-Type"]  # not Flask's default: as sent
        if reply.status != 304:
            response.headers["Content-Length"] = str(reply.length)
    except BaseException:
        if answer.opened is not None:
            answer.opened.close()
        raise
    if answer.opened is not None:
        response.call_on_close(answer.opened.close)
    return response


def _artifact_response(services, machine, partition, interface, token, name, by_mac=None):
    incoming = _incoming()
    artifact, bound = artifacts.machine_artifact(services, machine, partition, interface,
                                                 token, name, incoming.remote)
    answer = Answer.of(artifact, name)

    def reply_of():
        reply, row = boot_endpoints.fetch_reply(incoming, answer, machine.id, interface, name,
                                                http_date(time.time()), bound=bound,
                                                by_mac=by_mac)
        if row is not None:
            _record(services, [row])
        return reply

    return _serve(answer, reply_of)


@bp.get(boot_endpoints.MACHINE_ARTIFACT)
def machine_artifact(machine_id, interface, token, name):
    """A per-machine artifact; its fetch is boot evidence."""
    services = current_services()
    with services.db.read_conn() as conn:
        try:
            machine, partition = services.snapshot(conn, machine_id)
        except NotFound:
            machine = partition = None
    return _artifact_response(services, machine, partition, interface, token, name)


@bp.get(boot_endpoints.SCRIPT_BY_MAC)
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


@bp.get(boot_endpoints.PARTITION_ARTIFACT)
def partition_artifact(partition_id, interface, name):
    """An artifact shared by a partition (e.g. the iPXE ISO); not evidence."""
    services = current_services()
    with services.db.read_conn() as conn:
        partition = artifacts.load_partitions(conn, [partition_id]).get(partition_id)
    answer = Answer.of(artifacts.partition_artifact(services, partition, interface, name), name)
    return _serve(answer, lambda: boot_endpoints.artifact_reply(_incoming(), answer,
                                                                http_date(time.time())))


def _authenticate_report(machine_id):
    """{interface: own token?} of a boot report's token (see
    :func:`artifacts.authenticate_report`), before its body is checked."""
    services = current_services()
    token = boot_endpoints.report_token(_incoming(), request.get_data(cache=True),
                                        auth.role_of)
    with services.db.read_conn() as conn:
        return artifacts.authenticate_report(services, conn,
                                             schemas.canonical_machine_id(machine_id), token)


@bp.post(boot_endpoints.BOOT_REPORT)
@endpoint(role="machine", body=schemas.BootReportSchema, authenticate=_authenticate_report,
          responses={201: schemas.BootReportResultSchema}, extra_errors=(401, 403),
          tags=["boot"], example={"boot_interface": "fake", "message": "booted"})
def report_boot(machine_id, body, auth):
    """A booted machine reports in, with the per-machine token its boot carried.

    The token comes as a bearer token or in the body; it is the one in the
    METAL_BOOT_TOKEN kernel parameter of the machine's boot.ipxe. It is checked
    before the body: without it the answer is 401 (403 for an API token),
    whatever the body holds.
    """
    services = current_services()
    machine_id = schemas.canonical_machine_id(machine_id)
    bound = artifacts.report_binding(services, auth, body["boot_interface"])
    [evidence_id] = _record(services, [artifacts.report_evidence(
        machine_id, body, request.remote_addr, bound=bound)])
    return jsonify({"machine_id": machine_id, "evidence_id": evidence_id}), 201
