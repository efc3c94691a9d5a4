"""Boot evidence: the watcher that ends each machine's wait for its boot.

After ``activate`` a machine's coroutine keeps the machine's lock and waits
here, on the step loop (:meth:`EvidenceWatcher.await_boot`), for what ends
its wait: the evidence its target recognises, its deadline, or a wake-up (the
conductor stops, the migration is cancelled). The boot server (another
process, maybe on another host) commits a row for every fetch and boot
report; a thread of the conductor looks every ``[conductor]
evidence_interval`` while machines wait, and hands each coroutine what ends
its wait:

- one cursor, the newest evidence id read: a look reads the rows newer than
  it, then the whole evidence of the waiting machines they belong to, and of
  machines that began to wait since the last look (their evidence may have
  been committed first, or before a restart);
- one backstop: every :data:`FULL_LOOK_INTERVAL` seconds a look reads the
  evidence of every waiting machine, for rows committed out of id order
  (PostgreSQL allows it);
- a machine past its deadline times out only once a look has read its
  evidence and found nothing its target recognises, so that a machine
  resumed after its deadline still moves on by the evidence that is there.

So a machine moves on to ``verifying`` and its source's ``clean_up`` within a
look of its boot, with the job its coroutine already has. A machine awaiting
its boot that nobody waits for -- left by a conductor that stopped, or died
and lost its locks -- is taken by the scheduler's scan like any other machine
in flight, and waits here until the deadline persisted with its move to
``awaiting_boot``.
"""

import asyncio
import dataclasses
import heapq
import logging
import threading
import time

from sqlalchemy import bindparam, func, select

from metalboot_framework import metrics
from metalboot_framework.boot_interface import Evidence
from metalboot_framework.machine_steps import Event
from metalboot_framework.store import models
from metalboot_framework.store.many_rows import chunks
from metalboot_framework.task import BootTask

LOG = logging.getLogger(__name__)

_EV = models.BootEvidence.__table__
_NEWEST = select(func.max(_EV.c.id))
_NEW_ROWS = select(_EV.c.id, _EV.c.machine_id).where(_EV.c.id > bindparam("cursor"))
_EVIDENCE_OF = select(_EV).where(_EV.c.machine_id.in_(bindparam("mids", expanding=True))) \
    .order_by(_EV.c.id)
FULL_LOOK_INTERVAL = 2.0  # seconds between looks at every waiting machine's evidence
_TIMED_OUT = object()  # a wait's result: its deadline passed


def recognised(services, waiting, records):
    """The record among ``records`` (the machine's evidence, oldest first) that
    its target interface recognises as its boot, or None; ``waiting`` has the
    machine's migration_id, machine_id, target_boot_interface, activated_at and
    require_boot_report (the migration's option). Only records since the
    activation count; with that option only boot reports (the booted system
    spoke, not only the firmware)."""
    reports_only = waiting.require_boot_report
    candidates = [Evidence(e.id, e.machine_id, e.interface, e.kind, e.path,
                           e.client_address, e.created_at)
                  for e in records
                  if (waiting.activated_at is None or e.created_at >= waiting.activated_at)
                  and (not reports_only or e.kind == "report")]
    if not candidates:
        return None
    target = waiting.target_boot_interface
    return services.interfaces.get(target).recognise_evidence(
        BootTask.lazy(services, waiting.machine_id, target, waiting.migration_id), candidates)


def evidence_reason(evidence):
    return (f"boot evidence: {evidence.kind} of {evidence.path} from "
            f"{evidence.client_address}")


def no_evidence_error(target, seconds):
    return f"no boot evidence through {target} within {int(seconds) if seconds else '?'} s"


def evidence_of(conn, machine_ids):
    """{machine id: its evidence records, oldest first}."""
    records = {}
    for chunk in chunks(list(machine_ids)):
        for ev in conn.execute(_EVIDENCE_OF, {"mids": chunk}):
            records.setdefault(ev.machine_id, []).append(ev)
    return records


@dataclasses.dataclass(eq=False)
class _Waiting:
    migration_id: str
    machine_id: str
    target_boot_interface: str
    activated_at: object
    require_boot_report: bool  # the migration's option
    deadline: float  # time.monotonic()
    future: object  # on the step loop: the evidence, _TIMED_OUT, or None when woken
    looked: bool = False  # a look has read its evidence since it began to wait

    def __lt__(self, other):  # in the heap of deadlines
        return self.deadline < other.deadline


class EvidenceWatcher:
    """The machines this conductor waits for while they boot, and the look for
    their evidence and deadlines."""

    def __init__(self, services, interval):
        self.services = services
        self.interval = interval
        self._waiting = {}  # machine id -> _Waiting
        self._fresh = set()  # began to wait since the last look
        self._deadlines = []  # heap of _Waiting by deadline (ended ones dropped lazily)
        self._lock = threading.Lock()
        self._has_waiting = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        self._cursor = None
        self._full_at = 0.0

    # -- on the step loop --------------------------------------------------------------
    async def await_boot(self, job, deadline, timeout):
        """Wait for the machine's boot until ``deadline`` (``time.monotonic()``;
        ``timeout`` seconds after its move to ``awaiting_boot``):
        ``(event, reason, error, evidence id)`` of what ended the wait (the
        table of :mod:`metalboot_framework.machine_steps` says where it
        leads), or None when woken (see :meth:`wake`)."""
        waiting = _Waiting(job.migration_id, job.machine_id, job.target, job.activated_at,
                           bool((job.options or {}).get("require_boot_report")), deadline,
                           asyncio.get_running_loop().create_future())
        with self._lock:
            self._waiting[job.machine_id] = waiting
            self._fresh.add(job.machine_id)
            heapq.heappush(self._deadlines, waiting)
        self._has_waiting.set()
        try:
            ended = await waiting.future
        finally:
            with self._lock:
                if self._waiting.get(job.machine_id) is waiting:
                    del self._waiting[job.machine_id]
                self._fresh.discard(job.machine_id)
        if ended is None:
            return None
        if ended is _TIMED_OUT:
            error = no_evidence_error(job.target, timeout)
            return Event.BOOT_TIMEOUT, error, error, None
        metrics.observe_boot_evidence(job.target, job.activated_at, ended.created_at)
        return Event.EVIDENCE, evidence_reason(ended), None, ended.id

    @staticmethod
    def _resolve(ended):
        for waiting, result in ended:
            if not waiting.future.done():
                waiting.future.set_result(result)

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
        recognise, and those past their deadline with nothing recognised their
        time-out."""
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
            records = evidence_of(conn, [w.machine_id for w in looked_at]) if looked_at else {}
        ended = []
        for waiting in looked_at:
            try:
                evidence = recognised(self.services, waiting,
                                      records.get(waiting.machine_id, ()))
            except Exception:
                LOG.exception("recognising the boot evidence of machine %s failed",
                              waiting.machine_id)
                evidence = None
            if evidence is not None:
                ended.append((waiting, evidence))
            waiting.looked = True
        ended += self._timed_out(now, {id(w) for w, _ in ended})
        if ended:
            self.services.step_loop.call_soon(self._resolve, ended)

    def _timed_out(self, now, ending):
        """(waiting, _TIMED_OUT) of the machines past their deadline whose
        evidence a look has read (the others wait for the next look)."""
        timed_out, later = [], []
        with self._lock:
            if len(self._deadlines) > 2 * len(self._waiting) + 64:
                # mostly waits that ended otherwise: keep only the current ones
                self._deadlines = [w for w in self._deadlines
                                   if self._waiting.get(w.machine_id) is w]
                heapq.heapify(self._deadlines)
            heap = self._deadlines
            while heap and heap[0].deadline <= now:
                waiting = heapq.heappop(heap)
                if self._waiting.get(waiting.machine_id) is not waiting \
                        or waiting.future.done() or id(waiting) in ending:
                    continue  # its wait ended otherwise
                if waiting.looked:
                    timed_out.append((waiting, _TIMED_OUT))
                else:
                    later.append(waiting)
            for waiting in later:
                heapq.heappush(heap, waiting)
        return timed_out
