"""Migrations as the API sees them: creation, views, and operator actions.

Creating a migration claims its machines in the same transaction that records
it: a conditional update moves each selected machine from ``ready`` to
``migrating``, so of two concurrent requests for the same machine exactly one
gets it and the other answers 409 naming the machines. The conductor
(:mod:`metalboot_framework.conductor`) does the work afterwards.
"""

import datetime
import uuid

from sqlalchemy import bindparam, func, select, update

from metalboot_framework import inventory
from metalboot_framework import migration_states as states
from metalboot_framework import machine_steps
from metalboot_framework import machine_lifecycle
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.exceptions import Conflict, InvalidInput, NotFound
from metalboot_framework.store import models
from metalboot_framework.timestamps import iso

MM = models.MigrationMachine
# What creating a migration reads of each selected machine: not every column
# (parsing the JSON ones would be most of the cost of a large selection).
_SELECTED = (inventory.MACHINES.c.id, inventory.MACHINES.c.state,
             inventory.MACHINES.c.boot_interface)


# The selected machines become the migration's (a Core statement: the ORM's
# bulk UPDATE would also evaluate its criteria against the session's objects,
# work this statement has no use for).
_CLAIM = update(inventory.MACHINES).where(
    inventory.MACHINES.c.id.in_(bindparam("ids", expanding=True)),
    inventory.MACHINES.c.state.in_(machine_lifecycle.MIGRATABLE)).values(
    state=State.MIGRATING.value, updated_at=bindparam("now"))


def _select_machines(session, selector, target):
    """Machine rows the selector names, and per-item errors for explicit ids."""
    if "machines" in selector:
        ids = list(dict.fromkeys(selector["machines"]))
        rows = {}
        for start in range(0, len(ids), 500):
            for m in session.execute(select(*_SELECTED).where(
                    inventory.MACHINES.c.id.in_(ids[start:start + 500]))):
                rows[m.id] = m
        missing = [mid for mid in ids if mid not in rows]
        if missing:
            index = {mid: i for i, mid in enumerate(selector["machines"])}
            raise InvalidInput(
                f"machine {missing[0]} does not exist"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
                fields={f"selector.machines.{index[mid]}": ["no such machine"]
                        for mid in missing[:100]})
        return [rows[mid] for mid in ids]
    if session.get(models.Partition, selector["partition"]) is None:
        raise InvalidInput(f"partition {selector['partition']} does not exist",
                           fields={"selector.partition": ["no such partition"]})
    q = select(*_SELECTED).where(
        inventory.MACHINES.c.partition_id == selector["partition"],
        inventory.MACHINES.c.boot_interface != target).order_by(inventory.MACHINES.c.id)
    if selector.get("boot_interface"):
        q = q.where(inventory.MACHINES.c.boot_interface == selector["boot_interface"])
    if selector.get("state"):
        q = q.where(inventory.MACHINES.c.state == selector["state"])
    return session.execute(q).all()


def _skip_reason(machine, target, services):
    if machine.boot_interface == target:
        return f"already on {target}"
    if machine.state == State.MAINTENANCE:
        return "machine is in maintenance"
    if machine.state == State.ERROR:
        return ("machine is in error (a failed rollback or enrolment, see its last_error); "
                "set it ready after repair")
    if machine.boot_interface not in services.interfaces:
        return (f"its boot interface {machine.boot_interface} is not enabled, so it could "
                f"not be rolled back")
    return None


def create(services, body):
    target = body["boot_interface"]
    services.interfaces.require(target)
    options = {k: body[k] for k in ("max_parallel", "max_failures", "canary", "dry_run")}
    if body.get("require_boot_report"):
        options["require_boot_report"] = True
    options["boot_timeout"] = body.get("boot_timeout") or \
        services.conf.conductor.default_boot_timeout
    migration_id = str(uuid.uuid4())
    now = models.utcnow()
    dry_run = body["dry_run"]
    with services.transactions.now() as unit:
        s = unit.session
        machines = _select_machines(s, body["selector"], target)
        if not machines:
            raise InvalidInput("the selector matches no machine",
                               fields={"selector": ["matches no machine"]})
        rows, claim = [], []
        for position, m in enumerate(machines):
            reason = _skip_reason(m, target, services) if not dry_run else None
            busy = m.state == State.MIGRATING and not dry_run
            rows.append({"migration_id": migration_id, "machine_id": m.id,
                         "position": position, "source_boot_interface": m.boot_interface,
                         "state": machine_steps.EXCLUDED if reason else machine_steps.JOINED,
                         "attempt": 0,
                         "last_error": reason, "canary": False, "updated_at": now,
                         "finished_at": now if reason else None})
            if not reason and not busy:
                claim.append(m.id)
        busy = [m.id for m in machines if m.state == State.MIGRATING] if not dry_run else []
        if busy:
            raise _busy_conflict(s, busy)
        queued = [r for r in rows if r["state"] == machine_steps.JOINED]
        if not queued:
            reasons = sorted({r["last_error"] for r in rows})
            raise InvalidInput("no selected machine can be migrated: " + "; ".join(reasons),
                               fields={"selector": reasons})
        for r in queued[:body["canary"]]:
            r["canary"] = True
        if not dry_run:
            claimed = 0
            for start in range(0, len(claim), 500):
                claimed += s.execute(_CLAIM, {"ids": claim[start:start + 500],
                                              "now": now}).rowcount
            if claimed != len(claim):
                # Lost a race with another request between our read and update.
                raise _busy_conflict(s, claim)
        s.add(models.Migration(
            id=migration_id, state=states.RUNNING, target_boot_interface=target,
            selector=body["selector"], options=options, total=len(rows), created_at=now,
            started_at=now, updated_at=now,
            finished_at=None))
        s.flush()
        s.execute(models.MigrationMachine.__table__.insert(), rows)
        unit.event("migration.created",
                   f"{'dry run' if dry_run else 'migration'} of {len(rows)} machine(s) to "
                   f"{target} ({len(queued)} queued, {len(rows) - len(queued)} skipped)",
                   migration_id=migration_id,
                   data={"boot_interface": target, "total": len(rows),
                         "queued": len(queued), "options": options})
        unit.announce(services.work_arrived)
    view = get(services, migration_id)
    services.hooks.notify("metalboot_migration_state_changed", migration=view, old=None,
                          new=states.RUNNING)
    return view


def _busy_conflict(session, machine_ids):
    rows = []
    for start in range(0, len(machine_ids), 500):
        rows += session.execute(select(MM.machine_id, MM.migration_id).where(
            MM.machine_id.in_(machine_ids[start:start + 500]),
            MM.state.in_(machine_steps.ACTIVE))).all()
    if not rows:
        rows = [(mid, "another request") for mid in machine_ids[:1]]
    names = ", ".join(f"{mid} (in {mig})" for mid, mig in rows[:20])
    return Conflict(f"{len(rows)} machine(s) already belong to an active migration: {names}"
                    + (" ..." if len(rows) > 20 else ""),
                    fields={"selector": [f"{mid} is in migration {mig}"
                                         for mid, mig in rows[:100]]})


def counts(session, migration_id):
    return dict(session.execute(select(MM.state, func.count()).where(
        MM.migration_id == migration_id).group_by(MM.state)).all())


def view(session, migration):
    by_state = counts(session, migration.id)
    total = migration.total or 0
    finished = sum(n for state, n in by_state.items() if state in machine_steps.FINISHED)
    eta = None
    if migration.state in states.LIVE and finished and total > finished and migration.started_at:
        elapsed = (models.utcnow() - migration.started_at).total_seconds()
        eta = models.utcnow() + datetime.timedelta(
            seconds=elapsed / finished * (total - finished))
    # stored only when set (older migrations lack it): answered always
    options = {**dict(migration.options),
               "require_boot_report": bool(migration.options.get("require_boot_report"))}
    return {
        "id": migration.id, "state": migration.state,
        "boot_interface": migration.target_boot_interface, "selector": migration.selector,
        "options": options, "total": total, "counts": by_state,
        "progress": round(finished / total, 4) if total else 1.0,
        "result": migration.result, "succeeded": states.machines_succeeded(by_state),
        "failed": states.machines_failed(by_state),
        "reason": migration.reason, "created_at": iso(migration.created_at),
        "started_at": iso(migration.started_at), "finished_at": iso(migration.finished_at),
        "estimated_completion": iso(eta),
    }


def get(services, migration_id):
    with services.db.read() as s:
        migration = s.get(models.Migration, migration_id)
        if migration is None:
            raise NotFound(f"migration {migration_id} not found")
        return view(s, migration)


def list_(services, state=None, limit=100, marker=None, result=None):
    with services.db.read() as s:
        q = select(models.Migration).order_by(models.Migration.created_at.desc(),
                                              models.Migration.id).limit(limit + 1)
        if state:
            q = q.where(models.Migration.state == state)
        if result:
            q = q.where(models.Migration.result == result)
        if marker:
            ref = s.get(models.Migration, marker)
            if ref is None:
                raise InvalidInput(f"marker {marker} is not a migration",
                                   fields={"marker": ["no such migration"]})
            q = q.where((models.Migration.created_at < ref.created_at) |
                        ((models.Migration.created_at == ref.created_at) &
                         (models.Migration.id > ref.id)))
        rows = list(s.scalars(q))
        more = len(rows) > limit
        rows = rows[:limit]
        return [view(s, m) for m in rows], (rows[-1].id if more else None)


def machines(services, migration_id, state=None, limit=100, marker=-1):
    with services.db.read() as s:
        if s.get(models.Migration, migration_id) is None:
            raise NotFound(f"migration {migration_id} not found")
        q = select(MM).where(MM.migration_id == migration_id, MM.position > marker) \
            .order_by(MM.position).limit(limit + 1)
        if state:
            q = q.where(MM.state == state)
        rows = list(s.scalars(q))
        more = len(rows) > limit
        rows = rows[:limit]
        evidence_ids = [r.evidence_id for r in rows if r.evidence_id]
        evidence = {e.id: e for e in s.scalars(select(models.BootEvidence).where(
            models.BootEvidence.id.in_(evidence_ids)))} if evidence_ids else {}
        out = []
        for r in rows:
            ev = evidence.get(r.evidence_id)
            out.append({
                "machine_id": r.machine_id, "position": r.position, "canary": r.canary,
                "source_boot_interface": r.source_boot_interface, "state": r.state,
                "attempt": r.attempt, "last_error": r.last_error,
                "started_at": iso(r.started_at), "activated_at": iso(r.activated_at),
                "finished_at": iso(r.finished_at),
                "evidence": None if ev is None else inventory.evidence_dict(ev),
                "seconds_to_evidence": round((ev.created_at - r.activated_at).total_seconds(), 3)
                if ev is not None and r.activated_at else None,
            })
        return out, (rows[-1].position if more else None)


def _transition(services, migration_id, allowed, new, message, action, done):
    with services.transactions.now() as unit:
        m = unit.session.scalars(select(models.Migration).where(
            models.Migration.id == migration_id).with_for_update()).first()
        if m is None:
            raise NotFound(f"migration {migration_id} not found")
        if m.state not in allowed:
            raise Conflict(f"cannot {action} migration {migration_id}: it is {m.state}; "
                           f"only a {' or '.join(allowed)} migration can be {done}")
        old = m.state
        m.state = new
        m.updated_at = models.utcnow()
        unit.event("migration.state", f"{old} -> {new}: {message}", migration_id=migration_id,
                   data={"old": old, "new": new, "reason": message})
        unit.announce(services.work_arrived)
    result = get(services, migration_id)
    services.hooks.notify("metalboot_migration_state_changed", migration=result, old=old,
                          new=new)
    return result


def cancel(services, migration_id):
    return _transition(services, migration_id, (states.RUNNING, states.PAUSED),
                       states.CANCELLING, "cancelled by the operator", "cancel", "cancelled")


def pause(services, migration_id):
    return _transition(services, migration_id, (states.RUNNING,), states.PAUSED,
                       "paused by the operator: no new machine starts", "pause", "paused")


def resume(services, migration_id):
    return _transition(services, migration_id, (states.PAUSED,), states.RUNNING,
                       "resumed by the operator", "resume", "resumed")
