"""Canary replacement: a vetoed canary proved nothing, so the first queued
machine that is not a canary takes its place (canaries are the first queued
machines and start first), in the transaction that skips it."""

from sqlalchemy import bindparam, select, update

from metalboot_framework.machine_steps import Step
from metalboot_framework.migrations import MM
from metalboot_framework.store.many_rows import chunks

_MMT = MM.__table__
_mids = bindparam("mids", expanding=True)

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


def replace(conn, migration_id, skipped):
    """{skipped canary: the queued machine that became a canary in its place},
    in ``conn``'s transaction; a canary left out of the wave must not let the
    rest start unproven."""
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
