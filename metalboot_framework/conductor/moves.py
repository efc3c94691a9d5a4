"""Writing machines' moves, many in one transaction.

A move is a row of :data:`metalboot_framework.machine_steps.TRANSITIONS`
applied to one machine (:class:`Move`); the group commit hands the moves of
many machines to :meth:`MoveWriter.apply_many`, which writes those of one
migration from and to the same steps with one UPDATE (and one for their
locks, one for the machines switching interface), appends each move's events
to its unit and announces it once committed, in commit order.
"""

import dataclasses
import datetime
import logging

from sqlalchemy import bindparam, case, select, update

from metalboot_framework import machine_steps
from metalboot_framework.conductor import canaries, machine_lock
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.machine_steps import Lock, Write
from metalboot_framework.migrations import MM
from metalboot_framework.store import models
from metalboot_framework.store.many_rows import changed, chunks

# the log of the machines' steps (operators filter on its name)
LOG = logging.getLogger("metalboot_framework.conductor.steps")

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
_MOVE_STATEMENTS = {}
# What a move writes to each machine (in this order), by the row's writes.
_MACHINE_WRITES = ((Write.SOURCE_PREPARED, _SOURCE_PREPARED), (Write.AT_REST, _BACK_TO_REST),
                   (Write.MACHINE_ERROR, _TO_ERROR))


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


@dataclasses.dataclass
class Move:
    """One machine's move by a row of :data:`machine_steps.TRANSITIONS`, to be
    written: the row says where it leads, what is written with it and whether
    this conductor's lock on the machine is released with it.

    ``refill``: the slot this (final) move frees may start the next queued
    machine in the same transaction (:mod:`.refill`); ``names`` is (source,
    target) interface names, if the caller knows them; ``activated_at``: the
    time from which the machine's evidence counts, written with the move (a
    row that writes it writes the commit's time without it).
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
    """What a move came to once committed (the group commit's result)."""

    # what :meth:`MoveWriter.announce` needs, None if the machine was not where
    # the move expected it
    done: tuple | None
    # refill: (what announce needs of the start in the slot it freed, its job or None)
    successor: tuple | None = None


def boot_timeout(services, migration_id, options=None):
    """Seconds a machine of the migration has for its boot once activated."""
    if options is None:
        with services.db.read() as s:
            options = s.scalar(select(models.Migration.options).where(
                models.Migration.id == migration_id))
    return options.get("boot_timeout") or services.conf.conductor.default_boot_timeout


class MoveWriter:
    """Writes moves for the conductor on ``host`` (whose locks they release)."""

    def __init__(self, services, host):
        self.services = services
        self.host = host

    def apply_many(self, conn, moves, units):
        """The writes of ``moves`` in ``conn``'s transaction, each move's
        events into its unit of ``units``; returns per move what
        :meth:`announce` needs after the commit, or None if the machine was no
        longer where the move expected it.

        Moves of one migration from and to the same steps are one UPDATE
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
            replaced = canaries.replace(conn, migration_id, [
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
            values["deadline"] = now + datetime.timedelta(seconds=boot_timeout(
                self.services, t.migration_id, t.options))
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
        """Log a committed move and tell the hooks (in the announcer's thread)."""
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
