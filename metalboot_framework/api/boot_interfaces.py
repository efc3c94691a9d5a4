"""GET /v1/boot-interfaces: what this deployment offers."""

from flask import Blueprint, jsonify

from metalboot_framework.api import schemas
from metalboot_framework.api.spec import current_services, endpoint

bp = Blueprint("boot_interfaces", __name__)


@bp.get("/v1/boot-interfaces")
@endpoint(responses={200: schemas.BootInterfaceListSchema}, tags=["boot-interfaces"])
def list_boot_interfaces():
    """The enabled boot interfaces, with their properties and capabilities."""
    services = current_services()
    return jsonify({"boot_interfaces": [
        dict(iface.describe(), default=iface.name == services.interfaces.default)
        for iface in services.interfaces]})
