"""Enrolment: make a machine at rest bootable through its boot interface.

A machine registered on ``pxe`` needs its DHCP entries before it can PXE boot;
one whose boot interface was changed through the API needs the old interface's
traces removed and the new one prepared. Such a machine is ``enrolling``; the
conductor takes its lock, cleans up the interface it was prepared for (if
another), validates and prepares the current one, and sets it ``ready`` -- or
``error`` with ``last_error``, for an operator to fix and set ``enrolling``
again. Enrolment never resets a machine: it boots the new way at its next boot.

A migration may take an enrolling machine; the enrolment then steps back (the
migration prepares what it needs, and its rollback prepares the source).
"""

import logging

from sqlalchemy import bindparam, update

from metalboot_framework.conductor.at_rest import MachineWork
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.conductor.plugin_call import call_step
from metalboot_framework.store import models

LOG = logging.getLogger(__name__)

_M = models.Machine.__table__
_mid = bindparam("mid")
PREPARED = update(_M).where(_M.c.id == _mid).values(prepared_interface=bindparam("iface"))
FINISH = update(_M).where(_M.c.id == _mid, _M.c.state == State.ENROLLING,
                          _M.c.boot_interface == bindparam("iface")) \
    .values(state=bindparam("state"), last_error=bindparam("error"),
            updated_at=bindparam("now"))


class Enroller(MachineWork):
    """Enrols one machine at a time; any number of them run in the worker pool."""

    state = State.ENROLLING.value

    def run(self, machine_id):
        """Enrol the machine if it is still enrolling and unlocked; returns its new
        state, or None if someone else had it."""
        claimed = self.claim(machine_id)
        if claimed is None:
            return None
        lock, machine, partition = claimed
        with lock:
            return self._enrol(lock, machine, partition)

    def _enrol(self, lock, machine, partition):
        """Returns the new state or None; the lock goes with the enrolment's end."""
        target, previous = machine.boot_interface, machine.prepared_interface
        error = None
        if target not in self.services.interfaces:
            error = f"its boot interface {target} is not enabled"
        note = ""
        if error is None and previous and previous != target:
            if previous in self.services.interfaces:
                error = call_step(self.services, machine, partition, previous, "clean_up")
                note = f" ({previous} cleaned up)"
            else:
                note = f" ({previous} is not enabled: its traces were not cleaned up)"
        cleaned = error is None and previous != target
        prepare_failed = False
        if error is None:
            error = call_step(self.services, machine, partition, target, "validate")
            if error is None:
                error = call_step(self.services, machine, partition, target, "prepare")
                prepare_failed = error is not None  # maybe half done: not prepared
        new = State.ERROR.value if error else State.READY.value

        def finish(unit):
            conn = unit.session
            if error is None:
                conn.execute(PREPARED, {"mid": machine.id, "iface": target})
            elif cleaned or prepare_failed:
                conn.execute(PREPARED, {"mid": machine.id, "iface": None})
            finished = conn.execute(FINISH, {
                "mid": machine.id, "iface": target, "state": new, "error": error,
                "now": models.utcnow()}).rowcount
            if finished:
                message = f"enrolment on {target} failed: {error}" if error else \
                    f"enrolled: prepared for {target}{note}"
                unit.event("machine.enrolment_failed" if error else "machine.enrolled",
                           message, machine_id=machine.id,
                           data={"boot_interface": target, "previous": previous,
                                 "error": error})
            lock.release_in(conn)
            return finished

        finished = self.services.transactions.grouped(finish).result()
        lock.dropped()
        if not finished:
            return None  # a migration took it, or its interface changed meanwhile
        log = LOG.warning if error else LOG.info
        log("machine %s: %s", machine.id, f"enrolment on {target} failed: {error}" if error
            else f"enrolled on {target}", extra={"machine_id": machine.id})
        return new
