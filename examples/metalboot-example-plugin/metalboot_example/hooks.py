"""A hook plugin: appends every registered machine id to a file (METALBOOT_EXAMPLE_AUDIT)."""

import os

from metalboot_framework import hookimpl


@hookimpl
def metalboot_machine_registered(machine):
    path = os.environ.get("METALBOOT_EXAMPLE_AUDIT")
    if path:
        with open(path, "a") as f:
            f.write(f"registered {machine['id']} on {machine['boot_interface']}\n")
