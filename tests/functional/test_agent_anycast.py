"""Two boot agents of one partition on one anycast address, one of them killed
during a storm of fetches.

Built in network namespaces the test makes (root: ``ip netns``, veth)::

    host (this test, metalboot-server on fd00:9::1)
      | veth  fd00:9::1 <-> fd00:9::2
    router ns   ECMP route fd00:a::1/128 -> fd00:1::2 | fd00:2::2  (L4 hash)
      | veth fd00:1::1 <-> fd00:1::2      | veth fd00:2::1 <-> fd00:2::2
    agent ns A (fd00:a::1 on lo)        agent ns B (fd00:a::1 on lo)
      metalboot-boot-agent [::]:6481      metalboot-boot-agent [::]:6481

The test process plays the machines of a migration: each fetches its
boot.ipxe by MAC from the anycast address and, as iPXE does, tries again on a
failed connection or answer. During the storm agent A is SIGKILLed, and its
route withdrawn a second later, as a BGP speaker does on a failed health
check. Every machine gets its answer, the migration ends ``done`` with every
machine's evidence, no evidence is lost (A's journal is delivered when A
starts again on its state) and none is stored twice, and the evidence of both
agents is in the one database and event feed.
"""

import concurrent.futures
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
import requests

from tests.conftest import USE_POSTGRES, machine_body

pytestmark = [pytest.mark.functional, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
              pytest.mark.skipif(USE_POSTGRES, reason="reads the SQLite file")]

ANYCAST = "fd00:a::1"
HOST, ROUTER = "fd00:9::1", "fd00:9::2"
AGENT_PORT = 6481
MACHINES = 40
_RUN = itertools.count()


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


class Fabric:
    """The namespaces, links and routes above; removed by :meth:`close`."""

    def __init__(self):
        tag = f"{os.getpid() % 10000}{next(_RUN)}"
        self.router, self.agents = f"mbr{tag}", [f"mba{tag}", f"mbb{tag}"]
        self.host_link = f"mbh{tag}"
        self.made = []
        try:
            self._build(tag)
        except BaseException:
            self.close()
            raise

    def _build(self, tag):
        for ns in [self.router, *self.agents]:
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "up0",
           "netns", self.router)
        sh("ip", "-6", "addr", "add", f"{HOST}/64", "dev", self.host_link, "nodad")
        sh("ip", "link", "set", self.host_link, "up")
        sh("ip", "-n", self.router, "-6", "addr", "add", f"{ROUTER}/64", "dev", "up0", "nodad")
        sh("ip", "-n", self.router, "link", "set", "up0", "up")
        sh("ip", "netns", "exec", self.router, "sysctl", "-qw",
           "net.ipv6.conf.all.forwarding=1", "net.ipv6.fib_multipath_hash_policy=1")
        for n, ns in enumerate(self.agents, start=1):
            link = f"dn{n}"
            sh("ip", "-n", self.router, "link", "add", link, "type", "veth", "peer", "name",
               "eth0", "netns", ns)
            sh("ip", "-n", self.router, "-6", "addr", "add", f"fd00:{n}::1/64", "dev", link,
               "nodad")
            sh("ip", "-n", self.router, "link", "set", link, "up")
            sh("ip", "-n", ns, "-6", "addr", "add", f"fd00:{n}::2/64", "dev", "eth0", "nodad")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "-6", "addr", "add", f"{ANYCAST}/128", "dev", "lo")
            sh("ip", "-n", ns, "-6", "route", "add", "default", "via", f"fd00:{n}::1")
            # the host reaches the agents' links through the router (the API's answers)
            sh("ip", "-6", "route", "add", f"fd00:{n}::/64", "via", ROUTER)
        sh("ip", "-6", "route", "add", f"{ANYCAST}/128", "via", ROUTER)
        self.announce(0, 1)

    def announce(self, *agents):
        """The router's route to the anycast address: ECMP over ``agents``."""
        hops = []
        for n in agents:
            hops += ["nexthop", "via", f"fd00:{n + 1}::2", "dev", f"dn{n + 1}"]
        sh("ip", "-n", self.router, "-6", "route", "replace", f"{ANYCAST}/128", *hops)

    def close(self):
        sh("ip", "link", "del", self.host_link, check=False)  # its routes go with it
        sh("ip", "-6", "route", "del", f"{ANYCAST}/128", check=False)
        for n in (1, 2):
            sh("ip", "-6", "route", "del", f"fd00:{n}::/64", check=False)
        for ns in self.made:
            sh("ip", "netns", "pids", ns, check=False)
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sh("ip", "netns", "del", ns, check=False)


class Agent:
    """metalboot-boot-agent in a namespace, with its config, state and log."""

    def __init__(self, fabric, index, tmp_path, api_url, token):
        self.ns = fabric.agents[index]
        self.id = f"agent-{'ab'[index]}"
        self.dir = tmp_path / self.id
        self.dir.mkdir()
        (self.dir / "token").write_text(token + "\n")
        self.conf = self.dir / "agent.conf"
        self.conf.write_text(
            "[DEFAULT]\nenabled_boot_interfaces = fake,fake-alt\n"
            f"state_path = {self.dir / 'state'}\n"
            f"[agent]\napi_url = {api_url}\ntoken_file = {self.dir / 'token'}\n"
            f"partitions = p1\nlisten = [::]:{AGENT_PORT}\nstate_dir = {self.dir / 'state'}\n"
            f"agent_id = {self.id}\n"
            # the machines (this test) fetch from the host's link
            "[artifacts]\nboot_network_prefixes = fd00:9::/64\n")
        self.proc = None

    def start(self):
        log = open(self.dir / "agent.log", "ab")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-m",
             "metalboot_framework.cmd.boot_agent", "--config-file", str(self.conf)],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            got = sh("ip", "netns", "exec", self.ns, "curl", "-s", "-o", "/dev/null", "-w",
                     "%{http_code}", f"http://[::1]:{AGENT_PORT}/healthz", check=False)
            if got.stdout == "200":
                return self
            time.sleep(0.2)
        raise AssertionError(f"agent {self.id} not fresh after 60 s:\n{self.log()}")

    def kill(self):
        # `ip netns exec` execs the agent: the pid is the agent's
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def log(self):
        path = self.dir / "agent.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture
def fabric():
    made = Fabric()
    yield made
    made.close()


def fetch_like_ipxe(url, attempts=200):
    """GET ``url`` on a new connection until it answers 200 (iPXE retries a
    failed boot); (body, tries)."""
    for attempt in range(1, attempts + 1):
        try:
            r = requests.get(url, timeout=3, headers={"Connection": "close"})
            if r.status_code == 200:
                return r.text, attempt
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url}: no answer in {attempts} tries")


def test_two_agents_on_one_anycast_address_survive_one_killed(fabric, server_factory,
                                                              tmp_path):
    server = server_factory(host_ip=HOST,
                            extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()
    assert server.request("POST", "/v1/partitions", json={
        "id": "p1", "boot": {"kernel_url": "http://images.example/vmlinuz",
                             "boot_url": f"http://[{ANYCAST}]:{AGENT_PORT}"}}).status_code == 201
    bodies = [machine_body(n, boot_interface="fake") for n in range(1, MACHINES + 1)]
    ids = server.register_enrolled(bodies)
    made = server.request("POST", "/v1/partitions/p1/agent-tokens", json={})
    agents = [Agent(fabric, i, tmp_path, server.url, made.json()["token"]).start()
              for i in (0, 1)]
    try:
        migration = server.request("POST", "/v1/migrations", json={
            "selector": {"machines": ids}, "boot_interface": "fake-alt",
            "max_parallel": MACHINES, "boot_timeout": 300}).json()
        # every machine is booting: its boot.ipxe for fake-alt answers by MAC
        deadline = time.monotonic() + 60
        while server.request("GET", f"/v1/migrations/{migration['id']}").json()[
                "counts"].get("awaiting_boot", 0) < MACHINES:
            assert time.monotonic() < deadline, "machines never all awaiting boot"
            time.sleep(0.2)

        answered, killed = {}, threading.Event()

        def boot(body):
            mac = body["nics"][0]["mac"]
            # a machine boots more than once in a storm: a few fetches each
            for _ in range(3):
                script, _ = fetch_like_ipxe(
                    f"http://[{ANYCAST}]:{AGENT_PORT}/boot/mac/{mac}/fake-alt/boot.ipxe")
                assert f"METAL_MACHINE_ID={body['id']}" in script
                answered[body["id"]] = answered.get(body["id"], 0) + 1
                if len(answered) >= MACHINES // 3 and not killed.is_set():
                    killed.set()
                    agents[0].kill()
                    time.sleep(1.0)  # the health check notices, BGP withdraws
                    fabric.announce(1)

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(boot, bodies))
        assert killed.is_set() and sorted(answered) == sorted(ids)
        assert all(count == 3 for count in answered.values())

        # A's journal is delivered when it starts again on its state
        fabric.announce(0, 1)
        agents[0].start()
        deadline = time.monotonic() + 120
        while True:
            state = server.request("GET", f"/v1/migrations/{migration['id']}").json()
            if state["state"] == "done":
                break
            assert time.monotonic() < deadline, state
            time.sleep(0.5)
        assert state["counts"].get("done") == MACHINES, state
        deadline = time.monotonic() + 30
        while True:  # A delivers what it journaled before the kill
            healthy = [sh("ip", "netns", "exec", a.ns, "curl", "-s",
                          f"http://[::1]:{AGENT_PORT}/healthz").stdout for a in agents]
            if all('"journal_pending":0' in h.replace(" ", "") for h in healthy):
                break
            assert time.monotonic() < deadline, healthy
            time.sleep(0.5)
    finally:
        for agent in agents:
            agent.stop()

    with sqlite3.connect(server.state / "metalboot.sqlite") as db:
        rows = db.execute("SELECT machine_id, delivery FROM boot_evidence "
                          "WHERE kind = 'fetch'").fetchall()
    deliveries = [d for _, d in rows]
    assert None not in deliveries and len(set(deliveries)) == len(deliveries)  # once each
    # every answer the machines got is there (an agent killed after journaling
    # and before answering leaves one more, which the machine then fetched again)
    per_machine = {}
    for machine_id, _ in rows:
        per_machine[machine_id] = per_machine.get(machine_id, 0) + 1
    assert all(per_machine.get(m, 0) >= answered[m] for m in ids), per_machine
    assert {d.split(":")[0] for d in deliveries} == {"agent-a", "agent-b"}
    # one event feed: each machine's boot evidence, whichever agent answered it
    events, since = [], 0
    while True:
        page = server.request("GET", f"/v1/events?since={since}&limit=1000").json()
        if not page["events"]:
            break
        events += page["events"]
        since = page["next_cursor"]
    booted = {e["machine_id"] for e in events if e["kind"] == "migration.step"
              and e["data"]["new"] == "verifying" and "boot evidence: fetch of boot.ipxe"
              in e["data"]["reason"]}
    assert booted == set(ids)
