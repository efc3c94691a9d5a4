"""Calling one step of a boot interface so that its failure is a message: a
plugin's error (or bug) fails the machine it works on, never the conductor.

:func:`call_step` is for blocking code (enrolment, removal); :func:`acall_step`
for the machines of a migration, coroutines on the step loop: it awaits a step
written as a coroutine and runs a blocking one in a worker thread."""

import logging

from metalboot_framework.exceptions import BootInterfaceError
from metalboot_framework.steploop import call_blocking, is_coroutine_step
from metalboot_framework.task import BootTask

LOG = logging.getLogger(__name__)


def call_step(services, machine, partition, interface, step, migration_id=None):
    """``interface``'s ``step`` on the machine; None, or why it failed."""
    try:
        iface = services.interfaces.get(interface)
        call_blocking(getattr(iface, step), BootTask(services, machine, partition, interface,
                                                     migration_id=migration_id))
    except Exception as exc:
        return _failure(exc, machine, interface, step)
    return None


async def acall_step(services, machine, partition, interface, step, migration_id=None):
    """:func:`call_step` on the step loop; a blocking step runs in one of its
    threads (:meth:`.steploop.StepLoop.call_in_thread`)."""
    try:
        method = getattr(services.interfaces.get(interface), step)
        task = BootTask(services, machine, partition, interface, migration_id=migration_id)
        if is_coroutine_step(method):
            await method(task)
        else:
            await services.step_loop.call_in_thread(method, task)
    except Exception as exc:
        return _failure(exc, machine, interface, step)
    return None


def _failure(exc, machine, interface, step):
    if isinstance(exc, BootInterfaceError):
        return f"{interface} {step}: {exc.message}"
    # a plugin bug
    LOG.error("boot interface %s failed in %s of machine %s", interface, step, machine.id,
              exc_info=exc)
    return f"{interface} {step}: {type(exc).__name__}: {exc}"
