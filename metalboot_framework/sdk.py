"""The plugin SDK: the modules a boot interface or a hook plugin may import.

A plugin builds on these and nothing else of ``metalboot_framework``; they keep
their names and meaning across minor releases. Every other module is private
to the framework and may change in any release. The first-party plugins and the
example third-party plugin are held to this list by a test, as a third party's
plugin would be.

- :mod:`metalboot_framework`: :data:`~metalboot_framework.hookimpl`.
- :mod:`metalboot_framework.boot_interface`: the contract (``BootInterface``,
  ``Property``, ``Capability``, ``Evidence``, ``Artifact``).
- :mod:`metalboot_framework.task`: the read-only ``BootTask`` a step is given.
- :mod:`metalboot_framework.exceptions`: the errors a step raises.
- :mod:`metalboot_framework.hooks`: ``hookimpl`` and ``BootScript``.
- :mod:`metalboot_framework.ipxe`: the grammar of values that reach a boot
  script and ``quote``, which every value a plugin or hook writes into one
  goes through.
- :mod:`metalboot_framework.bmc` and its modules: a Redfish client for the
  task's BMC (``client_for_task(task)``), power and virtual media, with the
  framework's retries, timeouts, vendor quirks and password redaction.
- :mod:`metalboot_framework.dhcp` and its modules: the DHCP backend the operator
  configured (``get_backend(name, task.conf)``) and the host entries it takes.
- :mod:`metalboot_framework.testing.conformance` and
  :mod:`metalboot_framework.testing.simulator`: for a plugin's own tests.
"""

#: Modules a plugin may import (a package's entry covers its modules where
#: :data:`PACKAGES` names it).
MODULES = (
    "metalboot_framework",
    "metalboot_framework.boot_interface",
    "metalboot_framework.task",
    "metalboot_framework.exceptions",
    "metalboot_framework.hooks",
    "metalboot_framework.ipxe",
    "metalboot_framework.bmc",
    "metalboot_framework.dhcp",
    "metalboot_framework.testing.conformance",
    "metalboot_framework.testing.simulator",
)

#: Packages of the SDK whose modules are part of it too.
PACKAGES = ("metalboot_framework.bmc", "metalboot_framework.dhcp")


def is_public(module):
    """Whether a plugin may import ``module`` (a dotted name)."""
    return module in MODULES or any(module.startswith(package + ".") for package in PACKAGES)
