"""/v1/machines: registration, inventory, validation and history of machines."""

import logging

from flask import Blueprint, current_app, jsonify, url_for

from metalboot_framework import inventory
from metalboot_framework.api import schemas
from metalboot_framework.api.spec import OneOf, current_services, endpoint
from metalboot_framework.exceptions import BootInterfaceError, InvalidInput, ValidationFailed
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.steploop import call_blocking

LOG = logging.getLogger(__name__)

bp = Blueprint("machines", __name__)


@bp.url_value_preprocessor
def _canonical_machine_id(_endpoint, values):
    """An id given in capitals (as a caller may keep the one it registered)
    finds its machine: ids are stored in lower case."""
    if values and "machine_id" in values:
        values["machine_id"] = schemas.canonical_machine_id(values["machine_id"])


def _page_size(query):
    return query.get("limit", current_services().conf.api.default_page_size)


@bp.get("/v1/machines")
@endpoint(query=schemas.MachineListQuerySchema, responses={200: schemas.MachineListSchema},
          tags=["machines"])
def list_machines(query):
    """Machines ordered by id, filtered by partition, boot_interface and state.

    Page with ``limit`` and ``marker`` (the last id of the previous page).
    """
    machines, next_marker = inventory.list_machines(
        current_services(), partition=query.get("partition"),
        boot_interface=query.get("boot_interface"), state=query.get("state"),
        limit=_page_size(query), marker=query.get("marker"))
    return jsonify({"machines": machines, "next_marker": next_marker})


@bp.post("/v1/machines")
@endpoint(role="admin", body=schemas.MachineCreateSchema, body_many=10000,
          responses={201: OneOf("MachineCreateResponse", schemas.MachineSchema,
                                schemas.MachineCreatedSchema,
                                description="One object registered: the Machine; a list: "
                                            "MachineCreated.")},
          extra_errors=(409,), tags=["machines"], location=True, example={
              "id": "4c4c4544-0000-1000-8000-000000000001", "partition": "p1",
              "bmc": {"address": "https://10.0.0.1", "username": "root",
                      "password": "secret"},
              "nics": [{"mac": "52:54:00:00:00:01"}], "boot_mode": "uefi",
              "properties": {"rack": "r1"}})
def create_machines(body, many):
    """Register one machine (an object) or many (a list), all or nothing.

    A list answers ``{"machines": [...], "count": n}``; one object answers the
    machine itself.
    """
    services = current_services()
    items = body if many else [body]
    limit = services.conf.api.max_machines_per_request
    if len(items) > limit:
        raise InvalidInput(f"at most {limit} machines per request",
                           fields={"_schema": [f"at most {limit} items"]})
    created = inventory.register_machines(services, items, many)
    if many:
        return jsonify({"machines": created, "count": len(created)}), 201
    return jsonify(created[0]), 201, {"Location": url_for(".get_machine",
                                                          machine_id=created[0]["id"])}


@bp.get("/v1/machines/<machine_id>")
@endpoint(responses={200: schemas.MachineSchema}, tags=["machines"])
def get_machine(machine_id):
    """One machine, with its lock and current migration step."""
    return jsonify(inventory.get_machine(current_services(), machine_id))


@bp.patch("/v1/machines/<machine_id>")
@endpoint(role="admin", body=schemas.MachinePatchSchema,
          responses={200: schemas.MachineSchema}, extra_errors=(409,), tags=["machines"],
          example={"state": State.MAINTENANCE.value})
def patch_machine(machine_id, body):
    """Change fields of a machine; 409 while it is locked or migrating."""
    return jsonify(inventory.patch_machine(current_services(), machine_id, body))


@bp.delete("/v1/machines/<machine_id>")
@endpoint(role="admin", query=schemas.MachineDeleteQuerySchema,
          responses={202: schemas.MachineSchema, 204: None}, extra_errors=(409,),
          tags=["machines"])
def delete_machine(machine_id, query):
    """Forget a machine (its event history stays in GET /v1/events): 204 at once if
    it was never prepared for a boot interface, else 202 and ``deleting`` until the
    conductor has cleaned up what its interface prepared (``error`` with
    ``last_error`` if that fails; DELETE again to retry, or with force=true)."""
    machine = inventory.delete_machine(current_services(), machine_id, force=query["force"])
    if machine is None:
        return "", 204
    return jsonify(machine), 202


@bp.post("/v1/machines/<machine_id>/validate")
@endpoint(role="admin", body=schemas.ValidateRequestSchema,
          responses={200: schemas.ValidateResultSchema}, tags=["machines"],
          example={"boot_interface": "fake"})
def validate_machine(machine_id, body):
    """Ask a boot interface whether the machine can use it; changes nothing."""
    services = current_services()
    view = inventory.get_machine(services, machine_id)
    name = body.get("boot_interface") or view["boot_interface"]
    iface = services.interfaces.require(name)
    task = services.task(machine_id, name)
    result = {"machine_id": machine_id, "boot_interface": name, "valid": True,
              "reason": None, "fields": {}}
    try:
        call_blocking(iface.validate, task)
    except ValidationFailed as exc:
        result.update(valid=False, reason=exc.message, fields=exc.fields)
    except BootInterfaceError as exc:
        result.update(valid=False, reason=exc.message)
    except Exception as exc:  # a plugin bug must not become a 500
        current_app.logger.exception("boot interface %s failed in validate", name)
        result.update(valid=False, reason=f"boot interface {name} failed: "
                                          f"{type(exc).__name__}: {exc}")
    return jsonify(result)


@bp.get("/v1/machines/<machine_id>/events")
@endpoint(query=schemas.EventQuerySchema, responses={200: schemas.EventListSchema},
          tags=["machines"])
def list_machine_events(machine_id, query):
    """The machine's append-only history, oldest first, after cursor ``since``."""
    events, cursor = inventory.machine_events(current_services(), machine_id,
                                              since=query["since"], limit=_page_size(query))
    return jsonify({"events": events, "next_cursor": cursor})


@bp.get("/v1/machines/<machine_id>/evidence")
@endpoint(query=schemas.EventQuerySchema, responses={200: schemas.EvidenceListSchema},
          tags=["machines"])
def list_machine_evidence(machine_id, query):
    """Every fetch of the machine's own artifacts and every boot report, oldest
    first, after cursor ``since``: proof of how it booted, in or out of migrations."""
    evidence, cursor = inventory.machine_evidence(current_services(), machine_id,
                                                  since=query["since"], limit=_page_size(query))
    return jsonify({"evidence": evidence, "next_cursor": cursor})
