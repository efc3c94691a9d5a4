"""The systemd units in etc/systemd, checked by systemd's own tools.

``systemd-analyze verify`` loads each unit as systemd would (unknown keys,
bad values and a missing ExecStart binary are reported), ``systemd-analyze
security --offline`` scores its sandbox, and ``systemd-sysusers --root``
creates the user of etc/sysusers.d in a scratch root. The units name
/opt/metalboot, the virtual environment doc/deployment.rst installs into;
here it is the environment these tests run in, so ExecStart must name a
console script that ``pip install`` made. CI installs systemd (``.ci/run``);
the services are not started here (no systemd is running as PID 1).
"""

import configparser
import importlib.metadata
import json
import pathlib
import shutil
import subprocess
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNITS_DIR = ROOT / "etc" / "systemd"
UNITS = sorted(p.name for p in UNITS_DIR.glob("*.service"))
SERVICES = ["metalboot-api.service", "metalboot-boot-agent.service",
            "metalboot-boot-server.service", "metalboot-conductor.service"]
INSTALL_PREFIX = "/opt/metalboot/bin/"
KEA_SIGNAL_DROP_IN = (UNITS_DIR / "drop-ins" / "metalboot-boot-agent.service.d"
                      / "kea-reload-signal.conf")


def systemd_tool(name):
    path = shutil.which(name)
    if path is None:  # a failure, not a skip: CI installs systemd
        pytest.fail(f"{name} is not installed (apt-get install systemd)")
    return path


def install_unit(name, directory):
    """The unit as installed beside this environment's console scripts."""
    scripts = sysconfig.get_path("scripts")
    text = (UNITS_DIR / name).read_text().replace(INSTALL_PREFIX, scripts + "/")
    path = directory / name
    path.write_text(text)
    return path


def exec_start(name):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read(UNITS_DIR / name)
    return parser["Service"]["ExecStart"].split()


def security(path):
    """{check name: (set, exposure)} of ``systemd-analyze security --offline``."""
    out = subprocess.run(
        [systemd_tool("systemd-analyze"), "security", "--offline=yes", "--json=short",
         "--threshold=20", str(path)],
        capture_output=True, text=True, timeout=120)
    found = {item["name"]: (item["set"], item["exposure"]) for item in json.loads(out.stdout)}
    # --threshold=20: exit status 1 above an overall exposure of 2.0 ("OK")
    assert out.returncode == 0, ("exposure above 2.0; not set: "
                                 + ", ".join(name for name, (s, _) in found.items() if not s))
    return found


def test_there_is_a_unit_per_service_and_dbsync():
    assert set(UNITS) == set(SERVICES) | {"metalboot-dbsync.service"}


@pytest.mark.parametrize("name", UNITS)
def test_exec_start_is_an_installed_console_script(name):
    argv = exec_start(name)
    assert argv[0].startswith(INSTALL_PREFIX), argv
    script = argv[0][len(INSTALL_PREFIX):]
    scripts = {ep.name for ep in importlib.metadata.entry_points(group="console_scripts")
               if ep.dist is not None and ep.dist.name == "metalboot"}
    assert script in scripts
    installed = pathlib.Path(sysconfig.get_path("scripts")) / script
    # pip made it, and it starts (the configuration file is its only argument: the
    # control plane's, or the agent's own, which has no [database])
    conf = "agent.conf" if script == "metalboot-boot-agent" else "metalboot.conf"
    assert argv[1:] == ["--config-file", f"/etc/metalboot/{conf}"]
    out = subprocess.run([str(installed), "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--config-file" in out.stdout


@pytest.mark.parametrize("name", UNITS)
def test_systemd_analyze_verify(name, tmp_path):
    unit = install_unit(name, tmp_path)
    out = subprocess.run([systemd_tool("systemd-analyze"), "verify", "--man=no", str(unit)],
                         capture_output=True, text=True, timeout=120)
    # a misspelt key or a bad value is only a warning: any output fails
    assert (out.returncode, out.stdout + out.stderr) == (0, "")


def test_verify_reports_what_it_should(tmp_path):
    """The check above can fail: a misspelt option and a missing binary."""
    unit = install_unit("metalboot-api.service", tmp_path)
    unit.write_text(unit.read_text().replace("ProtectSystem=", "ProtectSytem=")
                    .replace("bin/metalboot-api ", "bin/metalboot-apj "))
    out = subprocess.run([systemd_tool("systemd-analyze"), "verify", "--man=no", str(unit)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "Unknown key 'ProtectSytem'" in out.stderr
    assert "metalboot-apj is not executable" in out.stderr


@pytest.mark.parametrize("name", UNITS)
def test_sandbox(name, tmp_path):
    found = security(install_unit(name, tmp_path))
    wanted = ["NoNewPrivileges=", "ProtectSystem=", "ProtectHome=", "PrivateTmp=",
              "PrivateDevices=", "ProtectKernelTunables=", "ProtectKernelModules=",
              "ProtectControlGroups=", "RestrictNamespaces=~user", "RestrictSUIDSGID=",
              "RestrictAddressFamilies=~AF_PACKET", "RestrictAddressFamilies=~AF_NETLINK",
              "RestrictAddressFamilies=~…", "SystemCallFilter=~@privileged",
              "ProtectProc=", "ProcSubset=", "MemoryDenyWriteExecute=", "PrivateMounts=",
              "SystemCallFilter=~@mount", "SystemCallArchitectures=", "User=/DynamicUser=",
              "CapabilityBoundingSet=~CAP_SYS_ADMIN", "CapabilityBoundingSet=~CAP_NET_ADMIN",
              "CapabilityBoundingSet=~CAP_NET_(BIND_SERVICE|BROADCAST|RAW)",
              "CapabilityBoundingSet=~CAP_KILL", "AmbientCapabilities="]
    assert {check: found[check][0] for check in wanted} == {check: True for check in wanted}
    text = (UNITS_DIR / name).read_text()
    assert "ProtectSystem=strict\n" in text and "User=metalboot\n" in text
    assert "StateDirectory=metalboot" in text


def test_kea_signal_drop_in_grants_cap_kill_only(tmp_path):
    """Only [kea] reload = signal needs a capability (SIGHUP to Kea's process,
    another user's); the drop-in adds CAP_KILL and nothing else."""
    unit = install_unit("metalboot-boot-agent.service", tmp_path)
    drop_ins = tmp_path / "metalboot-boot-agent.service.d"
    drop_ins.mkdir()
    shutil.copy(KEA_SIGNAL_DROP_IN, drop_ins)
    out = subprocess.run([systemd_tool("systemd-analyze"), "verify", "--man=no", str(unit)],
                         capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout + out.stderr) == (0, "")
    found = security(unit)
    caps = {name: is_set for name, (is_set, _) in found.items()
            if name.startswith("CapabilityBoundingSet=")}
    assert caps.pop("CapabilityBoundingSet=~CAP_KILL") is False
    assert all(caps.values()), caps
    assert found["AmbientCapabilities="][0] is False


def test_sysusers_creates_the_service_user(tmp_path):
    (tmp_path / "etc").mkdir()
    conf = ROOT / "etc" / "sysusers.d" / "metalboot.conf"
    out = subprocess.run([systemd_tool("systemd-sysusers"), f"--root={tmp_path}", str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text().splitlines()
    user = [line.split(":") for line in passwd if line.startswith("metalboot:")]
    assert len(user) == 1
    assert user[0][5] == "/var/lib/metalboot"
    assert user[0][6].endswith("nologin")
