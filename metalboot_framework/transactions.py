"""Write transactions, the events they append, and what follows their commit.

Every change is a write transaction (:class:`UnitOfWork`) that appends the
events it causes; the event hooks hear of them, and the unit's announcements
are made, only once it is committed. A write is committed on its own
(:meth:`Transactions.now`) or together with other writers' small writes by
the group commit (:meth:`Transactions.grouped`, :meth:`Transactions.batched`;
:mod:`metalboot_framework.store.group_commit`), whose announcements the
announcer makes in commit order (:mod:`metalboot_framework.announcer`). Outside
``store/``, nothing else writes to the database.
"""

import asyncio
import contextlib
import threading
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
    what is to be announced once it is committed (:meth:`announce`).
    ``session``: an ORM session, or a Core connection (``now(core=True)``,
    grouped and batched work)."""

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
    """The one way to write: three entry points, each for blocking code and
    for coroutines alike.

    - :meth:`now`: a transaction of its own, committed when its block ends:
      ``with`` in a thread, ``async with`` in a coroutine (the wait for the
      write lock and the commit then happen in a thread).
    - :meth:`grouped`: work committed by the group commit together with other
      callers' small writes.
    - :meth:`batched`: like :meth:`grouped`, for work done for many items at once.

    :meth:`grouped` and :meth:`batched` queue their work at once and return a
    :class:`Write`, as an executor returns a future: ``.result()`` waits for
    the commit in a thread, ``await`` on an event loop. One call serves both
    kinds of caller, and one that goes on before the commit (a step whose
    re-run is harmless) keeps the :class:`Write` and awaits it later."""

    def __init__(self, db, hooks, step_loop):
        self.db = db
        self.hooks = hooks
        self.step_loop = step_loop
        # Hooks and log lines of group-committed changes, in commit order.
        self.announcer = Announcer()
        # One writer thread commits many threads' small transactions together.
        self._group = GroupCommitter(db.write_conn, finish=lambda conn, done: insert_events(
            conn, [unit for unit, _ in done]), committed=self._announce_committed)

    def now(self, core=False, nowait=False):
        """A write transaction (:class:`UnitOfWork`) of its own; events added to
        it reach hooks after commit. ``with`` or ``async with`` (:class:`Now`).

        ``core``: over a plain connection instead of an ORM session (hot paths);
        its events are inserted together at the end, ids then. ``nowait``
        (implies ``core``): the unit is None instead of waiting when SQLite's
        write lock is taken at this moment, and always on PostgreSQL: for code
        on an event loop, which must not wait (:meth:`.Database.write_conn_nowait`)."""
        return Now(self, core, nowait)

    @contextlib.contextmanager
    def _now(self, core, nowait):
        core = core or nowait
        if nowait:
            opened = self.db.write_conn_nowait()
        else:
            opened = self.db.write_conn() if core else self.db.write()
        with opened as session:
            if session is None:
                yield None
                return
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
        if not unit.events:
            return unit.after
        if event_hooks is None:
            event_hooks = self.hooks.has("metalboot_event")
        if not event_hooks:
            return unit.after
        return [(self._notify_event, (ev,)) for ev in unit.events] + unit.after

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

    def grouped(self, work):
        """``work(unit)`` like ``now(core=True)``, group-committed with other
        writes; a :class:`Write` of its result. ``work`` must only write to the
        database: it may run twice (a failed batch is re-run one by one). Its
        events get their ids at the end of the batch; they reach the hooks,
        with what the unit announces, through the announcer."""
        return Write(self._group.submit(self._grouped(work)), self.step_loop)

    def batched(self, many, item):
        """Like :meth:`grouped`, for work that is cheaper done for many items at
        once: ``many(conn, items)`` writes for every item of a batch that shares
        ``many`` and returns ``(UnitOfWork, result)`` per item, in order."""
        return Write(self._group.submit(Batched(many, item)), self.step_loop)


class Write:
    """A write queued for the group commit: its result once committed, waited
    for in a thread (:meth:`result`) or awaited on an event loop (the step
    loop's without a thread). Raises what the work raised."""

    __slots__ = ("_outcome", "_step_loop")

    def __init__(self, outcome, step_loop):
        self._outcome = outcome
        self._step_loop = step_loop

    def result(self):
        """The result, waiting for the commit (not from the step loop)."""
        return self._outcome.result()[1]

    def done(self):
        return self._outcome.done()

    def add_done_callback(self, fn):
        """``fn(write)`` once committed (or failed), in the writer's thread."""
        self._outcome.add_done_callback(lambda _: fn(self))

    def __await__(self):
        if self._step_loop.in_loop():
            future = self._step_loop.outcome(self._outcome)
        else:
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            self._outcome.add_done_callback(
                lambda done: loop.call_soon_threadsafe(_settle, future, done))
        return (yield from future.__await__())[1]


def _settle(future, outcome):
    if future.cancelled():
        return
    try:
        future.set_result(outcome.result())
    except BaseException as exc:  # the work's own error, as a blocking caller gets it
        future.set_exception(exc)


class Now:
    """:meth:`Transactions.now`: ``with`` waits for the write lock and the
    commit in the calling thread; ``async with`` waits for them in a thread of
    the loop's executor, and runs the block on the loop (keep its statements
    few: the database is held while it runs). One block per object."""

    def __init__(self, transactions, core, nowait):
        self._opened = transactions._now(core, nowait)
        self._entering = None  # async with: orders the thread's begin against a cancel
        self._entered = self._abandoned = False

    def __enter__(self):
        return self._opened.__enter__()

    def __exit__(self, *exc_info):
        return self._opened.__exit__(*exc_info)

    async def __aenter__(self):
        self._entering = threading.Lock()
        entering = asyncio.get_running_loop().run_in_executor(None, self._enter_in_thread)
        try:
            return await asyncio.shield(entering)
        except asyncio.CancelledError:
            with self._entering:
                self._abandoned = True
                entered = self._entered
            if entered:  # begun, but the block will not run: rolled back at once
                self._roll_back()
            raise

    def _enter_in_thread(self):
        unit = self.__enter__()
        with self._entering:
            self._entered = True
            abandoned = self._abandoned
        if abandoned:  # the coroutine was cancelled while this waited
            self._roll_back()
        return unit

    def _roll_back(self):
        cancelled = asyncio.CancelledError()
        self.__exit__(type(cancelled), cancelled, None)

    async def __aexit__(self, *exc_info):
        exiting = asyncio.get_running_loop().run_in_executor(None, self.__exit__, *exc_info)
        return await asyncio.shield(exiting)  # cancelled, the transaction still ends
