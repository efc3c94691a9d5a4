"""Write transactions, the events they append, and what follows their commit.

Every change is a write transaction (:class:`UnitOfWork`) that appends the
events it causes; the event hooks hear of them, and the unit's announcements
are made, only once it is committed. A write is committed on its own
(:meth:`Transactions.write`) or together with other threads' small writes by
the group commit (:mod:`metalboot_framework.store.group_commit`), whose
announcements the announcer makes in commit order
(:mod:`metalboot_framework.announcer`).
"""

import contextlib
import types

import sqlalchemy

from metalboot_framework.announcer import Announcer
from metalboot_framework.feed import event_dict
from metalboot_framework.store import driver_insert, models
from metalboot_framework.store.group_commit import Batched, GroupCommitter

EVENTS = models.Event.__table__
_EVENT_INSERT = EVENTS.insert().returning(EVENTS.c.id)
_EVENTS_INSERT_MANY = EVENTS.insert().returning(EVENTS.c.id, sort_by_parameter_order=True)
_EVENT_COLUMNS = ("id", "kind", "message", "machine_id", "migration_id", "data", "created_at")
_NEWEST_EVENT_ID = sqlalchemy.select(sqlalchemy.func.max(EVENTS.c.id))


class UnitOfWork:
    """A write transaction, the events it appends (for hooks, after commit) and
    what is to be announced once it is committed (:meth:`announce`)."""

    def __init__(self, session, defer_events=False):
        self.session = session
        self.events = []
        self.defer_events = defer_events  # inserted by insert_events(), ids then
        self.after = []  # (fn, args) to call once committed

    def announce(self, fn, *args):
        """Call ``fn(*args)`` once this unit is committed: for a group-committed
        unit in the announcer's thread, in commit order (:mod:`..announcer`)."""
        self.after.append((fn, args))

    def event(self, kind, message, machine_id=None, migration_id=None, data=None):
        # A plain INSERT ... RETURNING: the ORM's flush costs more than the write.
        row = {"kind": kind, "message": message, "machine_id": machine_id,
               "migration_id": migration_id, "data": data, "created_at": models.utcnow()}
        row["id"] = None if self.defer_events else \
            self.session.execute(_EVENT_INSERT, row).scalar_one()
        ev = types.SimpleNamespace(**row)
        self.events.append(ev)
        return ev


def insert_events(conn, units):
    """The deferred events of ``units``, in order, with one executemany."""
    pending = [ev for unit in units for ev in unit.events if ev.id is None]
    if pending and conn.dialect.name == "sqlite":
        _insert_events_sqlite(conn, pending)
    elif pending:
        ids = conn.execute(_EVENTS_INSERT_MANY, [
            {k: v for k, v in vars(ev).items() if k != "id"} for ev in pending]).scalars()
        for ev, event_id in zip(pending, ids, strict=True):
            ev.id = event_id


def _insert_events_sqlite(conn, pending):
    """SQLite: ids from here on the newest, and one executemany of the driver
    (:func:`driver_insert.statement`).

    SQLAlchemy can only return SQLite's ids in the rows' order by inserting them
    one statement at a time (most of a step's cost to the group commit). Every
    write transaction on SQLite holds the database's write lock from BEGIN
    IMMEDIATE on (store/db.py), so the ids after the newest are this
    transaction's to give, as SQLite would give them. Values go through the
    columns' own bind processors, so the rows are those SQLAlchemy would write.
    """
    sql, binders = driver_insert.statement(EVENTS, _EVENT_COLUMNS, conn.dialect)
    first = (conn.execute(_NEWEST_EVENT_ID).scalar() or 0) + 1
    rows = []
    for n, ev in enumerate(pending):
        ev.id = first + n
        rows.append(tuple(bind(getattr(ev, name)) if bind else getattr(ev, name)
                          for name, bind in binders))
    conn.exec_driver_sql(sql, rows)


class Transactions:
    """The ways to commit a write: alone, group-committed (waited for by a
    thread or by a coroutine of the step loop), or batched with like work."""

    def __init__(self, db, hooks, step_loop):
        self.db = db
        self.hooks = hooks
        self.step_loop = step_loop
        # Hooks and log lines of group-committed changes, in commit order.
        self.announcer = Announcer()
        # One writer thread commits many threads' small transactions together.
        self._group = GroupCommitter(db.write_conn, finish=lambda conn, done: insert_events(
            conn, [unit for unit, _ in done]), committed=self._announce_committed)

    @contextlib.contextmanager
    def write(self, core=False):
        """A write transaction; events added to it reach hooks after commit.

        ``core``: over a plain connection instead of an ORM session (hot paths);
        its events are inserted together at the end, ids then.
        """
        with (self.db.write_conn() if core else self.db.write()) as session:
            unit = UnitOfWork(session, defer_events=core)
            yield unit
            if core:
                insert_events(session, [unit])
        for fn, args in self._after_commit(unit):
            fn(*args)

    def _after_commit(self, unit, event_hooks=None):
        """What follows the commit of ``unit``: its events to the event hooks,
        then its announcements. ``event_hooks``: whether there are any, if the
        caller asked already (once for a batch of units)."""
        calls = []
        if event_hooks is None:
            event_hooks = self.hooks.has("metalboot_event")
        if unit.events and event_hooks:
            calls += [(self._notify_event, (ev,)) for ev in unit.events]
        return calls + unit.after

    def _notify_event(self, ev):
        self.hooks.notify("metalboot_event", event=event_dict(ev))

    def _announce_committed(self, results):
        """In the writer thread, after each group commit: its units' events and
        announcements to the announcer, in commit order."""
        event_hooks = self.hooks.has("metalboot_event")
        self.announcer.put([call for unit, _ in results
                            for call in self._after_commit(unit, event_hooks)])

    @staticmethod
    def _grouped(work):
        def run(conn):
            unit = UnitOfWork(conn, defer_events=True)
            return unit, work(unit)
        return run

    def write_grouped(self, work):
        """``work(unit)`` like ``write(core=True)``, group-committed with other
        threads' writes; returns its result once committed. ``work`` must only
        write to the database: it may run twice (a failed batch is re-run one by
        one). Its events get their ids at the end of the batch; they reach the
        hooks, with what the unit announces, through the announcer."""
        return self._group.run(self._grouped(work))[1]

    def write_batched(self, many, item):
        """Like :meth:`write_grouped`, for work that is cheaper done for many items
        at once: ``many(conn, items)`` writes for every item of a batch that shares
        ``many`` and returns ``(UnitOfWork, result)`` per item, in order."""
        return self._group.run(Batched(many, item))[1]

    def write_batched_later(self, many, item):
        """:meth:`write_batched` without waiting: an outcome that :meth:`asettle`
        turns into its result."""
        return self._group.submit(Batched(many, item))

    # Coroutines of the step loop wait for the same commits without a thread.
    async def awrite_grouped(self, work):
        """:meth:`write_grouped` for a coroutine on the step loop."""
        return (await self.step_loop.outcome(self._group.submit(self._grouped(work))))[1]

    async def awrite_batched(self, many, item):
        """:meth:`write_batched` for a coroutine on the step loop."""
        return (await self.step_loop.outcome(self._group.submit(Batched(many, item))))[1]

    async def asettle(self, outcome):
        """The result of :meth:`write_batched_later`'s work, once committed."""
        return (await self.step_loop.outcome(outcome))[1]

    def record_event(self, machine_id, kind, message, data=None, migration_id=None):
        """Append one event, group-committed; returns once it is committed."""
        self.write_grouped(_event_work(machine_id, kind, message, data, migration_id))

    async def arecord_event(self, machine_id, kind, message, data=None, migration_id=None):
        """:meth:`record_event` for a coroutine on the step loop."""
        await self.awrite_grouped(_event_work(machine_id, kind, message, data, migration_id))


def _event_work(machine_id, kind, message, data, migration_id):
    return lambda unit: unit.event(kind, message, machine_id=machine_id,
                                   migration_id=migration_id, data=data)
