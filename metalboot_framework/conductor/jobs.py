"""Claiming machines in flight: their locks, and what their steps need (a :class:`Job`).

A machine's coroutine runs its steps only while this conductor holds the
machine's lock (:mod:`.machine_lock`); a claim takes the locks of many
machines at once and reads their jobs in the same transaction, or reads the
jobs of machines whose locks a start took before (:meth:`Claims.read_jobs`).
"""

import dataclasses
import time

from sqlalchemy import bindparam, select

from metalboot_framework import machine_steps
from metalboot_framework.conductor import machine_lock
from metalboot_framework.migrations import MM
from metalboot_framework.store import models
from metalboot_framework.store.many_rows import chunks

_MIGRATIONS = models.Migration.__table__
_MMT = MM.__table__

JOBS = select(_MMT.c.machine_id, _MMT.c.state, _MMT.c.source_boot_interface,
              _MMT.c.activated_at) \
    .where(_MMT.c.migration_id == bindparam("mig"),
           _MMT.c.machine_id.in_(bindparam("mids", expanding=True)))
# The deadline a move to awaiting_boot persisted: read for a machine taken
# over there only (parsing a date for every job of a batch costs).
_DEADLINE = select(_MMT.c.deadline).where(_MMT.c.migration_id == bindparam("mig"),
                                          _MMT.c.machine_id == bindparam("mid"))
# The migration's part of every job, read once per batch (not once per machine:
# its options are JSON).
_JOB_MIGRATION = select(_MIGRATIONS.c.target_boot_interface, _MIGRATIONS.c.state,
                        _MIGRATIONS.c.options).where(_MIGRATIONS.c.id == bindparam("mig"))


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
    lock: machine_lock.Held
    refill: bool = False  # its end may start the next queued machine (run's switch)
    # the machine started in the slot this one freed, its lock taken: the same
    # coroutine runs it next (see StepRunner.run)
    successor: object = None
    pending: object = None  # the outcome of a move queued without waiting
    # read by a claim, not in the transaction that started the machine
    resumed: bool = False
    # resumed in the step it is in: a conductor may have died in it after it
    # called the next step's plugin while the move was still queued (see
    # StepRunner._finish_later), so the table's rows for a machine taken over apply
    taken_over: bool = False
    # time.monotonic() by which its boot is due, once it began to wait for it
    boot_deadline: float | None = None


class Claims:
    """This conductor's claims on machines in flight."""

    def __init__(self, services, host):
        self.services = services
        self.host = host

    def claim_many(self, conn, migration_id, machine_ids):
        """Take the locks of those of ``machine_ids`` nobody holds and read what
        their steps need, in ``conn``'s transaction: {machine id: :class:`Job`}.

        A machine no longer in flight is released again.
        """
        return self.jobs_of_locked(conn, migration_id,
                                   machine_lock.take(conn, machine_ids, self.host))

    def jobs_of_locked(self, conn, migration_id, locked):
        """The jobs of machines whose locks ``conn``'s transaction took, read in it;
        those no longer in flight are released in it."""
        jobs, idle = self._jobs(conn, migration_id, locked)
        machine_lock.release(conn, idle, self.host)
        return jobs

    def read_jobs(self, migration_id, machine_ids):
        """{machine id: :class:`Job`} of machines whose locks this conductor took
        (:func:`.machine_lock.take`) in a write transaction committed before:
        reads need no write lock, and on SQLite every statement under it makes
        all other writers wait. Those no longer in flight are released."""
        if not machine_ids:
            return {}
        with self.services.db.read_conn() as conn:
            jobs, idle = self._jobs(conn, migration_id, machine_ids)
        self.release(idle)
        return jobs

    def _jobs(self, conn, migration_id, machine_ids):
        """(jobs of those of the locked ``machine_ids`` in flight, the ids of
        the others)."""
        jobs, idle = {}, []
        migration = None
        for claimed in chunks(list(machine_ids)):
            if migration is None:
                migration = conn.execute(_JOB_MIGRATION, {"mig": migration_id}).first()
            rows = {row.machine_id: row for row in conn.execute(
                JOBS, {"mig": migration_id, "mids": claimed})} if migration else {}
            snapshots = self.services.snapshots(conn, claimed)
            for machine_id in claimed:
                row = rows.get(machine_id)
                if row is None or not machine_steps.goes_on(row.state) \
                        or machine_id not in snapshots:
                    idle.append(machine_id)
                    continue
                machine, partition = snapshots[machine_id]
                jobs[machine_id] = Job(
                    migration_id, machine_id, row.state, row.source_boot_interface,
                    migration.target_boot_interface, row.activated_at, migration.state,
                    migration.options, machine, partition,
                    machine_lock.Held(self.services, machine_id, self.host))
        return jobs, idle

    def release(self, machine_ids):
        """Drop this conductor's locks on machines it claimed but will not run."""
        if machine_ids:
            self.services.transactions.grouped(
                lambda unit: machine_lock.release(unit.session, machine_ids, self.host)).result()

    def persisted_deadline(self, job):
        """The persisted deadline of a machine awaiting its boot, as a
        ``time.monotonic()`` (None: unknown, counted from now)."""
        with self.services.db.read_conn() as conn:
            deadline = conn.execute(_DEADLINE, {"mig": job.migration_id,
                                                "mid": job.machine_id}).scalar()
        if deadline is None:
            return None
        return time.monotonic() + (deadline - models.utcnow()).total_seconds()
