"""How long a boot agent takes to bring its Kea to the partition's DHCP entries.

A real kea-dhcp6 (Debian's kea-dhcp6-server) in a network namespace of its own
(root), with metalboot's include file and control socket, driven by the boot
agent's :class:`~metalboot_framework.agent.dhcp_sync.DhcpApplier`: a snapshot
of N machines (as at an agent's start), then a wave of 50 changed machines on
top of it (a migration's prepare steps arriving in one page of the feed). The
Kea backend applies each apply's changes in one write and one
``config-reload`` (``KeaBackend.apply_host_entries``); the baseline, alternated
with it on the same Kea, is the contract's default of one write and one
reload per machine (``DhcpBackend.apply_host_entries``).
"""

import tempfile
import time
from pathlib import Path

from benchmarks.common import table
from metalboot_framework.agent.dhcp_sync import DhcpApplier
from metalboot_framework.conf import CONF
from metalboot_framework.dhcp import DhcpBackend, DhcpOption, HostEntry, clear_cache
from metalboot_framework.dhcp.kea import KeaBackend

WAVE = 50


class OneByOne(KeaBackend):
    """The Kea backend without its batching: a reload per machine."""

    apply_host_entries = DhcpBackend.apply_host_entries


def _entries(count, salt):
    return {f"m-{i:05d}": {"dhcp-httpboot": [HostEntry(
        mac=f"52:54:{salt:02x}:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
        options=(DhcpOption(59, f"http://[fd77::1]:6481/boot/m-{i:05d}/x/ipxe.efi",
                            version=6),)).to_dict()]} for i in range(count)}


def _clear(backend, kea):
    kea.include.write_text("")
    backend._reload()


def _measure(backend, kea, count):
    """(seconds for a snapshot of ``count`` machines, seconds for a wave of 50)."""
    _clear(backend, kea)
    applier = DhcpApplier({"dhcp-httpboot": [backend]})
    snapshot = _entries(count, 1)
    start = time.monotonic()
    applier.apply("p1", True, snapshot, set())
    full = time.monotonic() - start
    wave = dict(list(_entries(count, 2).items())[:WAVE])
    start = time.monotonic()
    applier.apply("p1", False, wave, set())
    return full, time.monotonic() - start


def run(quick=False):
    from tests.functional.dhcp.conftest import TestNet, Kea
    counts = (100,) if quick else (100, 500, 1000)
    rounds = 1 if quick else 2
    with tempfile.TemporaryDirectory(prefix="metalboot-bench-dhcp-") as root:
        net = TestNet()
        net.setup()
        kea = Kea(net, Path(root) / "kea").start()
        try:
            CONF([], project="metalboot", default_config_files=[], default_config_dirs=[])
            CONF.set_override("include_file", str(kea.include), group="kea")
            CONF.set_override("control_socket", str(kea.socket), group="kea")
            deadline = time.monotonic() + 30
            batched, single = KeaBackend(CONF), OneByOne(CONF)
            while True:  # Kea up: its control socket answers
                try:
                    batched.validate()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            rows = []
            for count in counts:
                figures = {"batched": [], "one by one": []}
                for _ in range(rounds):  # alternated on the same Kea
                    figures["batched"].append(_measure(batched, kea, count))
                    figures["one by one"].append(_measure(single, kea, count))
                for name, runs in figures.items():
                    rows.append((count, name, f"{min(r[0] for r in runs):.2f} s",
                                 f"{min(r[1] for r in runs):.2f} s"))
        finally:
            kea.stop()
            net.teardown()
            clear_cache()
            CONF.clear()
    table(f"DHCP at the partition: an agent's Kea brought to N machines, then a wave of "
          f"{WAVE} (best of {rounds}){' (--quick: figures mean nothing)' if quick else ''}",
          ["machines", "Kea reloads", "snapshot applied", f"wave of {WAVE} applied"], rows)
    return rows
