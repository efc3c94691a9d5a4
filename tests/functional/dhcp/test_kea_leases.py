"""A fetch of boot.ipxe by MAC from the address real Kea leased by DHCPv6 to
one of the machine's MACs is boot evidence ([kea] lease_file); from an address
Kea did not lease it is ``unverified``.

ISC ``dhclient -6`` (Debian isc-dhcp-client) takes the lease in the client
namespace and puts the address on its NIC; metalboot-boot-server runs in the
server namespace on the boot network ([fd77::1]), the API server on loopback,
both on one database. No boot network prefix is configured.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import free_port, machine_body
from tests.functional.dhcp.conftest import SERVER_V6
from tests.functional.test_boot_server import BootServerProcess

pytestmark = pytest.mark.functional

MAC = "52:54:00:77:00:fe"  # the client namespace's cli0
UNLEASED = "fd77::99"

#: dhclient's script: put the leased address on the NIC and note it.
DHCLIENT_SCRIPT = """#!/bin/sh
case "$reason" in
  BOUND6|RENEW6|REBIND6|REBOOT6)
    ip -6 addr add "$new_ip6_address/128" dev "$interface" nodad
    echo "$new_ip6_address" > "$(dirname "$0")/leased" ;;
esac
exit 0
"""


class BootServerInNamespace(BootServerProcess):
    """metalboot-boot-server started inside the test's server namespace."""

    def __init__(self, api, port, net):
        super().__init__(api, port)
        self.net = net
        self.url = f"http://[{SERVER_V6}]:{port}"

    def start(self, wait=True):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.net.in_server(sys.executable, "-m", self.command, "--config-file",
                               str(self.conf_path)),
            stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + 60
        while fetch(self.net, self.url + "/", UNLEASED) == "000":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"boot server not ready:\n{self.log()}")
            time.sleep(0.2)
        return self


def fetch(net, url, source):
    """HTTP status of a GET from the client namespace, sent from ``source``."""
    out = subprocess.run(["ip", "netns", "exec", net.client, "curl", "-sS", "-g", "-o",
                          "/dev/null", "-w", "%{http_code}", "--max-time", "20",
                          "--interface", source.split("%")[0], url],
                         capture_output=True, text=True)
    return out.stdout.strip() or "000"


@pytest.fixture
def dhclient6(net, tmp_path):
    """lease() -> the address Kea leased to the client namespace's cli0."""
    binary = shutil.which("dhclient")
    if not binary:
        pytest.fail("dhclient (Debian isc-dhcp-client) is missing: it is the DHCPv6 "
                    "client of this test")
    root = tmp_path / "dhclient"
    root.mkdir()
    script = root / "script"
    script.write_text(DHCLIENT_SCRIPT)
    script.chmod(0o755)
    pid_file = root / "dhclient6.pid"

    def lease():
        subprocess.run(["ip", "netns", "exec", net.client, binary, "-6", "-1", "-sf",
                        str(script), "-lf", str(root / "dhclient6.leases"), "-pf",
                        str(pid_file), "cli0"],
                       capture_output=True, text=True, timeout=90, check=True)
        return (root / "leased").read_text().strip()
    try:
        yield lease
    finally:
        # dhclient stays to renew: stop the one this test started, by its pid
        try:
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


def test_a_kea_dhcpv6_lease_binds_a_fetch_by_mac(net, kea, dhclient6, server_factory):
    # the client reaches the boot network's prefix on its link (what the RA says)
    subprocess.run(["ip", "-n", net.client, "-6", "route", "add", "fd77::/64", "dev", "cli0"],
                   check=True)
    subprocess.run(["ip", "-n", net.client, "-6", "addr", "add", f"{UNLEASED}/128", "dev",
                    "cli0", "nodad"], check=True)
    port = free_port()
    api = server_factory(extra_conf=f"[kea]\nlease_file = {kea.lease_file}\n"
                                    f"[boot_server]\nhost_ip = {SERVER_V6}\nport = {port}\n"
                                    f"[api]\npublic_url = http://[{SERVER_V6}]:{port}\n"
                                    ).start()
    boot = BootServerInNamespace(api, port, net).start()
    try:
        assert api.request("POST", "/v1/partitions", json={"id": "p1", "boot": {
            "kernel_url": "http://images.example/vmlinuz"}}).status_code == 201
        [mid] = api.register_enrolled([machine_body(7, nics=[{"mac": MAC}])])
        url = f"{boot.url}/boot/mac/{MAC}/fake/boot.ipxe"

        # before any lease (Kea's lease file is read, and has nothing of the MAC)
        assert fetch(net, url, UNLEASED) == "200"
        leased = dhclient6()
        assert leased.startswith("fd77::1"), leased  # Kea's pool
        rows = kea.lease_file.read_text().splitlines()
        assert any(row.startswith(leased + ",") and MAC in row for row in rows), rows
        # a lease granted after the file was read last is seen at once
        assert fetch(net, url, leased) == "200"
        assert fetch(net, url, UNLEASED) == "200"

        evidence = api.request("GET", f"/v1/machines/{mid}/evidence").json()["evidence"]
        assert [(e["kind"], e["client_address"]) for e in evidence] == [
            ("unverified", UNLEASED), ("fetch", leased), ("unverified", UNLEASED)]
    finally:
        boot.stop()
