"""Removal: clean up what a machine's boot interface prepared, then forget it.

A machine deleted through the API while prepared for a boot interface is
``deleting``: its DHCP entries or boot overrides live where the conductor runs,
so the conductor takes its lock, calls the interface's ``clean_up`` and deletes
its rows in one transaction with the ``machine.deleted`` event. A failed
clean-up leaves the machine ``error`` with ``last_error``; deleting it again
retries, ``force=true`` forgets it without clean-up.
"""

import logging

from sqlalchemy import bindparam, update

from metalboot_framework import inventory
from metalboot_framework.conductor.at_rest import MachineWork
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.conductor.plugin_call import call_step
from metalboot_framework.store import models

LOG = logging.getLogger(__name__)

_M = models.Machine.__table__
FAILED = update(_M).where(_M.c.id == bindparam("mid"), _M.c.state == State.DELETING) \
    .values(state=State.ERROR.value, last_error=bindparam("error"), updated_at=bindparam("now"))


class Remover(MachineWork):
    """Removes one machine at a time; any number of them run in the worker pool."""

    state = State.DELETING.value

    def run(self, machine_id):
        """Clean up and forget the machine if it is still deleting and unlocked;
        returns True if it is gone, False if its clean-up failed, None if
        someone else had it."""
        claimed = self.claim(machine_id)
        if claimed is None:
            return None
        lock, machine, partition = claimed
        with lock:
            return self._remove(lock, machine, partition)

    def _remove(self, lock, machine, partition):
        machine_id = machine.id
        view = inventory.get_machine(self.services, machine_id)
        interface = machine.prepared_interface
        error = self._clean_up(machine, partition, interface)

        def finish(unit):
            if error is None:
                inventory.forget_machine(unit, machine_id, cleaned_up=interface or False)
            else:
                unit.session.execute(FAILED, {"mid": machine_id, "error": error,
                                              "now": models.utcnow()})
                unit.event("machine.deletion_failed", f"deletion failed: {error}",
                           machine_id=machine_id,
                           data={"prepared_interface": interface, "error": error})
                lock.release_in(unit.session)

        self.services.transactions.grouped(finish).result()
        lock.dropped()  # released, or gone with the machine's row
        if error is not None:
            LOG.warning("machine %s: deletion failed: %s", machine_id, error,
                        extra={"machine_id": machine_id})
            return False
        LOG.info("machine %s: deleted (%s cleaned up)", machine_id, interface,
                 extra={"machine_id": machine_id})
        self.services.hooks.notify("metalboot_machine_deleted", machine=view)
        return True

    def _clean_up(self, machine, partition, interface):
        """None, or why the interface's traces could not be removed."""
        if interface is None:
            return None
        if interface not in self.services.interfaces:
            return (f"{interface} is not enabled, so its traces cannot be cleaned up; "
                    "enable it, or DELETE with force=true")
        return call_step(self.services, machine, partition, interface, "clean_up")
