"""No import cycles among the framework's modules.

A cycle is what makes a reader unable to understand one module without the
other, and what the deferred imports inside functions hide: every import in a
module counts, wherever it is written. Importing ``package.module`` runs the
package's ``__init__`` first, so it counts as importing the package too.
"""

import ast
import pathlib


import metalboot_framework

PACKAGE = pathlib.Path(metalboot_framework.__file__).parent


def module_names(root=PACKAGE):
    """{dotted name: (path, is a package)} of every module under ``root``."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def imports_of(name, path, is_package, modules):
    """The framework modules ``name`` imports: ``from M import x`` counts as
    ``M.x`` where that is a module, else as ``M``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[:len(name.split(".")) - node.level + is_package]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(modules):
    """{module: modules it imports}, with the packages each import runs."""
    graph = {}
    for name, (path, is_package) in modules.items():
        edges = set()
        for target in imports_of(name, path, is_package, modules):
            edges.add(target)
            parts = target.split(".")
            for n in range(1, len(parts)):
                package = ".".join(parts[:n])
                if not (name == package or name.startswith(package + ".")):
                    edges.add(package)  # its __init__ runs first
        graph[name] = edges
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(graph, component):
    members = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in component)


def test_the_framework_has_no_import_cycle():
    graph = import_graph(module_names())
    found = cycles(graph)
    assert not found, "import cycles: " + " | ".join(describe(graph, c) for c in found)


def write_package(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_names(root / "pkg")


def test_the_check_sees_a_cycle_through_a_deferred_import(tmp_path):
    modules = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import thing\n",
        "pkg/b.py": "def thing():\n    from pkg import a\n    return a\n",
        "pkg/c.py": "from . import a\n",
    })
    assert cycles(import_graph(modules)) == [["pkg.a", "pkg.b"]]


def test_the_check_sees_a_cycle_through_a_package_init(tmp_path):
    """pkg.x imports pkg.sub.y, which runs pkg.sub's __init__, which imports pkg.x."""
    modules = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/x.py": "import pkg.sub.y\n",
        "pkg/sub/__init__.py": "from pkg.sub import z\n",
        "pkg/sub/y.py": "",
        "pkg/sub/z.py": "from pkg import x\n",
    })
    assert cycles(import_graph(modules)) == [["pkg.sub", "pkg.sub.z", "pkg.x"]]
