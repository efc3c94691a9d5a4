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

import datetime
import logging

from sqlalchemy import select, update

from metalboot_framework.exceptions import BootInterfaceError
from metalboot_framework.migrations import MM
from metalboot_framework.store import models

LOG = logging.getLogger(__name__)

FORWARD = {"validating": "preparing", "preparing": "activating", "activating": "awaiting_boot",
           "verifying": "done"}
RUNNABLE = ("validating", "preparing", "activating", "verifying", "rolling_back")


class StepRunner:
    """Runs one persisted step of one machine, then persists where it leads."""

    def __init__(self, services, host):
        self.services = services
        self.host = host

    # -- locking ------------------------------------------------------------------
    def _claim(self, machine_id):
        with self.services.db.write() as s:
            return s.execute(update(models.Machine).where(
                models.Machine.id == machine_id, models.Machine.reservation.is_(None))
                .values(reservation=self.host, reserved_at=models.utcnow())).rowcount == 1

    def _release(self, machine_id):
        with self.services.db.write() as s:
            s.execute(update(models.Machine).where(
                models.Machine.id == machine_id, models.Machine.reservation == self.host)
                .values(reservation=None, reserved_at=None))

    # -- the step -------------------------------------------------------------------
    def run(self, migration_id, machine_id):
        """Run the machine's current step if it is runnable and not locked."""
        if not self._claim(machine_id):
            return False
        try:
            with self.services.db.read() as s:
                mm = s.get(MM, (migration_id, machine_id))
                migration = s.get(models.Migration, migration_id)
                if mm is None or mm.state not in RUNNABLE:
                    return False
                state, source, activated_at = mm.state, mm.source_boot_interface, mm.activated_at
                target, mstate = migration.target_boot_interface, migration.state
                dry_run = migration.options.get("dry_run")
            if state != "rolling_back" and mstate == "cancelling" and not dry_run:
                self.transition(migration_id, machine_id, state, "rolling_back",
                                "migration cancelled", error="migration cancelled")
                return True
            if dry_run:
                self._dry_run(migration_id, machine_id, target)
            elif state == "rolling_back":
                self._roll_back(migration_id, machine_id, source, target, activated_at)
            else:
                self._forward(migration_id, machine_id, state, source, target)
            return True
        finally:
            self._release(machine_id)

    def _call(self, interface_name, step, migration_id, machine_id):
        """Call one plugin step; return None or the error message."""
        try:
            iface = self.services.interfaces.get(interface_name)
            task = self.services.task(machine_id, interface_name, migration_id=migration_id)
            getattr(iface, step)(task)
        except BootInterfaceError as exc:
            return f"{interface_name} {step}: {exc.message}"
        except Exception as exc:  # a plugin bug fails the machine, not the conductor
            LOG.exception("boot interface %s failed in %s of machine %s", interface_name, step,
                          machine_id)
            return f"{interface_name} {step}: {type(exc).__name__}: {exc}"
        return None

    def _dry_run(self, migration_id, machine_id, target):
        error = self._call(target, "validate", migration_id, machine_id)
        self.transition(migration_id, machine_id, "validating",
                        "invalid" if error else "valid", error or "valid for " + target,
                        error=error)

    def _forward(self, migration_id, machine_id, state, source, target):
        if state == "validating":
            vetoes = self._vetoes(migration_id, machine_id)
            if vetoes:
                self.transition(migration_id, machine_id, state, "skipped",
                                "vetoed: " + "; ".join(vetoes), error="; ".join(vetoes))
                return
            error = self._call(target, "validate", migration_id, machine_id)
        elif state == "preparing":
            error = self._call(target, "prepare", migration_id, machine_id)
        elif state == "activating":
            error = self._call(target, "activate", migration_id, machine_id)
        elif state == "verifying":
            error = self._call(source, "clean_up", migration_id, machine_id)
        if error:
            self.transition(migration_id, machine_id, state, "rolling_back", error, error=error)
        else:
            self.transition(migration_id, machine_id, state, FORWARD[state],
                            f"{state.replace('ing', '')} done" if state != "verifying"
                            else f"booted through {target}; {source} cleaned up")

    def _roll_back(self, migration_id, machine_id, source, target, activated_at):
        """Remove the target's traces; if the machine may have been reset onto the
        target, make it boot through its source again."""
        steps = [(target, "clean_up")]
        if activated_at is not None:
            steps += [(source, "prepare"), (source, "activate")]
        for interface, step in steps:
            error = self._call(interface, step, migration_id, machine_id)
            if error:
                self.transition(migration_id, machine_id, "rolling_back", "rollback_failed",
                                f"rollback failed: {error}; the machine needs an operator",
                                error=f"rollback failed: {error}")
                return
        self.transition(migration_id, machine_id, "rolling_back", "rolled_back",
                        f"rolled back to {source}" + ("" if activated_at else
                                                      " (it had not been reset)"))

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
                   evidence_id=None):
        """Persist old -> new with an event, in one transaction; False if the
        machine was no longer in ``old`` (someone else moved it)."""
        now = models.utcnow()
        values = {"state": new, "updated_at": now}
        if error is not None:
            values["last_error"] = error
        if new == "activating":
            # Evidence counts from the moment activation may begin.
            values["activated_at"] = now
        if new == "awaiting_boot":
            values["deadline"] = now + datetime.timedelta(seconds=self._boot_timeout(
                migration_id))
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

    def _boot_timeout(self, migration_id):
        with self.services.db.read() as s:
            options = s.scalar(select(models.Migration.options).where(
                models.Migration.id == migration_id))
        return options.get("boot_timeout") or self.services.conf.conductor.default_boot_timeout
