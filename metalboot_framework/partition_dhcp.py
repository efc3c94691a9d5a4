"""DHCP entries at the partition: what the DHCP interfaces publish, what the
partition's boot agents applied, and the wait between the two.

A boot interface that answers by DHCP (``pxe``, ``dhcp-httpboot``) writes no
DHCP server's files: its prepare step publishes the machine's host entries
here (``dhcp_entries``, one row per machine and interface), and they travel to
the partition's boot agents with the rest of its boot data (a trigger writes
the ``boot_changes`` row). Each agent applies them to its own dnsmasq and Kea
and reports the boot data cursor up to which its servers hold them
(``dhcp_agents``). A step is done when every agent of the partition that
reported within ``[dhcp] agent_timeout`` has applied the cursor of its change;
after ``[dhcp] apply_timeout`` it fails, naming the agents that did not.
"""

import asyncio
import datetime
import time

from sqlalchemy import delete, func, select

from metalboot_framework import feed
from metalboot_framework.exceptions import BootInterfaceError, Gone, NotFound
from metalboot_framework.store import models
from metalboot_framework.timestamps import iso

_E, _A = models.DhcpEntry.__table__, models.DhcpAgent.__table__
_M, _CH = models.Machine.__table__, models.BootChange.__table__
#: seconds between two looks at what the agents reported while a step waits
POLL_INTERVAL = 0.2


class DhcpNotApplied(BootInterfaceError):
    """The partition's boot agents did not apply a machine's DHCP entries in time."""


# -- the conductor's side ------------------------------------------------------------
def publish(services, machine_id, interface, entries):
    """Make ``entries`` (HostEntry objects) what the partition's DHCP servers
    answer ``machine_id`` for ``interface``; the boot data cursor of the change."""
    rows = [entry.to_dict() for entry in entries]
    with services.transactions.now() as unit:
        unit.session.execute(delete(_E).where(_E.c.machine_id == machine_id,
                                              _E.c.interface == interface))
        unit.session.execute(_E.insert().values(machine_id=machine_id, interface=interface,
                                                entries=rows, updated_at=models.utcnow()))
    return _change_position(services, machine_id)


def withdraw(services, machine_id, interface=None):
    """Remove the machine's entries (of ``interface`` only, if given); the boot
    data cursor the agents must reach for the removal to be applied."""
    with services.transactions.now() as unit:
        query = delete(_E).where(_E.c.machine_id == machine_id)
        if interface is not None:
            query = query.where(_E.c.interface == interface)
        unit.session.execute(query)
    return _change_position(services, machine_id)


def _change_position(services, machine_id):
    """The feed position of the machine's newest change (committed already)."""
    feed.sequence_boot_changes(services)
    position = feed.boot_change_position(services)
    with services.db.read_conn() as conn:
        return conn.execute(select(func.coalesce(func.max(position), 0)).where(
            _CH.c.machine_id == machine_id)).scalar()


def entries_by_machine(conn, partition_id, machine_ids=None):
    """{machine id: {interface: [entry dicts]}} of the partition's machines
    (of ``machine_ids`` only, if given)."""
    query = select(_E.c.machine_id, _E.c.interface, _E.c.entries) \
        .join(_M, _M.c.id == _E.c.machine_id).where(_M.c.partition_id == partition_id)
    if machine_ids is not None:
        query = query.where(_E.c.machine_id.in_(list(machine_ids)))
    found = {}
    for row in conn.execute(query):
        found.setdefault(row.machine_id, {})[row.interface] = row.entries
    return found


def _agents(services, partition_id):
    with services.db.read_conn() as conn:
        return conn.execute(select(_A).where(_A.c.partition_id == partition_id)
                            .order_by(_A.c.agent_id)).all()


def _fresh(services, row, now):
    limit = datetime.timedelta(seconds=services.conf.dhcp.agent_timeout)
    return now - row.reported_at <= limit


def _pending(services, partition_id, interface, position):
    """(agents that applied it, agents that did not, stale agents): fresh
    agents of the partition that apply ``interface``, by whether their
    cursor has reached ``position``; then the others that apply it."""
    now = models.utcnow()
    done, pending, stale = [], [], []
    for row in _agents(services, partition_id):
        if interface not in (row.interfaces or ()):
            continue
        if not _fresh(services, row, now):
            stale.append(row)
        elif row.applied_cursor >= position:
            done.append(row)
        else:
            pending.append(row)
    return done, pending, stale


def _failure(services, machine_id, partition_id, interface, position, pending, stale,
             action):
    timeout = services.conf.dhcp.apply_timeout
    if pending:
        why = ", ".join(f"{r.agent_id} (at cursor {r.applied_cursor}"
                        + (f": {r.error}" if r.error else "") + ")" for r in pending)
        return DhcpNotApplied(
            f"the DHCP entries of machine {machine_id} for {interface} were not {action} "
            f"within {timeout:g} s ([dhcp] apply_timeout) by the boot agent(s) of partition "
            f"{partition_id}: {why}; they need boot data cursor {position}")
    now = models.utcnow()
    known = "".join(f"; {r.agent_id} last reported {(now - r.reported_at).total_seconds():.0f}"
                    f" s ago" for r in stale)
    return DhcpNotApplied(
        f"no boot agent of partition {partition_id} with a DHCP backend for {interface} "
        f"has reported within [dhcp] agent_timeout "
        f"({services.conf.dhcp.agent_timeout:g} s): nothing would answer machine "
        f"{machine_id} by DHCP{known}")


async def wait_applied(services, machine_id, partition_id, interface, position,
                       action="applied"):
    """Return the ids of the partition's fresh agents once each has applied
    boot data ``position``; raise :class:`DhcpNotApplied` after ``[dhcp]
    apply_timeout``. Entries applied (``action`` "applied") need a fresh
    agent; entries removed do not: an agent that is not fresh removes them
    when it reads the boot data again, before it reports itself fresh."""
    deadline = time.monotonic() + services.conf.dhcp.apply_timeout
    while True:
        done, pending, stale = await asyncio.to_thread(_pending, services, partition_id,
                                                       interface, position)
        if not pending and (done or action == "removed"):
            return [r.agent_id for r in done]
        if time.monotonic() >= deadline:
            raise _failure(services, machine_id, partition_id, interface, position, pending,
                           stale, action)
        await asyncio.sleep(POLL_INTERVAL)


# -- the agents' side (through the API) --------------------------------------------------
def _cursors(services, partition_id):
    """(the feed's newest cursor, the partition's), in one read; NotFound for
    a partition that does not exist."""
    feed.sequence_boot_changes(services)
    position = feed.boot_change_position(services)
    newest = func.coalesce(func.max(position), 0)
    with services.db.read_conn() as conn:
        if conn.execute(select(models.Partition.id).where(
                models.Partition.id == partition_id)).first() is None:
            raise NotFound(f"partition {partition_id} not found")
        return (conn.execute(select(newest)).scalar(),
                conn.execute(select(newest).where(_CH.c.partition_id == partition_id))
                .scalar())


def record_report(services, partition_id, report):
    """POST /v1/partitions/{id}/boot-data/dhcp: what an agent's DHCP servers hold."""
    top, cursor = _cursors(services, partition_id)
    if report["cursor"] > top:
        raise Gone(f"cursor {report['cursor']} is newer than the feed ({top}): the database "
                   "was restored or replaced; take a new snapshot")
    values = {"interfaces": sorted(set(report["interfaces"])),
              "applied_cursor": report["cursor"], "entries": report["entries"],
              "error": report.get("error"), "reported_at": models.utcnow()}
    with services.transactions.now() as unit:
        updated = unit.session.execute(
            _A.update().where(_A.c.partition_id == partition_id,
                              _A.c.agent_id == report["agent"]).values(**values)).rowcount
        if not updated:
            unit.session.execute(_A.insert().values(partition_id=partition_id,
                                                    agent_id=report["agent"], **values))
    return _listing(services, partition_id, cursor)


def agent_list(services, partition_id):
    """GET /v1/partitions/{id}/dhcp-agents: what each agent last reported."""
    return _listing(services, partition_id, _cursors(services, partition_id)[1])


def _listing(services, partition_id, cursor):
    now = models.utcnow()
    return {"cursor": cursor, "agents": [
        {"agent": r.agent_id, "cursor": r.applied_cursor, "interfaces": list(r.interfaces),
         "entries": r.entries, "error": r.error, "reported_at": iso(r.reported_at),
         "fresh": _fresh(services, r, now)} for r in _agents(services, partition_id)]}
