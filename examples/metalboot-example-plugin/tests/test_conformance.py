"""The example plugin's tests: metalboot's conformance kit, run against ``example``.

The interface is loaded as metalboot-server loads it, through the
``metalboot.boot_interfaces`` entry point of the installed distribution, so
these tests check the package as shipped. Its world is the directory in the
machine property ``example_dir``.
"""

from metalboot_framework.testing.conformance import BootInterfaceConformance


class TestExampleConformance(BootInterfaceConformance):
    interface_name = "example"

    def conformance_options(self, tmp_path):
        # Called before the machines are registered: make the world here.
        self.example_dir = tmp_path / "example"
        self.example_dir.mkdir()
        return {}

    def machine_fields(self, index):
        fields = super().machine_fields(index)
        fields["properties"] = {"example_dir": str(self.example_dir)}
        return fields

    def invalid_machine_fields(self):
        fields = self.machine_fields(2)
        fields["properties"] = {"example_dir": str(self.example_dir / "missing")}
        return fields

    def snapshot_world(self):
        return {path.name: path.read_text() for path in sorted(self.example_dir.iterdir())}

    def test_prepare_writes_the_marker(self):
        self.interface.prepare(self.task)
        assert self.snapshot_world() == {
            f"{self.task.machine.id}.prepared": self.task.artifact_url("boot.ipxe") + "\n"}
