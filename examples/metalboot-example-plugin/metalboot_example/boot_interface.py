"""``example``: a boot interface that keeps its state in a directory.

It stands for a site's own boot path. prepare writes a marker file per
machine, clean_up removes it, and the machine proves its boot by fetching
its boot.ipxe like with every other interface.
"""

import os

from metalboot_framework.boot_interface import BootInterface, Capability, Property
from metalboot_framework.exceptions import ValidationFailed


class ExampleBootInterface(BootInterface):
    """Example third-party boot interface that records its state in files."""

    capabilities = frozenset({Capability.SIMULATED, Capability.IPV6})

    def get_properties(self):
        return {"example_dir": Property("Directory for the marker files.", required=True)}

    def _marker(self, task):
        return os.path.join(task.machine.properties["example_dir"], f"{task.machine.id}.prepared")

    def validate(self, task):
        path = task.machine.properties.get("example_dir")
        if not path:
            raise ValidationFailed("property example_dir is required",
                                   fields={"properties.example_dir": ["required"]})
        if not os.path.isdir(path):
            raise ValidationFailed(f"example_dir {path} is not a directory",
                                   fields={"properties.example_dir": ["not a directory"]})

    def prepare(self, task):
        with open(self._marker(task), "w") as f:
            f.write(task.artifact_url("boot.ipxe") + "\n")

    def activate(self, task):
        task.record_event("example.activate", "the operator resets the machine by hand")

    def clean_up(self, task):
        try:
            os.unlink(self._marker(task))
        except FileNotFoundError:
            pass
