"""GET /v1/events: every machine and migration event, with a stable cursor."""

from flask import Blueprint, jsonify

from metalboot_framework import feed as feed_mod
from metalboot_framework.api import schemas
from metalboot_framework.api.spec import current_services, endpoint

bp = Blueprint("events", __name__)


@bp.get("/v1/events")
@endpoint(query=schemas.FeedQuerySchema, responses={200: schemas.EventListSchema},
          tags=["events"])
def list_events(query):
    """Events after cursor ``since``, oldest first; poll with the answer's next_cursor.

    A poller that always passes the last next_cursor sees every event exactly once.
    """
    services = current_services()
    rows, cursor = feed_mod.read(
        services, since=query["since"],
        limit=query.get("limit", services.conf.api.default_page_size),
        machine_id=query.get("machine_id"), migration_id=query.get("migration_id"))
    return jsonify({"events": [feed_mod.event_dict(ev) for ev in rows], "next_cursor": cursor})
