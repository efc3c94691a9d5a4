"""The demo's metalboot-server: a configuration of its own, a free port, the admin token."""

import configparser
import os
import sys
import time

from metalboot_framework.cli.client import CliError
from metalboot_framework.cli.demo.plan import REDFISH
from metalboot_framework.cli.demo.processes import free_port, wait_http


def server_config(state, port, interfaces, ipxe_efi):
    """Short polls and BMC retries, so that the demo moves at the pace of a reader."""
    conf = configparser.ConfigParser(interpolation=None)
    conf["DEFAULT"] = {"state_path": state, "enabled_boot_interfaces": ",".join(interfaces),
                       "default_boot_interface": "fake"}
    conf["api"] = {"host_ip": "127.0.0.1", "port": str(port)}
    conf["conductor"] = {"poll_interval": "0.2"}
    conf["bmc"] = {"connect_timeout": "5", "read_timeout": "30", "retry_attempts": "3",
                   "retry_interval": "0.2", "retry_max_interval": "1",
                   "power_poll_interval": "0.25", "power_timeout": "60",
                   "post_retry_interval": "0.5", "post_retry_timeout": "10"}
    if REDFISH in interfaces:
        conf["redfish"] = {"ipxe_efi_path": ipxe_efi}
    # the simulated machines fetch boot.ipxe by MAC from this host
    conf["artifacts"] = {"boot_network_prefixes": "127.0.0.0/8,::1/128"}
    return conf


def start_server(children, workdir, interfaces, ipxe_efi, port=None):
    """Starts the server (on ``port``, or a free one with three tries).

    Returns its URL, the admin token file and the token.
    """
    state = os.path.join(workdir, "server")
    os.makedirs(state, exist_ok=True)
    for attempt in range(3):
        use_port = port or free_port()
        path = os.path.join(workdir, "metalboot.conf")
        with open(path, "w") as f:
            server_config(state, use_port, interfaces, ipxe_efi).write(f)
        log_path = os.path.join(workdir, "server.log")
        env = dict(os.environ)
        env.pop("METALBOOT_STATE_DIR", None)
        proc = children.start("metalboot-server", [
            sys.executable, "-m", "metalboot_framework.cmd.server", "--config-file", path],
            log_path, env=env)
        url = f"http://127.0.0.1:{use_port}"
        try:
            wait_http(url + "/v1", proc, "metalboot-server", log_path)
        except CliError:
            if attempt == 2 or port:
                raise
            proc.terminate()
            continue
        token_file = os.path.join(state, "admin-token")
        return url, token_file, read_token(token_file)


def read_token(token_file, timeout=10):
    """The admin token, once the server has written it."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(token_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(token_file) as f:
        return f.read().strip()

