"""[kea] reload = signal against a Kea that runs as another user, as on Debian
(_kea): the backend works with CAP_KILL (the conductor unit's optional
drop-in) and, without it, says so by name instead of failing with a bare
PermissionError. The backend runs in a child process started as root with
or without CAP_KILL in its bounding set (setpriv); the stand-in for Kea is a
``sleep`` of another user, which a SIGHUP ends."""

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

# starts processes as root under another user (CI runs as root)
pytestmark = pytest.mark.functional

BACKEND = textwrap.dedent("""
    import json, sys
    from metalboot_framework.conf import CONF
    from metalboot_framework.dhcp import DhcpOption, HostEntry, get_backend
    from metalboot_framework.exceptions import ValidationFailed
    import metalboot_dhcp.conf  # noqa: F401
    state, pid_file = sys.argv[1:3]
    CONF([], project="metalboot", default_config_files=[], default_config_dirs=[])
    CONF.set_override("state_path", state)
    CONF.set_override("include_file", state + "/res6.json", group="kea")
    CONF.set_override("reload", "signal", group="kea")
    CONF.set_override("pid_file", pid_file, group="kea")
    backend = get_backend("kea", CONF)
    out = {}
    try:
        backend.validate()
        out["validate"] = None
    except ValidationFailed as exc:
        out["validate"] = [exc.message, sorted(exc.fields)]
    entry = HostEntry(mac="52:54:00:aa:bb:01", duid=None, options=(
        DhcpOption(59, "http://[fd00:b::1]:6481/boot/m/i/t/ipxe.efi", version=6),))
    try:
        backend.ensure_host_entries("m1", "dhcp-httpboot", [entry])
        out["reload"] = None
    except Exception as exc:
        out["reload"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
""")


@pytest.fixture
def kea_of_another_user(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("needs root (setpriv to another user), as CI runs")
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv is not installed (Debian package util-linux)")
    daemon = pwd.getpwnam("daemon")
    proc = subprocess.Popen([shutil.which("setpriv"), f"--reuid={daemon.pw_uid}",
                             f"--regid={daemon.pw_gid}", "--clear-groups", "sleep", "120"],
                            # as a daemon would: SIGHUP not ignored even where the
                            # tests run under nohup (ignored signals are inherited)
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    pid_file = tmp_path / "kea-dhcp6.pid"
    pid_file.write_text(f"{proc.pid}\n")
    yield proc, pid_file
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def run_backend(tmp_path, pid_file, with_cap_kill):
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    (state / "res6.json").write_text("")
    prefix = [] if with_cap_kill else [shutil.which("setpriv"), "--bounding-set=-kill",
                                       "--inh-caps=-kill"]
    out = subprocess.run(prefix + [sys.executable, "-c", BACKEND, str(state), str(pid_file)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_reload_by_signal_needs_cap_kill_and_says_so(kea_of_another_user, tmp_path):
    kea, pid_file = kea_of_another_user
    without = run_backend(tmp_path, pid_file, with_cap_kill=False)
    message, fields = without["validate"]
    assert fields == ["[kea] pid_file"]
    assert "runs as another user" in message and "CAP_KILL" in message
    assert "CAP_KILL" in without["reload"] and "PermissionError" not in without["reload"]
    assert kea.poll() is None  # not signalled
    with_cap = run_backend(tmp_path, pid_file, with_cap_kill=True)
    assert with_cap == {"validate": None, "reload": None}
    assert kea.wait(10) == -signal.SIGHUP
