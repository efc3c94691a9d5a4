"""Admission: which queued machines of a migration may start now.

One rule for both places that start machines: the scheduler, which fills a
migration up to ``max_parallel`` on its ticks, and a worker whose machine has
just finished, which starts the next queued machine in the transaction that
frees the slot (so a slot does not stand empty until the next tick). No more
than ``max_parallel`` machines in flight, canaries first and alone, nothing new
once a canary failed or the failure budget is spent, and nothing at all unless
the migration is running -- all read in the transaction that starts them,
which holds the migration's row lock, so conductors sharing a database never
start more than ``max_parallel`` between them.

The queued machines started are those nobody holds: the starter takes their
locks in the same transaction.
"""

from sqlalchemy import bindparam, func, select

from metalboot_framework import migration_states as states
from metalboot_framework import machine_steps
from metalboot_framework.machine_steps import Step
from metalboot_framework.conductor import machine_lock
from metalboot_framework.store import models

_MMT = models.MigrationMachine.__table__
_MIGRATIONS = models.Migration.__table__

# Machine steps that count against the failure budget.
FAILING = (Step.ROLLING_BACK,) + machine_steps.FAILED

# A tick's view of a migration: counts of the steps that are few (under way,
# failed), read through the (migration_id, state) index, and whether machines
# are still queued -- never a count over all of them, which grows with the fleet.
_TALLIED = tuple(dict.fromkeys(machine_steps.IN_FLIGHT + machine_steps.FAILED + (Step.CANCELLED,)))
_TALLY = select(_MMT.c.state, _MMT.c.canary, func.count()).where(
    _MMT.c.migration_id == bindparam("mig"), _MMT.c.state.in_(_TALLIED)) \
    .group_by(_MMT.c.state, _MMT.c.canary)
# Canaries are the first queued machines and start first: the first queued one
# tells whether any (canary) machine is still queued.
_FIRST_QUEUED = select(_MMT.c.canary).where(
    _MMT.c.migration_id == bindparam("mig"), _MMT.c.state == Step.QUEUED) \
    .order_by(_MMT.c.position).limit(1)
_MACHINES = models.Machine.__table__
# Queued machines nobody holds, in queue order.
_QUEUED = select(_MMT.c.machine_id, _MMT.c.canary) \
    .join(_MACHINES, _MACHINES.c.id == _MMT.c.machine_id).where(
    _MMT.c.migration_id == bindparam("mig"), _MMT.c.state == Step.QUEUED,
    machine_lock.unlocked()) \
    .order_by(_MMT.c.position).limit(bindparam("n"))
_CANARIES_QUEUED = _QUEUED.where(_MMT.c.canary.is_(True))
_LOCKED_MIGRATION = select(_MIGRATIONS.c.state, _MIGRATIONS.c.options, _MIGRATIONS.c.total) \
    .where(_MIGRATIONS.c.id == bindparam("mig")).with_for_update()


def lock_migrations(conn, migration_ids):
    """Lock the rows of ``migration_ids`` in one order (PostgreSQL; SQLite's
    write transaction is alone anyway): a transaction that starts or chooses
    machines of several migrations in several passes must not take them in
    another order than a concurrent one."""
    if conn.dialect.name == "sqlite":
        return
    for migration_id in sorted(migration_ids):
        conn.execute(_LOCKED_MIGRATION, {"mig": migration_id})


def tally(conn, migration_id):
    """{(step, canary): machines} for the steps that are few (in flight, failed,
    cancelled), plus ("queued", canary of the first queued machine): 1 while
    machines are queued."""
    params = {"mig": migration_id}
    counts = {(state, bool(canary)): n for state, canary, n in conn.execute(_TALLY, params)}
    first = conn.execute(_FIRST_QUEUED, params).first()
    if first is not None:
        counts[(Step.QUEUED, bool(first.canary))] = 1
    return counts


def queued(counts):
    """Whether machines are still queued."""
    return any(n for (state, _), n in counts.items() if state == Step.QUEUED)


def in_flight(counts):
    return sum(n for (state, _), n in counts.items() if state in machine_steps.IN_FLIGHT)


def failures(counts):
    return sum(n for (state, _), n in counts.items() if state in FAILING)


def canary_failing(counts):
    return any(n for (state, canary), n in counts.items() if canary and state in FAILING)


def over_budget(counts, options, total):
    """Why the failures in ``counts`` exceed the migration's ``max_failures``, or None."""
    failed = failures(counts)
    budget = options.get("max_failures")
    if not failed or not budget:
        return None
    if "count" in budget and failed > budget["count"]:
        return f"{failed} machines failed, more than max_failures {budget['count']}"
    if "percent" in budget and total and failed * 100.0 / total > budget["percent"]:
        return (f"{failed} of {total} machines failed, more than "
                f"max_failures {budget['percent']:g}%")
    return None


def admit(conn, migration_id, limit):
    """Which queued machines nobody holds may start now, up to ``limit``, read
    in ``conn``'s write transaction with the migration's row locked: (the
    migration's options, [(machine id, canary)] in queue order); nothing
    unless the rules above allow it."""
    options, capacity, canaries_open = _open_slots(conn, migration_id, limit)
    if not capacity:
        return options, []
    return options, [tuple(row) for row in conn.execute(
        _CANARIES_QUEUED if canaries_open else _QUEUED, {"mig": migration_id, "n": capacity})]


def _open_slots(conn, migration_id, limit):
    """(the migration's options, how many machines may start, up to ``limit``,
    whether only canaries may), read with the migration's row locked."""
    if limit <= 0:
        return None, 0, False
    migration = conn.execute(_LOCKED_MIGRATION, {"mig": migration_id}).first()
    if migration is None or migration.state != states.RUNNING:
        return None, 0, False
    counts = tally(conn, migration_id)
    if not queued(counts):
        return migration.options, 0, False
    if canary_failing(counts) or over_budget(counts, migration.options, migration.total):
        return migration.options, 0, False  # the scheduler halts it on its next tick
    capacity = min(migration.options["max_parallel"] - in_flight(counts), limit)
    canaries_open = any(n for (state, canary), n in counts.items()
                        if canary and state not in machine_steps.SUCCEEDED)
    return migration.options, max(capacity, 0), canaries_open
