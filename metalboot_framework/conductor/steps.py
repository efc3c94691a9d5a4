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
from metalboot_framework.machine_steps import Step
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
    boot_interface=bindparam("target"), prepared_interface=bindparam("target"), state="ready",
    last_error=None, updated_at=bindparam("now")))
# Back at rest: ready if prepared for its interface, else the conductor enrols it
# (a machine may join a migration before it was ever enrolled).
_BACK_TO_REST = update(_MACHINES).where(_MACHINES.c.id == _mid,
                                        _MACHINES.c.state == "migrating") \
    .values(state=case((_MACHINES.c.prepared_interface == _MACHINES.c.boot_interface, "ready"),
                       else_="enrolling"), updated_at=bindparam("now"))
# A finished rollback prepared the source again (or found it prepared).
_SOURCE_PREPARED = update(_MACHINES).where(_MACHINES.c.id == _mid).values(
    prepared_interface=_MACHINES.c.boot_interface)
_TO_ERROR = update(_MACHINES).where(_MACHINES.c.id == _mid).values(
    state="error", last_error=bindparam("v_last_error"), updated_at=bindparam("now"))
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
_TRANSITIONS = {}


def _transition_stmt(keys):
    """UPDATE of migration machines from an expected state, per set of columns
    (``state`` and ``updated_at`` among them: :data:`_MOVED` reads them back)."""
    stmt = _TRANSITIONS.get(keys)
    if stmt is None:
        stmt = _TRANSITIONS[keys] = update(_MMT).where(
            _MMT.c.migration_id == bindparam("mig"), _MMT.c.machine_id.in_(_mids),
            _MMT.c.state == bindparam("old")) \
            .values({k: bindparam(f"v_{k}") for k in keys})
    return stmt


DONE_MESSAGES = {Step.VALIDATING: "{target} validated the machine",
                 Step.PREPARING: "{target} prepared", Step.ACTIVATING: "{target} activated",
                 Step.VERIFYING: "booted through {target}; {source} cleaned up"}


@dataclasses.dataclass
class Transition:
    """One machine's move from one persisted step to the next.

    ``release`` also drops this conductor's lock on the machine; ``refill``:
    the slot this (final) move frees may start the next queued machine in the
    same transaction (:meth:`StepRunner.start_many`); ``names`` is (source,
    target) interface names, if the caller knows them; ``activated_at``: the
    time from which the machine's evidence counts, written with the move (the
    move to ``activating`` writes the commit's time without it).
    """

    migration_id: str
    machine_id: str
    old: str
    new: str
    reason: str
    error: str | None = None
    evidence_id: int | None = None
    release: bool = False
    options: dict | None = None
    names: tuple | None = None
    refill: bool = False
    activated_at: object = None

    def __post_init__(self):
        machine_steps.check(self.old, self.new)


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
    # read by a claim, not in the transaction that started the machine: a
    # conductor may have died after it called prepare while the move to
    # preparing was still queued (see _finish_later), so the step may have
    # changed the machine even though it says validating
    resumed: bool = False
    # resumed in preparing: the dead conductor may have called activate (the
    # move to activating is committed while activate runs), so a rollback
    # resets the machine onto its source as if it had been activated
    maybe_activated: bool = False
    # time.monotonic() by which its boot is due, once it began to wait for it
    boot_deadline: float | None = None


def _starts(migration_id, rows, options, freed_by=None):
    """queued -> validating transitions of ``rows`` ([(machine id, canary)]);
    ``freed_by``: the machine whose slot the k-th one takes, if any."""
    return [Transition(migration_id, machine_id, Step.QUEUED, Step.VALIDATING,
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

    def _jobs_of_locked(self, conn, migration_id, locked, runnable=machine_steps.IN_FLIGHT):
        """The jobs of machines whose locks ``conn``'s transaction took, read in it;
        those whose step is not in ``runnable`` (any more) are released in it."""
        jobs, idle = self._jobs(conn, migration_id, locked, runnable)
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

    def _jobs(self, conn, migration_id, machine_ids, runnable=machine_steps.IN_FLIGHT):
        """(jobs of those of the locked ``machine_ids`` whose step is in
        ``runnable``, the ids of the others)."""
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
                if row is None or row.state not in runnable or machine_id not in snapshots:
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
            job.resumed = True
            job.maybe_activated = job.state == Step.PREPARING and job.activated_at is None
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
            if new not in machine_steps.IN_FLIGHT:
                return new
            job.state = new

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
        cancelling = job.migration_state == "cancelling" or job.migration_id in self.cancelling
        if job.state != Step.ROLLING_BACK and cancelling \
                and not job.options.get("dry_run"):
            return await self._finish(job, Step.ROLLING_BACK, "migration cancelled",
                                      error="migration cancelled")
        if job.options.get("dry_run"):
            return await self._dry_run(job)
        if job.state == Step.ROLLING_BACK:
            return await self._roll_back(job)
        if job.state == Step.AWAITING_BOOT:
            return await self._await_boot(job)
        return await self._forward(job)

    async def _await_boot(self, job):
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
            return None if self.stopping else Step.AWAITING_BOOT
        new, reason, error, evidence_id = ended
        if new == Step.VERIFYING:
            if not await self._settle(job):  # the move to awaiting_boot (committed by now)
                return None
            return self._finish_later(job, new, reason, evidence_id=evidence_id)
        return await self._finish(job, new, reason, error=error)

    async def _settle(self, job):
        """Wait for the transition queued without waiting; False if it found the
        machine moved by someone else."""
        pending, job.pending = job.pending, None
        if pending is None:
            return True
        return (await self.services.transactions.asettle(pending)).done is not None

    def _finish_later(self, job, new, reason, evidence_id=None):
        """Queue the step's outcome and go on at once: for a step whose re-run
        after a crash is harmless. A ``new`` the coroutine goes on with is
        waited for before the next transition (:meth:`_settle`); any other
        releases the lock, and the machine's coroutine ends without waiting.
        Either is announced once committed, in commit order (:meth:`_record`).

        Such steps: validating -> preparing (validate changed nothing; prepare
        is idempotent), preparing -> activating (a machine resumed in preparing
        is prepared and activated again, and its rollback activates the source
        as if it had been activated: ``Job.maybe_activated``), activating ->
        awaiting_boot (activate is re-run), and awaiting_boot -> verifying (a
        machine resumed awaiting its boot finds its evidence again, and the
        source's clean_up is idempotent). The caller settles the transition
        queued before (:meth:`_settle`): a machine's moves commit in order."""
        release = new not in machine_steps.IN_FLIGHT
        activated_at = None
        if new == Step.ACTIVATING:
            # evidence counts from now, before activate may reset the machine
            activated_at = job.activated_at = job.activated_at or models.utcnow()
        job.pending = self.services.transactions.write_batched_later(self._apply_batch, Transition(
            job.migration_id, job.machine_id, job.state, new, reason, options=job.options,
            names=(job.source, job.target), release=release, evidence_id=evidence_id,
            activated_at=activated_at))
        if release:
            job.pending.add_done_callback(_log_if_failed)  # nobody waits for it
            job.lock.dropped()
        return new

    async def _finish(self, job, new, reason, error=None):
        """Persist the step's outcome; release the lock with it when no step follows.

        A machine's end (``done``, ``valid``, ``skipped``) starts the next queued
        machine in the slot it frees, in the same transaction, when the
        coroutine may go on with it (``job.refill``): ``Committed.successor``."""
        release = new not in machine_steps.IN_FLIGHT
        if not await self._settle(job):
            return None  # its queued move found the machine moved by someone else
        activated_at = None
        if new == Step.ROLLING_BACK and job.activated_at is None and job.maybe_activated:
            # persisted, so that a rollback resumed after another crash resets too
            activated_at = job.activated_at = models.utcnow()
        committed = await self.services.transactions.awrite_batched(self._apply_batch, Transition(
            job.migration_id, job.machine_id, job.state, new, reason, error=error,
            release=release, options=job.options, names=(job.source, job.target),
            refill=job.refill and new in machine_steps.REFILLING, activated_at=activated_at))
        if release:
            job.lock.dropped()
        if committed.done is None:
            return None  # someone else moved the machine: not ours to go on with
        if committed.successor is not None:
            _, job.successor = committed.successor
        return new

    async def _call(self, job, interface_name, step):
        """Call one plugin step; return None or the error message."""
        return await acall_step(self.services, job.machine, job.partition, interface_name,
                                step, migration_id=job.migration_id)

    async def _dry_run(self, job):
        error = await self._call(job, job.target, "validate")
        return await self._finish(job, Step.INVALID if error else Step.VALID,
                                  error or "valid for " + job.target, error=error)

    async def _forward(self, job):
        """The plugin call of the machine's step, then its move forward, both
        as the table (:data:`machine_steps.FORWARD_MOVES`) has them; a failed
        call rolls back."""
        state, source, target = job.state, job.source, job.target
        move = machine_steps.FORWARD_MOVES[state]
        if state == Step.VALIDATING:
            vetoes = await self._vetoes(job.migration_id, job.machine_id)
            if vetoes:
                # resumed, it may have been prepared: rolled back, not skipped
                return await self._finish(job, Step.ROLLING_BACK if job.resumed else Step.SKIPPED,
                                          "vetoed: " + "; ".join(vetoes),
                                          error="veto: " + "; ".join(vetoes))
        role, step = machine_steps.plugin_call(move)
        error = await self._call(job, target if role == "target" else source, step)
        if error is None and step == "clean_up":
            stale = self._stale_interface(job)
            if stale:
                error = await self._call(job, stale, "clean_up")
        if error and state == Step.VALIDATING and not job.resumed:
            # validate changes nothing (the contract), so nothing is rolled back:
            # the target's clean_up would only talk again to the BMC or DHCP server
            # that validation may have found broken, and fail the machine for nothing.
            # (A resumed machine may have been prepared: it is rolled back.)
            return await self._finish(job, Step.ROLLED_BACK, error, error=error)
        if error:
            return await self._finish(job, Step.ROLLING_BACK, error, error=error)
        message = DONE_MESSAGES[state].format(source=source, target=target)
        if move.commit is machine_steps.Commit.QUEUED:
            if not await self._settle(job):  # the move before (committed by now)
                return None
            return self._finish_later(job, move.new.value, message)
        return await self._finish(job, move.new.value, message)

    async def _roll_back(self, job):
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
                return await self._finish(
                    job, Step.ROLLBACK_FAILED,
                    f"rollback failed: {error}; the machine needs an operator",
                    error=f"rollback failed: {error}")
        return await self._finish(job, Step.ROLLED_BACK, f"rolled back to {job.source}" + (
            "" if job.activated_at else " (it had not been reset)"))

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

    # -- transitions -------------------------------------------------------------------
    def transition(self, migration_id, machine_id, old, new, reason, error=None,
                   evidence_id=None, release=False, options=None):
        """Persist old -> new with an event, in one transaction; False if the
        machine was no longer in ``old`` (someone else moved it). ``release``
        also drops this conductor's lock on the machine in that transaction."""
        committed = self.services.transactions.write_batched(self._apply_batch, Transition(
            migration_id, machine_id, old, new, reason, error=error, evidence_id=evidence_id,
            release=release, options=options))
        return committed.done is not None

    def _apply_batch(self, conn, transitions):
        """A group commit's transitions: (unit, :class:`Committed`) each."""
        units = [UnitOfWork(conn, defer_events=True) for _ in transitions]
        admitting = {t.migration_id for t in transitions if t.refill}
        if len(admitting) > 1:  # row locks in migration order (PostgreSQL)
            admission.lock_migrations(conn, admitting)
        dones = self.apply_many(conn, transitions, units)
        results = [Committed(done) for done in dones]
        for result, successor in zip(results, self._refill(conn, transitions, dones, units),
                                     strict=True):
            result.successor = successor
        return list(zip(units, results, strict=True))

    def _refill(self, conn, transitions, dones, units):
        """Start a queued machine in each slot that a finished machine of a
        ``refill`` transition freed (as far as :mod:`.admission` allows);
        per transition (announce's start, job or None) or None. The start's events
        go to the unit of the transition whose slot it takes."""
        freed = {}
        for index, (t, done) in enumerate(zip(transitions, dones, strict=True)):
            if done is not None and t.refill:
                freed.setdefault(t.migration_id, []).append(index)
        successors = [None] * len(transitions)
        for migration_id in sorted(freed):  # row locks in one order (PostgreSQL)
            indexes = freed[migration_id]
            starts, locked = self.start_many(
                conn, migration_id, len(indexes), [units[i] for i in indexes],
                freed_by=[transitions[i].machine_id for i in indexes])
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

    def apply_many(self, conn, transitions, units):
        """The writes of ``transitions`` in ``conn``'s transaction, each transition's
        events into its unit of ``units``; returns per transition what
        :meth:`announce` needs after the commit, or None if the machine was no
        longer where the transition expected it.

        Transitions of one migration from and to the same steps are one UPDATE
        (and one for their locks, one for machines switching interface).
        """
        now = models.utcnow()
        results = [None] * len(transitions)
        groups = {}
        seen = set()
        for index, t in enumerate(transitions):
            if (t.migration_id, t.machine_id, t.old) in seen:
                continue  # the same move twice (two looks saw its evidence): done once
            seen.add((t.migration_id, t.machine_id, t.old))
            key = (t.migration_id, t.old, t.new, t.release, t.error, t.evidence_id is None,
                   t.activated_at is None)
            if t.new == Step.DONE and t.names is None:
                t.names = tuple(conn.execute(_MM_NAMES, {"mig": t.migration_id,
                                                         "mid": t.machine_id}).first())
            groups.setdefault(key, []).append(index)
        for (migration_id, old, new, release, _error, _, _), indexes in groups.items():
            first = transitions[indexes[0]]
            values = self._values(first, now)
            if first.activated_at is not None:
                # one UPDATE for the group: evidence counts from the earliest
                values["activated_at"] = min(transitions[i].activated_at for i in indexes)
            params = {"mig": migration_id, "old": old, "host": self.host, "now": now}
            params.update({f"v_{k}": v for k, v in values.items()})
            stmt = _transition_stmt(tuple(sorted(values)))
            ids = [transitions[i].machine_id for i in indexes]
            moved_ids = set(changed(conn, stmt, dict(params, new=new), ids, _MOVED))
            if release:
                # a machine moved to done is released by its switch (_after)
                released = [m for m in ids if new != Step.DONE or m not in moved_ids]
                machine_lock.release(conn, released, self.host)
            moved = [i for i in indexes if transitions[i].machine_id in moved_ids]
            if moved and first.evidence_id is not None:
                conn.execute(_EVIDENCE, [{"mig": migration_id, "mid": transitions[i].machine_id,
                                          "evidence": transitions[i].evidence_id}
                                         for i in moved])
            if moved:
                self._after(conn, [transitions[i] for i in moved], params)
            replaced = self._replace_canaries(conn, migration_id, [
                transitions[i].machine_id for i in moved]) if new == Step.SKIPPED else {}
            for i in moved:
                t = transitions[i]
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
        """The columns a transition sets."""
        values = {"state": t.new, "updated_at": now}
        if t.error is not None:
            values["last_error"] = t.error
        if t.old == Step.QUEUED and t.new == Step.VALIDATING:
            values["started_at"] = now
            values["attempt"] = 1
        if t.new == Step.ACTIVATING or t.activated_at is not None:
            # Evidence counts from the moment activation may begin.
            values["activated_at"] = t.activated_at or now
        if t.new == Step.AWAITING_BOOT:
            values["deadline"] = now + datetime.timedelta(seconds=self._boot_timeout(
                t.migration_id, t.options))
        if t.new in machine_steps.FINISHED:
            values["finished_at"] = now
        return values

    def _after(self, conn, moved, params):
        """What a move means for the machines themselves (``moved``: one kind of move)."""
        old, new = moved[0].old, moved[0].new
        ids = [t.machine_id for t in moved]
        if new == Step.DONE:
            by_target = {}
            for t in moved:
                by_target.setdefault(t.names[1], []).append(t.machine_id)
            for target, machine_ids in by_target.items():
                for chunk in chunks(machine_ids):
                    conn.execute(_SWITCH, dict(params, target=target, mids=chunk))
        elif new in machine_steps.AT_REST:
            for machine_id in ids:
                if old == Step.ROLLING_BACK:
                    conn.execute(_SOURCE_PREPARED, dict(params, mid=machine_id))
                conn.execute(_BACK_TO_REST, dict(params, mid=machine_id))
        elif new == Step.ROLLBACK_FAILED:
            for machine_id in ids:
                conn.execute(_TO_ERROR, dict(params, mid=machine_id,
                                             v_last_error=moved[0].error))

    def _record(self, unit, t):
        """The events of a committed-to-be move, and its announcement once
        committed (in commit order: the announcer's thread); what
        :meth:`announce` needs."""
        unit.event("migration.step", f"{t.old} -> {t.new}: {t.reason}",
                   machine_id=t.machine_id, migration_id=t.migration_id,
                   data={"old": t.old, "new": t.new, "reason": t.reason})
        machine_change = None
        if t.new == Step.DONE:
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
