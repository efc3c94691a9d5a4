"""Plugins import only the SDK, as a third party's plugin must."""

import ast
import importlib
import importlib.util
import pathlib

import pytest

from metalboot_framework import sdk

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLUGIN_FILES = sorted(p for p in [*ROOT.glob("plugins/**/*.py"), *ROOT.glob("examples/**/*.py")]
                      if ".venv" not in p.parts and "tests" not in p.parts)


def framework_imports(source):
    """The metalboot_framework modules a source imports (``from M import name``
    counts as ``M.name`` where that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if _is_module(sub) else node.module)
    return {name for name in found if name.split(".")[0] == "metalboot_framework"}


def _is_module(dotted):
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, AttributeError, ValueError):
        return False


def test_there_are_plugins_to_check():
    assert len(PLUGIN_FILES) > 10


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugin_imports_only_the_sdk(path):
    private = sorted(m for m in framework_imports(path.read_text()) if not sdk.is_public(m))
    assert not private, f"{path.relative_to(ROOT)} imports private modules {private}"


def test_the_check_sees_a_private_import():
    assert framework_imports("from metalboot_framework import inventory") == {
        "metalboot_framework.inventory"}
    assert not sdk.is_public("metalboot_framework.inventory")
    assert framework_imports("from metalboot_framework.services import Services") == {
        "metalboot_framework.services"}
    assert framework_imports("from metalboot_framework import hookimpl") == {"metalboot_framework"}
    assert sdk.is_public("metalboot_framework.bmc.power")


def test_every_sdk_module_imports():
    for name in sdk.MODULES:
        importlib.import_module(name)
