"""A partition's boot data as its boot agents replicate it, and the evidence
they deliver back.

A ``metalboot-boot-agent`` serves one partition's booting machines from a
copy of what a fetch needs (per machine: NICs, boot interface, migration
targets it is booting through, and its per-machine tokens; per partition: its
boot configuration). It reads that copy here, through the API, with a
partition-scoped token: a snapshot, then a change feed by cursor
(``boot_changes``, written by database triggers on every change of what the
snapshot holds, so no code path can forget to announce one). The agent holds
no secret: the tokens come signed with the data, for the partition's machines
only. What it journals (fetches, boot reports) comes back through
:func:`store_evidence`, stored exactly once per ``agent:seq``.
"""

import base64
import datetime
import hashlib
import logging
import re
import time

import sqlalchemy
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
from sqlalchemy import func, select

from metalboot_framework import artifacts, feed, machine_steps, partition_dhcp
from metalboot_framework.exceptions import Gone, InvalidInput, NotFound
from metalboot_framework.store import models
from metalboot_framework.timestamps import iso

LOG = logging.getLogger(__name__)

_M, _N, _P = models.Machine.__table__, models.Nic.__table__, models.Partition.__table__
_MM, _MIG = models.MigrationMachine.__table__, models.Migration.__table__
_CH, _EV = models.BootChange.__table__, models.BootEvidence.__table__

PARTITION_FIELDS = ("id", "kernel_url", "initrd_url", "cmdline", "metal_boot_url",
                    "metal_hammer_version", "properties", "boot_url")
MACHINE_FIELDS = ("id", "partition_id", "boot_interface", "boot_mode", "state", "properties",
                  "token_generation", "prepared_interface")
NIC_FIELDS = ("mac", "duid", "ipv4_address", "ipv6_address")
#: the most changes one answer of the feed reads (then ``more`` is true)
CHANGES_PER_ANSWER = 2000
#: seconds between two looks at the feed while a long poll waits
POLL_INTERVAL = 0.1
#: the longest a long poll waits
MAX_WAIT = 30
AGENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


# -- what the agents read ---------------------------------------------------------------
def partition_record(row):
    record = {name: getattr(row, name) for name in PARTITION_FIELDS}
    record["cmdline"] = record["cmdline"] or ""
    record["properties"] = dict(record["properties"] or {})
    return record


def machine_records(conn, services, partition_id, machine_ids=None):
    """The records of the partition's machines (of ``machine_ids`` only, if
    given), with their NICs, the targets of the migrations booting them and
    their tokens for every enabled interface."""
    query = select(*(_M.c[name] for name in MACHINE_FIELDS)) \
        .where(_M.c.partition_id == partition_id).order_by(_M.c.id)
    nics_query = select(_N.c.machine_id, *(_N.c[n] for n in NIC_FIELDS)) \
        .join(_M, _M.c.id == _N.c.machine_id).where(_M.c.partition_id == partition_id) \
        .order_by(_N.c.machine_id, _N.c.position)
    booting_query = select(_MM.c.machine_id, _MIG.c.target_boot_interface) \
        .join(_MIG, _MIG.c.id == _MM.c.migration_id).join(_M, _M.c.id == _MM.c.machine_id) \
        .where(_M.c.partition_id == partition_id, _MM.c.state.in_(machine_steps.BOOTING))
    if machine_ids is not None:
        if not machine_ids:
            return []
        ids = sqlalchemy.bindparam("ids", expanding=True)
        query = query.where(_M.c.id.in_(ids))
        nics_query = nics_query.where(_M.c.id.in_(ids))
        booting_query = booting_query.where(_M.c.id.in_(ids))
    params = {"ids": list(machine_ids)} if machine_ids is not None else {}
    nics, booting = {}, {}
    for row in conn.execute(nics_query, params):
        nics.setdefault(row.machine_id, []).append({n: getattr(row, n) for n in NIC_FIELDS})
    for machine_id, target in conn.execute(booting_query, params):
        booting.setdefault(machine_id, []).append(target)
    dhcp = partition_dhcp.entries_by_machine(conn, partition_id, machine_ids)
    interfaces = services.interfaces.names()
    tokens = services.tokens
    records = []
    for row in conn.execute(query, params):
        record = {name: getattr(row, name) for name in MACHINE_FIELDS}
        record["properties"] = dict(record["properties"] or {})
        record["nics"] = nics.get(row.id, [])
        record["booting_to"] = sorted(set(booting.get(row.id, ())))
        generation = row.token_generation
        record["tokens"] = {
            name: [tokens.machine_token(row.id, generation, name),
                   tokens.unbound_token(row.id, generation, name)] for name in interfaces}
        record["dhcp"] = dhcp.get(row.id, {})
        records.append(record)
    return records


def _partition_row(conn, partition_id):
    row = conn.execute(select(_P).where(_P.c.id == partition_id)).first()
    if row is None:
        raise NotFound(f"partition {partition_id} not found")
    return row


def snapshot(services, partition_id):
    """GET /v1/partitions/{id}/boot-data: everything the partition's agents
    serve, and the cursor of the change feed it is current to."""
    feed.sequence_boot_changes(services)
    with services.db.read_conn() as conn:  # one read transaction: the cursor fits the data
        cursor = conn.execute(select(func.coalesce(
            func.max(feed.boot_change_position(services)), 0))).scalar()
        partition = partition_record(_partition_row(conn, partition_id))
        machines = machine_records(conn, services, partition_id)
    return {"partition": partition, "interfaces": services.interfaces.names(),
            "machines": machines, "cursor": cursor,
            "generated_at": iso(models.utcnow())}


def changes(services, partition_id, since, wait=0.0):
    """GET /v1/partitions/{id}/boot-data/changes: what changed after cursor
    ``since``, waiting up to ``wait`` seconds for a change (long poll; a
    process shutting down answers at once)."""
    deadline = time.monotonic() + min(max(wait, 0.0), MAX_WAIT)
    position = feed.boot_change_position(services)
    while True:
        with services.db.read_conn() as conn:
            _partition_row(conn, partition_id)
            top = conn.execute(select(func.coalesce(func.max(_CH.c.id), 0))).scalar()
            pending = conn.execute(select(_CH.c.id).where(
                _CH.c.partition_id == partition_id,
                (position > since) if services.db.is_sqlite else
                ((_CH.c.feed_id > since) | _CH.c.feed_id.is_(None))).limit(1)).first()
        if since > top:
            raise Gone(f"cursor {since} is newer than the feed ({top}): the database was "
                       "restored or replaced; take a new snapshot")
        over = time.monotonic() >= deadline or services.stopping.is_set()
        if pending is not None:
            answer = _read_changes(services, partition_id, since)
            if answer["cursor"] != since or over:
                return answer
        elif over:
            return {"cursor": since, "partition": None, "machines": [], "removed": [],
                    "more": False}
        services.stopping.wait(POLL_INTERVAL)


def _read_changes(services, partition_id, since):
    feed.sequence_boot_changes(services)
    position = feed.boot_change_position(services)
    with services.db.read_conn() as conn:
        rows = conn.execute(
            select(position, _CH.c.machine_id)
            .where(_CH.c.partition_id == partition_id, position > since)
            .order_by(position).limit(CHANGES_PER_ANSWER)).all()
        if not rows:
            return {"cursor": since, "partition": None, "machines": [], "removed": [],
                    "more": False}
        changed = sorted({r.machine_id for r in rows if r.machine_id is not None})
        partition = partition_record(_partition_row(conn, partition_id)) \
            if any(r.machine_id is None for r in rows) else None
        machines = machine_records(conn, services, partition_id, changed)
    present = {m["id"] for m in machines}
    return {"cursor": rows[-1][0], "partition": partition, "machines": machines,
            "removed": [m for m in changed if m not in present],
            "more": len(rows) == CHANGES_PER_ANSWER}


def partition_artifact(services, partition_id, interface, name):
    """(Artifact, sha256 hex) that GET /boot/partitions/{id}/{interface}/{name}
    serves, for an agent to cache (the common 404 otherwise)."""
    with services.db.read_conn() as conn:
        partition = artifacts.load_partitions(conn, [partition_id]).get(partition_id)
    artifact = artifacts.partition_artifact(services, partition, interface, name)
    digest = hashlib.sha256()
    if artifact.path:
        with open(artifact.path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    else:
        digest.update(artifact.content)
    return artifact, digest


def digest_headers(digest):
    return {"Digest": "sha-256=" + base64.b64encode(digest.digest()).decode(),
            "X-Content-SHA256": digest.hexdigest()}


# -- what the agents deliver ------------------------------------------------------------
def store_evidence(services, partition_id, agent, journal, records):
    """Store the evidence records an agent of the partition delivered, each
    once (key ``agent:journal:seq``); records of machines not in the partition
    are refused (not stored). {"stored", "duplicates", "refused"}."""
    for name, value in (("agent", agent), ("journal", journal)):
        if not AGENT_ID.fullmatch(value):
            raise InvalidInput(f"{name}: letters, digits, '.', '_' and '-' only",
                               fields={name: [f"Not a valid {name} id."]})
    keys = [f"{agent}:{journal}:{r['seq']}" for r in records]
    machine_ids = list({r["machine_id"] for r in records})
    with services.transactions.now(core=True) as unit:
        conn = unit.session
        ours = set(conn.execute(select(_M.c.id).where(
            _M.c.id.in_(machine_ids), _M.c.partition_id == partition_id)).scalars()) \
            if machine_ids else set()
        seen = set(conn.execute(select(_EV.c.delivery).where(_EV.c.delivery.in_(keys)))
                   .scalars()) if keys else set()
        rows, refused = [], 0
        for key, record in zip(keys, records, strict=True):
            if record["machine_id"] not in ours:
                refused += 1
                continue
            if key in seen:  # stored before, or earlier in this batch
                continue
            seen.add(key)
            row = artifacts.evidence_row(record["machine_id"], record["interface"],
                                         record["kind"], record["path"],
                                         record.get("client_address"), record.get("data"))
            row["created_at"] = _utc(record["created_at"])
            row["delivery"] = key
            rows.append(row)
        if rows:
            insert = (sqlalchemy.dialects.sqlite.insert if services.db.is_sqlite
                      else sqlalchemy.dialects.postgresql.insert)(_EV)
            conn.execute(insert.on_conflict_do_nothing(index_elements=["delivery"]), rows)
            # unverified rows stay bounded per machine, as the API and boot server keep them
            artifacts.prune_unverified(conn, rows,
                                       services.conf.artifacts.max_unverified_evidence)
    if refused:
        LOG.warning("agent %s of partition %s delivered %d evidence record(s) of machines "
                    "not in the partition: not stored", agent, partition_id, refused)
    for row in rows:
        artifacts.log_evidence(row["delivery"], row)
    return {"stored": len(rows), "duplicates": len(records) - len(rows) - refused,
            "refused": refused}


def _utc(value):
    """A timestamp as stored: naive UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value
