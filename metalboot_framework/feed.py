"""The event feed: every event once, in order, behind a stable integer cursor,
and each event as the API and the hooks show it.

With SQLite one writer commits at a time, so event ids grow in commit order
and the id is the cursor. With PostgreSQL, processes commit concurrently: an
event with a smaller id may become visible after one with a larger id, and a
poller that had moved past it would never see it. So each event remembers its
writing transaction (``xid``), and the feed gives feed positions
(``feed_id``) only to events whose transaction is older than every
transaction still in progress (``pg_snapshot_xmin``): those are final. The
positions are handed out in (xid, id) order by one reader at a time (an
advisory lock), so a cursor once passed is never crossed by a new event.
"""

from sqlalchemy import select, text

from metalboot_framework.store import models
from metalboot_framework.timestamps import iso

EVENTS = models.Event.__table__

# Arbitrary constants naming the advisory locks of the sequencers.
_FEED_LOCK = 0x6D6266  # "mbf"
BOOT_CHANGES_LOCK = 0x6D6263  # "mbc"

_SEQUENCE = """
WITH final AS (
    SELECT id, row_number() OVER (ORDER BY xid, id) AS n
    FROM {table}
    WHERE feed_id IS NULL
      AND xid < (pg_snapshot_xmin(pg_current_snapshot())::text)::bigint
), base AS (
    SELECT COALESCE(MAX(feed_id), 0) AS top FROM {table}
)
UPDATE {table} SET feed_id = base.top + final.n
FROM final, base WHERE {table}.id = final.id
"""


def sequence(conn, table, lock):
    """PostgreSQL: give feed positions to the rows of ``table`` (with ``xid``
    and ``feed_id`` columns) whose transactions are final, one sequencer at a
    time (advisory lock ``lock``), in the caller's write transaction. Used by
    the event feed and by the boot data change feed
    (:mod:`metalboot_framework.partition_data`)."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock})
    conn.execute(text(_SEQUENCE.format(table=table)))


def read(services, since=0, limit=100, machine_id=None, migration_id=None):
    """Events after cursor ``since`` and the cursor to pass next time."""
    postgres = not services.db.is_sqlite
    position = EVENTS.c.feed_id if postgres else EVENTS.c.id
    if postgres:
        with services.transactions.now(core=True) as unit:
            sequence(unit.session, "events", _FEED_LOCK)
    q = select(EVENTS, position.label("position")).where(position > since) \
        .order_by(position).limit(limit)
    if machine_id:
        q = q.where(EVENTS.c.machine_id == machine_id)
    if migration_id:
        q = q.where(EVENTS.c.migration_id == migration_id)
    with services.db.read_conn() as conn:
        rows = conn.execute(q).all()
    return rows, (rows[-1].position if rows else since)


def event_dict(ev):
    """An event as GET /v1/events shows it and as hooks receive it."""
    return {"id": ev.id, "kind": ev.kind, "message": ev.message,
            "machine_id": ev.machine_id, "migration_id": ev.migration_id,
            "data": ev.data, "created_at": iso(ev.created_at)}


def sequence_boot_changes(services):
    """PostgreSQL: give boot data feed positions to the changes that are final."""
    if not services.db.is_sqlite:
        with services.transactions.now(core=True) as unit:
            sequence(unit.session, "boot_changes", BOOT_CHANGES_LOCK)


def boot_change_position(services):
    """The column that orders the boot data feed (its cursor)."""
    table = models.BootChange.__table__
    return table.c.id if services.db.is_sqlite else table.c.feed_id
