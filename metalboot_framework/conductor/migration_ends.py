"""How a migration ends: it halts past its failure budget or with a failed
canary, and it is closed (``done``, ``cancelled``, ``halted``) once none of
its machines is queued or in flight, with the ``result`` of their steps."""

import logging

from sqlalchemy import select, update

from metalboot_framework import machine_steps
from metalboot_framework import migration_states as states
from metalboot_framework import migrations as mig
from metalboot_framework.conductor import admission
from metalboot_framework.store import models

# the conductor's log of its migrations (operators filter on its name)
LOG = logging.getLogger("metalboot_framework.conductor.manager")

MM = models.MigrationMachine


def halt_reason(services, migration, tally):
    """Why the migration must halt (a failed canary, its failure budget spent), or None."""
    if not admission.failures(tally):
        return None
    if admission.canary_failing(tally):
        with services.db.read() as s:
            failed_canary = s.execute(select(MM.machine_id, MM.last_error).where(
                MM.migration_id == migration.id, MM.canary.is_(True),
                MM.state.in_(admission.FAILING)).order_by(MM.position)).first()
        if failed_canary is not None:
            return (f"canary machine {failed_canary.machine_id} failed: "
                    f"{failed_canary.last_error}")
    return admission.over_budget(tally, migration.options, migration.total)


def close_if_finished(services, migration):
    """Close the migration if none of its machines is queued or in flight."""
    with services.db.read() as s:
        current = s.execute(select(models.Migration.state, models.Migration.reason).where(
            models.Migration.id == migration.id)).first()
        by_state = mig.counts(s, migration.id)
    if current is None or any(by_state.get(step) for step in machine_steps.ACTIVE):
        return
    summary = ", ".join(f"{n} {state}" for state, n in sorted(by_state.items()))
    if current.state == states.CANCELLING:
        set_state(services, migration.id, states.CANCELLING, states.CANCELLED,
                  f"cancelled: {summary}")
    elif current.state in (states.RUNNING, states.PAUSED):
        set_state(services, migration.id, current.state, states.DONE, f"finished: {summary}")
    elif current.state == states.HALTING:
        # the reason stays why it halted; the event says the machines in flight ended
        set_state(services, migration.id, states.HALTING, states.HALTED, current.reason,
                  message=f"the machines in flight have ended: {summary}")


def set_state(services, migration_id, old, new, reason, message=None):
    """``old`` -> ``new`` if the migration is still ``old``; a final state
    records ``finished_at`` and the ``result`` of its machines' steps."""
    now = models.utcnow()
    with services.transactions.now() as unit:
        values = {"state": new, "reason": reason, "updated_at": now}
        data = {"old": old, "new": new, "reason": reason}
        if new in states.FINAL:
            by_state = mig.counts(unit.session, migration_id)
            values.update(finished_at=now, result=states.result(by_state))
            data.update(result=values["result"],
                        succeeded=states.machines_succeeded(by_state),
                        failed=states.machines_failed(by_state))
        changed = unit.session.execute(update(models.Migration).where(
            models.Migration.id == migration_id, models.Migration.state == old).values(
            **values)).rowcount
        if changed:
            unit.event("migration.state",
                       f"{old} -> {states.describe(dict(data, state=new))}: "
                       f"{message or reason}",
                       migration_id=migration_id, data=data)
    if changed:
        LOG.info("migration %s: %s -> %s: %s", migration_id, old, new, reason)
        services.hooks.notify("metalboot_migration_state_changed",
                              migration=mig.get(services, migration_id), old=old, new=new)
    return bool(changed)
