"""What the conductor's work on machines at rest (removal, enrolment) shares:
finding the machines waiting for it, taking a machine's lock, releasing it
(:mod:`.machine_lock`).
Plugin steps are called with :func:`.plugin_call.call_step`."""

from sqlalchemy import bindparam, case, select

from metalboot_framework.conductor import machine_lock
from metalboot_framework.store import models

_M = models.Machine.__table__


class Waiting:
    """The machines in the states of ``workers`` that nobody holds, in the order
    of ``workers``, then longest waiting first: one query for all of them, built
    once (the scheduler asks on every tick)."""

    def __init__(self, services, workers):
        self.services = services
        self._by_state = {worker.state: worker for worker in workers}
        rank = case({state: i for i, state in enumerate(self._by_state)}, value=_M.c.state)
        self._query = select(_M.c.id, _M.c.state).where(
            _M.c.state.in_(list(self._by_state)), _M.c.reservation.is_(None)) \
            .order_by(rank, _M.c.updated_at, _M.c.id).limit(bindparam("n"))

    def __call__(self, limit):
        """[(worker, machine id)], at most ``limit``."""
        with self.services.db.read_conn() as conn:
            return [(self._by_state[row.state], row.id)
                    for row in conn.execute(self._query, {"n": limit})]


class MachineWork:
    """Base of a worker on machines in ``state`` (one machine per call of ``run``)."""

    state = None

    def __init__(self, services, host):
        self.services = services
        self.host = host

    def claim(self, machine_id):
        """Take the machine's lock if it is still in our state and unlocked; returns
        (machine, partition), or None."""

        def claim(unit):
            if not machine_lock.take_in_state(unit.session, machine_id, self.state, self.host):
                return None
            return self.services.snapshot(unit.session, machine_id)

        return self.services.transactions.grouped(claim).result()

    def release(self, conn, machine_id):
        """Drop our lock on the machine in ``conn``'s transaction."""
        machine_lock.release_one(conn, machine_id, self.host)
