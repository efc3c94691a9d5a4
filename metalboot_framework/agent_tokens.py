"""The bearer tokens of partitions' boot agents.

An agent token lets its holder read one partition's boot data and deliver
that partition's evidence, nothing else (``@endpoint(role="agent")``): a
stolen token, or a compromised agent host, reaches no other partition and no
other endpoint. Only the token's SHA-256 is stored; the token itself is
shown once, when it is made. Tokens are looked up per request, so a revoked
one stops working at once in every API process, without a restart. A rotated
token stays valid for a grace period, so that its agents can be given the new
one first.
"""

import datetime
import hashlib
import secrets

from sqlalchemy import delete, or_, select, update

from metalboot_framework.exceptions import NotFound
from metalboot_framework.store import models
from metalboot_framework.timestamps import iso

_T = models.AgentToken.__table__
TOKEN_PREFIX = "mbat_"  # tells an agent token from others in a log or a file
#: seconds between two updates of a token's ``last_used_at``
LAST_USED_RESOLUTION = 60.0


def _digest(token):
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def token_dict(row):
    return {"id": row.id, "partition": row.partition_id, "description": row.description or "",
            "created_at": iso(row.created_at), "expires_at": iso(row.expires_at),
            "last_used_at": iso(row.last_used_at)}


def _partition_exists(conn, partition_id):
    if conn.execute(select(models.Partition.id).where(
            models.Partition.id == partition_id)).first() is None:
        raise NotFound(f"partition {partition_id} not found")


def create(services, partition_id, description=""):
    """A new token of the partition's agents: (its record, the token)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = {"id": "at-" + secrets.token_hex(8), "partition_id": partition_id,
           "description": description or "", "token_sha256": _digest(token),
           "created_at": models.utcnow(), "expires_at": None, "last_used_at": None}
    with services.transactions.now(core=True) as unit:
        _partition_exists(unit.session, partition_id)
        unit.session.execute(_T.insert(), row)
    return dict(token_dict(_Row(row)), token=token, replaces=None, replaced_expires_at=None)


def list_tokens(services, partition_id):
    now = models.utcnow()
    with services.db.read_conn() as conn:
        _partition_exists(conn, partition_id)
        rows = conn.execute(select(_T).where(
            _T.c.partition_id == partition_id,
            or_(_T.c.expires_at.is_(None), _T.c.expires_at > now)).order_by(_T.c.created_at))
        return [token_dict(r) for r in rows]


def revoke(services, partition_id, token_id):
    with services.transactions.now(core=True) as unit:
        gone = unit.session.execute(delete(_T).where(_T.c.id == token_id,
                                             _T.c.partition_id == partition_id)).rowcount
    if not gone:
        raise NotFound(f"agent token {token_id} of partition {partition_id} not found")


def rotate(services, partition_id, token_id, grace):
    """A new token with the old one's description; the old one expires after
    ``grace`` seconds (0: at once)."""
    with services.db.read_conn() as conn:
        old = conn.execute(select(_T).where(_T.c.id == token_id,
                                            _T.c.partition_id == partition_id)).first()
    if old is None:
        raise NotFound(f"agent token {token_id} of partition {partition_id} not found")
    created = create(services, partition_id, old.description)
    expires = models.utcnow() + datetime.timedelta(seconds=grace)
    with services.transactions.now(core=True) as unit:
        if grace > 0:
            unit.session.execute(update(_T).where(_T.c.id == token_id)
                                 .values(expires_at=expires))
        else:
            unit.session.execute(delete(_T).where(_T.c.id == token_id))
    return dict(created, replaces=token_id, replaced_expires_at=iso(expires) if grace else None)


def partition_of(services, token):
    """The partition whose agents ``token`` belongs to, or None."""
    now = models.utcnow()
    with services.db.read_conn() as conn:
        row = conn.execute(select(_T.c.id, _T.c.partition_id, _T.c.last_used_at).where(
            _T.c.token_sha256 == _digest(token),
            or_(_T.c.expires_at.is_(None), _T.c.expires_at > now))).first()
    if row is None:
        return None
    if row.last_used_at is None or \
            (now - row.last_used_at).total_seconds() > LAST_USED_RESOLUTION:
        with services.transactions.now(core=True) as unit:
            unit.session.execute(update(_T).where(_T.c.id == row.id).values(last_used_at=now))
    return row.partition_id


class _Row:
    def __init__(self, values):
        self.__dict__.update(values)
