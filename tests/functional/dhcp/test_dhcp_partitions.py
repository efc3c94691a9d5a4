"""DHCP at the partition: two partitions, each with its own boot agent, Kea
and dnsmasq, and one metalboot-server (API and conductor) that reaches none of
their DHCP servers.

Built in network namespaces the test makes (root: ``ip netns``, veth)::

    this test (root ns) 10.91.0.1 == 10.91.0.2  control ns: metalboot-server
                                                 br "up" 10.90.0.1/24
          +--------------------------------------+--------------------------+
    partition ns A (up0 10.90.0.11)          partition ns B (up0 10.90.0.12)
      br0 10.77.0.1/24 fd77::1/64              br0 10.77.0.1/24 fd77::1/64
      kea-dhcp6, dnsmasq, boot agent :6481     kea-dhcp6, dnsmasq, boot agent :6481
      | veth                                   | veth
    client ns A: the machines' DHCP, fetches client ns B

The two machine links use the same prefixes, as two boot VRFs may; the
control namespace has no route to them, and its server's [dnsmasq] and [kea]
options point at nothing: whatever the DHCP servers hold, the agents wrote.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import ServerProcess
from tests.functional.test_migrations import migrate as start_migration
from tests.functional.test_migrations import machine_states, wait_for
from tests.functional.dhcp.conftest import (DhcpClients, Dnsmasq, Kea, RUN_ID, SERVER_V4,
                                            SERVER_V6,
                                            server_conf, sh)
from tests.functional.dhcp.conftest import TestNet as Net

pytestmark = [pytest.mark.functional, pytest.mark.slow]

AGENT_PORT = 6481
BOOT_URL = f"http://{SERVER_V4}:{AGENT_PORT}"
CONTROL, CONTROL_UPLINK = "10.91.0.2", "10.90.0.1"
PXE, HTTPBOOT = "pxe", "dhcp-httpboot"


def machine(partition, n):
    return {"id": f"00000000-0000-4000-8000-0000000{'ab'.index(partition[-1]) + 10:x}{n:04x}",
            "partition": partition, "boot_interface": "fake", "boot_mode": "uefi",
            "nics": [{"mac": f"52:54:00:7{'ab'.index(partition[-1])}:00:{n:02x}",
                      "duid": f"00:03:00:01:52:54:00:7{'ab'.index(partition[-1])}:00:{n:02x}"}]}


class ControlPlane:
    """The control namespace (server) with its uplink bridge and a link to the test."""

    def __init__(self):
        self.ns = f"mbt{RUN_ID}ctl"
        self.test_link = f"mbt{RUN_ID}c0"
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self):
        sh("ip", "netns", "add", self.ns)
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", self.test_link, "type", "veth", "peer", "name", "t0",
           "netns", self.ns)
        sh("ip", "addr", "add", "10.91.0.1/30", "dev", self.test_link)
        sh("ip", "link", "set", self.test_link, "up")
        sh("ip", "-n", self.ns, "addr", "add", f"{CONTROL}/30", "dev", "t0")
        sh("ip", "-n", self.ns, "link", "set", "t0", "up")
        sh("ip", "-n", self.ns, "link", "add", "upbr", "type", "bridge")
        sh("ip", "-n", self.ns, "addr", "add", f"{CONTROL_UPLINK}/24", "dev", "upbr")
        sh("ip", "-n", self.ns, "link", "set", "upbr", "up")

    def attach(self, net, index):
        """Link a partition's server namespace to the control bridge."""
        link = f"up{index}"
        sh("ip", "-n", self.ns, "link", "add", link, "type", "veth", "peer", "name", "up0",
           "netns", net.server)
        sh("ip", "-n", self.ns, "link", "set", link, "master", "upbr")
        sh("ip", "-n", self.ns, "link", "set", link, "up")
        sh("ip", "-n", net.server, "addr", "add", f"10.90.0.{10 + index}/24", "dev", "up0")
        sh("ip", "-n", net.server, "link", "set", "up0", "up")

    def close(self):
        sh("ip", "link", "del", self.test_link, check=False)
        for pid in sh("ip", "netns", "pids", self.ns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        sh("ip", "netns", "del", self.ns, check=False)


class ServerInNamespace(ServerProcess):
    def __init__(self, tmp_path, ns, **kw):
        super().__init__(tmp_path, host_ip="0.0.0.0", **kw)
        self.ns = ns
        self.url = f"http://{CONTROL}:{self.port}"

    def start(self, wait=True):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-m", self.command,
             "--config-file", str(self.conf_path)],
            stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        if wait:
            self.wait_ready()
        return self


class Partition:
    """A partition's namespaces, DHCP servers, clients and boot agent."""

    def __init__(self, name, index, control, tmp_path):
        self.name, self.index = name, index
        self.dir = tmp_path / name
        self.dir.mkdir()
        self.net = Net()
        self.net.setup()
        control.attach(self.net, index)
        self.dnsmasq = Dnsmasq(self.net, self.dir / "dnsmasq").start()
        self.kea = Kea(self.net, self.dir / "kea").start()
        self.clients = DhcpClients(self.net)
        self.efi = self.dir / "ipxe.efi"
        self.efi.write_bytes(b"MZ" + os.urandom(2048))
        self.agent = None

    def start_agent(self, server, token=None):
        if token is not None:
            (self.dir / "token").write_text(token + "\n")
        sections = server_conf(self.dnsmasq, self.kea, self.efi)
        conf = self.dir / "agent.conf"
        conf.write_text(
            "[DEFAULT]\nenabled_boot_interfaces = fake,pxe,dhcp-httpboot\n"
            f"state_path = {self.dir / 'state-path'}\n"
            f"[agent]\napi_url = http://{CONTROL_UPLINK}:{server.port}\n"
            f"token_file = {self.dir / 'token'}\npartitions = {self.name}\n"
            f"listen = [::]:{AGENT_PORT}\nstate_dir = {self.dir / 'state'}\n"
            f"agent_id = agent-{self.name}\n"
            # the machines' link (the test's DHCP client takes no lease to bind by)
            "[artifacts]\nboot_network_prefixes = 10.77.0.0/24\n"
            + sections[sections.index("[dnsmasq]"):])
        log = open(self.dir / "agent.log", "ab")
        self.agent = subprocess.Popen(
            self.net.in_server(sys.executable, "-m", "metalboot_framework.cmd.boot_agent",
                               "--config-file", str(conf)),
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.agent.poll() is None, self.agent_log()
            agents = server.request("GET", f"/v1/partitions/{self.name}/dhcp-agents").json()
            if any(a["fresh"] and a["cursor"] > 0 for a in agents["agents"]):
                return
            time.sleep(0.1)
        raise AssertionError(f"agent of {self.name} never reported:\n{self.agent_log()}")

    def kill_agent(self):
        self.agent.send_signal(signal.SIGKILL)  # `ip netns exec` execs: the agent's pid
        self.agent.wait(10)

    def agent_log(self):
        path = self.dir / "agent.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def fetch(self, url):
        """GET ``url`` from the machines' link, as the firmware would."""
        out = sh("ip", "netns", "exec", self.net.client, "curl", "-s", "-o", "/dev/null",
                 "-w", "%{http_code}", "--max-time", "10", url, check=False)
        return out.stdout

    # -- what the DHCP servers hold ------------------------------------------------
    def kea_machines(self):
        text = self.kea.include.read_text()
        body = "".join(line for line in text.splitlines(True) if not line.startswith("#"))
        reservations = json.loads("[" + body + "]") if body.strip() else []
        return {(r["user-context"]["metalboot"]["machine"], iface)
                for r in reservations for iface in r["user-context"]["metalboot"]["interfaces"]}

    def dnsmasq_machines(self):
        held = set()
        for name in os.listdir(self.dnsmasq.hostsdir):
            if not name.startswith("metalboot-"):
                continue
            first = (self.dnsmasq.hostsdir / name).read_text().splitlines()[0]
            meta = json.loads(first[len("# metalboot: "):])
            if not meta.get("removed"):
                held.update((meta["machine"], i) for i in meta.get("interfaces", ()))
        return held

    def close(self):
        if self.agent is not None and self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(20)
            except subprocess.TimeoutExpired:
                self.agent.kill()
        self.clients.stop()
        self.kea.stop()
        self.dnsmasq.stop()
        self.net.teardown()


@pytest.fixture
def fabric(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    parts, control = [], None
    try:
        control = ControlPlane()
        for index, name in enumerate(("pa", "pb"), start=1):
            parts.append(Partition(name, index, control, tmp_path))
        yield control, parts
    finally:
        for part in parts:
            part.close()
        if control is not None:
            control.close()


def boot(part, server, machine_id, interface, nic, migration_id, timeout=60):
    """Play the machine's firmware until the migration has its evidence: ask its
    partition's DHCP server, fetch the URL it answers from the machine link."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = server.request("GET", "/v1/events", params={
            "machine_id": machine_id, "migration_id": migration_id, "limit": 1000}).json()
        if not any(e["kind"] == f"{interface}.reset_required" for e in events["events"]):
            time.sleep(0.2)  # not activated yet: a boot now would be no evidence
            continue
        if interface == HTTPBOOT:
            answer = part.clients.v6(nic["mac"], duid=nic["duid"])
            url = bytes.fromhex((answer or {}).get("options", {}).get("59", "")).decode() \
                if answer and "59" in answer.get("options", {}) else None
        else:
            answer = part.clients.v4(nic["mac"], arch=7, user_class="iPXE")
            url = ((answer or {}).get("options", {}).get("boot-file-name")
                   or (answer or {}).get("file") or None)
        if url and url.startswith(BOOT_URL) and part.fetch(url) == "200":
            return url
        if server.request("GET", f"/v1/migrations/{migration_id}").json()["finished_at"]:
            return None
        time.sleep(0.2)
    raise AssertionError(f"machine {machine_id} got no {interface} answer in {timeout} s")


def wait_done(server, migration_id, timeout=120):
    return wait_for(server, migration_id, timeout=timeout)


def migrate(server, ids, target, boot_timeout=60):
    return start_migration(server, ids, target=target, max_parallel=len(ids),
                           boot_timeout=boot_timeout)["id"]


def test_each_partition_agent_holds_exactly_its_partitions_entries(fabric, tmp_path):
    control, (pa, pb) = fabric
    nothing = tmp_path / "no-dhcp-here"
    (tmp_path / "server").mkdir()
    server = ServerInNamespace(tmp_path / "server", control.ns, extra_conf=(
        "enabled_boot_interfaces = fake,pxe,dhcp-httpboot\n"
        f"[dnsmasq]\nhostsdir = {nothing}/hosts\noptsdir = {nothing}/opts\n"
        f"[kea]\ninclude_file = {nothing}/kea.json\ncontrol_socket = {nothing}/kea.sock\n"
        "[dhcp]\napply_timeout = 12\nagent_timeout = 10\n"
        f"[dhcp_httpboot]\nipxe_efi_path = {pa.efi}\n")).start()
    # the control plane reaches no DHCP server
    for address in (SERVER_V4, SERVER_V6):
        route = sh("ip", "-n", control.ns, "route", "get", address, check=False)
        assert route.returncode != 0 and "unreachable" in route.stderr, route
    machines = {}
    for part in (pa, pb):
        assert server.request("POST", "/v1/partitions", json={
            "id": part.name, "boot": {"boot_url": BOOT_URL}}).status_code == 201
        bodies = [machine(part.name, n) for n in (1, 2, 3)]
        r = server.request("POST", "/v1/machines", json=bodies)
        assert r.status_code == 201, r.text
        machines[part.name] = {b["id"]: b for b in bodies}
        token = server.request("POST", f"/v1/partitions/{part.name}/agent-tokens",
                               json={"description": "test"}).json()["token"]
        part.start_agent(server, token)
    # both partitions migrate at once: A to dhcp-httpboot (Kea), B to pxe (dnsmasq)
    targets = {"pa": HTTPBOOT, "pb": PXE}
    runs = {p.name: migrate(server, sorted(machines[p.name]), targets[p.name])
            for p in (pa, pb)}
    for part in (pa, pb):
        for mid, body in machines[part.name].items():
            assert boot(part, server, mid, targets[part.name], body["nics"][0],
                        runs[part.name]) is not None
    for part in (pa, pb):
        done = wait_done(server, runs[part.name])
        assert done["state"] == "done" and done["counts"] == {"done": 3}, done
    held_a = {(m, HTTPBOOT) for m in machines["pa"]}
    held_b = {(m, PXE) for m in machines["pb"]}
    assert pa.kea_machines() == held_a and pa.dnsmasq_machines() == set()
    assert pb.dnsmasq_machines() == held_b and pb.kea_machines() == set()
    # the conductor wrote nothing of its own
    assert not nothing.exists()

    # a rollback in A: a machine sent to pxe that never boots comes back
    a1, a2, a3 = sorted(machines["pa"])
    failed = wait_done(server, migrate(server, [a1], PXE, boot_timeout=3))
    assert failed["counts"] == {"rolled_back": 1}, failed
    assert pa.kea_machines() == held_a and pa.dnsmasq_machines() == set()
    assert pb.dnsmasq_machines() == held_b

    # a machine removed: its entries go from its partition's server only
    b1 = sorted(machines["pb"])[0]
    assert server.request("DELETE", f"/v1/machines/{b1}").status_code == 202
    deadline = time.monotonic() + 30
    while server.request("GET", f"/v1/machines/{b1}").status_code != 404:
        assert time.monotonic() < deadline, server.request("GET", f"/v1/machines/{b1}").json()
        time.sleep(0.2)
    assert pb.dnsmasq_machines() == held_b - {(b1, PXE)}
    assert pa.kea_machines() == held_a

    # A's agent killed; meanwhile a machine of A is removed (forced: nobody
    # can clean up); the restarted agent removes its entry from its Kea
    pa.kill_agent()
    r = server.request("DELETE", f"/v1/machines/{a2}?force=true")
    assert r.status_code in (202, 204), r.text
    assert (a2, HTTPBOOT) in pa.kea_machines()  # nobody told the Kea yet
    # with no fresh agent, a prepare fails naming why, and the machine is rolled
    # back (the clean-up's removal is the agent's to apply when it is back)
    failed = wait_done(server, migrate(server, [a3], PXE))
    assert failed["counts"] == {"rolled_back": 1}, failed
    error = machine_states(server, failed["id"])[a3]["last_error"]
    assert "no boot agent of partition pa" in error and "agent-pa last reported" in error
    pa.start_agent(server)
    deadline = time.monotonic() + 30
    while (a2, HTTPBOOT) in pa.kea_machines():
        assert time.monotonic() < deadline, pa.agent_log()
        time.sleep(0.1)
    assert pa.kea_machines() == held_a - {(a2, HTTPBOOT)}
    assert pb.dnsmasq_machines() == held_b - {(b1, PXE)}
    # the other machines still get their answers
    answer = pa.clients.v6(machines["pa"][a3]["nics"][0]["mac"],
                           duid=machines["pa"][a3]["nics"][0]["duid"])
    assert answer and "59" in answer["options"]
    assert requests.get(server.url + "/v1", timeout=10).status_code == 200
    server.stop()
