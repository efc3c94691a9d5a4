"""Calling one step of a boot interface so that its failure is a message: a
plugin's error (or bug) fails the machine it works on, never the conductor."""

import logging

from metalboot_framework.exceptions import BootInterfaceError
from metalboot_framework.task import BootTask

LOG = logging.getLogger(__name__)


def call_step(services, machine, partition, interface, step, migration_id=None):
    """``interface``'s ``step`` on the machine; None, or why it failed."""
    try:
        iface = services.interfaces.get(interface)
        getattr(iface, step)(BootTask(services, machine, partition, interface,
                                      migration_id=migration_id))
    except BootInterfaceError as exc:
        return f"{interface} {step}: {exc.message}"
    except Exception as exc:  # a plugin bug
        LOG.exception("boot interface %s failed in %s of machine %s", interface, step,
                      machine.id)
        return f"{interface} {step}: {type(exc).__name__}: {exc}"
    return None
