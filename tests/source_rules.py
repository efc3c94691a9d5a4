"""Rules about the source that tests check by reading it (with :mod:`ast`)."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def breaches(check, allowed=(), allowed_dirs=()):
    """{module: line numbers ``check(source)`` finds} of every module of the
    framework and the plugins but ``allowed`` and those under ``allowed_dirs``."""
    modules = [p for root in (ROOT / "metalboot_framework", ROOT / "plugins")
               for p in sorted(root.rglob("*.py"))
               if p not in allowed and not any(d in p.parents for d in allowed_dirs)]
    assert len(modules) > 50, "the framework was not found"
    return {str(p.relative_to(ROOT)): lines for p in modules
            if (lines := check(p.read_text()))}
