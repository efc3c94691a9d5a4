"""GET /metrics (Prometheus text format), and per-request metrics and access log.

``/metrics`` needs a reader (or admin) bearer token unless ``[api]
metrics_public`` is true. It is not part of the OpenAPI document: it answers
Prometheus' text format (or OpenMetrics, when the scraper asks for it), not
JSON. What it shows is in :mod:`metalboot_framework.metrics`.

The blueprint also times every request of the app (``before_app_request`` /
``after_app_request``): a count and a duration by route template, method and
status, and, with ``[api] access_log``, one INFO line per request with the path
masked by :func:`metalboot_framework.logs.redact` (per-machine tokens in
artifact URLs, ``?token=``).
"""

import logging
import time

from flask import Blueprint, Response, current_app, g, request
from prometheus_client.exposition import choose_encoder

from metalboot_framework import logs, metrics
from metalboot_framework.api import auth
from metalboot_framework.api.spec import current_services

LOG = logging.getLogger(__name__)
ACCESS_LOG = logging.getLogger("metalboot_framework.api.access")

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def scrape():
    """The metrics of this process and the database, for Prometheus."""
    services = current_services()
    if not services.conf.api.metrics_public:
        auth.require("reader")
    registry = current_app.extensions.get("metalboot_metrics_registry")
    if registry is None:
        registry = current_app.extensions["metalboot_metrics_registry"] = \
            metrics.registry_for(services)
    encoder, content_type = choose_encoder(request.headers.get("Accept"))
    return Response(encoder(registry), headers={"Content-Type": content_type,
                                                "Cache-Control": "no-store"})


@bp.before_app_request
def _started():
    g.metalboot_started = time.perf_counter()


@bp.after_app_request
def _observe(response):
    started = g.get("metalboot_started")
    seconds = time.perf_counter() - started if started is not None else 0.0
    endpoint = request.url_rule.rule if request.url_rule is not None else None
    metrics.observe_http(endpoint, request.method, response.status_code, seconds)
    if current_services().conf.api.access_log:
        path = logs.redact(request.full_path.rstrip("?"))
        ACCESS_LOG.info("%s %s %d %.1f ms", request.method, path, response.status_code,
                        seconds * 1000.0,
                        extra={"http_method": request.method, "path": path,
                               "status": response.status_code,
                               "duration_ms": round(seconds * 1000.0, 2),
                               "remote_addr": request.remote_addr})
    return response


@bp.teardown_app_request
def _forget_request_id(_exc):
    logs.clear_request_id()
