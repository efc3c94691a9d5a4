"""Running a machine's steps in a migration, as the table has them.

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

What each event of a step leads to is a row of
:data:`metalboot_framework.machine_steps.TRANSITIONS`; the runner looks it up
and hands the move to :mod:`.moves`, which writes it with other machines'
moves. Claims are :mod:`.jobs`'s, and the starts of queued machines
:mod:`.refill`'s.
"""

import logging
import time

from metalboot_framework import machine_steps, metrics
from metalboot_framework.conductor import admission
from metalboot_framework.conductor.jobs import Claims
from metalboot_framework.conductor.moves import Committed, Move, MoveWriter, boot_timeout
from metalboot_framework.conductor.plugin_call import acall_step
from metalboot_framework.conductor.refill import Refill
from metalboot_framework.machine_steps import Event, Lock, Write
from metalboot_framework.store import models
from metalboot_framework.transactions import UnitOfWork

LOG = logging.getLogger(__name__)

DONE_MESSAGES = {Event.VALIDATED: "{target} validated the machine",
                 Event.PREPARED: "{target} prepared", Event.ACTIVATED: "{target} activated",
                 Event.CLEANED_UP: "booted through {target}; {source} cleaned up"}


def _log_if_failed(outcome):
    try:
        outcome.result()
    except Exception:
        LOG.exception("a step's move queued without waiting failed")


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
        self.claims = Claims(services, host)
        self.moves = MoveWriter(services, host)
        self.refill = Refill(host, self.moves, self.claims)

    # -- the step -------------------------------------------------------------------
    async def run(self, migration_id, machine_id, job=None, switch=None):
        """Run the machine's steps while they are runnable, holding its lock: a
        coroutine on the step loop, which awaits each plugin step (a blocking
        one in a thread of the loop's) and each commit.

        ``job``: what :meth:`.Claims.claim_many` read when it took the lock; without
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
            job = (await self.services.transactions.grouped(
                lambda unit: self.claims.claim_many(unit.session, migration_id, [machine_id]))
            ).get(machine_id)
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
        timeout = boot_timeout(self.services, job.migration_id, job.options)
        if job.boot_deadline is None and job.resumed:
            # taken over: its boot is due by the deadline its move persisted
            job.boot_deadline = await self.services.step_loop.call_in_thread(
                self.claims.persisted_deadline, job)
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
        return (await pending).done is not None

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
        announced once committed, in commit order (:meth:`.MoveWriter._record`)."""
        release = row.lock is Lock.RELEASED
        job.pending = self.services.transactions.batched(self._apply_batch, Move(
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
        committed = await self.services.transactions.batched(self._apply_batch, Move(
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

    # -- moves ------------------------------------------------------------------------
    def transition(self, migration_id, machine_id, old, event, reason, error=None):
        """Persist the move of ``event`` in ``old`` (a row of the table) in one
        transaction; False if the machine was no longer in ``old`` (someone
        else moved it)."""
        committed = self.services.transactions.batched(self._apply_batch, Move(
            migration_id, machine_id, machine_steps.on(old, event), reason, error=error)).result()
        return committed.done is not None

    def _apply_batch(self, conn, moves):
        """A group commit's moves: (unit, :class:`Committed`) each."""
        units = [UnitOfWork(conn, defer_events=True) for _ in moves]
        admitting = {t.migration_id for t in moves if t.refill}
        if len(admitting) > 1:  # row locks in migration order (PostgreSQL)
            admission.lock_migrations(conn, admitting)
        dones = self.moves.apply_many(conn, moves, units)
        results = [Committed(done) for done in dones]
        for result, successor in zip(results, self.refill.refill(conn, moves, dones, units),
                                     strict=True):
            result.successor = successor
        return list(zip(units, results, strict=True))
