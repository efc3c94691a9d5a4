"""Every error leaves the API as {"error": {"code", "message", "fields"}}.

No request ends in a traceback: an unexpected exception is logged with the
request id and answered 500 with a message that names the request id only.
"""

import logging

from flask import g, jsonify
from werkzeug.exceptions import HTTPException

from metalboot_framework.exceptions import MetalbootError

LOG = logging.getLogger(__name__)


def error_response(code, message, fields=None, headers=None):
    response = jsonify({"error": {"code": code, "message": message, "fields": fields or {}}})
    response.status_code = code
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


def register(app):
    @app.errorhandler(MetalbootError)
    def _metalboot_error(exc):
        headers = {"WWW-Authenticate": 'Bearer realm="metalboot"'} if exc.code == 401 else None
        if exc.code >= 500:
            LOG.error("request %s failed: %s", getattr(g, "request_id", "-"), exc.message)
        return error_response(exc.code, exc.message, exc.fields, headers)

    @app.errorhandler(HTTPException)
    def _http_error(exc):
        message = exc.description or exc.name
        if exc.code == 413:
            message = "the request body is larger than [api] max_request_body_size allows"
        elif exc.code == 400:
            message = "malformed request: " + (exc.description or "bad request")
        return error_response(exc.code, message, headers=dict(exc.get_headers()) and {
            k: v for k, v in exc.get_headers() if k.lower() == "allow"})

    @app.errorhandler(Exception)
    def _unexpected(exc):
        request_id = getattr(g, "request_id", "-")
        LOG.exception("request %s failed unexpectedly", request_id)
        return error_response(500, f"internal error; see the server log for request {request_id}")
