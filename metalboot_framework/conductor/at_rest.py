"""What the conductor's work on machines at rest (removal, enrolment) shares:
finding the machines waiting for it and taking a machine's lock
(:class:`.machine_lock.Held`, which releases it).
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
            _M.c.state.in_(list(self._by_state)), machine_lock.unlocked()) \
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
        (:class:`.machine_lock.Held`, machine, partition), or None."""

        def claim(unit):
            lock = machine_lock.Held.take_in_state(unit.session, self.services, machine_id,
                                                   self.state, self.host)
            if lock is None:
                return None
            return (lock, *self.services.snapshot(unit.session, machine_id))

        return self.services.transactions.grouped(claim).result()
