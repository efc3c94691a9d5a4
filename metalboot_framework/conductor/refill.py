"""Refill: starting queued machines, by the scheduler and in the slots that
finished machines free.

A machine that ends (``done``, ``valid``, ``skipped``) frees its slot for the
next queued machine of its migration in the transaction that writes its end
(as far as :mod:`.admission` allows); the machine's coroutine goes on with
the one it started, whose lock that transaction took and whose job it read.
"""

from metalboot_framework import machine_steps
from metalboot_framework.conductor import admission, machine_lock
from metalboot_framework.conductor.moves import Move
from metalboot_framework.machine_steps import Event, Step

_START = machine_steps.on(Step.QUEUED, Event.STARTED)


def _starts(migration_id, rows, options, freed_by=None):
    """The starts of ``rows`` ([(machine id, canary)]); ``freed_by``: the
    machine whose slot the k-th one takes, if any."""
    return [Move(migration_id, machine_id, _START,
                 "started" + (" (canary)" if canary else "")
                 + (f" in the slot {freed_by[k]} freed" if freed_by else ""),
                 options=options)
            for k, (machine_id, canary) in enumerate(rows)]


class Refill:
    """Starts queued machines with ``writer`` (:class:`.moves.MoveWriter`),
    taking their locks and reading their jobs with ``claims`` (:class:`.jobs.Claims`)."""

    def __init__(self, host, writer, claims):
        self.host = host
        self.writer = writer
        self.claims = claims

    def start_many(self, conn, migration_id, limit, units, freed_by=None):
        """queued -> validating for up to ``limit`` machines that
        :func:`.admission.admit` lets start, and their locks, in ``conn``'s write
        transaction; ``units``: where the k-th start's events go; ``freed_by``:
        the machine whose slot the k-th start takes, if any. Returns (per
        start what :meth:`.MoveWriter.announce` needs, or None; the ids of the
        machines whose locks it took: :meth:`.Claims.read_jobs` reads their jobs)."""
        options, rows = admission.admit(conn, migration_id, limit)
        starts = _starts(migration_id, rows, options, freed_by)
        dones = self.writer.apply_many(conn, starts, units[:len(starts)])
        return dones, machine_lock.take(conn, [d[1] for d in dones if d is not None],
                                        self.host)

    def refill(self, conn, moves, dones, units):
        """Start a queued machine in each slot that a finished machine of a
        ``refill`` move freed; per move (announce's start, job or None) or
        None. The start's events go to the unit of the move whose slot it takes."""
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
            jobs = self.claims.jobs_of_locked(conn, migration_id, locked)
            for index, start in zip(indexes, starts, strict=False):
                if start is not None:  # its job None: locked elsewhere, a scan runs it
                    successors[index] = (start, jobs.get(start[1]))
        return successors
