"""GET /v1/events: every machine and migration event, with a stable cursor."""

from flask import Blueprint, jsonify
from sqlalchemy import select

from metalboot_framework.api import schemas
from metalboot_framework.api.spec import current_services, endpoint
from metalboot_framework.services import event_dict
from metalboot_framework.store import models

bp = Blueprint("events", __name__)


@bp.get("/v1/events")
@endpoint(query=schemas.FeedQuerySchema, responses={200: schemas.EventListSchema},
          tags=["events"])
def feed(query):
    """Events after cursor ``since``, oldest first; poll with the answer's next_cursor.

    A poller that always passes the last next_cursor sees every event exactly once.
    """
    services = current_services()
    limit = query.get("limit", services.conf.api.default_page_size)
    with services.db.read() as s:
        q = select(models.Event).where(models.Event.id > query["since"]) \
            .order_by(models.Event.id).limit(limit)
        if query.get("machine_id"):
            q = q.where(models.Event.machine_id == query["machine_id"])
        if query.get("migration_id"):
            q = q.where(models.Event.migration_id == query["migration_id"])
        rows = list(s.scalars(q))
    events = [event_dict(ev) for ev in rows]
    return jsonify({"events": events, "next_cursor": rows[-1].id if rows else query["since"]})
