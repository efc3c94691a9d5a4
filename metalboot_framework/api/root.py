"""GET /v1 and the OpenAPI document."""

from flask import Blueprint, current_app, jsonify

from metalboot_framework import __version__
from metalboot_framework.api import schemas
from metalboot_framework.api.spec import endpoint, openapi_document

bp = Blueprint("root", __name__)


@bp.get("/v1")
@endpoint(role=None, responses={200: schemas.RootSchema}, tags=["root"])
def get_root():
    """Name, version and the collections of this API."""
    return jsonify({"name": "metalboot", "version": __version__, "links": {
        "openapi": "/v1/openapi.json", "boot_interfaces": "/v1/boot-interfaces",
        "partitions": "/v1/partitions", "machines": "/v1/machines",
        "migrations": "/v1/migrations", "events": "/v1/events"}})


@bp.get("/v1/openapi.json")
def openapi():
    """The OpenAPI 3 document, generated from the endpoint marks and schemas."""
    doc = current_app.extensions.get("metalboot_openapi")
    if doc is None:
        doc = current_app.extensions["metalboot_openapi"] = openapi_document(current_app)
    return jsonify(doc)
