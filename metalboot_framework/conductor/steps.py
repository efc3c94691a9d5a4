"""One machine's state machine in a migration: each step, and where it leads.

queued -> validating -> preparing -> activating -> awaiting_boot -> verifying -> done
any failure -> rolling_back -> rolled_back | rollback_failed

The persisted state names the step still to be carried out, so a conductor
that dies between two steps resumes by running the step again: every plugin
step is idempotent. A step runs only while its runner holds the machine's lock
(``machines.reservation``), taken with a conditional update, so exactly one
conductor runs it even when several share the database. ``awaiting_boot`` is
passive: the scheduler moves it on when evidence arrives or time runs out.
"""

import dataclasses
import datetime
import logging

from sqlalchemy import select, update

from metalboot_framework.exceptions import BootInterfaceError
from metalboot_framework.migrations import MM
from metalboot_framework.store import models
from metalboot_framework.task import BootTask

LOG = logging.getLogger(__name__)

FORWARD = {"validating": "preparing", "preparing": "activating", "activating": "awaiting_boot",
           "verifying": "done"}
RUNNABLE = ("validating", "preparing", "activating", "verifying", "rolling_back")


@dataclasses.dataclass
class Job:
    """What one step of one machine needs, read when its lock was taken."""

    migration_id: str
    machine_id: str
    state: str
    source: str
    target: str
    activated_at: object
    migration_state: str
    options: dict
    machine: object
    partition: object
    released: bool = False


class StepRunner:
    """Runs one persisted step of one machine, then persists where it leads."""

    def __init__(self, services, host):
        self.services = services
        self.host = host

    # -- the step -------------------------------------------------------------------
    def _claim(self, migration_id, machine_id):
        """Take the machine's lock and read what the step needs, in one transaction.

        Returns a :class:`Job`, or None when the machine is locked by someone
        else or its step is not runnable any more.
        """
        with self.services.db.write() as s:
            taken = s.execute(update(models.Machine).where(
                models.Machine.id == machine_id, models.Machine.reservation.is_(None))
                .values(reservation=self.host, reserved_at=models.utcnow())).rowcount
            if not taken:
                return None
            row = s.execute(
                select(MM.state, MM.source_boot_interface, MM.activated_at,
                       models.Migration.target_boot_interface, models.Migration.state.label(
                           "migration_state"), models.Migration.options)
                .join(models.Migration, models.Migration.id == MM.migration_id)
                .where(MM.migration_id == migration_id, MM.machine_id == machine_id)).first()
            if row is None or row.state not in RUNNABLE:
                s.execute(self._release_stmt(machine_id))
                return None
            machine, partition = self.services.snapshot(s, machine_id)
        return Job(migration_id, machine_id, row.state, row.source_boot_interface,
                   row.target_boot_interface, row.activated_at, row.migration_state,
                   row.options, machine, partition)

    def _release_stmt(self, machine_id):
        return update(models.Machine).where(
            models.Machine.id == machine_id, models.Machine.reservation == self.host) \
            .values(reservation=None, reserved_at=None)

    def run(self, migration_id, machine_id):
        """Run the machine's current step if it is runnable and not locked.

        Returns the state the machine is in afterwards, or None if nothing ran.
        """
        job = self._claim(migration_id, machine_id)
        if job is None:
            return None
        try:
            if job.state != "rolling_back" and job.migration_state == "cancelling" \
                    and not job.options.get("dry_run"):
                return self._finish(job, "rolling_back", "migration cancelled",
                                    error="migration cancelled")
            if job.options.get("dry_run"):
                return self._dry_run(job)
            if job.state == "rolling_back":
                return self._roll_back(job)
            return self._forward(job)
        finally:
            if not job.released:  # the transition failed before releasing
                with self.services.db.write() as s:
                    s.execute(self._release_stmt(machine_id))

    def _finish(self, job, new, reason, error=None):
        """Persist the step's outcome and release the lock in one transaction."""
        self.transition(job.migration_id, job.machine_id, job.state, new, reason, error=error,
                        release=True, options=job.options)
        job.released = True
        return new

    def _call(self, job, interface_name, step):
        """Call one plugin step; return None or the error message."""
        machine_id = job.machine_id
        try:
            iface = self.services.interfaces.get(interface_name)
            task = BootTask(self.services, job.machine, job.partition, interface_name,
                            migration_id=job.migration_id)
            getattr(iface, step)(task)
        except BootInterfaceError as exc:
            return f"{interface_name} {step}: {exc.message}"
        except Exception as exc:  # a plugin bug fails the machine, not the conductor
            LOG.exception("boot interface %s failed in %s of machine %s", interface_name, step,
                          machine_id)
            return f"{interface_name} {step}: {type(exc).__name__}: {exc}"
        return None

    def _dry_run(self, job):
        error = self._call(job, job.target, "validate")
        return self._finish(job, "invalid" if error else "valid",
                            error or "valid for " + job.target, error=error)

    def _forward(self, job):
        state, source, target = job.state, job.source, job.target
        if state == "validating":
            vetoes = self._vetoes(job.migration_id, job.machine_id)
            if vetoes:
                return self._finish(job, "skipped", "vetoed: " + "; ".join(vetoes),
                                    error="veto: " + "; ".join(vetoes))
            error = self._call(job, target, "validate")
        elif state == "preparing":
            error = self._call(job, target, "prepare")
        elif state == "activating":
            error = self._call(job, target, "activate")
        elif state == "verifying":
            error = self._call(job, source, "clean_up")
        if error:
            return self._finish(job, "rolling_back", error, error=error)
        return self._finish(job, FORWARD[state],
                            f"{state.replace('ing', '')} done" if state != "verifying"
                            else f"booted through {target}; {source} cleaned up")

    def _roll_back(self, job):
        """Remove the target's traces; if the machine may have been reset onto the
        target, make it boot through its source again."""
        steps = [(job.target, "clean_up")]
        if job.activated_at is not None:
            steps += [(job.source, "prepare"), (job.source, "activate")]
        for interface, step in steps:
            error = self._call(job, interface, step)
            if error:
                return self._finish(job, "rollback_failed",
                                    f"rollback failed: {error}; the machine needs an operator",
                                    error=f"rollback failed: {error}")
        return self._finish(job, "rolled_back", f"rolled back to {job.source}" + (
            "" if job.activated_at else " (it had not been reset)"))

    def _vetoes(self, migration_id, machine_id):
        if not self.services.hooks.has("metalboot_veto_machine"):
            return []
        from metalboot_framework import inventory, migrations
        machine = inventory.get_machine(self.services, machine_id)
        migration = migrations.get(self.services, migration_id)
        return [f"{plugin}: {reason}" for plugin, reason in self.services.hooks.collect(
            "metalboot_veto_machine", machine=machine, migration=migration)]

    # -- transitions -------------------------------------------------------------------
    def transition(self, migration_id, machine_id, old, new, reason, error=None,
                   evidence_id=None, release=False, options=None):
        """Persist old -> new with an event, in one transaction; False if the
        machine was no longer in ``old`` (someone else moved it). ``release``
        also drops this conductor's lock on the machine in that transaction."""
        now = models.utcnow()
        values = {"state": new, "updated_at": now}
        if error is not None:
            values["last_error"] = error
        if new == "activating":
            # Evidence counts from the moment activation may begin.
            values["activated_at"] = now
        if new == "awaiting_boot":
            values["deadline"] = now + datetime.timedelta(seconds=self._boot_timeout(
                migration_id, options))
        if new in ("done", "rolled_back", "rollback_failed", "skipped", "cancelled",
                   "valid", "invalid"):
            values["finished_at"] = now
        if evidence_id is not None:
            values["evidence_id"] = evidence_id
        with self.services.write() as unit:
            s = unit.session
            changed = s.execute(update(MM).where(
                MM.migration_id == migration_id, MM.machine_id == machine_id,
                MM.state == old).values(**values)).rowcount
            if release:
                s.execute(self._release_stmt(machine_id))
            if not changed:
                return False
            unit.event("migration.step", f"{old} -> {new}: {reason}", machine_id=machine_id,
                       migration_id=migration_id, data={"old": old, "new": new,
                                                        "reason": reason})
            machine_change = None
            if new == "done":
                target = s.scalar(select(models.Migration.target_boot_interface).where(
                    models.Migration.id == migration_id))
                source = s.scalar(select(MM.source_boot_interface).where(
                    MM.migration_id == migration_id, MM.machine_id == machine_id))
                s.execute(update(models.Machine).where(models.Machine.id == machine_id)
                          .values(boot_interface=target, state="ready", updated_at=now))
                unit.event("machine.boot_interface_changed",
                           f"boot interface {source} -> {target} (migration {migration_id})",
                           machine_id=machine_id, migration_id=migration_id,
                           data={"old": source, "new": target, "reason": "migration"})
                machine_change = (source, target)
            elif new in ("rolled_back", "skipped", "cancelled"):
                s.execute(update(models.Machine).where(
                    models.Machine.id == machine_id, models.Machine.state == "migrating")
                    .values(state="ready", updated_at=now))
            elif new == "rollback_failed":
                s.execute(update(models.Machine).where(models.Machine.id == machine_id)
                          .values(state="error", updated_at=now))
        LOG.info("machine %s in migration %s: %s -> %s: %s", machine_id, migration_id, old, new,
                 reason)
        self.services.hooks.notify("metalboot_machine_step_changed", machine_id=machine_id,
                                   migration_id=migration_id, old=old, new=new, reason=reason)
        if machine_change and self.services.hooks.has("metalboot_boot_interface_changed"):
            from metalboot_framework import inventory
            self.services.hooks.notify(
                "metalboot_boot_interface_changed",
                machine=inventory.get_machine(self.services, machine_id), old=machine_change[0],
                new=machine_change[1], reason=f"migration {migration_id}")
        return True

    def _boot_timeout(self, migration_id, options=None):
        if options is None:
            with self.services.db.read() as s:
                options = s.scalar(select(models.Migration.options).where(
                    models.Migration.id == migration_id))
        return options.get("boot_timeout") or self.services.conf.conductor.default_boot_timeout
