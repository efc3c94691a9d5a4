"""The machines this conductor waits for while they boot, and the look for their evidence.

After ``activate`` a machine's coroutine does not end: it keeps the machine's
lock and waits here, on the step loop, for what ends its wait -- the evidence
its target recognises, its deadline, or a wake-up (the conductor stops, the
migration is cancelled). A thread looks every ``[conductor] evidence_interval``
for evidence rows newer than its last look, reads the whole evidence of the
waiting machines they belong to (and of machines that began to wait since,
whose evidence may have come first), asks each target interface to recognise
it, and hands what it found to the coroutines. So a machine moves on to
``verifying`` and its source's ``clean_up`` within a look of its boot, with
the job its coroutine already has, instead of at the scheduler's next tick
and a new claim.

Machines nobody waits for this way -- resumed after a restart, or left by a
conductor that died (their locks released) -- are the scheduler's
(:mod:`.evidence`), which leaves locked machines alone. Now and then the
thread reads every waiting machine's evidence: a backstop for rows committed
out of id order (PostgreSQL allows it).
"""

import asyncio
import dataclasses
import logging
import threading
import time

from sqlalchemy import bindparam, func, select

from metalboot_framework import metrics
from metalboot_framework.conductor.evidence import (evidence_of, evidence_reason,
                                                    no_evidence_error, recognised)
from metalboot_framework.store import models

LOG = logging.getLogger(__name__)

_EV = models.BootEvidence.__table__
_NEWEST = select(func.max(_EV.c.id))
_NEW_ROWS = select(_EV.c.id, _EV.c.machine_id).where(_EV.c.id > bindparam("cursor"))
FULL_LOOK_INTERVAL = 2.0  # seconds between looks at every waiting machine's evidence


@dataclasses.dataclass
class _Waiting:
    migration_id: str
    machine_id: str
    target_boot_interface: str
    activated_at: object
    require_boot_report: bool  # the migration's option
    future: object  # on the step loop: the evidence, or None when woken


class BootWaits:
    def __init__(self, services, interval):
        self.services = services
        self.interval = interval
        self._waiting = {}  # machine id -> _Waiting
        self._fresh = set()  # began to wait since the last look
        self._lock = threading.Lock()
        self._has_waiting = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        self._cursor = None
        self._full_at = 0.0

    # -- on the step loop --------------------------------------------------------------
    async def await_boot(self, job, deadline, timeout):
        """Wait for the machine's boot until ``deadline`` (``time.monotonic()``;
        ``timeout`` seconds after it began to wait):
        ``(new state, reason, error, evidence id)`` of the transition that ends
        the wait, or None when woken (see :meth:`wake`)."""
        waiting = _Waiting(job.migration_id, job.machine_id, job.target, job.activated_at,
                           bool((job.options or {}).get("require_boot_report")),
                           asyncio.get_running_loop().create_future())
        with self._lock:
            self._waiting[job.machine_id] = waiting
            self._fresh.add(job.machine_id)
        self._has_waiting.set()
        try:
            evidence = await asyncio.wait_for(waiting.future, deadline - time.monotonic())
        except TimeoutError:
            error = no_evidence_error(job.target, timeout)
            return "rolling_back", error, error, None
        finally:
            with self._lock:
                if self._waiting.get(job.machine_id) is waiting:
                    del self._waiting[job.machine_id]
                self._fresh.discard(job.machine_id)
        if evidence is None:
            return None
        metrics.observe_boot_evidence(job.target, job.activated_at, evidence.created_at)
        return "verifying", evidence_reason(evidence), None, evidence.id

    def _resolve(self, found):
        for waiting, evidence in found:
            if not waiting.future.done():
                waiting.future.set_result(evidence)

    # -- from any thread -----------------------------------------------------------------
    def wake(self, migration_id=None):
        """End the waits of one migration's machines (or of all) without a result:
        their coroutines look again at what to do (cancelled? stopping?)."""
        with self._lock:
            woken = [(w, None) for w in self._waiting.values()
                     if migration_id is None or w.migration_id == migration_id]
        if woken:
            self.services.step_loop.call_soon(self._resolve, woken)

    # -- the look, in a thread of its own --------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self._run, name="conductor-evidence",
                                        daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._has_waiting.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self):
        while not self._stop.is_set():
            self._has_waiting.wait()
            started = time.monotonic()
            try:
                self.look()
            except Exception:
                LOG.exception("looking for boot evidence failed")
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def look(self):
        """Hand the waiting machines whose evidence arrived what their targets
        recognise."""
        with self._lock:
            if not self._waiting:
                self._has_waiting.clear()
                return
            fresh, self._fresh = self._fresh, set()
        now = time.monotonic()
        full = now - self._full_at >= FULL_LOOK_INTERVAL
        with self.services.db.read_conn() as conn:
            if self._cursor is None:
                self._cursor = conn.execute(_NEWEST).scalar() or 0
                full = True
            rows = conn.execute(_NEW_ROWS, {"cursor": self._cursor}).all()
            if rows:
                self._cursor = max(row.id for row in rows)
            arrived = {row.machine_id for row in rows}
            with self._lock:
                looked_at = [w for w in self._waiting.values()
                             if full or w.machine_id in fresh or w.machine_id in arrived]
            if full:
                self._full_at = now
            if not looked_at:
                return
            records = evidence_of(conn, [w.machine_id for w in looked_at])
        found = []
        for waiting in looked_at:
            try:
                evidence = recognised(self.services, waiting,
                                      records.get(waiting.machine_id, ()))
            except Exception:
                LOG.exception("recognising the boot evidence of machine %s failed",
                              waiting.machine_id)
                continue
            if evidence is not None:
                found.append((waiting, evidence))
        if found:
            self.services.step_loop.call_soon(self._resolve, found)
