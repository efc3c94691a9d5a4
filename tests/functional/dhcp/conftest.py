"""Real dnsmasq and Kea in network namespaces these fixtures create, and DHCP clients.

Layout per test (names unique per test run, removed in ``finally``)::

    <id>s (server ns)  br0 10.77.0.1/24 fd77::1/64 -- vs0 ==veth== cli0  <id>c (client ns)
                       dnsmasq (DHCPv4+TFTP), kea-dhcp6             10.77.0.9/24 fe80::c1

Traffic only flows inside these namespaces. Needs root, ``ip``, dnsmasq
(Debian dnsmasq-base), kea-dhcp6 (kea-dhcp6-server) and scapy.
"""

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.dhcp_agent import LocalDhcpAgent

from metalboot_framework.conf import CONF
from metalboot_framework.dhcp import clear_cache
from metalboot_framework.store import models
import metalboot_dhcp.conf  # noqa: F401  (registers [pxe], [dhcp_httpboot])

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "dhcp_client.py")
RUN_ID = uuid.uuid4().hex[:4]
_COUNTER = itertools.count()

SERVER_V4, CLIENT_V4 = "10.77.0.1", "10.77.0.9"
SERVER_V6 = "fd77::1"
PUBLIC_URL = f"http://{SERVER_V4}:8080"


def _require():
    if os.geteuid() != 0:
        pytest.skip("DHCP functional tests need root (network namespaces)")
    missing = [b for b in ("ip", "dnsmasq", "kea-dhcp6") if not shutil.which(b)]
    try:
        import scapy  # noqa: F401
    except ImportError:
        missing.append("scapy (pip)")
    if missing:
        pytest.fail("missing for the DHCP functional tests: " + ", ".join(missing)
                    + " (apt-get install iproute2 dnsmasq-base kea-dhcp6-server; "
                      "pip install scapy)")


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class TestNet:
    """A server and a client namespace joined by a bridge and a veth pair."""

    def __init__(self):
        base = f"mbt{RUN_ID}{next(_COUNTER)}"
        self.server, self.client = base + "s", base + "c"
        self.made = []

    def setup(self):
        for ns in (self.server, self.client):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0",
               "net.ipv6.conf.all.accept_dad=0")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        s, c = self.server, self.client
        sh("ip", "-n", s, "link", "add", "br0", "type", "bridge", "forward_delay", "0",
           "stp_state", "0")
        sh("ip", "-n", s, "link", "add", "vs0", "type", "veth", "peer", "name", "cli0",
           "netns", c)
        sh("ip", "-n", s, "link", "set", "vs0", "master", "br0")
        for dev in ("vs0", "br0"):
            sh("ip", "-n", s, "link", "set", dev, "up")
        sh("ip", "-n", s, "addr", "add", f"{SERVER_V4}/24", "dev", "br0")
        sh("ip", "-n", s, "addr", "add", f"{SERVER_V6}/64", "dev", "br0", "nodad")
        sh("ip", "-n", c, "link", "set", "cli0", "address", "52:54:00:77:00:fe")
        sh("ip", "-n", c, "link", "set", "cli0", "up")
        sh("ip", "-n", c, "addr", "add", f"{CLIENT_V4}/24", "dev", "cli0")
        sh("ip", "-n", c, "addr", "add", "fe80::c1/64", "dev", "cli0", "nodad")
        # br0 needs its link-local address before Kea can bind to it.
        deadline = time.monotonic() + 5
        while "fe80" not in sh("ip", "-n", s, "-6", "addr", "show", "dev", "br0").stdout:
            if time.monotonic() > deadline:
                raise RuntimeError("br0 got no IPv6 link-local address")
            time.sleep(0.05)

    def teardown(self):
        for ns in self.made:
            sh("ip", "netns", "del", ns, check=False)

    def exists(self):
        names = sh("ip", "netns", "list").stdout
        return any(ns in names for ns in (self.server, self.client))

    def in_server(self, *cmd):
        return ["ip", "netns", "exec", self.server, *cmd]

    def dhcp(self, *args):
        """Run dhcp_client.py in the client namespace; its JSON answer."""
        out = subprocess.run(["ip", "netns", "exec", self.client, sys.executable, CLIENT,
                              *map(str, args)], capture_output=True, text=True, timeout=60)
        if out.returncode:
            raise RuntimeError(f"dhcp_client {args} failed: {out.stderr}")
        return json.loads(out.stdout)

    def v4(self, mac, **kw):
        args = ["v4", "cli0", mac]
        for key, value in kw.items():
            args += [f"--{key.replace('_', '-')}", value]
        return self.dhcp(*args)

    def v6(self, mac, duid=None, http_client=True):
        args = ["v6", "cli0", mac] + (["--duid", duid] if duid else []) + (
            ["--http-client"] if http_client else [])
        return self.dhcp(*args)


class Daemon:
    """A server process in the server namespace, stopped in teardown."""

    def __init__(self, net, name, cmd, log_path, env=None):
        self.net, self.name, self.cmd, self.log_path = net, name, cmd, log_path
        self.env = dict(os.environ, **(env or {}))
        self.proc = None

    def start(self):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.net.in_server(*self.cmd), stdout=self._log,
                                     stderr=subprocess.STDOUT, env=self.env)
        return self

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.proc = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


class Dnsmasq(Daemon):
    def __init__(self, net, root):
        self.root = root
        self.hostsdir, self.optsdir = root / "hosts", root / "opts"
        self.tftp = root / "tftp"
        for d in (self.hostsdir, self.optsdir, self.tftp):
            d.mkdir(parents=True, exist_ok=True)
        self.pid_file = root / "dnsmasq.pid"
        self.conf_path = root / "dnsmasq.conf"
        self.conf_path.write_text(DNSMASQ_CONF.format(root=root))
        super().__init__(net, "dnsmasq", ["dnsmasq", "--keep-in-foreground",
                                          f"--conf-file={self.conf_path}"],
                         root / "dnsmasq.log")

    def start(self):
        super().start()
        deadline = time.monotonic() + 10
        while "DHCP, sockets bound" not in self.log():
            if not self.running() or time.monotonic() > deadline:
                raise RuntimeError(f"dnsmasq did not start:\n{self.log()}")
            time.sleep(0.02)
        return self

    def restart(self):
        self.stop()
        with open(self.log_path, "a") as f:
            f.write("---- restart ----\n")
        self.log_path.rename(self.log_path.with_suffix(".log.old"))
        return self.start()


# What the operator's dnsmasq.conf holds for metalboot (doc/boot-interfaces/dhcp.rst).
DNSMASQ_CONF = """\
interface=br0
bind-interfaces
user=root
port=0
dhcp-range=10.77.0.100,10.77.0.200,255.255.255.0,1h
dhcp-authoritative
no-ping
dhcp-leasefile={root}/leases
pid-file={root}/dnsmasq.pid
log-dhcp
log-facility=-
enable-tftp
tftp-root={root}/tftp
dhcp-hostsdir={root}/hosts
dhcp-optsdir={root}/opts
dhcp-userclass=set:ipxe,iPXE
dhcp-match=set:ipxe,175
dhcp-match=set:bios,option:client-arch,0
dhcp-match=set:efi64,option:client-arch,7
dhcp-match=set:efi64,option:client-arch,9
dhcp-match=set:efiarm64,option:client-arch,11
dhcp-vendorclass=set:efihttp,HTTPClient
dhcp-option-force=tag:efihttp,tag:metalboot-dhcp-httpboot,60,HTTPClient
"""


class Kea(Daemon):
    def __init__(self, net, root):
        self.root = root
        (root / "run").mkdir(parents=True, exist_ok=True)
        self.include = root / "metalboot-reservations6.json"
        self.include.write_text("")
        self.socket = root / "run" / "kea6.sock"
        self.lease_file = root / "kea-leases6.csv"
        self.conf_path = root / "kea-dhcp6.conf"
        self.conf_path.write_text(KEA_CONF % {"root": root, "include": self.include,
                                              "socket": self.socket,
                                              "leases": self.lease_file})
        env = {"KEA_PIDFILE_DIR": str(root / "run"), "KEA_LOCKFILE_DIR": str(root / "run")}
        super().__init__(net, "kea", ["kea-dhcp6", "-c", str(self.conf_path)],
                         root / "kea.out", env=env)
        self.pid_file = root / "run" / "kea-dhcp6.kea-dhcp6.pid"

    def command(self, command):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(self.socket))
            sock.sendall(json.dumps({"command": command}).encode())
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        return json.loads(data)

    def start(self):
        super().start()
        deadline = time.monotonic() + 15
        while True:
            if not self.running():
                raise RuntimeError(f"kea-dhcp6 exited:\n{self.log()}")
            try:
                if self.command("status-get").get("result") == 0:
                    return self
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kea-dhcp6 did not answer:\n{self.log()}")
            time.sleep(0.05)

    def restart(self):
        self.stop()
        return self.start()


# What the operator's kea-dhcp6.conf holds for metalboot (doc/boot-interfaces/dhcp.rst).
KEA_CONF = """\
{"Dhcp6": {
  "interfaces-config": {"interfaces": ["br0"]},
  "control-socket": {"socket-type": "unix", "socket-name": "%(socket)s"},
  "data-directory": "%(root)s",
  "lease-database": {"type": "memfile", "persist": true, "name": "%(leases)s",
                     "lfc-interval": 0},
  "loggers": [{"name": "kea-dhcp6", "severity": "INFO",
               "output_options": [{"output": "%(root)s/kea.log"}]}],
  "subnet6": [{"id": 1, "subnet": "fd77::/64", "interface": "br0",
    "pools": [{"pool": "fd77::1000-fd77::1fff"}],
    "reservations": [
<?include "%(include)s"?>
    ]}]
}}
"""


@pytest.fixture
def net():
    _require()
    testnet = TestNet()
    try:
        testnet.setup()
        yield testnet
    finally:
        testnet.teardown()


@pytest.fixture
def dnsmasq(net, tmp_path):
    daemon = Dnsmasq(net, tmp_path / "dnsmasq")
    try:
        yield daemon.start()
    finally:
        daemon.stop()


@pytest.fixture
def kea(net, tmp_path):
    daemon = Kea(net, tmp_path / "kea")
    try:
        yield daemon.start()
    finally:
        daemon.stop()


@pytest.fixture
def dhcp_conf(tmp_path):
    """CONF pointed at a temporary state dir, this test's dnsmasq/Kea paths and URL."""
    CONF.clear()
    CONF([], project="metalboot", default_config_files=[], default_config_dirs=[])
    o = CONF.set_override
    o("state_path", str(tmp_path / "state"))
    o("enabled_boot_interfaces", ["pxe", "dhcp-httpboot", "fake"])
    o("default_boot_interface", "pxe")
    o("public_url", PUBLIC_URL, group="api")
    o("hostsdir", str(tmp_path / "dnsmasq" / "hosts"), group="dnsmasq")
    o("optsdir", str(tmp_path / "dnsmasq" / "opts"), group="dnsmasq")
    o("pid_file", str(tmp_path / "dnsmasq" / "dnsmasq.pid"), group="dnsmasq")
    o("include_file", str(tmp_path / "kea" / "metalboot-reservations6.json"), group="kea")
    o("control_socket", str(tmp_path / "kea" / "run" / "kea6.sock"), group="kea")
    o("ipv6_dns_servers", [SERVER_V6], group="dhcp")
    efi = tmp_path / "ipxe.efi"
    efi.write_bytes(b"MZ" + os.urandom(2048))
    o("ipxe_efi_path", str(efi), group="dhcp_httpboot")
    clear_cache()
    yield CONF
    clear_cache()
    CONF.clear()
    CONF.reset()


@pytest.fixture
def services(dhcp_conf):
    from metalboot_framework.services import Services
    svc = Services.from_conf(dhcp_conf)
    yield svc
    svc.db.dispose()


@pytest.fixture
def local_agent(services):
    """The DHCP half of a boot agent for partition p1 (the steps wait for it)."""
    with LocalDhcpAgent(services) as agent:
        yield agent


@pytest.fixture
def make_task(services, local_agent):
    """Insert a real machine row (with NICs) and return a BootTask for it."""

    def make(interface, nics, machine_id=None, boot_mode="uefi", bmc_address=None):
        machine_id = machine_id or str(uuid.uuid4())
        with services.transactions.now() as unit:
            session = unit.session
            if session.get(models.Partition, "p1") is None:
                session.add(models.Partition(id="p1", cmdline="console=ttyS0"))
                session.flush()
            session.add(models.Machine(id=machine_id, partition_id="p1",
                                       boot_interface=interface, boot_mode=boot_mode,
                                       bmc_address=bmc_address, bmc_username="u",
                                       bmc_password=services.password_key.seal("p"),
                                       properties={}))
            session.flush()
            for i, nic in enumerate(nics):
                session.add(models.Nic(machine_id=machine_id, position=i, **nic))
        return services.task(machine_id, interface)

    return make


#: dhcp_client.py's main() for one JSON argv per stdin line, in one process: the
#: scapy import (over a second) is paid once, not per DHCP request.
WORKER = """
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import dhcp_client
for line in sys.stdin:
    try:
        dhcp_client.main(json.loads(line))
    except BaseException:
        print(json.dumps({"worker_error": traceback.format_exc()}))
    sys.stdout.flush()
"""


class DhcpClients:
    """dhcp_client.py run in the client namespace, one request at a time (the
    DHCPv6 client binds [fe80::c1]:546); same calls as TestNet's."""

    def __init__(self, net):
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", net.client, sys.executable, "-c", WORKER, HERE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()

    def dhcp(self, *args):
        with self.lock:
            self.proc.stdin.write(json.dumps([str(a) for a in args]) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"dhcp_client worker exited ({self.proc.poll()})")
        answer = json.loads(line)
        if isinstance(answer, dict) and "worker_error" in answer:
            raise RuntimeError(f"dhcp_client {args} failed: {answer['worker_error']}")
        return answer

    def v4(self, mac, **kw):
        args = ["v4", "cli0", mac]
        for key, value in kw.items():
            args += [f"--{key.replace('_', '-')}", value]
        return self.dhcp(*args)

    def v6(self, mac, duid=None, http_client=True):
        return self.dhcp("v6", "cli0", mac, *(["--duid", duid] if duid else []),
                         *(["--http-client"] if http_client else []))

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def clients(net):
    workers = DhcpClients(net)
    try:
        yield workers
    finally:
        workers.stop()


def server_conf(dnsmasq, kea, efi):
    """metalboot configuration for pxe and dhcp-httpboot with these servers."""
    return f"""\
enabled_boot_interfaces = fake,pxe,dhcp-httpboot
default_boot_interface = fake
[dnsmasq]
hostsdir = {dnsmasq.hostsdir}
optsdir = {dnsmasq.optsdir}
pid_file = {dnsmasq.pid_file}
[kea]
include_file = {kea.include}
control_socket = {kea.socket}
[dhcp]
ipv6_dns_servers = {SERVER_V6}
[dhcp_httpboot]
ipxe_efi_path = {efi}
"""


@pytest.fixture
def dhcp_agent(tmp_path):
    """start(server, dnsmasq, kea, efi): a metalboot-boot-agent of partition p1
    that applies its DHCP entries to this test's dnsmasq and Kea; it is listed
    as a fresh DHCP agent when start returns."""
    from tests.functional.agent.agent_process import AgentProcess
    agents = []

    def start(server, dnsmasq, kea, efi, partition="p1", agent_id="dhcp-agent"):
        r = server.request("POST", f"/v1/partitions/{partition}/agent-tokens",
                           json={"description": "the test's DHCP agent"})
        assert r.status_code == 201, r.text
        sections = server_conf(dnsmasq, kea, efi)
        agent = AgentProcess(tmp_path / f"agent-{len(agents)}", server.url, r.json()["token"],
                             partitions=(partition,), agent_id=agent_id,
                             interfaces="fake,pxe,dhcp-httpboot",
                             extra=sections[sections.index("[dnsmasq]"):])
        agents.append(agent)
        agent.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = server.request("GET", f"/v1/partitions/{partition}/dhcp-agents").json()
            if any(a["agent"] == agent_id and a["fresh"] for a in listed["agents"]):
                return agent
            time.sleep(0.05)
        raise AssertionError(f"agent {agent_id} never reported its DHCP state:\n{agent.log()}")

    yield start
    for agent in agents:
        agent.stop()
