"""What both artifact servers decide alike: which artifact a URL names, who may
fetch it, and what a fetch leaves as boot evidence.

Two servers answer booting machines: the Flask blueprint
(:mod:`metalboot_framework.api.boot`, in metalboot-server and metalboot-api) and
metalboot-boot-server (:mod:`metalboot_framework.boot_server`, asyncio). Both
call the functions here (and answer over HTTP through
:mod:`metalboot_framework.boot_endpoints`), so that the token check, the "same 404 for
everything" rule, the MAC lookup rule, rendering and the evidence rows exist
once. The functions take a database connection (or session) from the caller and
do no I/O of their own beyond what a plugin's ``get_artifact`` does, so the
asyncio server can run them in a thread and in batches.
"""

import datetime
import functools
import hashlib
import logging
import os
import unicodedata
import zlib
from urllib.parse import quote

import sqlalchemy
from werkzeug.datastructures import Headers
from werkzeug.utils import get_content_type

from metalboot_framework import machine_steps, metrics
from metalboot_framework.boot_interface import Artifact
from metalboot_framework.exceptions import NotFound, Unauthorized
from metalboot_framework.store import driver_insert, models
from metalboot_framework.snapshots import machine_info, partition_info
from metalboot_framework.task import BootTask
from metalboot_framework.tokens import UNBOUND

LOG = logging.getLogger(__name__)

SCRIPT_NAME = "boot.ipxe"
SCRIPT_CONTENT_TYPE = "text/plain"
NOT_FOUND_MESSAGE = "no such boot artifact"

# Steps in which a machine migrating to an interface may fetch by MAC.
BOOTING_STEPS = machine_steps.BOOTING

_M, _N, _P = models.Machine.__table__, models.Nic.__table__, models.Partition.__table__
_MM, _MIG = models.MigrationMachine.__table__, models.Migration.__table__
_EVIDENCE = models.BootEvidence.__table__
_EVIDENCE_INSERT = _EVIDENCE.insert()
_EVIDENCE_INSERT_ID = _EVIDENCE.insert().returning(_EVIDENCE.c.id)
# What MachineInfo and PartitionInfo are made of (and their revisions): every
# column but timestamps (costly to parse, unused) and the machine's drift report.
_MACHINE_COLUMNS = [c for c in _M.c
                    if not isinstance(c.type, sqlalchemy.DateTime) and c.name != "drift"]
_PARTITION_COLUMNS = [c for c in _P.c if not isinstance(c.type, sqlalchemy.DateTime)]
# Tells a machine from an earlier one with the same id (deleted, registered again:
# its revision starts over). As stored: no parsing of the timestamp.
_INCARNATION = sqlalchemy.type_coerce(_M.c.created_at, sqlalchemy.String).label("incarnation")


def not_found():
    """The same answer for an unknown machine, a wrong token, a disabled
    interface and a missing artifact: a prober learns nothing."""
    return NotFound(NOT_FOUND_MESSAGE)


def normalize_mac(mac):
    return mac.lower().replace("-", ":")


# -- reading what a fetch needs, for one key or many ---------------------------------
def load_snapshots(conn, machine_ids, password_key):
    """{machine id: (MachineInfo, PartitionInfo, revisions)} for those of
    ``machine_ids`` that exist, in three queries however many ids there are;
    ``revisions`` is what :func:`snapshot_revisions` gives for the machine.
    ``password_key`` opens a BMC password if a plugin reads one."""
    ids = list(dict.fromkeys(machine_ids))
    if not ids:
        return {}
    machines = conn.execute(sqlalchemy.select(*_MACHINE_COLUMNS, _INCARNATION)
                            .where(_M.c.id.in_(ids))).all()
    if not machines:
        return {}
    nics = {}
    for nic in conn.execute(sqlalchemy.select(_N).where(_N.c.machine_id.in_(
            [m.id for m in machines])).order_by(_N.c.machine_id, _N.c.position)):
        nics.setdefault(nic.machine_id, []).append(nic)
    partitions = {p.id: (partition_info(p), p.revision)
                  for p in _partition_rows(conn, {m.partition_id for m in machines})}
    found = {}
    for m in machines:
        partition, partition_revision = partitions[m.partition_id]
        found[m.id] = (machine_info(m, nics.get(m.id, ()), password_key), partition,
                       (m.revision, m.incarnation, partition_revision))
    return found


def snapshot_revisions(conn, machine_ids):
    """{machine id: (machine revision, incarnation, partition revision)} for those
    of ``machine_ids`` that exist: one narrow query that tells whether a snapshot
    :func:`load_snapshots` gave is still what the database holds (triggers bump
    the revisions on every change of what a snapshot is made of; the incarnation,
    the machine's creation time, tells a machine registered again after its
    deletion from the one before, whose revisions may have been the same).
    ``machine_ids`` None: of every machine."""
    query = sqlalchemy.select(_M.c.id, _M.c.revision, _INCARNATION, _P.c.revision) \
        .join(_P, _P.c.id == _M.c.partition_id)
    if machine_ids is not None:  # None: every machine
        ids = list(dict.fromkeys(machine_ids))
        if not ids:
            return {}
        query = query.where(_M.c.id.in_(ids))
    return {row[0]: (row[1], row[2], row[3]) for row in conn.execute(query)}


def _partition_rows(conn, partition_ids):
    ids = list(dict.fromkeys(partition_ids))
    if not ids:
        return []
    return conn.execute(sqlalchemy.select(*_PARTITION_COLUMNS).where(_P.c.id.in_(ids))).all()


def load_partitions(conn, partition_ids):
    """{partition id: PartitionInfo} for those of ``partition_ids`` that exist."""
    return {p.id: partition_info(p) for p in _partition_rows(conn, partition_ids)}


def machines_by_mac(conn, services, keys):
    """{(mac, interface): machine id} for the (normalized MAC, interface) pairs in
    ``keys`` that may fetch boot.ipxe by MAC; pairs that may not are absent.

    The rule: the MAC belongs to a machine whose boot interface is ``interface``,
    or that a migration to ``interface`` is booting (:data:`BOOTING_STEPS`).
    """
    keys = [k for k in dict.fromkeys(keys) if k[1] in services.interfaces]
    if not keys:
        return {}
    rows = conn.execute(
        sqlalchemy.select(_N.c.mac, _M.c.id, _M.c.boot_interface)
        .join(_M, _M.c.id == _N.c.machine_id)
        .where(_N.c.mac.in_({mac for mac, _ in keys}))).all()
    owner = {r.mac: r for r in rows}
    found, undecided = {}, []
    for mac, interface in keys:
        row = owner.get(mac)
        if row is None:
            continue
        if row.boot_interface == interface:
            found[(mac, interface)] = row.id
        else:
            undecided.append((mac, interface, row.id))
    if undecided:
        booting = set(conn.execute(
            sqlalchemy.select(_MM.c.machine_id, _MIG.c.target_boot_interface)
            .join(_MIG, _MIG.c.id == _MM.c.migration_id)
            .where(_MM.c.machine_id.in_({m for _, _, m in undecided}),
                   _MM.c.state.in_(BOOTING_STEPS))).all())
        for mac, interface, machine_id in undecided:
            if (machine_id, interface) in booting:
                found[(mac, interface)] = machine_id
    return found


# -- by MAC: whose fetch is it? ---------------------------------------------------------
def mac_binding(services, machine, client_address):
    """How a fetch of ``machine``'s boot.ipxe by MAC from ``client_address`` is
    bound to the machine (:mod:`metalboot_framework.address_binding`: ``eui64``,
    ``nic-address``, ``prefix``, ``dhcp-lease``), or :data:`UNBOUND`. The one
    rule both artifact servers apply."""
    return services.address_binding.bound_by(machine, client_address) or UNBOUND


def script_token(services, machine, interface, binding):
    """The token a by-MAC script carries: the machine's for a bound fetch, its
    unbound token (:mod:`metalboot_framework.tokens`) for any other."""
    if binding == UNBOUND:
        return services.tokens.unbound_token(machine.id, machine.token_generation, interface)
    return services.tokens.machine_token(machine.id, machine.token_generation, interface)


# -- choosing the artifact -----------------------------------------------------------
def check_access(services, machine, interface, token, name, client_address=None,
                 expected=None):
    """Raise the common 404 unless ``token`` is the machine's current token for an
    enabled ``interface`` (True) or its unbound token (False: what it fetches is
    unverified evidence). ``machine`` None: unknown machine. ``expected``: the
    machine's current token, if the caller has it already (no HMAC then)."""
    if interface not in services.interfaces or machine is None:
        raise not_found()
    own = services.tokens.classify(machine.id, machine.token_generation, interface, token,
                                   expected)
    if own is not None:
        return own
    LOG.warning("artifact %s of machine %s requested with a wrong token from %s",
                name, machine.id, client_address)
    raise not_found()


def boot_script(services, machine, partition, interface, token):
    """The machine's boot.ipxe as an :class:`Artifact` (rendered bytes)."""
    body = services.render_boot_script(machine, partition, interface, token).encode()
    return Artifact(content_type=SCRIPT_CONTENT_TYPE, content=body)


def plugin_artifact(services, machine, partition, interface, name):
    """A per-machine artifact other than boot.ipxe, as the interface's plugin
    gives it (may build a file: call it off the event loop)."""
    task = BootTask(services, machine, partition, interface)
    artifact = services.interfaces.get(interface).get_artifact(task, name)
    if artifact is None:
        raise not_found()
    return artifact


# Answers that count as a fetch (evidence): the artifact, a part of it, or "you
# have it" to a conditional request -- not a 412 or 416, which gave nothing.
# A HEAD counts as its GET would (UEFI HTTP boot may ask for the size first).
EVIDENCE_STATUSES = frozenset((200, 206, 304))


def machine_artifact(services, machine, partition, interface, token, name,
                     client_address=None):
    """(the artifact that GET /boot/<machine>/<interface>/<token>/<name> serves,
    whether ``token`` is the machine's own: see :func:`check_access`)."""
    bound = check_access(services, machine, interface, token, name, client_address)
    if name == SCRIPT_NAME:
        return boot_script(services, machine, partition, interface, token), bound
    return plugin_artifact(services, machine, partition, interface, name), bound


def partition_artifact(services, partition, interface, name):
    """The artifact that GET /boot/partitions/<partition>/<interface>/<name> serves
    (``partition`` None: unknown partition)."""
    if partition is None or interface not in services.interfaces:
        raise not_found()
    artifact = services.interfaces.get(interface).get_partition_artifact(
        services, partition, name)
    if artifact is None:
        raise not_found()
    return artifact


# -- how an artifact is answered (both servers send the same headers) --------------------
def content_etag(content):
    return hashlib.sha256(content).hexdigest()[:32]


def file_etag(path, st):
    """The ETag werkzeug's send_file gives a file (mtime, size, path checksum)."""
    return f"{st.st_mtime}-{st.st_size}-{zlib.adler32(os.path.abspath(path).encode()) & 0xFFFFFFFF}"


def content_type(artifact):
    """The Content-Type header of an artifact (a charset added to text types)."""
    return get_content_type(artifact.content_type, "utf-8")


@functools.lru_cache(maxsize=1024)
def content_disposition(name):
    """Content-Disposition: inline, with the artifact's name (RFC 6266)."""
    try:
        name.encode("ascii")
        names = {"filename": name}
    except UnicodeEncodeError:
        simple = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
        names = {"filename": simple,
                 "filename*": "UTF-8''" + quote(name, safe="!#$&+-.^_`|~")}
    headers = Headers()
    headers.set("Content-Disposition", "inline", **names)
    return headers["Content-Disposition"]


# -- evidence -------------------------------------------------------------------------
# Kinds of evidence rows. An unverified one (a fetch or boot report with the
# unbound token, see script_token) is kept for the operator but proves nothing:
# recognise_evidence accepts fetches and reports only.
FETCH, REPORT, UNVERIFIED = "fetch", "report", "unverified"
# The columns of an evidence row (the id is the database's).
EVIDENCE_COLUMNS = ("machine_id", "interface", "kind", "path", "client_address", "data",
                    "created_at")


def evidence_row(machine_id, interface, kind, path, client_address, data=None, timed=True):
    """One boot_evidence row: a fetch (``data`` the Range asked for, if any) or a
    boot report (``data`` its message). ``timed`` False: ``created_at`` is None,
    for a writer that times a batch of rows at once."""
    return {"machine_id": machine_id, "interface": interface, "kind": kind, "path": path,
            "client_address": client_address, "data": data,
            "created_at": models.utcnow() if timed else None}


def fetch_evidence(machine_id, interface, name, client_address, range_header=None,
                   timed=True, bound=True, by_mac=None):
    """The row of a fetch: ``bound`` False (the unbound token) makes it
    unverified; ``by_mac``: the binding of a fetch by MAC (:func:`mac_binding`),
    kept in its data."""
    data = {"range": range_header} if range_header else {}
    if by_mac is not None:
        data["by_mac"] = str(by_mac)
        if getattr(by_mac, "lease", None):  # dhcp-lease: the lease that bound it
            data["lease"] = by_mac.lease
    return evidence_row(machine_id, interface, FETCH if bound else UNVERIFIED, name,
                        client_address, data or None, timed)


def insert_evidence(conn, rows, with_ids=False):
    """Insert ``rows`` in the caller's transaction: with one executemany, or
    (``with_ids``) one by one, returning their ids."""
    if with_ids:
        return [conn.execute(_EVIDENCE_INSERT_ID, row).scalar_one() for row in rows]
    if not rows:
        return None
    if conn.dialect.name == "sqlite":
        _insert_evidence_sqlite(conn, rows)
    else:
        conn.execute(_EVIDENCE_INSERT, rows)
    return None


def prune_unverified(conn, rows, keep):
    """In the caller's transaction, after ``rows`` are inserted: delete all but
    the newest ``keep`` unverified rows of each machine that ``rows`` add one
    to (anyone who knows a MAC can add them), counting the drops in
    :data:`metrics.UNVERIFIED_EVIDENCE_DROPPED`."""
    added = {row["machine_id"]: row["interface"] for row in rows if row["kind"] == UNVERIFIED}
    for machine_id, interface in sorted(added.items()):
        unverified = (_EVIDENCE.c.machine_id == machine_id) & (_EVIDENCE.c.kind == UNVERIFIED)
        newest = sqlalchemy.select(_EVIDENCE.c.id).where(unverified) \
            .order_by(_EVIDENCE.c.id.desc()).limit(keep)
        dropped = conn.execute(_EVIDENCE.delete().where(
            unverified & _EVIDENCE.c.id.not_in(newest))).rowcount
        if dropped:
            metrics.unverified_evidence_dropped(interface, dropped)
            LOG.warning("dropped %d unverified boot evidence rows of machine %s "
                        "([artifacts] max_unverified_evidence = %d)", dropped, machine_id, keep)


def _insert_evidence_sqlite(conn, rows):
    """A boot storm's evidence by an executemany of the driver
    (:func:`driver_insert.statement`), its values bound once per distinct
    time and data: SQLAlchemy's executemany would bind every row's."""
    sql, binders = driver_insert.statement(_EVIDENCE, EVIDENCE_COLUMNS, conn.dialect)
    # a batch's rows mostly share their time and their data (None): each such
    # value is processed once
    processed = [{} for _ in binders]
    values = []
    for row in rows:
        one = []
        for (name, bind), seen in zip(binders, processed, strict=True):
            value = row[name]
            if bind is None:
                pass
            elif value is None or type(value) is datetime.datetime:
                found = seen.get(value, seen)
                if found is seen:
                    found = seen[value] = bind(value)
                value = found
            else:
                value = bind(value)
            one.append(value)
        values.append(tuple(one))
    conn.exec_driver_sql(sql, values)


def log_evidence(evidence_id, row):
    LOG.info("boot evidence %s: machine %s %s %s via %s from %s", evidence_id,
             row["machine_id"], row["kind"], row["path"], row["interface"],
             row["client_address"])


# -- boot reports ---------------------------------------------------------------------
def bearer_token(authorization):
    """The token of an ``Authorization: Bearer ...`` header value, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def authenticate_report(services, conn, machine_id, token):
    """{interface: whether ``token`` is the machine's own (False: its unbound
    token)} for every enabled interface the token is the machine's for;
    Unauthorized when there is none (checked before the report's body)."""
    machine = conn.execute(sqlalchemy.select(_M.c.id, _M.c.token_generation)
                           .where(_M.c.id == machine_id)).first()
    return report_interfaces(services, services.tokens, machine, token)


def report_interfaces(services, tokens, machine, token):
    """What :func:`authenticate_report` answers for ``machine`` (with ``id`` and
    ``token_generation``; None: unknown) by the token signer ``tokens`` (the
    database's, or an agent's replicated tokens)."""
    found = {}
    if machine is not None:
        for name in services.interfaces.names():
            own = tokens.classify(machine.id, machine.token_generation, name, token)
            if own is not None:
                found[name] = own
    if not found:
        raise Unauthorized("unknown machine or wrong machine token")
    return found


def report_binding(services, found, boot_interface):
    """Whether a report through ``boot_interface`` (its body checked) is the
    machine's own, of the interfaces :func:`authenticate_report` found: the
    token is bound to one interface."""
    services.interfaces.require(boot_interface)
    if boot_interface not in found:
        raise Unauthorized("unknown machine or wrong machine token")
    return found[boot_interface]


def report_evidence(machine_id, body, client_address, timed=True, bound=True):
    return evidence_row(machine_id, body["boot_interface"], REPORT if bound else UNVERIFIED,
                        "boot-report", client_address, {"message": body.get("message", "")},
                        timed)
