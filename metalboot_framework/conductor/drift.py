"""Drift: whether each machine at rest is still set up for its boot interface.

Every ``[conductor] drift_check_interval`` the conductor asks each ready
machine's interface (``check_drift``) and records what it found, with a
``machine.drift`` event when that changed.
"""

import concurrent.futures

from sqlalchemy import select, update

from metalboot_framework.machine_lifecycle import State
from metalboot_framework.store import models


class DriftCheck:
    """The drift check of every machine at rest, in a pool of its own: drift
    checks of a whole fleet must not queue ahead of migration steps in the
    workers' pool."""

    def __init__(self, services, workers):
        self.services = services
        self.workers = workers

    def __call__(self):
        """Ask each machine at rest whether it is still set up for its interface;
        how many have drifted."""
        with self.services.db.read() as s:
            machines = s.execute(select(models.Machine.id, models.Machine.boot_interface,
                                        models.Machine.drift)
                                 .where(models.Machine.state == State.READY)).all()
        with concurrent.futures.ThreadPoolExecutor(
                max_workers=min(8, self.workers),
                thread_name_prefix="conductor-drift") as pool:
            checks = [pool.submit(self._check_one, m.id, m.boot_interface, m.drift)
                      for m in machines if m.boot_interface in self.services.interfaces]
        return sum(1 for c in checks if c.result())

    def _check_one(self, machine_id, interface, previous):
        iface = self.services.interfaces.get(interface)
        try:
            drift = list(iface.check_drift(self.services.task(machine_id, interface)))
        except Exception as exc:
            drift = [f"drift check failed: {type(exc).__name__}: {exc}"]
        now = models.utcnow()
        with self.services.transactions.now() as unit:
            unit.session.execute(update(models.Machine).where(models.Machine.id == machine_id)
                                 .values(drift=drift or None, drift_checked_at=now))
            if (drift or None) != previous:
                unit.event("machine.drift",
                           "drift: " + "; ".join(drift) if drift else "drift resolved",
                           machine_id=machine_id, data={"interface": interface,
                                                        "drift": drift})
        return bool(drift)
