"""GET / (where to go from here), GET /v1 and the OpenAPI document."""

from flask import Blueprint, Response, current_app, jsonify

from metalboot_framework import __version__
from metalboot_framework.api import schemas
from metalboot_framework.api.spec import endpoint, openapi_document

bp = Blueprint("root", __name__)

# A person who opens the server's address in a browser lands here: name the
# dashboard and the API instead of answering 404. Static, so it needs no token.
INDEX = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>metalboot</title></head>
<body>
<h1>metalboot {version}</h1>
<ul>
<li><a href="/dashboard">/dashboard</a>: the migrations dashboard (read-only; asks for a token)</li>
<li><a href="/v1">/v1</a>: the REST API (bearer token; <code>/v1</code> itself is public)</li>
<li><a href="/v1/openapi.json">/v1/openapi.json</a>: its OpenAPI 3 document</li>
<li><a href="/metrics">/metrics</a>: Prometheus metrics (a reader token unless
<code>[api] metrics_public</code>)</li>
</ul>
</body>
</html>
"""


@bp.get("/")
def index():
    """A small page naming the dashboard and the API (not in the OpenAPI document:
    it answers HTML)."""
    return Response(INDEX.format(version=__version__), mimetype="text/html", headers={
        "Content-Security-Policy": "default-src 'none'", "X-Content-Type-Options": "nosniff"})


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
