"""/v1/partitions: partitions and their boot configuration."""

from flask import Blueprint, jsonify, url_for

from metalboot_framework import inventory
from metalboot_framework.api import schemas
from metalboot_framework.api.spec import current_services, endpoint

bp = Blueprint("partitions", __name__)


@bp.get("/v1/partitions")
@endpoint(responses={200: schemas.PartitionListSchema}, tags=["partitions"])
def list_partitions():
    """All partitions, with the number of machines in each."""
    return jsonify({"partitions": inventory.list_partitions(current_services())})


@bp.post("/v1/partitions")
@endpoint(role="admin", body=schemas.PartitionCreateSchema,
          responses={201: schemas.PartitionSchema}, extra_errors=(409,), tags=["partitions"],
          location=True, example={
              "id": "p1", "description": "rack row 1",
              "boot": {"kernel_url": "http://images.example/metal-hammer/vmlinuz",
                       "initrd_url": "http://images.example/metal-hammer/initrd.img",
                       "cmdline": "console=ttyS0", "metal_hammer_version": "v0.13.0"}})
def create_partition(body):
    """Create a partition with its boot configuration."""
    created = inventory.create_partition(current_services(), body)
    return jsonify(created), 201, {"Location": url_for(".get_partition",
                                                       partition_id=created["id"])}


@bp.get("/v1/partitions/<partition_id>")
@endpoint(responses={200: schemas.PartitionSchema}, tags=["partitions"])
def get_partition(partition_id):
    """One partition."""
    return jsonify(inventory.get_partition(current_services(), partition_id))


@bp.patch("/v1/partitions/<partition_id>")
@endpoint(role="admin", body=schemas.PartitionPatchSchema,
          responses={200: schemas.PartitionSchema}, tags=["partitions"],
          example={"boot": {"cmdline": "console=ttyS0,115200"}})
def patch_partition(partition_id, body):
    """Change a partition's boot configuration; machines boot with it from now on."""
    return jsonify(inventory.update_partition(current_services(), partition_id, body))


@bp.delete("/v1/partitions/<partition_id>")
@endpoint(role="admin", responses={204: None}, extra_errors=(409,), tags=["partitions"])
def delete_partition(partition_id):
    """Delete a partition that has no machines."""
    inventory.delete_partition(current_services(), partition_id)
    return "", 204
