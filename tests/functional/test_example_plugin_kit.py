"""The example third-party plugin, pip-installed on its own, passes its own tests.

Its tests (``examples/metalboot-example-plugin/tests``) subclass metalboot's
conformance kit. They run in a separate pytest process that finds the plugin
only through the installed distribution (``PYTHONPATH`` = the install
target), as a plugin author's CI would: the entry point, the package data and
the kit are what is checked, not the source tree.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.functional

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "metalboot-example-plugin"


def test_example_plugin_passes_the_conformance_kit(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(EXAMPLE)],
                   check=True, cwd=tmp_path)
    assert list(target.glob("metalboot_example_plugin-*.dist-info"))
    env = dict(os.environ, PYTHONPATH=str(target))
    env.pop("PYTEST_ADDOPTS", None)

    # The plugin the tests will load is the installed one.
    where = subprocess.run(
        [sys.executable, "-c", "import json, metalboot_example.boot_interface as m, "
         "importlib.metadata as md; print(json.dumps([m.__file__, sorted(e.name for e in "
         "md.entry_points(group='metalboot.boot_interfaces'))]))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    module_file, names = json.loads(where.stdout)
    assert module_file.startswith(str(target)), module_file
    assert "example" in names

    report = tmp_path / "report.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--junitxml={report}", str(EXAMPLE / "tests")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = report.read_text()
    assert 'failures="0"' in text and 'errors="0"' in text, proc.stdout
    assert "TestExampleConformance" in text and "test_clean_up_leaves_nothing_behind" in text
