"""The kit itself: each contract check fails for an interface that breaks it.

A module of deliberately broken interfaces (each breaks one rule, in a
directory that is its world) is run with pytest in a subprocess; the junit
report must show exactly the expected checks failing, and a correct
interface passing all of them.
"""

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BROKEN = textwrap.dedent('''
    import os

    import pytest

    from metalboot_framework.boot_interface import BootInterface, Capability, Property
    from metalboot_framework.testing.conformance import BootInterfaceConformance


    class DirInterface(BootInterface):
        """Keeps one file per machine in a directory (a correct interface)."""

        capabilities = frozenset({Capability.SIMULATED})
        directory = None

        def get_properties(self):
            return {"nics": Property("The NICs.")}

        def path(self, task):
            return os.path.join(self.directory, task.machine.id)

        def validate(self, task):
            pass

        def prepare(self, task):
            with open(self.path(task), "w") as f:
                f.write("prepared\\n")

        def activate(self, task):
            with open(self.path(task), "w") as f:
                f.write("active\\n")

        def clean_up(self, task):
            if os.path.exists(self.path(task)):
                os.unlink(self.path(task))


    class DirConformance(BootInterfaceConformance):
        interface_name = "fake"
        other_interface = "fake-alt"
        impl = DirInterface

        def build_interface(self, services):
            iface = self.impl()
            iface.name = "fake"
            iface.directory = str(self.world_dir)
            return iface

        def conformance_options(self, tmp_path):
            self.world_dir = tmp_path / "world"
            self.world_dir.mkdir()
            return {}

        def snapshot_world(self):
            return {p.name: p.read_text() for p in self.world_dir.iterdir()}


    class TestCorrect(DirConformance):
        pass


    class ValidateWrites(DirInterface):
        """validate leaves a file."""

        def validate(self, task):
            open(self.path(task) + ".checked", "w").close()


    class TestValidateWrites(DirConformance):
        impl = ValidateWrites


    class PrepareAppends(DirInterface):
        """prepare appends instead of replacing."""

        def prepare(self, task):
            with open(self.path(task), "a") as f:
                f.write("prepared\\n")


    class TestPrepareAppends(DirConformance):
        impl = PrepareAppends


    class CleanUpForgets(DirInterface):
        """clean_up forgets what activate wrote."""

        def activate(self, task):
            super().activate(task)
            open(self.path(task) + ".media", "w").close()


    class TestCleanUpForgets(DirConformance):
        impl = CleanUpForgets


    class CleanUpNeedsPrepare(DirInterface):
        """clean_up fails when nothing was prepared."""

        def clean_up(self, task):
            os.unlink(self.path(task))


    class TestCleanUpNeedsPrepare(DirConformance):
        impl = CleanUpNeedsPrepare


    class CleanUpTooMuch(DirInterface):
        """clean_up removes every machine's file."""

        def clean_up(self, task):
            for name in os.listdir(self.directory):
                os.unlink(os.path.join(self.directory, name))


    class TestCleanUpTooMuch(DirConformance):
        impl = CleanUpTooMuch


    class AnyEvidence(DirInterface):
        """Takes any record as evidence."""

        def recognise_evidence(self, task, records):
            return records[-1] if records else None


    class TestAnyEvidence(DirConformance):
        impl = AnyEvidence


    class UnservedEvidence(DirInterface):
        """Names an evidence artifact nobody serves."""

        evidence_artifacts = ("boot.ipxe", "grub.efi")


    class TestUnservedEvidence(DirConformance):
        impl = UnservedEvidence


    class Undocumented(DirInterface):
        """Properties without descriptions, capabilities as strings."""

        capabilities = frozenset({"needs_bmc"})

        def get_properties(self):
            return {"nics": Property(""), "bmc.address": "the BMC"}


    class TestUndocumented(DirConformance):
        impl = Undocumented


    class NotJson(DirInterface):
        """describe() has a set in it."""

        def describe(self):
            described = super().describe()
            described["extra"] = {"a"}
            return described


    class TestNotJson(DirConformance):
        impl = NotJson
''')

EXPECTED_FAILURES = {
    "TestValidateWrites": {"test_validate_has_no_side_effects"},
    "TestPrepareAppends": {"test_prepare_is_idempotent"},
    "TestCleanUpForgets": {"test_clean_up_leaves_nothing_behind",
                           "test_clean_up_spares_other_machines"},
    "TestCleanUpNeedsPrepare": {"test_clean_up_when_nothing_was_prepared",
                                "test_clean_up_is_idempotent"},
    "TestCleanUpTooMuch": {"test_clean_up_spares_other_machines"},
    "TestAnyEvidence": {"test_other_interface_is_not_evidence"},
    "TestUnservedEvidence": {"test_evidence_artifacts_recognised"},
    "TestUndocumented": {"test_properties_documented", "test_capabilities_declared",
                         "test_describe_is_json"},
    "TestNotJson": {"test_describe_is_json"},
}


def test_each_check_catches_its_violation(tmp_path):
    module = tmp_path / "test_broken_interfaces.py"
    module.write_text(BROKEN)
    report = tmp_path / "report.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"--junitxml={report}", "--rootdir", str(tmp_path), str(module)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert report.exists(), proc.stdout + proc.stderr
    failed, passed = {}, {}
    for case in ET.parse(report).getroot().iter("testcase"):
        cls = case.get("classname").rsplit(".", 1)[-1]
        bucket = failed if case.find("failure") is not None or case.find(
            "error") is not None else passed
        bucket.setdefault(cls, set()).add(case.get("name"))
    assert "TestCorrect" not in failed, proc.stdout
    assert len(passed["TestCorrect"]) >= 15
    assert failed == EXPECTED_FAILURES, proc.stdout
