"""Boot evidence: a machine awaiting its boot moves on once its evidence is committed.

The boot server (another process, maybe on another host) commits a row for
every fetch and boot report; the conductor learns of them by reading. A
machine whose coroutine waits for its boot holds its lock and is looked after
by :mod:`.boot_waits`; the others -- resumed after a restart, or left by a
conductor that died -- are read on every scheduler tick
(:meth:`EvidenceWatcher.look`), which skips locked machines. A look reads only machines with
evidence newer than the last look, machines that started waiting since then
(their evidence may have been committed first) and machines past their
deadline (rolled back), so it costs about the same for 10 or 10,000 machines
awaiting their boot; now and then it reads every waiting machine, a backstop
for evidence committed out of id order (PostgreSQL allows it).

A look moves what it found in one group-committed transaction and hands the
machines to the step loop (``hand_over``).
"""

import datetime

from sqlalchemy import bindparam, func, select

from metalboot_framework import metrics
from metalboot_framework.boot_interface import Evidence
from metalboot_framework import machine_steps
from metalboot_framework.conductor import machine_lock
from metalboot_framework.conductor.steps import Transition
from metalboot_framework.store.many_rows import chunks
from metalboot_framework.store import models
from metalboot_framework.store.packed_rows import all_rows
from metalboot_framework.task import BootTask

_MMT = models.MigrationMachine.__table__
_EV = models.BootEvidence.__table__
_NEWEST_EVIDENCE = select(func.max(_EV.c.id))
_M = models.Machine.__table__
_WAITING = select(_MMT.c.migration_id, _MMT.c.machine_id, _MMT.c.activated_at, _MMT.c.deadline,
                  models.Migration.target_boot_interface,
                  # the one option a look needs, not the whole JSON document
                  models.Migration.options["require_boot_report"].as_boolean()
                  .label("require_boot_report")) \
    .join(models.Migration, models.Migration.id == _MMT.c.migration_id) \
    .join(_M, _M.c.id == _MMT.c.machine_id) \
    .where(_MMT.c.state == "awaiting_boot", _M.c.reservation.is_(None))
_WAITING_WITH_NEW_EVIDENCE = _WAITING.where(_MMT.c.machine_id.in_(
    select(_EV.c.machine_id).where(_EV.c.id > bindparam("cursor"))))
_WAITING_EXPIRED = _WAITING.where(_MMT.c.deadline < bindparam("now"))
_WAITING_SINCE = _WAITING.where(_MMT.c.updated_at >= bindparam("since"))
_EVIDENCE_OF = select(_EV).where(_EV.c.machine_id.in_(bindparam("mids", expanding=True))) \
    .order_by(_EV.c.id)
# A step's updated_at is its writer's clock when the step was written, before
# the commit, and conductors on other hosts have clocks of their own.
_CLOCK_SLACK = datetime.timedelta(seconds=1)


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
        for ev in sorted(all_rows(conn, _EVIDENCE_OF, {"mids": chunk}), key=lambda ev: ev.id):
            records.setdefault(ev.machine_id, []).append(ev)
    return records


class EvidenceWatcher:
    """Moves machines awaiting boot to verifying on their evidence, or to
    rolling_back past their deadline. ``hand_over(migration_id, machine_ids,
    jobs)`` gives the moved machines to the step loop."""

    def __init__(self, services, runner, hand_over):
        self.services = services
        self.runner = runner
        self._hand_over = hand_over
        self._cursor = -1  # the newest evidence id seen by the last look
        self._checked_at = datetime.datetime.min  # the last look's time

    def look(self, full=False):
        """awaiting_boot -> verifying on evidence, -> rolling_back after the
        deadline; ``full``: every waiting machine, not only those above."""
        now = models.utcnow()
        since, self._checked_at = self._checked_at, now
        with self.services.db.read_conn() as conn:
            newest = conn.execute(_NEWEST_EVIDENCE).scalar() or 0
            if full:
                waiting = all_rows(conn, _WAITING)
            else:
                waiting = all_rows(conn, _WAITING_SINCE, {"since": since - _CLOCK_SLACK})
                if newest != self._cursor:
                    waiting += all_rows(conn, _WAITING_WITH_NEW_EVIDENCE,
                                        {"cursor": self._cursor})
                waiting += all_rows(conn, _WAITING_EXPIRED, {"now": now})
            found = self._evidence(conn, waiting)
        self._cursor = newest
        self._move(found, now)

    @staticmethod
    def _evidence(conn, waiting):
        """[(waiting machine, its evidence records)], each machine once."""
        waiting = list({w.machine_id: w for w in waiting}.values())
        records = evidence_of(conn, [w.machine_id for w in waiting])
        return [(w, records.get(w.machine_id, ())) for w in waiting]

    def _move(self, found, now):
        """awaiting_boot -> verifying for those with evidence their target
        recognises; -> rolling_back for those past their deadline."""
        moves = []  # (waiting machine, evidence or None, transition arguments)
        for w, records in found:
            evidence = recognised(self.services, w, records)
            if evidence is not None:
                moves.append((w, evidence, dict(old="awaiting_boot", new="verifying",
                                                evidence_id=evidence.id,
                                                reason=evidence_reason(evidence))))
            elif w.deadline is not None and now > w.deadline:
                error = no_evidence_error(w.target_boot_interface, (
                    w.deadline - w.activated_at).total_seconds() if w.activated_at else None)
                moves.append((w, None, dict(old="awaiting_boot", new="rolling_back",
                                            reason=error, error=error)))
        if not moves:
            return
        transitions = [Transition(w.migration_id, w.machine_id, **change)
                       for w, _, change in moves]

        def move(unit):  # group-committed: may run twice
            dones = self.runner.apply_many(unit.session, transitions, [unit] * len(moves))
            by_migration = {}
            for w, done in zip((w for w, _, _ in moves), dones, strict=True):
                if done is not None and done[3] in machine_steps.RUNNABLE:
                    by_migration.setdefault(w.migration_id, []).append(w.machine_id)
            return dones, {mid: (ids, machine_lock.take(unit.session, ids, self.runner.host))
                           for mid, ids in by_migration.items()}

        dones, locked = self.services.write_grouped(move)  # announced once committed
        jobs = {mid: self.runner.read_jobs(mid, taken) for mid, (_, taken) in locked.items()}
        for (w, evidence, _), done in zip(moves, dones, strict=True):
            if done is not None and evidence is not None:
                metrics.observe_boot_evidence(w.target_boot_interface, w.activated_at,
                                              evidence.created_at)
        for migration_id, (machine_ids, _) in locked.items():
            self._hand_over(migration_id, machine_ids, jobs[migration_id])
