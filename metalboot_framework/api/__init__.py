"""The REST API: a Flask app factory and one blueprint per resource."""

import logging
import re
import uuid

from flask import Flask, g, request

from metalboot_framework import logs
from metalboot_framework.api import (bearer_tokens, boot, boot_interfaces, dashboard, errors,
                                     events, machines, metrics, migrations, partition_agents,
                                     partitions, root)
from metalboot_framework.exceptions import NotFound

LOG = logging.getLogger(__name__)

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

BLUEPRINTS = (root.bp, boot_interfaces.bp, partitions.bp, partition_agents.bp, machines.bp,
              migrations.bp, events.bp, boot.bp, metrics.bp, dashboard.bp)


def create_app(services, extra_blueprints=()):
    """Build the WSGI app around ``services`` (see metalboot_framework.services)."""
    app = Flask("metalboot_framework")
    app.config["MAX_CONTENT_LENGTH"] = services.conf.api.max_request_body_size
    app.config["METALBOOT_TOKENS"] = bearer_tokens.api_tokens(services.conf)
    logs.register_secret(*app.config["METALBOOT_TOKENS"][0], *app.config["METALBOOT_TOKENS"][1])
    app.json.sort_keys = False
    app.extensions["metalboot"] = services
    for bp in BLUEPRINTS + tuple(extra_blueprints):
        app.register_blueprint(bp)
    errors.register(app)

    @app.before_request
    def _request_id():
        given = request.headers.get("X-Request-Id", "")
        g.request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:16]
        logs.set_request_id(g.request_id)  # on every log line of this request
        if "\x00" in request.path:
            # no resource has a NUL in its name (and PostgreSQL cannot look one up)
            raise NotFound("not found: the path contains a NUL character")

    @app.after_request
    def _headers(response):
        response.headers["X-Request-Id"] = g.get("request_id", "")
        return response

    return app
