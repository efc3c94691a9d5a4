"""Fixtures of the e2e tests: a real boot network with QEMU/OVMF machines.

These tests run only when selected (``tox -e e2e`` or ``pytest -m e2e``; the
default run excludes the marker). They need root, the Debian packages
``.ci/run`` installs (qemu-system-x86, ovmf, radvd, dnsmasq-base,
kea-dhcp6-server, dosfstools, mtools) and ``virt-firmware`` from PyPI; a
missing one is a failure, not a skip, since nobody selects them by accident.
Debian trixie's iPXE is fetched once by ``fetch_trixie_ipxe.sh``
(``METALBOOT_E2E_IPXE_DIR`` points at an unpacked copy instead), the test
metal-hammer (Debian kernel + busybox-static) is built once by
``metal_hammer.py`` (``METALBOOT_E2E_METAL_HAMMER_DIR`` instead).

Each test names the boot path it proves in its ``path`` parameter (its id);
``-k`` with exactly a path's name selects that path's tests and no others.
"""

import os

import pytest

from tests.e2e.harness import Harness, missing_requirements
from tests.e2e.scenarios import CHAIN, format_table

HERE = os.path.dirname(os.path.abspath(__file__))
#: What ``-k`` selects exactly: the boot paths the e2e tests prove.
PATHS = ("pxe", *CHAIN)

_TABLES = []


@pytest.fixture
def boot_network(tmp_path):
    """Factory: boot_network(machines=N) -> a started Harness, closed after the test."""
    missing = missing_requirements()
    if missing:
        pytest.fail("missing for the e2e tests: " + ", ".join(missing))
    made = []

    def make(machines=1, **options):
        harness = Harness(machines=machines, workdir=str(tmp_path / f"net{len(made)}"),
                          **options)
        made.append(harness)
        harness.start()
        return harness

    try:
        yield make
    finally:
        for harness in made:
            harness.close()


@pytest.fixture
def e2e_report(request):
    """report(rows): the table is printed in the terminal summary (it travels
    with the test's report, so from pytest-xdist's workers too)."""
    def report(rows):
        request.node.user_properties.append(("e2e_table", format_table(rows)))
    return report


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        _TABLES.extend((report.nodeid, table)
                       for name, table in report.user_properties if name == "e2e_table")


def pytest_terminal_summary(terminalreporter):
    if not _TABLES:
        return
    terminalreporter.section("e2e: seconds from reset to each stage of the boot")
    for nodeid, table in _TABLES:
        terminalreporter.write_line(nodeid)
        for line in table.splitlines():
            terminalreporter.write_line("  " + line)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """``-k <path>`` runs the e2e tests of that path only: pytest's ``-k`` matches
    substrings, and ``pxe`` is also in ``redfish-virtual-media-ipxe``."""
    path = (config.option.keyword or "").strip()
    if path not in PATHS:
        return
    keep, drop = [], []
    for item in items:
        ours = str(item.path).startswith(HERE + os.sep)
        params = getattr(getattr(item, "callspec", None), "params", {})
        (drop if ours and params.get("path") != path else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
