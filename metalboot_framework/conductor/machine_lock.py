"""The per-machine lock: ``machines.reservation`` (the holder's host name) and
``reserved_at`` (when it was taken). Every statement that writes or reads
them is here: other modules ask :func:`unlocked` for the SQL condition,
:func:`holder` for who holds a machine, and keep a lock they took as a
:class:`Held`, which releases it when their work on the machine ends.

The rules:

- A conductor runs a machine's step, enrols or removes it only while it holds
  the machine's lock. A lock is taken by a conditional update (``... WHERE
  reservation IS NULL``, :func:`take`): of several conductors (or threads)
  racing for a machine, exactly one update changes its row, and only that one
  holder goes on. The ids taken are known from the row count, or read back by
  the ``reserved_at`` that only this update wrote.
- Only the holder releases a lock (``... WHERE reservation = <host>``:
  :func:`release`, :func:`release_one`, :func:`releasing`), so a release that
  comes late never drops a lock someone else took since.
- A conductor releases all its own locks when it starts (left by its previous
  run) and when it stops (:func:`release_all`); while it runs, those older
  than a heartbeat interval on machines none of its workers runs (a release
  lost when the database was away, :func:`release_leaked`).
- The locks of a conductor whose heartbeat is older than ``[conductor]
  heartbeat_timeout`` are released by any live conductor, which marks it
  offline in the same transaction (:func:`release_of_dead`); the machines are
  then taken over by whoever takes their locks next, and resume from their
  persisted step (every step may run again).

Statements are built once, at import: building SQL expressions per call costs
more than running them. Each function runs in the caller's transaction.
"""

from sqlalchemy import bindparam, case, select, update

from metalboot_framework.store import models
from metalboot_framework.store.many_rows import changed, chunks

_M = models.Machine.__table__
_C = models.Conductor.__table__
_mid, _mids, _host, _now = (bindparam("mid"), bindparam("mids", expanding=True),
                            bindparam("host"), bindparam("now"))

_TAKE_MANY = update(_M).where(_M.c.id.in_(_mids), _M.c.reservation.is_(None)) \
    .values(reservation=_host, reserved_at=_now)
# the machines a take changed, read back by the values only that statement wrote
# (its ``now`` is new): when its row count says not all of them changed
_TAKEN = select(_M.c.id).where(_M.c.id.in_(_mids), _M.c.reservation == _host,
                               _M.c.reserved_at == _now)
_TAKE_IN_STATE = update(_M).where(_M.c.id == _mid, _M.c.reservation.is_(None),
                                  _M.c.state == bindparam("in_state")) \
    .values(reservation=_host, reserved_at=_now)
_RELEASE_MANY = update(_M).where(_M.c.id.in_(_mids), _M.c.reservation == _host) \
    .values(reservation=None, reserved_at=None)
_RELEASE_ONE = update(_M).where(_M.c.id == _mid, _M.c.reservation == _host) \
    .values(reservation=None, reserved_at=None)
_RELEASE_ALL = update(_M).where(_M.c.reservation == _host) \
    .values(reservation=None, reserved_at=None)
_LEAKED = select(_M.c.id).where(_M.c.reservation == _host, _M.c.reserved_at < bindparam("before"),
                                _M.c.id.notin_(bindparam("busy", expanding=True)))
_DEAD = select(_C.c.hostname).where(_C.c.heartbeat_at < bindparam("limit"),
                                    _C.c.online.is_(True))
_RELEASE_OF_HOLDERS = update(_M).where(_M.c.reservation.in_(bindparam("holders",
                                                                       expanding=True))) \
    .values(reservation=None, reserved_at=None)
_UNLOCKED = _M.c.reservation.is_(None)
_OFFLINE = update(_C).where(_C.c.hostname.in_(bindparam("holders", expanding=True))) \
    .values(online=False)


def take(conn, machine_ids, host):
    """Take the locks of those of ``machine_ids`` nobody holds; the ids taken."""
    return changed(conn, _TAKE_MANY, {"host": host, "now": models.utcnow()},
                   list(dict.fromkeys(machine_ids)), _TAKEN)


def take_in_state(conn, machine_id, state, host):
    """Take the machine's lock if nobody holds it and the machine is in
    ``state`` (``machines.state``); whether it was taken."""
    return bool(conn.execute(_TAKE_IN_STATE, {"mid": machine_id, "in_state": state, "host": host,
                                              "now": models.utcnow()}).rowcount)


def release(conn, machine_ids, host):
    """Drop ``host``'s locks on ``machine_ids``."""
    for ids in chunks(list(machine_ids)):
        conn.execute(_RELEASE_MANY, {"mids": ids, "host": host})


def release_one(conn, machine_id, host):
    """Drop ``host``'s lock on one machine."""
    conn.execute(_RELEASE_ONE, {"mid": machine_id, "host": host})


def releasing(stmt):
    """``stmt``, an UPDATE of machines, made to also drop the lock of the
    conductor bound as ``host`` on the rows it changes, in the same statement;
    a lock someone else holds is kept."""
    mine = _M.c.reservation == _host
    return stmt.values(reservation=case((mine, None), else_=_M.c.reservation),
                       reserved_at=case((mine, None), else_=_M.c.reserved_at))


def release_all(conn, host):
    """Drop every lock of ``host``; how many there were."""
    return conn.execute(_RELEASE_ALL, {"host": host}).rowcount


def release_leaked(conn, host, before, busy):
    """Drop ``host``'s locks taken before ``before`` on machines not in ``busy``
    (those its workers run); the ids released."""
    leaked = conn.execute(_LEAKED, {"host": host, "before": before,
                                    "busy": list(busy)}).scalars().all()
    release(conn, leaked, host)
    return leaked


def release_of_dead(conn, limit):
    """Drop the locks of the conductors marked online whose last heartbeat is
    older than ``limit``, and mark them offline; (their host names, how many
    locks were released)."""
    dead = conn.execute(_DEAD, {"limit": limit}).scalars().all()
    if not dead:
        return [], 0
    released = conn.execute(_RELEASE_OF_HOLDERS, {"holders": dead}).rowcount
    conn.execute(_OFFLINE, {"holders": dead})
    return dead, released


def unlocked():
    """The SQL condition "nobody holds the machine's lock" (on ``machines``)."""
    return _UNLOCKED


#: the lock columns of a machine row nobody ever locked (a row just inserted)
NEVER_HELD = {"reservation": None, "reserved_at": None}


def holder(machine):
    """(who holds the lock of ``machine``, a row of ``machines``, since when),
    or None if nobody does."""
    if machine.reservation is None:
        return None
    return machine.reservation, machine.reserved_at


class Held:
    """One machine's lock, from the take to the release: the work on the
    machine runs inside ``with held:`` (``async with`` on the step loop).

    The transaction that ends the work may drop the lock with its own writes
    (:meth:`release_in`, or a statement made by :func:`releasing`); once that
    transaction is committed (or queued, when nobody waits for it) its caller
    says so with :meth:`dropped`. Leaving the block releases a lock still
    held in a transaction of its own -- not group-committed: the group commit
    may be what failed.
    """

    def __init__(self, services, machine_id, host):
        self.services = services
        self.machine_id = machine_id
        self.host = host
        self.held = True

    @classmethod
    def take_in_state(cls, conn, services, machine_id, state, host):
        """The lock of the machine if nobody holds it and it is in ``state``,
        taken in ``conn``'s transaction; None otherwise."""
        if not take_in_state(conn, machine_id, state, host):
            return None
        return cls(services, machine_id, host)

    def release_in(self, conn):
        """Drop the lock in ``conn``'s transaction (then :meth:`dropped`)."""
        release_one(conn, self.machine_id, self.host)

    def dropped(self):
        """The lock went with a transaction of the work's: nothing to release."""
        self.held = False

    def release(self):
        """Release the lock now, if still held, in a transaction of its own."""
        if self.held:
            with self.services.transactions.now(core=True) as unit:
                release_one(unit.session, self.machine_id, self.host)
            self.held = False

    async def arelease_grouped(self):
        """Release the lock, group-committed, from a coroutine of the step loop."""
        if self.held:
            await self.services.transactions.grouped(
                lambda unit: release_one(unit.session, self.machine_id, self.host))
            self.held = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if self.held:
            await self.services.step_loop.call_in_thread(self.release)
