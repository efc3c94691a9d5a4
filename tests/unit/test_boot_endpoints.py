"""The boot endpoints' one framework-neutral layer: its routes, and the lines
it draws between the packages (the API, the boot server, the decisions in
artifacts)."""

import ast
import importlib.metadata
import pathlib

import pytest

from metalboot_framework import boot_endpoints

PACKAGE = pathlib.Path(boot_endpoints.__file__).parent
M = "3f2b8c1e-0000-4000-8000-000000000001"


@pytest.mark.parametrize("method,path,expected", [
    ("GET", f"/boot/{M}/fake/tok/boot.ipxe", ("machine_artifact", (M, "fake", "tok",
                                                                   "boot.ipxe"))),
    ("HEAD", f"/boot/{M}/fake/tok/kernel", ("machine_artifact", (M, "fake", "tok", "kernel"))),
    # fixed segments first, as werkzeug ranks rules
    ("GET", "/boot/mac/52:54:00:00:00:01/fake/boot.ipxe",
     ("script_by_mac", ("52:54:00:00:00:01", "fake"))),
    ("GET", "/boot/mac/52:54:00:00:00:01/fake/other.efi",
     ("machine_artifact", ("mac", "52:54:00:00:00:01", "fake", "other.efi"))),
    ("GET", "/boot/partitions/p1/redfish/x.iso", ("partition_artifact", ("p1", "redfish",
                                                                         "x.iso"))),
    ("POST", f"/v1/machines/{M}/boot-report", ("boot_report", (M,))),
    # a route whose method differs, an empty segment, a brace, a segment too many
    ("POST", f"/boot/{M}/fake/tok/boot.ipxe", None),
    ("GET", f"/v1/machines/{M}/boot-report", None),
    ("POST", "/boot/mac/52:54:00:00:00:01/fake/boot.ipxe", None),
    ("GET", f"/boot/{M}//tok/boot.ipxe", None),
    ("GET", f"/boot/{M}/fake/tok/boot.ipxe/", None),
    ("GET", f"/boot/{M}/fake/{{x}}/boot.ipxe", None),
    ("GET", f"/boot/{M}/fa/ke/tok/boot.ipxe", None),
    ("GET", "/boot", None), ("GET", "/", None),
])
def test_routes(method, path, expected):
    assert boot_endpoints.match(method, path) == expected


def test_flask_blueprint_serves_the_same_routes(app):
    rules = {r.rule: r.methods for r in app.url_map.iter_rules()
             if r.endpoint.startswith("boot.")}
    assert rules == {route: methods for route, methods in (
        (boot_endpoints.MACHINE_ARTIFACT, {"GET", "HEAD", "OPTIONS"}),
        (boot_endpoints.SCRIPT_BY_MAC, {"GET", "HEAD", "OPTIONS"}),
        (boot_endpoints.PARTITION_ARTIFACT, {"GET", "HEAD", "OPTIONS"}),
        (boot_endpoints.BOOT_REPORT, {"POST", "OPTIONS"}))}


def _modules(directory):
    for path in sorted(directory.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _imports(tree):
    """Every module name a file imports, at any depth (lazy imports too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@pytest.mark.parametrize("name", ["artifacts.py", "boot_endpoints.py", "boot_server/cache.py",
                                  "boot_server/evidence.py"])
def test_the_shared_layer_does_not_import_the_api(name):
    tree = ast.parse((PACKAGE / name).read_text())
    assert not [m for m in _imports(tree) if m.startswith("metalboot_framework.api")]


def test_nothing_outside_the_api_calls_its_private_functions():
    calls = []
    for path, tree in _modules(PACKAGE):
        if "api" in path.relative_to(PACKAGE).parts:
            continue
        api_names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "metalboot_framework.api":
                api_names.update(alias.asname or alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                api_names.update(alias.asname for alias in node.names
                                 if alias.asname and alias.name.startswith(
                                     "metalboot_framework.api."))
        calls += [f"{path.name}:{node.lineno} {node.value.id}.{node.attr}"
                  for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr.startswith("_")
                  and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                  and node.value.id in api_names]
    assert calls == []


def test_console_script_is_the_boot_server_package():
    from metalboot_framework.boot_server import process

    [script] = importlib.metadata.entry_points(group="console_scripts",
                                                name="metalboot-boot-server")
    assert script.load() is process.main
    entry = (PACKAGE / "cmd" / "boot_server.py").read_text()
    assert len(entry.splitlines()) < 20  # only the entry point
