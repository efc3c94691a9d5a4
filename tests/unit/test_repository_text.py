"""The repository speaks about the software: no work-log numbering in its text.

Readers of the code, the docs and the tests need the reason for what they
read; a reference to a numbered work session or tracker issue tells them
nothing and goes stale. ("session" alone is fine: SQLAlchemy and HTTP have
sessions.)
"""

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PLACES = ("README.md", "doc", "metalboot_framework", "plugins", "tests", "benchmarks",
          "examples", "etc")
SUFFIXES = {".py", ".md", ".rst", ".txt", ".cfg", ".ini", ".toml", ".conf", ".sample", ""}
# a numbered session or issue, spelled so that this file does not match itself
NUMBERED = re.compile(r"\bsess" r"ions? #?\d+\b|\biss" r"ues? #?\d+\b", re.I)


def text_files():
    for place in PLACES:
        path = ROOT / place
        for f in [path] if path.is_file() else sorted(path.rglob("*")):
            if f.is_file() and f.suffix in SUFFIXES and not {"build", "__pycache__"} & set(
                    f.relative_to(ROOT).parts):
                yield f


def test_no_numbered_sessions_or_issues_in_the_repository():
    found = []
    for f in text_files():
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if NUMBERED.search(line):
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
