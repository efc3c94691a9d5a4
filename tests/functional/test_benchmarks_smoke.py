"""The scale benchmarks run: ``python benchmarks/run.py scale --quick`` prints its table.

A smoke check of the benchmark code (sushy-tools emulators, wrk + nginx,
PostgreSQL, metalboot processes), scaled down to about a minute; the figures
mean nothing. Parts whose tools are missing here are left out with --skip and
named in the skip reason only when nothing is left to run.
"""

import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.functional, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]
PARTS = ("redfish", "bootstorm", "conductors", "apiscale")
NUMBER = re.compile(r"\d+\.\d+")


def missing_tools():
    """benchmark -> why it cannot run on this machine."""
    why = {}
    ipxe = os.environ.get("METALBOOT_TEST_IPXE_EFI", "/usr/lib/ipxe/ipxe.efi")
    if not os.path.exists(ipxe) or not shutil.which("mkfs.vfat") or not shutil.which("mcopy"):
        why["redfish"] = why["bootstorm"] = f"iPXE ISO tools ({ipxe}, mkfs.vfat, mtools)"
    for tool in ("wrk", "nginx"):
        if not shutil.which(tool):
            why["bootstorm"] = f"{tool} (apt-get install wrk nginx-light)"
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb") or os.geteuid() != 0:
        why["conductors"] = why["apiscale"] = "PostgreSQL (Debian package, run as root)"
    return why


def test_scale_quick_prints_the_combined_table():
    why = missing_tools()
    if all(part in why for part in PARTS):
        pytest.skip("no benchmark can run here: " + "; ".join(sorted(set(why.values()))))
    argv = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "scale", "--quick"]
    for part in why:
        argv += ["--skip", part]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "Scale benchmarks (--quick" in out, out[-3000:]
    combined = out[out.rindex("Scale benchmarks (--quick"):].splitlines()
    header, rule, *rows = combined[1:]
    assert header.split()[:2] == ["benchmark", "measurement"] and set(rule) <= {"-", " "}
    for part in PARTS:
        if part in why:
            continue
        mine = [row for row in rows if row.startswith(part + " ")]
        assert mine, f"no {part} row in:\n" + "\n".join(combined)
        assert all(NUMBER.search(row) for row in mine), mine
        assert not any("FAILED" in row for row in mine), mine
        assert all(re.search(r"\b(met|MISSED)\b", row) for row in mine
                   if ">=" in row or "<=" in row), mine
    print(f"benchmarks/run.py scale --quick took {took:.0f} s")


def test_migration_benchmark_prints_its_figures_and_the_host_steal():
    """The migration wall-time benchmark, scaled down: its table, the verdict,
    and the share of CPU time the hypervisor stole during the run."""
    argv = [sys.executable, "-m", "benchmarks.migration", "--only", "latency",
            "--machines", "40", "--max-parallel", "10", "--delay", "0.05"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    row = re.search(r"^metalboot\s+(\d+\.\d+) s\s+(\d+\.\d+) s\s+(\d+\.\d+)x", out, re.M)
    assert row, out
    wall, ideal, ratio = map(float, row.groups())
    # wall and ratio are each printed to 0.005: the ratio of the printed
    # figures may differ from the printed ratio by the sum of both roundings
    assert abs(ideal - 4 * 0.05 * 40 / 10) < 0.01, out
    assert abs(wall / ideal - ratio) <= 0.005 / ideal + 0.005 + 1e-9, out
    assert re.search(r"^target: within 1\.2x of ideal: (met|MISSED)$", out, re.M), out
    assert re.search(r"^host: (\d+\.\d% of the CPU time stolen by the hypervisor during "
                     r"the run|CPU time stolen by a hypervisor unknown)", out, re.M), out
    probe = re.search(r"^host: a fixed CPU-bound loop took (\d+\.\d+) s before the run and "
                      r"(\d+\.\d+) s after", out, re.M)
    assert probe and all(0 < float(v) < 60 for v in probe.groups()), out


def test_redfish_vendor_benchmark_counts_every_method_and_the_resets():
    """Requests by method and resets per migrated machine, per vendor and
    interface, on the vendor mock BMC: one machine each."""
    why = missing_tools()
    if "redfish" in why:
        pytest.skip(why["redfish"])
    argv = [sys.executable, "-m", "benchmarks.redfish_vendors", "--machines", "1"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for row in ("dell-idrac9 redfish-http-url", "dell-idrac10 redfish-virtual-media-ipxe",
                "hpe-ilo5 redfish-http-url", "supermicro-x11 redfish-virtual-media-ipxe",
                "supermicro-x12 redfish-virtual-media-ipxe",
                "lenovo-xcc redfish-virtual-media-ipxe"):
        line = next((li for li in out.splitlines() if li.startswith(row + " ")), None)
        assert line and re.search(r"GET \d+\.\d PATCH \d+\.\d POST \d+\.\d", line), out
    assert "target exactly one per activation: met" in out, out


def test_agent_benchmark_prints_the_storm_and_feed_figures():
    """``benchmarks/run.py agent --quick``: the agent's storm beside nginx, with
    the evidence of every answer stored, and the feed's figures."""
    for tool in ("wrk", "nginx"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: .ci/run installs it")
    argv = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "agent", "--quick"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for needle in ("snapshot of the partition", "change to served", "API CPU at rest",
                   "Boot storm against one metalboot-boot-agent and nginx"):
        assert needle in out, out[-3000:]
    stored, answered = map(int, re.search(
        r"evidence: (\d+) rows stored by the API for (\d+) successful answers", out).groups())
    assert stored >= answered > 0
    summary = out[out.rindex("agent summary"):].splitlines()
    rows = [r for r in summary[1:] if r.startswith("agent ")]
    assert {r.split("  ")[0] for r in rows} == {"agent feed", "agent storm"}, summary
    assert all(re.search(r"\b(met|MISSED)\b", r) for r in rows if ">=" in r or "<=" in r)


def test_dhcp_benchmark_prints_both_ways_of_reloading_kea():
    """``benchmarks/run.py dhcp --quick``: an agent's Kea brought to 100 machines,
    batched and one reload per machine, alternated on one real Kea."""
    if os.geteuid() != 0 or shutil.which("kea-dhcp6") is None:
        pytest.fail("the DHCP benchmark needs root and kea-dhcp6: .ci/run installs it")
    argv = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "dhcp", "--quick"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        got = re.fullmatch(r"100\s+(batched|one by one)\s+([\d.]+) s\s+([\d.]+) s\s*", line)
        if got:
            rows[got.group(1)] = (float(got.group(2)), float(got.group(3)))
    assert set(rows) == {"batched", "one by one"}, proc.stdout[-3000:]
