"""``metalboot demo``: completes, shows the migration, and leaves no process behind."""

import os
import re
import signal
import subprocess
import time

import pytest
import requests

from tests.functional.cli.conftest import CLI

pytestmark = [pytest.mark.functional, pytest.mark.slow]


def processes_mentioning(text):
    """Pids of live processes whose command line contains ``text``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if text in cmdline and not zombie:
            found.append((int(pid), cmdline))
    return found


def test_demo_exit_completes_and_cleans_up(tmp_path, cli_env):
    state = tmp_path / "demo"
    start = time.monotonic()
    proc = subprocess.run(CLI + ["demo", "--machines", "3", "--exit", "--state-dir", state],
                          capture_output=True, text=True, env=cli_env, timeout=240)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert elapsed < 180
    out = proc.stdout
    assert "Traceback" not in out + proc.stderr
    assert "done, succeeded: done 3" in out
    results = [line.split() for line in out.splitlines() if "evidence: fetch" in line]
    assert len(results) == 3 and all(r[1] == "done" for r in results), out
    # the emulator was used: either the Redfish path or an explicit reason why not
    if "fake -> redfish-virtual-media-ipxe" in out:
        assert out.count("iPXE: chain ") >= 3 and "-> HTTP 200" in out
        assert out.count("evidence: fetch boot.ipxe") == 3
    else:
        assert "Redfish path not used: " in out
    # its servers stop with it: no URL that would lead nowhere, and a word on how to
    # keep them
    assert "Where to look" not in out and "/dashboard" not in out, out
    assert "without --exit" in out
    assert processes_mentioning(str(state)) == []
    assert (state / "server.log").exists() and (state / "cli.ini").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_demo_stops_children_on_signal(tmp_path, cli_env, sig):
    state = tmp_path / "demo"
    proc = subprocess.Popen(CLI + ["demo", "--machines", "2", "--interface", "fake",
                                   "--state-dir", state],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env)
    try:
        deadline = time.monotonic() + 120
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "keeps running" in line:
                break
        assert any("keeps running" in x for x in lines), "".join(lines) + proc.stderr.read()
        out = "".join(lines)
        for needle in ("Where to look", "admin token", "metalboot machines list"):
            assert needle in out, needle
        # what it points at answers while it runs
        dashboard = re.search(r"dashboard +(http://\S+/dashboard)", out).group(1)
        assert requests.get(dashboard, timeout=10).status_code == 200
        api = re.search(r"API +(http://\S+/v1)", out).group(1)
        assert requests.get(api, timeout=10).json()["name"] == "metalboot"
        children = [c for c in processes_mentioning(str(state)) if c[0] != proc.pid]
        assert len(children) == 2, children  # emulator and server
        proc.send_signal(sig)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()  # the migration had succeeded
    assert "stopping the demo" in proc.stderr.read()
    deadline = time.monotonic() + 5
    while processes_mentioning(str(state)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(state)) == []
