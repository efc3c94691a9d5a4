"""/v1/migrations: move machines between boot interfaces, and watch them go."""

from flask import Blueprint, jsonify, url_for

from metalboot_framework import migrations
from metalboot_framework.api import schemas
from metalboot_framework.api.spec import current_services, endpoint
from metalboot_framework.machine_lifecycle import State

bp = Blueprint("migrations", __name__)


def _limit(query):
    return query.get("limit", current_services().conf.api.default_page_size)


@bp.post("/v1/migrations")
@endpoint(role="admin", body=schemas.MigrationCreateSchema,
          responses={202: schemas.MigrationSchema}, extra_errors=(409,), tags=["migrations"],
          location=True, example={"selector": {"partition": "p1", "state": State.READY.value},
                                  "boot_interface": "fake", "max_parallel": 20,
                                  "max_failures": "5%", "canary": 2})
def create_migration(body):
    """Start moving the selected machines to a boot interface (202: it runs in the
    conductor). 409 names machines that already belong to an active migration."""
    created = migrations.create(current_services(), body)
    return jsonify(created), 202, {"Location": url_for(".get_migration",
                                                       migration_id=created["id"])}


@bp.get("/v1/migrations")
@endpoint(query=schemas.MigrationListQuerySchema, responses={200: schemas.MigrationListSchema},
          tags=["migrations"])
def list_migrations(query):
    """Migrations, newest first; ``state`` and ``result`` filter them."""
    items, marker = migrations.list_(current_services(), state=query.get("state"),
                                     limit=_limit(query), marker=query.get("marker"),
                                     result=query.get("result"))
    return jsonify({"migrations": items, "next_marker": marker})


@bp.get("/v1/migrations/<migration_id>")
@endpoint(responses={200: schemas.MigrationSchema}, tags=["migrations"])
def get_migration(migration_id):
    """State, result, machines per step, progress, times, estimated completion,
    reason."""
    return jsonify(migrations.get(current_services(), migration_id))


@bp.get("/v1/migrations/<migration_id>/machines")
@endpoint(query=schemas.MigrationMachineQuerySchema,
          responses={200: schemas.MigrationMachineListSchema}, tags=["migrations"])
def list_migration_machines(migration_id, query):
    """Each machine's step, last error and boot evidence, in migration order."""
    items, marker = migrations.machines(current_services(), migration_id,
                                        state=query.get("state"), limit=_limit(query),
                                        marker=query.get("marker", -1))
    return jsonify({"machines": items, "next_marker": marker})


def _action(name, doc):
    def view(migration_id):
        return jsonify(getattr(migrations, name)(current_services(), migration_id))
    view.__name__ = f"{name}_migration"
    view.__doc__ = doc
    bp.post(f"/v1/migrations/<migration_id>/{name}")(endpoint(
        role="admin", responses={200: schemas.MigrationSchema}, extra_errors=(409,),
        tags=["migrations"])(view))


_action("cancel", "Cancel: no new machine starts, machines in flight are rolled back.")
_action("pause", "Pause: no new machine starts; machines in flight carry on.")
_action("resume", "Resume a paused migration.")
