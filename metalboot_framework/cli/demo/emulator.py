"""The BMC side of the demo: a sushy-tools Redfish emulator with one system per machine."""

import os
import sys

from metalboot_framework.cli.client import CliError
from metalboot_framework.cli.demo.processes import free_port, wait_http


def emulated_systems(count):
    systems = []
    for i in range(1, count + 1):
        systems.append({
            "uuid": f"4c4c4544-0000-1000-8000-{i:012x}", "name": f"demo-{i:02d}",
            "power_state": "On", "boot_mode": "UEFI", "external_notifier": False,
            "nics": [{"mac": f"52:54:00:de:{i >> 8:02x}:{i & 0xff:02x}", "ip": "127.0.0.1"}]})
    return systems


def emulator_config(port, state_dir, systems):
    """The emulator's configuration file: the fake driver with ``systems`` on 127.0.0.1."""
    return (f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
            f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
            f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
            f"SUSHY_EMULATOR_STATE_DIR = {state_dir!r}\n"
            f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n")


def start_emulator(children, workdir, systems):
    """Starts the emulator (fake driver) on a free port, three tries; its URL."""
    os.makedirs(os.path.join(workdir, "state"), exist_ok=True)
    for attempt in range(3):
        port = free_port()
        config = os.path.join(workdir, "emulator.conf")
        with open(config, "w") as f:
            f.write(emulator_config(port, os.path.join(workdir, "state"), systems))
        log_path = os.path.join(workdir, "emulator.log")
        proc = children.start("sushy-emulator", [sys.executable, "-m",
                                                 "sushy_tools.emulator.main", "--config",
                                                 config], log_path)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(url + "/redfish/v1/", proc, "the sushy-tools emulator", log_path)
            return url
        except CliError:
            if attempt == 2:
                raise
            proc.terminate()
