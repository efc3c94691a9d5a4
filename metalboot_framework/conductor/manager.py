"""The conductor: heartbeat, recovery, enrolment, the scheduler of migration steps, drift.

A scheduler thread looks at the live migrations every ``poll_interval`` (and
whenever a step finishes): it starts queued machines up to ``max_parallel``
(canaries first), hands machines in flight to the step loop (each a coroutine
there, :mod:`metalboot_framework.steploop`; a plugin step written as a
blocking function runs in one of the loop's threads; a machine awaiting its
boot waits in :mod:`.evidence`), halts migrations past their failure budget
(``halting`` until their machines in flight have ended, then ``halted``) and closes
finished ones, recording how they went (``result``). Enrolment and removal
of machines at rest run in the worker threads. All state is in the database,
so a restarted conductor simply carries on; several conductors can share one
database because every step is claimed with a conditional update of the
machine's lock.
"""

import asyncio
import concurrent.futures
import datetime
import logging
import threading
import time

from sqlalchemy import select, update

from metalboot_framework import migration_states as states
from metalboot_framework import machine_steps
from metalboot_framework.machine_steps import Event, Step
from metalboot_framework.conductor import admission, machine_lock
from metalboot_framework.conductor import migration_ends as ends
from metalboot_framework.conductor.at_rest import Waiting
from metalboot_framework.conductor.drift import DriftCheck
from metalboot_framework.conductor.enrolment import Enroller
from metalboot_framework.conductor.evidence import EvidenceWatcher
from metalboot_framework.conductor.removal import Remover
from metalboot_framework.conductor.steps import StepRunner
from metalboot_framework.store import models

LOG = logging.getLogger(__name__)

MM = models.MigrationMachine

# Seconds between scans for machines in flight nobody runs (after a restart, or
# left by a conductor that stopped or died); steps this conductor starts are
# handed to a worker at once.
RESCAN_INTERVAL = 2.0

class Conductor:
    def __init__(self, services):
        self.services = services
        self.conf = services.conf
        self.host = services.conf.host
        self.evidence = EvidenceWatcher(services, self.conf.conductor.evidence_interval)
        self.runner = StepRunner(services, self.host, self.evidence)
        self.enroller = Enroller(services, self.host)
        self.remover = Remover(services, self.host)
        self._at_rest_waiting = Waiting(services, (self.remover, self.enroller))
        self.check_drift = DriftCheck(services, self.conf.conductor.workers)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads = []
        self._pool = None
        self._loop = services.step_loop
        self._machine_tasks = set()  # the machines' coroutines (asyncio holds weak refs)
        self._in_flight = set()
        self._in_flight_lock = threading.Lock()
        # machine id -> migration id: handed over while a coroutine of ours still
        # ran the machine; it is submitted again when that coroutine ends
        self._handed_back = {}
        self._last_scan = float("-inf")

    # -- life cycle -----------------------------------------------------------------
    def start(self):
        self._register()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.conf.conductor.workers, thread_name_prefix="conductor-worker")
        self._loop.set_threads(self.conf.conductor.workers)  # blocking plugin steps
        self.services.work_watchers.append(self._wake.set)
        self.evidence.start()
        self._spawn(self._heartbeat_loop, "heartbeat")
        self._spawn(self._scheduler_loop, "scheduler")
        if self.conf.conductor.drift_check_interval:
            self._spawn(self._drift_loop, "drift")

    def _spawn(self, target, name):
        thread = threading.Thread(target=target, name=f"conductor-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout=10):
        """Stop starting work, let running steps finish, release what we hold."""
        self._stop.set()
        self.runner.stopping = True
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout)
        if self._pool is not None:
            # machines finish the step they are in (their blocking plugin calls
            # need the pool; those waiting for their boot stop waiting), then the
            # pool's enrolments and removals
            self.evidence.wake()
            self._loop.run(self._machines_finished())
            self._pool.shutdown(wait=True, cancel_futures=True)
        self.evidence.stop()
        # transitions queued without waiting commit before this one, and are
        # announced before the conductor says it stopped
        self.services.transactions.grouped(lambda unit: None).result()
        self.services.transactions.announcer.flush()
        with self.services.transactions.now() as unit:
            s = unit.session
            s.execute(update(models.Conductor).where(models.Conductor.hostname == self.host)
                      .values(online=False))
            machine_lock.release_all(s, self.host)

    def _register(self):
        """Record this conductor as live; release locks a previous run left behind."""
        now = models.utcnow()
        with self.services.transactions.now() as unit:
            s = unit.session
            row = s.get(models.Conductor, self.host)
            if row is None:
                s.add(models.Conductor(hostname=self.host, started_at=now, heartbeat_at=now,
                                       online=True))
            else:
                row.started_at = row.heartbeat_at = now
                row.online = True
            released = machine_lock.release_all(s, self.host)
        if released:
            LOG.warning("released %d machine lock(s) left by a previous run of %s",
                        released, self.host)

    def _heartbeat_loop(self):
        interval = self.conf.conductor.heartbeat_interval
        while not self._stop.wait(interval):
            try:
                self.heartbeat()
            except Exception:
                LOG.exception("heartbeat failed")

    def heartbeat(self):
        """Refresh our heartbeat; release the locks of conductors that died, and
        our own locks on machines none of our workers has (see _release_leaked)."""
        now = models.utcnow()
        limit = now - datetime.timedelta(seconds=self.conf.conductor.heartbeat_timeout)
        with self.services.transactions.now() as unit:
            s = unit.session
            s.execute(update(models.Conductor).where(models.Conductor.hostname == self.host)
                      .values(heartbeat_at=now, online=True))
            self._release_leaked(s, now)
            dead, released = machine_lock.release_of_dead(s, limit)
            if dead:
                LOG.warning("conductor(s) %s missed heartbeats; released %d lock(s)",
                            ", ".join(dead), released)

    def _release_leaked(self, session, now):
        """A worker that could not write its machine's release (the database was
        away) leaves the lock behind, and a live conductor's locks are never
        released by the others: drop our locks on machines no worker of ours
        runs. Only locks older than a heartbeat interval, so that a claim on its
        way from the scheduler to a worker is not one of them."""
        with self._in_flight_lock:
            busy = list(self._in_flight)
        before = now - datetime.timedelta(seconds=self.conf.conductor.heartbeat_interval)
        leaked = machine_lock.release_leaked(session, self.host, before, busy)
        if leaked:
            LOG.warning("released %d lock(s) of %s on machines none of its workers runs: %s",
                        len(leaked), self.host, ", ".join(sorted(leaked)[:10]))

    # -- scheduling ----------------------------------------------------------------
    def _scheduler_loop(self):
        poll = self.conf.conductor.poll_interval
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
            except Exception:
                LOG.exception("scheduler tick failed")
            self._wake.wait(poll)
            self._wake.clear()
            # A finished step wakes us early, but a tick costs a dozen queries:
            # look at most 20 times a second.
            self._stop.wait(max(0.0, min(poll, 0.05) - (time.monotonic() - started)))

    def tick(self):
        """One look at enrolling machines and at every live migration."""
        with self.services.db.read() as s:
            live = list(s.scalars(select(models.Migration).where(
                models.Migration.state.in_(states.LIVE))
                .order_by(models.Migration.created_at)))
        self.runner.cancelling = frozenset(m.id for m in live if m.state == states.CANCELLING)
        # With a migration running, enrolment gets at most half of the idle
        # workers: a mass registration must not hold back a migration's start.
        self._enrol_waiting(share=0.5 if any(m.state == states.RUNNING for m in live) else 1.0)
        if not live:
            return
        now = time.monotonic()
        full_scan = now - self._last_scan >= RESCAN_INTERVAL
        if full_scan:
            self._last_scan = now
        for migration in live:
            tally = self._tally(migration.id)
            if migration.state == states.CANCELLING:
                self._cancel_queued(migration)
            elif migration.state == states.HALTING and admission.queued(tally):
                # left queued by a conductor that stopped right after halting it
                self._cancel_queued(migration, f"migration halted: {migration.reason}",
                                    Event.HALTED)
            elif migration.state == states.RUNNING:
                if not self._check_budget(migration, tally):
                    self._start_queued(migration, tally)
            if full_scan:
                self._dispatch(migration)
            # cancelling and halting cancelled the queued ones above; while
            # machines are in flight nothing can close
            if not admission.in_flight(tally) and (
                    not admission.queued(tally)
                    or migration.state in (states.CANCELLING, states.HALTING)):
                ends.close_if_finished(self.services, migration)

    def _tally(self, migration_id):
        with self.services.db.read_conn() as conn:
            return admission.tally(conn, migration_id)

    def _submit(self, migration_id, machine_id, job=None):
        """Run the machine's steps as a coroutine on the step loop, unless we
        already work on it (from any thread)."""
        with self._in_flight_lock:
            if machine_id in self._in_flight:
                return False
            self._in_flight.add(machine_id)
        self._loop.call_soon(self._spawn_machine, migration_id, machine_id, job)
        return True

    def _spawn_machine(self, migration_id, machine_id, job):  # on the step loop
        task = self._loop.loop.create_task(self._run_machine(migration_id, machine_id, job))
        self._machine_tasks.add(task)
        task.add_done_callback(self._machine_tasks.discard)

    async def _run_machine(self, migration_id, machine_id, job):
        held = [machine_id]  # what the coroutine runs now: it may go on to a successor

        def switch(old, new):
            with self._in_flight_lock:
                if new in self._in_flight or self._stop.is_set():
                    return False
                self._in_flight.discard(old)
                self._in_flight.add(new)
                held[0] = new
                return True

        try:
            await self.runner.run(migration_id, machine_id, job, switch)
        except Exception:
            LOG.exception("work on machine %s failed", held[0])
        finally:
            self._ended(held[0])

    async def _machines_finished(self):
        while self._machine_tasks:
            await asyncio.wait(list(self._machine_tasks))

    def _hand_over(self, migration_id, machine_ids, jobs):
        """Hand machines the tick started to the step loop:
        with the jobs of those whose locks it took, the others to claim them. A
        machine a coroutine of ours still runs (it may be about to end) has its
        lock released and is submitted again when that coroutine ends."""
        refused = [machine_id for machine_id, job in jobs.items()
                   if not self._submit(migration_id, machine_id, job)]
        with self._in_flight_lock:
            for machine_id in refused:
                self._handed_back[machine_id] = migration_id
        self.runner.claims.release(refused)
        for machine_id in machine_ids:
            if machine_id not in jobs:  # locked by someone else: its runner or a scan
                self._submit(migration_id, machine_id)

    def _start(self, machine_id, work, *args):
        """Hand blocking work on a machine at rest (enrolment, removal) to a worker
        thread unless we already work on the machine."""
        with self._in_flight_lock:
            if machine_id in self._in_flight:
                return False
            self._in_flight.add(machine_id)
        self._pool.submit(self._work, machine_id, work, *args)
        return True

    def _idle_workers(self):
        with self._in_flight_lock:
            return self.conf.conductor.workers - len(self._in_flight)

    def _enrol_waiting(self, share=1.0):
        """Give machines being deleted, then enrolling ones, to idle workers
        (``share`` of those idle, at least one)."""
        idle = self._idle_workers()
        if idle <= 0:
            return
        idle = max(1, int(idle * share))
        for worker, machine_id in self._at_rest_waiting(self.conf.conductor.workers):
            if idle <= 0:
                return
            if self._start(machine_id, worker.run, machine_id):
                idle -= 1

    def _dispatch(self, migration):
        """Hand machines in flight that nobody holds to idle workers (recovery
        after a restart, or machines another conductor left behind: a step to
        run again, or a boot to wait for)."""
        idle = self._idle_workers()
        if idle <= 0:
            return
        with self.services.db.read() as s:
            rows = s.execute(
                select(MM.machine_id).join(models.Machine, models.Machine.id == MM.machine_id)
                .where(MM.migration_id == migration.id, MM.state.in_(machine_steps.IN_FLIGHT),
                       machine_lock.unlocked())
                .order_by(MM.position).limit(idle + len(self._in_flight))).all()
        for (machine_id,) in rows:
            if idle <= 0:
                break
            if machine_id not in self._in_flight:
                self._submit(migration.id, machine_id)
                idle -= 1

    def _work(self, machine_id, work, *args):
        """Run blocking work on a machine at rest (a worker thread)."""
        try:
            work(*args)
        except Exception:
            LOG.exception("work on machine %s failed", machine_id)
        finally:
            self._ended(machine_id)

    def _ended(self, machine_id):
        """We no longer work on the machine: run it again if it was handed over
        meanwhile; the scheduler looks again."""
        with self._in_flight_lock:
            self._in_flight.discard(machine_id)
            again = self._handed_back.pop(machine_id, None)
        if again is not None and not self._stop.is_set():
            self._submit(again, machine_id)
        self._wake.set()

    def _start_queued(self, migration, tally):
        """queued -> validating for as many machines as max_parallel and this
        conductor's idle workers allow (:mod:`.admission`).

        Take only what this conductor's workers can run now: machines started
        but waiting in a queue would hold max_parallel slots that another
        conductor's idle workers could use.
        """
        if not admission.queued(tally):
            return
        if admission.in_flight(tally) >= migration.options["max_parallel"]:
            return  # full (as of the tally): no write transaction to find that out
        idle = self._idle_workers()
        if idle <= 0:
            return
        dones, locked = self.services.transactions.grouped(
            lambda unit: self.runner.refill.start_many(unit.session, migration.id, idle,
                                                       [unit] * idle)).result()
        jobs = self.runner.claims.read_jobs(migration.id, locked)  # starts announced once committed
        self._hand_over(migration.id, [done[1] for done in dones if done is not None], jobs)

    def _check_budget(self, migration, tally):
        """Halt a migration past its failure budget or with a failed canary."""
        reason = ends.halt_reason(self.services, migration, tally)
        if reason is None:
            return False
        if ends.set_state(self.services, migration.id, states.RUNNING, states.HALTING, reason):
            self._cancel_queued(migration, f"migration halted: {reason}", Event.HALTED)
        return True

    def _cancel_queued(self, migration, reason="migration cancelled", event=Event.CANCELLED):
        """Queued machines -> cancelled; when cancelling, machines awaiting their
        boot -> rolling_back: ours are woken and roll back by themselves, the
        others' (unlocked: nobody waits for them) are moved here."""
        if migration.state == states.CANCELLING:
            self.evidence.wake(migration.id)
        with self.services.db.read() as s:
            queued = s.scalars(select(MM.machine_id).where(
                MM.migration_id == migration.id, MM.state == Step.QUEUED)).all()
            waiting = s.scalars(select(MM.machine_id).join(
                models.Machine, models.Machine.id == MM.machine_id).where(
                MM.migration_id == migration.id, MM.state == Step.AWAITING_BOOT,
                machine_lock.unlocked())).all()
        for machine_id in queued:
            self.runner.transition(migration.id, machine_id, Step.QUEUED, event, reason)
        if migration.state == states.CANCELLING:
            for machine_id in waiting:
                if self.runner.transition(migration.id, machine_id, Step.AWAITING_BOOT,
                                          Event.CANCELLED, reason, error=reason):
                    self._submit(migration.id, machine_id)

    # -- drift -------------------------------------------------------------------
    def _drift_loop(self):
        while not self._stop.wait(self.conf.conductor.drift_check_interval):
            try:
                self.check_drift()
            except Exception:
                LOG.exception("drift check failed")
