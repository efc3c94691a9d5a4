"""What the conductor's work on a machine at rest (enrolment, removal) shares:
finding the machines of one state nobody holds, taking a machine's lock, and
calling one plugin step so that a failure is a message, never an exception."""

import logging

from sqlalchemy import bindparam, select, update

from metalboot_framework.exceptions import BootInterfaceError
from metalboot_framework.store import models
from metalboot_framework.task import BootTask

LOG = logging.getLogger(__name__)

_M = models.Machine.__table__
_mid = bindparam("mid")
RELEASE = update(_M).where(_M.c.id == _mid, _M.c.reservation == bindparam("host")) \
    .values(reservation=None, reserved_at=None)


class MachineWork:
    """Base of a worker on machines in ``state`` (one machine per call of ``run``)."""

    state = None

    def __init__(self, services, host):
        self.services = services
        self.host = host
        self._claim = update(_M).where(_M.c.id == _mid, _M.c.reservation.is_(None),
                                       _M.c.state == self.state) \
            .values(reservation=bindparam("host"), reserved_at=bindparam("now"))
        self._waiting = select(_M.c.id).where(_M.c.state == self.state,
                                              _M.c.reservation.is_(None)) \
            .order_by(_M.c.updated_at, _M.c.id).limit(bindparam("n"))

    def waiting(self, limit):
        """Ids of machines in our state that nobody holds, longest waiting first."""
        with self.services.db.read_conn() as conn:
            return [row.id for row in conn.execute(self._waiting, {"n": limit})]

    def claim(self, machine_id):
        """Take the machine's lock if it is still in our state and unlocked; returns
        (params for RELEASE, machine, partition), or None."""
        params = {"mid": machine_id, "host": self.host, "now": models.utcnow()}

        def claim(unit):
            if not unit.session.execute(self._claim, params).rowcount:
                return None
            return self.services.snapshot(unit.session, machine_id)

        claimed = self.services.write_grouped(claim)
        return None if claimed is None else (params, *claimed)

    def call(self, machine, partition, interface, step):
        """Call one plugin step; None, or the error message."""
        try:
            iface = self.services.interfaces.get(interface)
            getattr(iface, step)(BootTask(self.services, machine, partition, interface))
        except BootInterfaceError as exc:
            return f"{interface} {step}: {exc.message}"
        except Exception as exc:  # a plugin bug fails this machine, not the conductor
            LOG.exception("boot interface %s failed in %s of machine %s", interface, step,
                          machine.id)
            return f"{interface} {step}: {type(exc).__name__}: {exc}"
        return None
