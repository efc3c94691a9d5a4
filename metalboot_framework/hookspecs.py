"""Hook specifications: every registered implementation is called in turn.

Implementations live in any installed distribution that declares an entry point
in the ``metalboot.hooks`` namespace pointing at a module or object with
functions marked ``@metalboot_framework.hookimpl``. Hooks are called through
pluggy: the implementation registered last is called first, ``tryfirst`` and
``trylast`` move one, and ``wrapper=True`` implementations wrap the call.
Hooks are told about changes after they are committed: an implementation that
raises is logged and counts as no answer, the others are still called, and the
change is never undone. Only :func:`metalboot_veto_machine` and
:func:`metalboot_amend_boot_script` influence what happens.
"""

import pluggy

hookspec = pluggy.HookspecMarker("metalboot")


@hookspec
def metalboot_machine_registered(machine):
    """A machine was registered.

    :param machine: the machine as the API shows it (a dict, no password).
    """


@hookspec
def metalboot_machine_updated(machine, changes):
    """A machine's record changed through the API.

    :param machine: the machine after the change (a dict, no password).
    :param changes: the names of the fields that changed.
    """


@hookspec
def metalboot_machine_deleted(machine):
    """A machine was deleted; ``machine`` is its last state."""


@hookspec
def metalboot_boot_interface_changed(machine, old, new, reason):
    """A machine's boot interface switched from ``old`` to ``new``.

    Called for a direct change through the API and for a migration that
    completed; ``reason`` says which. metal-api would record the new boot path.
    """


@hookspec
def metalboot_migration_state_changed(migration, old, new):
    """A migration moved from state ``old`` to ``new`` (dicts as in the API)."""


@hookspec
def metalboot_machine_step_changed(machine_id, migration_id, old, new, reason):
    """A machine in a migration moved from step ``old`` to ``new``."""


@hookspec
def metalboot_veto_machine(machine, migration):
    """Asked before a migration starts work on a machine.

    Return a reason (a string) to skip the machine, e.g. because metal-api says
    it is allocated; return ``None`` to let it go on. Every implementation is
    asked, in one call; all reasons given are recorded, each after the name of
    the plugin that gave it. A ``wrapper=True`` implementation runs once, sees
    the list of reasons and may return another (a reason it adds is recorded
    after the names of the wrappers).
    """


@hookspec
def metalboot_amend_boot_script(machine, partition, interface, script):
    """Amend the boot.ipxe text served to ``machine``: a fold.

    ``script`` is a :class:`metalboot_framework.hooks.BootScript`; its ``text``
    is the script as amended by the implementations called before this one.
    Set ``script.text`` to change it; return nothing (a returned value is
    ignored with a warning). Implementations are called in pluggy's order, so
    ``tryfirst``/``trylast`` choose who amends first and last, and a
    ``wrapper=True`` implementation sees the text before and after the others.
    Write every value you add through :func:`metalboot_framework.ipxe.quote`,
    so that it cannot end, add or comment out an iPXE command.
    """


@hookspec
def metalboot_event(event):
    """An event was appended to the history (a dict as in ``GET /v1/events``).

    For notifiers (webhooks, message buses); must not block for long.
    """
