"""One machine's state machine in a migration: each step, and where it leads.

queued -> validating -> preparing -> activating -> awaiting_boot -> verifying -> done
any failure -> rolling_back -> rolled_back | rollback_failed

The persisted state names the step still to be carried out, so a conductor
that dies between two steps resumes by running the step again: every plugin
step is idempotent. A step runs only while its runner holds the machine's lock
(:mod:`.machine_lock`), taken with a conditional update, so exactly one
conductor runs it even when several share the database. In ``awaiting_boot``
the machine's coroutine keeps its lock and waits for its evidence or its
deadline (:mod:`.evidence`); a machine resumed there waits until the deadline
persisted with its move.
"""

import dataclasses
import datetime
import logging
import time

from sqlalchemy import bindparam, case, select, update

from metalboot_framework import metrics
from metalboot_framework import machine_steps
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.machine_steps import Event, Lock, Step, Write
from metalboot_framework.conductor import admission, machine_lock
from metalboot_framework.conductor.plugin_call import acall_step
from metalboot_framework.migrations import MM
from metalboot_framework.store import models
from metalboot_framework.store.many_rows import changed, chunks
from metalboot_framework.transactions import UnitOfWork

LOG = logging.getLogger(__name__)

_MACHINES = models.Machine.__table__
_MIGRATIONS = models.Migration.__table__
_MMT = MM.__table__
_mid = bindparam("mid")

# Statements built once: building SQL expressions per call costs more than
# running them.
# Which machines an UPDATE of many changed is read back only when its row
# count says that not all of them changed (someone else holds or moved one):
# see store/many_rows.py. The read back looks for the values only that
# statement wrote (its ``now`` is new).
_mids = bindparam("mids", expanding=True)
_MOVED = select(_MMT.c.machine_id).where(
    _MMT.c.migration_id == bindparam("mig"), _MMT.c.machine_id.in_(_mids),
    _MMT.c.state == bindparam("new"), _MMT.c.updated_at == bindparam("now"))
JOBS = select(_MMT.c.machine_id, _MMT.c.state, _MMT.c.source_boot_interface,
              _MMT.c.activated_at) \
    .where(_MMT.c.migration_id == bindparam("mig"), _MMT.c.machine_id.in_(_mids))
# The deadline a move to awaiting_boot persisted: read for a machine taken
# over there only (parsing a date for every job of a batch costs).
_DEADLINE = select(_MMT.c.deadline).where(_MMT.c.migration_id == bindparam("mig"),
                                          _MMT.c.machine_id == _mid)
# The migration's part of every job, read once per batch (not once per machine:
# its options are JSON).
_JOB_MIGRATION = select(_MIGRATIONS.c.target_boot_interface, _MIGRATIONS.c.state,
                        _MIGRATIONS.c.options).where(_MIGRATIONS.c.id == bindparam("mig"))
# Done: the machine's new interface, and our lock released in the same statement.
_SWITCH = machine_lock.releasing(update(_MACHINES).where(_MACHINES.c.id.in_(_mids)).values(
    boot_interface=bindparam("target"), prepared_interface=bindparam("target"),
    state=State.READY.value, last_error=None, updated_at=bindparam("now")))
# Back at rest: ready if prepared for its interface, else the conductor enrols it
# (a machine may join a migration before it was ever enrolled).
_BACK_TO_REST = update(_MACHINES).where(_MACHINES.c.id == _mid,
                                        _MACHINES.c.state == State.MIGRATING) \
    .values(state=case((_MACHINES.c.prepared_interface == _MACHINES.c.boot_interface,
                        State.READY.value), else_=State.ENROLLING.value),
            updated_at=bindparam("now"))
# A finished rollback prepared the source again (or found it prepared).
_SOURCE_PREPARED = update(_MACHINES).where(_MACHINES.c.id == _mid).values(
    prepared_interface=_MACHINES.c.boot_interface)
_TO_ERROR = update(_MACHINES).where(_MACHINES.c.id == _mid).values(
    state=State.ERROR.value, last_error=bindparam("v_last_error"), updated_at=bindparam("now"))
_MM_NAMES = select(_MMT.c.source_boot_interface, _MIGRATIONS.c.target_boot_interface) \
    .join(_MIGRATIONS, _MIGRATIONS.c.id == _MMT.c.migration_id) \
    .where(_MMT.c.migration_id == bindparam("mig"), _MMT.c.machine_id == _mid)
# The evidence each machine of a move to verifying was recognised by (executemany).
_EVIDENCE = update(_MMT).where(_MMT.c.migration_id == bindparam("mig"),
                               _MMT.c.machine_id == _mid) \
    .values(evidence_id=bindparam("evidence"))
# A vetoed canary proved nothing: the first queued machine that is not a
# canary takes its place (canaries are the first queued machines and start first).
_SKIPPED_CANARIES = select(_MMT.c.machine_id).where(
    _MMT.c.migration_id == bindparam("mig"), _MMT.c.machine_id.in_(_mids),
    _MMT.c.canary.is_(True))
# Two conductors skipping canaries of one wave at once must not promote the
# same machine: the rows chosen are locked, and those another one chose skipped
# (PostgreSQL; on SQLite the write transaction is alone anyway).
_NEXT_CANARIES = select(_MMT.c.machine_id).where(
    _MMT.c.migration_id == bindparam("mig"), _MMT.c.state == Step.QUEUED,
    _MMT.c.canary.is_(False)).order_by(_MMT.c.position).limit(bindparam("n")) \
    .with_for_update(skip_locked=True)
_MAKE_CANARIES = update(_MMT).where(_MMT.c.migration_id == bindparam("mig"),
                                    _MMT.c.machine_id.in_(_mids),
                                    _MMT.c.state == Step.QUEUED,
                                    _MMT.c.canary.is_(False)).values(canary=True) \
    .returning(_MMT.c.machine_id)
_MOVE_STATEMENTS = {}


def _move_stmt(keys):
    """UPDATE of migration machines from an expected state, per set of columns
    (``state`` and ``updated_at`` among them: :data:`_MOVED` reads them back)."""
    stmt = _MOVE_STATEMENTS.get(keys)
    if stmt is None:
        stmt = _MOVE_STATEMENTS[keys] = update(_MMT).where(
            _MMT.c.migration_id == bindparam("mig"), _MMT.c.machine_id.in_(_mids),
            _MMT.c.state == bindparam("old")) \
            .values({k: bindparam(f"v_{k}") for k in keys})
    return stmt


DONE_MESSAGES = {Event.VALIDATED: "{target} validated the machine",
                 Event.PREPARED: "{target} prepared", Event.ACTIVATED: "{target} activated",
                 Event.CLEANED_UP: "booted through {target}; {source} cleaned up"}
# What a move writes to each machine (in this order), by the row's writes.
_MACHINE_WRITES = ((Write.SOURCE_PREPARED, _SOURCE_PREPARED), (Write.AT_REST, _BACK_TO_REST),
                   (Write.MACHINE_ERROR, _TO_ERROR))


@dataclasses.dataclass
class Move:
    """One machine's move by a row of :data:`machine_steps.TRANSITIONS`, to be
    written: the row says where it leads, what is written with it and whether
    this conductor's lock on the machine is released with it.

    ``refill``: the slot this (final) move frees may start the next queued
    machine in the same transaction (:meth:`StepRunner.start_many`); ``names``
    is (source, target) interface names, if the caller knows them;
    ``activated_at``: the time from which the machine's evidence counts,
    written with the move (a row that writes it writes the commit's time
    without it).
    """

    migration_id: str
    machine_id: str
    row: machine_steps.Transition
    reason: str
    error: str | None = None
    evidence_id: int | None = None
    options: dict | None = None
    names: tuple | None = None
    refill: bool = False
    activated_at: object = None

    @property
    def old(self):
        return self.row.old.value

    @property
    def new(self):
        return self.row.new.value


@dataclasses.dataclass
class Committed:
    """What a transition came to once committed (the group commit's result)."""

    # what :meth:`StepRunner.announce` needs, None if the machine was not where
    # the transition expected it
    done: tuple | None
    # refill: (what announce needs of the start in the slot it freed, its job or None)
    successor: tuple | None = None


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
    pending: object = None  # the outcome of a transition queued without waiting
    # read by a claim, not in the transaction that started the machine
    resumed: bool = False
    # resumed in the step it is in: a conductor may have died in it after it
    # called the next step's plugin while the move was still queued (see
    # _finish_later), so the table's rows for a machine taken over apply
    taken_over: bool = False
    # time.monotonic() by which its boot is due, once it began to wait for it
    boot_deadline: float | None = None


_START = machine_steps.on(Step.QUEUED, Event.STARTED)


def _starts(migration_id, rows, options, freed_by=None):
    """The starts of ``rows`` ([(machine id, canary)]); ``freed_by``: the
    machine whose slot the k-th one takes, if any."""
    return [Move(migration_id, machine_id, _START,
                 "started" + (" (canary)" if canary else "")
                 + (f" in the slot {freed_by[k]} freed" if freed_by else ""),
                 options=options)
            for k, (machine_id, canary) in enumerate(rows)]


def _log_if_failed(outcome):
    try:
        outcome.result()
    except Exception:
        LOG.exception("a step transition queued without waiting failed")


class StepRunner:
    """Runs one persisted step of one machine, then persists where it leads."""

    def __init__(self, services, host, evidence=None):
        self.services = services
        self.host = host
        # where a machine's coroutine waits for its boot, keeping the
        # machine's lock (:class:`.evidence.EvidenceWatcher`)
        self.evidence = evidence
        # Ids of migrations being cancelled, kept current by the scheduler's
        # ticks: a machine's next step rolls it back instead of going on.
        self.cancelling = frozenset()
        # Set when the conductor stops: a finished machine starts no successor.
        self.stopping = False

    # -- the step -------------------------------------------------------------------
    def claim_many(self, conn, migration_id, machine_ids):
        """Take the locks of those of ``machine_ids`` nobody holds and read what
        their steps need, in ``conn``'s transaction: {machine id: :class:`Job`}.

        A machine no longer in flight is released again.
        """
        return self._jobs_of_locked(conn, migration_id,
                                    machine_lock.take(conn, machine_ids, self.host))

    def _jobs_of_locked(self, conn, migration_id, locked):
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
            self.services.transactions.write_grouped(self._release_work(machine_ids))

    def _release_work(self, machine_ids):
        return lambda unit: machine_lock.release(unit.session, machine_ids, self.host)

    async def run(self, migration_id, machine_id, job=None, switch=None):
        """Run the machine's steps while they are runnable, holding its lock: a
        coroutine on the step loop, which awaits each plugin step (a blocking
        one in a thread of the loop's) and each commit.

        ``job``: what :meth:`claim_many` read when it took the lock; without
        it the lock is taken here. Each step's outcome is persisted before the
        next starts, except where re-running a step after a crash is harmless
        (:meth:`_finish_later`): a crash loses at most the step in progress and
        the one before it.

        ``switch(old, new)``: given, a machine that finishes frees its slot for
        the next queued machine of its migration in the transaction that
        persists its end, and this coroutine goes on with that machine once
        ``switch`` agreed (the caller's bookkeeping of what it runs; False:
        the machine's lock is released for whoever has it). Returns the state
        the last machine is in afterwards, or None if nothing ran.
        """
        if job is None:
            job = (await self.services.transactions.awrite_grouped(lambda unit: self.claim_many(
                unit.session, migration_id, [machine_id]))).get(machine_id)
            if job is None:
                return None
            job.resumed = job.taken_over = True
        while True:
            async with job.lock:  # released on the way out unless a move took it
                try:
                    new = await self._steps(job, switch)
                finally:
                    if job.pending is not None and job.lock.held:
                        await self._settle(job)  # a step raised with its move's commit queued
            successor = job.successor
            if successor is None:
                return new
            if not switch(job.machine_id, successor.machine_id):
                await successor.lock.arelease_grouped()
                return new
            job = successor

    async def _steps(self, job, switch):
        """The machine's steps while it is in flight; the step it ends in."""
        while True:
            started = time.monotonic()
            step = job.state
            job.refill = switch is not None and not self.stopping
            new = await self._step(job)
            metrics.observe_step(step, job.target, time.monotonic() - started)
            if not machine_steps.goes_on(new):
                return new
            job.state, job.taken_over = new, False

    def _persisted_deadline(self, job):
        """The persisted deadline of a machine awaiting its boot, as a
        ``time.monotonic()`` (None: unknown, counted from now)."""
        with self.services.db.read_conn() as conn:
            deadline = conn.execute(_DEADLINE, {"mig": job.migration_id,
                                                "mid": job.machine_id}).scalar()
        if deadline is None:
            return None
        return time.monotonic() + (deadline - models.utcnow()).total_seconds()

    async def _step(self, job):
        """The work of the machine's step, and its move as the table has it."""
        dry_run = job.options.get("dry_run")
        if not dry_run and (job.migration_state == "cancelling"
                            or job.migration_id in self.cancelling):
            row = machine_steps.find(job.state, Event.CANCELLED, job.taken_over)
            if row is not None:  # (a rollback goes on)
                return await self._apply(job, row, "migration cancelled",
                                         error="migration cancelled")
        if dry_run:
            return await self._dry_run(job)
        work, done = machine_steps.WORK[job.state]
        return await self._work[work](self, job, done)

    async def _await_boot(self, job, _done=None):
        """Wait for the machine's evidence or its deadline (:mod:`.evidence`);
        woken without either, the step is looked at again (a cancel), unless
        the conductor stops: then the machine is left awaiting its boot,
        unlocked, for whoever looks next."""
        timeout = self._boot_timeout(job.migration_id, job.options)
        if job.boot_deadline is None and job.resumed:
            # taken over: its boot is due by the deadline its move persisted
            job.boot_deadline = await self.services.step_loop.call_in_thread(
                self._persisted_deadline, job)
        if job.boot_deadline is None:
            job.boot_deadline = time.monotonic() + timeout
        ended = await self.evidence.await_boot(job, job.boot_deadline, timeout)
        if ended is None:
            return None if self.stopping else job.state
        event, reason, error, evidence_id = ended
        return await self._apply(job, machine_steps.on(job.state, event, job.taken_over),
                                 reason, error=error, evidence_id=evidence_id)

    async def _settle(self, job):
        """Wait for the transition queued without waiting; False if it found the
        machine moved by someone else."""
        pending, job.pending = job.pending, None
        if pending is None:
            return True
        return (await self.services.transactions.asettle(pending)).done is not None

    async def _apply(self, job, row, reason, error=None, evidence_id=None):
        """Make the move of ``row`` (of the table), committed as the row says;
        the step the machine is in afterwards, or None if someone else moved it."""
        if row.commit is machine_steps.Commit.QUEUED:
            if not await self._settle(job):  # the move before (committed by now)
                return None
            return self._finish_later(job, row, reason, evidence_id)
        return await self._finish(job, row, reason, error)

    @staticmethod
    def _activated_at(job, row):
        """What the move writes as ``activated_at``, if its row writes it."""
        if Write.ACTIVATED_AT not in row.writes:
            return None
        # evidence counts from now, before activate may reset the machine
        job.activated_at = job.activated_at or models.utcnow()
        return job.activated_at

    def _finish_later(self, job, row, reason, evidence_id=None):
        """Queue the step's outcome and go on at once: for a step whose re-run
        after a crash is harmless (the table's ``queued`` commits, and its
        "after a crash" column says why). A move the coroutine goes on from is
        waited for before the next one (:meth:`_settle`); one that releases
        the lock ends the machine's coroutine without waiting. Either is
        announced once committed, in commit order (:meth:`_record`)."""
        release = row.lock is Lock.RELEASED
        job.pending = self.services.transactions.write_batched_later(self._apply_batch, Move(
            job.migration_id, job.machine_id, row, reason, options=job.options,
            names=(job.source, job.target), evidence_id=evidence_id,
            activated_at=self._activated_at(job, row)))
        if release:
            job.pending.add_done_callback(_log_if_failed)  # nobody waits for it
            job.lock.dropped()
        return row.new.value

    async def _finish(self, job, row, reason, error=None):
        """Persist the step's outcome; release the lock with it when the row says so.

        A machine's end (``done``, ``valid``, ``skipped``) starts the next queued
        machine in the slot it frees, in the same transaction, when the
        coroutine may go on with it (``job.refill``): ``Committed.successor``."""
        release = row.lock is Lock.RELEASED
        if not await self._settle(job):
            return None  # its queued move found the machine moved by someone else
        committed = await self.services.transactions.awrite_batched(self._apply_batch, Move(
            job.migration_id, job.machine_id, row, reason, error=error, options=job.options,
            names=(job.source, job.target), refill=job.refill and row.refills,
            activated_at=self._activated_at(job, row)))
        if release:
            job.lock.dropped()
        if committed.done is None:
            return None  # someone else moved the machine: not ours to go on with
        if committed.successor is not None:
            _, job.successor = committed.successor
        return row.new.value

    async def _call(self, job, interface_name, step):
        """Call one plugin step; return None or the error message."""
        return await acall_step(self.services, job.machine, job.partition, interface_name,
                                step, migration_id=job.migration_id)

    async def _dry_run(self, job):
        error = await self._call(job, job.target, "validate")
        row = machine_steps.on(job.state, Event.DRY_RUN_INVALID if error else Event.DRY_RUN_VALID)
        return await self._apply(job, row, error or "valid for " + job.target, error=error)

    async def _forward(self, job, done):
        """The plugin call the row of the step's success (``done``) names; that
        row's move, or, if a veto hook objects (where the table asks them) or
        the call fails, the row of that event."""
        move = machine_steps.on(job.state, done)
        vetoed = machine_steps.find(job.state, Event.VETOED, job.taken_over)
        if vetoed is not None:
            vetoes = await self._vetoes(job.migration_id, job.machine_id)
            if vetoes:
                return await self._apply(job, vetoed, "vetoed: " + "; ".join(vetoes),
                                         error="veto: " + "; ".join(vetoes))
        role, step = machine_steps.plugin_call(move)
        error = await self._call(job, job.target if role == "target" else job.source, step)
        if error is None and step == "clean_up":
            stale = self._stale_interface(job)
            if stale:
                error = await self._call(job, stale, "clean_up")
        if error:
            return await self._apply(
                job, machine_steps.on(job.state, Event.STEP_FAILED, job.taken_over), error,
                error=error)
        message = DONE_MESSAGES[done].format(source=job.source, target=job.target)
        return await self._apply(job, move, message)

    async def _roll_back(self, job, _done=None):
        """Remove the target's traces; if the machine may have been reset onto the
        target, make it boot through its source again."""
        steps = [(job.target, "clean_up")]
        stale = self._stale_interface(job)
        if stale:
            steps.append((stale, "clean_up"))
        if job.activated_at is not None:
            steps += [(job.source, "prepare"), (job.source, "activate")]
        elif job.machine.prepared_interface != job.source:
            # joined the migration before it was enrolled: prepare it now
            steps.append((job.source, "prepare"))
        for interface, step in steps:
            error = await self._call(job, interface, step)
            if error:
                return await self._apply(
                    job, machine_steps.on(job.state, Event.ROLLBACK_FAILED),
                    f"rollback failed: {error}; the machine needs an operator",
                    error=f"rollback failed: {error}")
        return await self._apply(job, machine_steps.on(job.state, Event.ROLLED_BACK),
                                 f"rolled back to {job.source}" + (
                                     "" if job.activated_at else " (it had not been reset)"))

    # what a machine's coroutine does in each kind of step (machine_steps.WORK)
    _work = {machine_steps.Work.CALL: _forward, machine_steps.Work.AWAIT_BOOT: _await_boot,
             machine_steps.Work.ROLL_BACK: _roll_back}

    def _stale_interface(self, job):
        """An interface the machine is still prepared for that is neither source nor
        target (its boot_interface changed at rest, and a migration took it before
        it was enrolled again): cleaned up with the source, or in a rollback."""
        stale = job.machine.prepared_interface
        if stale in (None, job.source, job.target) or stale not in self.services.interfaces:
            return None
        return stale

    async def _vetoes(self, migration_id, machine_id):
        """The veto hooks' reasons, asked in a thread of the loop's: a hook may ask
        metal-api over the network, and the machine is read from the database."""
        if not self.services.hooks.has("metalboot_veto_machine"):
            return []
        return await self.services.step_loop.call_in_thread(
            self._ask_vetoes, migration_id, machine_id)

    def _ask_vetoes(self, migration_id, machine_id):
        from metalboot_framework import inventory, migrations
        machine = inventory.get_machine(self.services, machine_id)
        migration = migrations.get(self.services, migration_id)
        return [f"{plugin}: {reason}" for plugin, reason in self.services.hooks.veto_reasons(
            machine=machine, migration=migration)]

    # -- moves -------------------------------------------------------------------
    def transition(self, migration_id, machine_id, old, event, reason, error=None):
        """Persist the move of ``event`` in ``old`` (a row of the table) in one
        transaction; False if the machine was no longer in ``old`` (someone
        else moved it)."""
        committed = self.services.transactions.write_batched(self._apply_batch, Move(
            migration_id, machine_id, machine_steps.on(old, event), reason, error=error))
        return committed.done is not None

    def _apply_batch(self, conn, moves):
        """A group commit's moves: (unit, :class:`Committed`) each."""
        units = [UnitOfWork(conn, defer_events=True) for _ in moves]
        admitting = {t.migration_id for t in moves if t.refill}
        if len(admitting) > 1:  # row locks in migration order (PostgreSQL)
            admission.lock_migrations(conn, admitting)
        dones = self.apply_many(conn, moves, units)
        results = [Committed(done) for done in dones]
        for result, successor in zip(results, self._refill(conn, moves, dones, units),
                                     strict=True):
            result.successor = successor
        return list(zip(units, results, strict=True))

    def _refill(self, conn, moves, dones, units):
        """Start a queued machine in each slot that a finished machine of a
        ``refill`` transition freed (as far as :mod:`.admission` allows);
        per transition (announce's start, job or None) or None. The start's events
        go to the unit of the transition whose slot it takes."""
        freed = {}
        for index, (t, done) in enumerate(zip(moves, dones, strict=True)):
            if done is not None and t.refill:
                freed.setdefault(t.migration_id, []).append(index)
        successors = [None] * len(moves)
        for migration_id in sorted(freed):  # row locks in one order (PostgreSQL)
            indexes = freed[migration_id]
            starts, locked = self.start_many(
                conn, migration_id, len(indexes), [units[i] for i in indexes],
                freed_by=[moves[i].machine_id for i in indexes])
            # read here, not by each machine after the commit: hundreds of machines
            # reading at once would open and close pool connections all the time
            jobs = self._jobs_of_locked(conn, migration_id, locked)
            for index, start in zip(indexes, starts, strict=False):
                if start is not None:  # its job None: locked elsewhere, a scan runs it
                    successors[index] = (start, jobs.get(start[1]))
        return successors

    def start_many(self, conn, migration_id, limit, units, freed_by=None):
        """queued -> validating for up to ``limit`` machines that
        :func:`.admission.admit` lets start, and their locks, in ``conn``'s write
        transaction; ``units``: where the k-th start's events go; ``freed_by``:
        the machine whose slot the k-th start takes, if any. Returns (per
        start what :meth:`announce` needs, or None; the ids of the machines
        whose locks it took: :meth:`read_jobs` reads their jobs)."""
        options, rows = admission.admit(conn, migration_id, limit)
        starts = _starts(migration_id, rows, options, freed_by)
        dones = self.apply_many(conn, starts, units[:len(starts)])
        return dones, machine_lock.take(conn, [d[1] for d in dones if d is not None],
                                        self.host)

    def apply_many(self, conn, moves, units):
        """The writes of ``moves`` in ``conn``'s transaction, each transition's
        events into its unit of ``units``; returns per transition what
        :meth:`announce` needs after the commit, or None if the machine was no
        longer where the transition expected it.

        Transitions of one migration from and to the same steps are one UPDATE
        (and one for their locks, one for machines switching interface).
        """
        now = models.utcnow()
        results = [None] * len(moves)
        groups = {}
        seen = set()
        for index, t in enumerate(moves):
            if (t.migration_id, t.machine_id, t.old) in seen:
                continue  # the same move twice (two looks saw its evidence): done once
            seen.add((t.migration_id, t.machine_id, t.old))
            key = (t.migration_id, t.old, t.new, t.row.lock, t.row.writes, t.error,
                   t.evidence_id is None, t.activated_at is None)
            if Write.SWITCH in t.row.writes and t.names is None:
                t.names = tuple(conn.execute(_MM_NAMES, {"mig": t.migration_id,
                                                         "mid": t.machine_id}).first())
            groups.setdefault(key, []).append(index)
        for (migration_id, old, new, *_), indexes in groups.items():
            first = moves[indexes[0]]
            writes = first.row.writes
            values = self._values(first, now)
            if first.activated_at is not None:
                # one UPDATE for the group: evidence counts from the earliest
                values["activated_at"] = min(moves[i].activated_at for i in indexes)
            params = {"mig": migration_id, "old": old, "host": self.host, "now": now}
            params.update({f"v_{k}": v for k, v in values.items()})
            stmt = _move_stmt(tuple(sorted(values)))
            ids = [moves[i].machine_id for i in indexes]
            moved_ids = set(changed(conn, stmt, dict(params, new=new), ids, _MOVED))
            if first.row.lock is Lock.RELEASED:
                # a machine that switches interface is released by its switch (_after)
                released = [m for m in ids if Write.SWITCH not in writes or m not in moved_ids]
                machine_lock.release(conn, released, self.host)
            moved = [i for i in indexes if moves[i].machine_id in moved_ids]
            if moved and Write.EVIDENCE in writes and first.evidence_id is not None:
                conn.execute(_EVIDENCE, [{"mig": migration_id, "mid": moves[i].machine_id,
                                          "evidence": moves[i].evidence_id}
                                         for i in moved])
            if moved:
                self._after(conn, [moves[i] for i in moved], params)
            replaced = self._replace_canaries(conn, migration_id, [
                moves[i].machine_id for i in moved]) if Write.REPLACE_CANARY in writes else {}
            for i in moved:
                t = moves[i]
                results[i] = self._record(units[i], t)
                if t.machine_id in replaced:
                    units[i].event("migration.canary_replaced",
                                   f"{replaced[t.machine_id]} is a canary in place of "
                                   f"{t.machine_id}, which was skipped: {t.reason}",
                                   machine_id=replaced[t.machine_id],
                                   migration_id=migration_id,
                                   data={"replaces": t.machine_id, "reason": t.reason})
        return results

    @staticmethod
    def _replace_canaries(conn, migration_id, skipped):
        """{skipped canary: the queued machine that became a canary in its place};
        a canary left out of the wave must not let the rest start unproven."""
        if not skipped:
            return {}
        gone = [mid for chunk in chunks(skipped) for mid in conn.execute(
            _SKIPPED_CANARIES, {"mig": migration_id, "mids": chunk}).scalars()]
        if not gone:
            return {}
        successors = conn.execute(_NEXT_CANARIES, {"mig": migration_id,
                                                   "n": len(gone)}).scalars().all()
        if successors:
            made = set(conn.execute(_MAKE_CANARIES, {"mig": migration_id,
                                                     "mids": successors}).scalars())
            successors = [mid for mid in successors if mid in made]
        # with fewer machines queued than canaries gone, the last ones have no successor
        return dict(zip(gone, successors, strict=False))

    def _values(self, t, now):
        """The columns of ``migration_machines`` a move sets (its row's writes)."""
        writes = t.row.writes
        values = {"state": t.new, "updated_at": now}
        if t.error is not None:
            values["last_error"] = t.error
        if Write.STARTED in writes:
            values["started_at"] = now
            values["attempt"] = 1
        if Write.ACTIVATED_AT in writes or t.activated_at is not None:
            # Evidence counts from the moment activation may begin.
            values["activated_at"] = t.activated_at or now
        if Write.DEADLINE in writes:
            values["deadline"] = now + datetime.timedelta(seconds=self._boot_timeout(
                t.migration_id, t.options))
        if Write.FINISHED in writes:
            values["finished_at"] = now
        return values

    def _after(self, conn, moved, params):
        """What a move means for the machines themselves (``moved``: one kind of move)."""
        writes = moved[0].row.writes
        if Write.SWITCH in writes:
            by_target = {}
            for t in moved:
                by_target.setdefault(t.names[1], []).append(t.machine_id)
            for target, machine_ids in by_target.items():
                for chunk in chunks(machine_ids):
                    conn.execute(_SWITCH, dict(params, target=target, mids=chunk))
        statements = [stmt for write, stmt in _MACHINE_WRITES if write in writes]
        for t in moved:
            for stmt in statements:
                conn.execute(stmt, dict(params, mid=t.machine_id, v_last_error=moved[0].error))

    def _record(self, unit, t):
        """The events of a committed-to-be move, and its announcement once
        committed (in commit order: the announcer's thread); what
        :meth:`announce` needs."""
        unit.event("migration.step", f"{t.old} -> {t.new}: {t.reason}",
                   machine_id=t.machine_id, migration_id=t.migration_id,
                   data={"old": t.old, "new": t.new, "reason": t.reason})
        machine_change = None
        if Write.SWITCH in t.row.writes:
            source, target = t.names
            unit.event("machine.boot_interface_changed",
                       f"boot interface {source} -> {target} (migration {t.migration_id})",
                       machine_id=t.machine_id, migration_id=t.migration_id,
                       data={"old": source, "new": target, "reason": "migration"})
            machine_change = (source, target)
        done = (t.migration_id, t.machine_id, t.old, t.new, t.reason, machine_change)
        unit.announce(self.announce, done)
        return done

    def announce(self, done):
        """Log a committed transition and tell the hooks (in the announcer's thread)."""
        migration_id, machine_id, old, new, reason, machine_change = done
        LOG.info("machine %s in migration %s: %s -> %s: %s", machine_id, migration_id, old, new,
                 reason, extra={"migration_id": migration_id, "machine_id": machine_id,
                                "old_step": old, "step": new})
        self.services.hooks.notify("metalboot_machine_step_changed", machine_id=machine_id,
                                   migration_id=migration_id, old=old, new=new, reason=reason)
        if machine_change and self.services.hooks.has("metalboot_boot_interface_changed"):
            from metalboot_framework import inventory
            self.services.hooks.notify(
                "metalboot_boot_interface_changed",
                machine=inventory.get_machine(self.services, machine_id), old=machine_change[0],
                new=machine_change[1], reason=f"migration {migration_id}")

    def _boot_timeout(self, migration_id, options=None):
        if options is None:
            with self.services.db.read() as s:
                options = s.scalar(select(models.Migration.options).where(
                    models.Migration.id == migration_id))
        return options.get("boot_timeout") or self.services.conf.conductor.default_boot_timeout
